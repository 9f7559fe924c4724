package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

const consumerColumns = `tenant_id::text, id::text, name, coalesce(plan, ''), version, created_at, updated_at`

func scanConsumer(row pgx.Row) (*tenants.Consumer, error) {
	var c tenants.Consumer
	if err := row.Scan(&c.TenantID, &c.ID, &c.Name, &c.Plan, &c.Version, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = utc(c.CreatedAt), utc(c.UpdatedAt)
	return &c, nil
}

func consumerChange(c *tenants.Consumer) change {
	cc := *c
	return put(c.TenantID, tenants.ObjectKey(c.TenantID, tenants.KindConsumer, c.ID), &tenants.Entry{Consumer: &cc})
}

func consumerErrors(c *tenants.Consumer) map[string]*tenants.Error {
	return map[string]*tenants.Error{
		"consumers_name_key":  {Code: tenants.EConflict, Field: "name", Message: fmt.Sprintf("a consumer named %q already exists", c.Name)},
		"consumers_plan_fkey": {Code: tenants.EValidation, Field: "plan", Message: fmt.Sprintf("the tenant has no plan named %q", c.Plan)},
	}
}

// nullable stores "" as NULL.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// CreateConsumer validates c, stores it with a new id and version 1, and fills in c.
// EValidation (also when c.Plan names no plan of the tenant, or past the platform plan's
// consumers), EConflict (name taken), ENotFound (tenant).
func (db *DB) CreateConsumer(ctx context.Context, c *tenants.Consumer) error {
	if !parseID(c.TenantID) {
		return notFound("tenant")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return insertConsumer(ctx, tx, c) })
	return constraintError(err, "create consumer", consumerErrors(c))
}

// insertConsumer is CreateConsumer's work in tx, on a validated c.
func insertConsumer(ctx context.Context, tx pgx.Tx, c *tenants.Consumer) error {
	if err := checkCount(ctx, tx, c.TenantID, tenants.ResConsumers); err != nil {
		return err
	}
	saved, err := scanConsumer(tx.QueryRow(ctx, `INSERT INTO consumers (tenant_id, id, name, plan) VALUES ($1, $2, $3, $4)
		RETURNING `+consumerColumns, c.TenantID, newID(), c.Name, nullable(c.Plan)))
	if err != nil {
		return err
	}
	*c = *saved
	return emit(ctx, tx, consumerChange(c))
}

// FindConsumer: ENotFound.
func (db *DB) FindConsumer(ctx context.Context, tenantID, id string) (*tenants.Consumer, error) {
	if !parseID(tenantID) || !parseID(id) {
		return nil, notFound("consumer")
	}
	c, err := scanConsumer(db.pool.QueryRow(ctx, `SELECT `+consumerColumns+` FROM consumers WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("consumer")
	}
	return c, constraintError(err, "find consumer", nil)
}

// ListConsumers returns a page of the tenant's consumers in creation order and the cursor
// of the next page ("" after the last).
func (db *DB) ListConsumers(ctx context.Context, tenantID string, p tenants.Page) ([]*tenants.Consumer, string, error) {
	limit, cursor, err := page(p)
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) {
		return []*tenants.Consumer{}, "", nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+consumerColumns+` FROM consumers
		WHERE tenant_id = $1 AND id > $2 ORDER BY consumers.id LIMIT $3`, tenantID, cursor, limit+1)
	if err != nil {
		return nil, "", constraintError(err, "list consumers", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Consumer, error) { return scanConsumer(r) })
	if err != nil {
		return nil, "", constraintError(err, "list consumers", nil)
	}
	list, next := nextCursor(list, limit, func(c *tenants.Consumer) string { return c.ID })
	return list, next, nil
}

// ConsumerNames maps those of ids that are the tenant's consumers to their names.
func (db *DB) ConsumerNames(ctx context.Context, tenantID string, ids []string) (map[string]string, error) {
	return db.names(ctx, "consumers", tenantID, ids)
}

// UpdateConsumer replaces the consumer's name and plan when c.Version is current and fills
// in c's new version and timestamps. ENotFound, EVersionConflict, EConflict, EValidation.
func (db *DB) UpdateConsumer(ctx context.Context, c *tenants.Consumer) error {
	if !parseID(c.TenantID) || !parseID(c.ID) {
		return notFound("consumer")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return updateConsumer(ctx, tx, c) })
	return constraintError(err, "update consumer", consumerErrors(c))
}

// updateConsumer is UpdateConsumer's work in tx, on a validated c.
func updateConsumer(ctx context.Context, tx pgx.Tx, c *tenants.Consumer) error {
	before, err := stateBefore(ctx, tx, scanConsumer, `SELECT `+consumerColumns+` FROM consumers WHERE tenant_id = $1 AND id = $2`, c.TenantID, c.ID)
	if err != nil {
		return err
	}
	saved, err := scanConsumer(tx.QueryRow(ctx, `UPDATE consumers SET name = $4, plan = $5, version = version + 1, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND version = $3 RETURNING `+consumerColumns,
		c.TenantID, c.ID, c.Version, c.Name, nullable(c.Plan)))
	if errors.Is(err, pgx.ErrNoRows) {
		return versionOrNotFound(ctx, tx, "consumer", `SELECT version FROM consumers WHERE tenant_id = $1 AND id = $2`, c.Version, c.TenantID, c.ID)
	}
	if err != nil {
		return err
	}
	*c = *saved
	auditUpdate(tx, before, c)
	return emit(ctx, tx, consumerChange(c))
}

// DeleteConsumer removes the consumer and its keys, and deletes their config entries:
// ENotFound.
func (db *DB) DeleteConsumer(ctx context.Context, tenantID, id string) error {
	if !parseID(tenantID) || !parseID(id) {
		return notFound("consumer")
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return deleteConsumer(ctx, tx, tenantID, id) })
	return constraintError(err, "delete consumer", nil)
}

// deleteConsumer is DeleteConsumer's work in tx.
func deleteConsumer(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	// Lock the consumer first: a key being added to it (whose foreign key check locks
	// it shared) either commits before, and is deleted below, or fails after.
	var tid, cid string
	err := tx.QueryRow(ctx, `SELECT tenant_id::text, id::text FROM consumers WHERE tenant_id = $1 AND id = $2 FOR UPDATE`,
		tenantID, id).Scan(&tid, &cid)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("consumer")
	}
	if err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `DELETE FROM keys WHERE tenant_id = $1 AND consumer_id = $2 RETURNING id::text`, tid, cid)
	if err != nil {
		return err
	}
	keyIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM consumers WHERE tenant_id = $1 AND id = $2`, tid, cid); err != nil {
		return err
	}
	uncount(ctx, tx, tid, tenants.ResConsumers) // its keys' count goes with it
	changes := make([]change, 0, len(keyIDs)+1)
	for _, k := range keyIDs {
		changes = append(changes, del(tid, tenants.ObjectKey(tid, tenants.KindKey, k)))
	}
	changes = append(changes, del(tid, tenants.ObjectKey(tid, tenants.KindConsumer, cid)))
	return emit(ctx, tx, changes...)
}

const keyColumns = `tenant_id::text, id::text, consumer_id::text, prefix, hash, label, expires_at, last_used_at, created_at`

func scanKey(row pgx.Row) (*tenants.Key, error) {
	var k tenants.Key
	if err := row.Scan(&k.TenantID, &k.ID, &k.ConsumerID, &k.Prefix, &k.Hash, &k.Label, &k.ExpiresAt, &k.LastUsedAt, &k.CreatedAt); err != nil {
		return nil, err
	}
	k.CreatedAt = utc(k.CreatedAt)
	for _, t := range []*time.Time{k.ExpiresAt, k.LastUsedAt} {
		if t != nil {
			*t = utc(*t)
		}
	}
	return &k, nil
}

func keyEntry(k *tenants.Key) *tenants.KeyEntry {
	e := &tenants.KeyEntry{ID: k.ID, TenantID: k.TenantID, ConsumerID: k.ConsumerID, Hash: k.Hash}
	if k.ExpiresAt != nil {
		e.ExpiresAt = k.ExpiresAt.Unix()
	}
	return e
}

// validHash reports whether h is a hex SHA-256, as tenants.HashSecret makes.
func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// CreateKey stores k (Hash and Prefix set by the caller from tenants.NewSecret) with a new
// id and fills in k. ENotFound (consumer), EValidation (hash, or past the platform plan's
// keys_per_consumer), EConflict (hash taken).
func (db *DB) CreateKey(ctx context.Context, k *tenants.Key) error {
	if !parseID(k.TenantID) || !parseID(k.ConsumerID) {
		return notFound("consumer")
	}
	if !validHash(k.Hash) {
		return tenants.Invalid("hash", "must be the hex SHA-256 of the key")
	}
	if err := k.Validate(time.Now()); err != nil {
		return err
	}
	id := newID()
	err := db.write(ctx, func(tx pgx.Tx) error {
		if err := checkKeyCount(ctx, tx, k.TenantID, k.ConsumerID); err != nil {
			if tenants.ErrorCode(err) == tenants.ENotFound {
				return notFound("consumer")
			}
			return err
		}
		saved, err := scanKey(tx.QueryRow(ctx, `INSERT INTO keys (tenant_id, id, consumer_id, prefix, hash, label, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			RETURNING `+keyColumns, k.TenantID, id, k.ConsumerID, k.Prefix, k.Hash, k.Label, k.ExpiresAt))
		if err != nil {
			return err
		}
		*k = *saved
		return emit(ctx, tx, put(k.TenantID, tenants.ObjectKey(k.TenantID, tenants.KindKey, k.ID), &tenants.Entry{Key: keyEntry(k)}))
	})
	return constraintError(err, "create key", map[string]*tenants.Error{
		"keys_consumer_fkey":                notFound("consumer"),
		"consumer_key_counts_consumer_fkey": notFound("consumer"),
		"keys_hash_key":                     tenants.Errorf(tenants.EConflict, "this key is already registered"),
	})
}

// ListKeys returns a page of the consumer's keys in creation order and the cursor of the
// next page ("" after the last): ENotFound (consumer).
func (db *DB) ListKeys(ctx context.Context, tenantID, consumerID string, p tenants.Page) ([]*tenants.Key, string, error) {
	limit, cursor, err := page(p)
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) || !parseID(consumerID) {
		return nil, "", notFound("consumer")
	}
	var list []*tenants.Key
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM consumers WHERE tenant_id = $1 AND id = $2)`,
			tenantID, consumerID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return notFound("consumer")
		}
		rows, err := tx.Query(ctx, `SELECT `+keyColumns+` FROM keys
			WHERE tenant_id = $1 AND consumer_id = $2 AND id > $3 ORDER BY keys.id LIMIT $4`, tenantID, consumerID, cursor, limit+1)
		if err != nil {
			return err
		}
		list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Key, error) { return scanKey(r) })
		return err
	})
	if err != nil {
		return nil, "", constraintError(err, "list keys", nil)
	}
	list, next := nextCursor(list, limit, func(k *tenants.Key) string { return k.ID })
	return list, next, nil
}

// DeleteKey removes one key of a consumer and deletes its config entry: ENotFound.
func (db *DB) DeleteKey(ctx context.Context, tenantID, consumerID, keyID string) error {
	if !parseID(tenantID) || !parseID(consumerID) || !parseID(keyID) {
		return notFound("key")
	}
	err := db.write(ctx, func(tx pgx.Tx) error {
		var tid, kid string
		err := tx.QueryRow(ctx, `DELETE FROM keys WHERE tenant_id = $1 AND consumer_id = $2 AND id = $3
			RETURNING tenant_id::text, id::text`, tenantID, consumerID, keyID).Scan(&tid, &kid)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("key")
		}
		if err != nil {
			return err
		}
		if err := uncountKey(ctx, tx, tid, consumerID); err != nil {
			return err
		}
		return emit(ctx, tx, del(tid, tenants.ObjectKey(tid, tenants.KindKey, kid)))
	})
	return constraintError(err, "delete key", nil)
}

var _ tenants.ConsumerService = (*DB)(nil)
