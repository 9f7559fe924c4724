package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// Tokens are the api's own credentials: they are not config entries and go through no
// outbox, but their changes are audited like any other.

const tokenColumns = `tenant_id::text, id::text, name, role, prefix, hash, created_at`

func scanToken(row pgx.Row) (*tenants.Token, error) {
	var t tenants.Token
	if err := row.Scan(&t.TenantID, &t.ID, &t.Name, &t.Role, &t.Prefix, &t.Hash, &t.CreatedAt); err != nil {
		return nil, err
	}
	t.CreatedAt = utc(t.CreatedAt)
	return &t, nil
}

// CreateToken validates t and stores it (Hash and Prefix set by the caller from
// tenants.NewSecret) with a new id, filling in t. EValidation, ENotFound (tenant),
// EConflict (hash taken).
func (db *DB) CreateToken(ctx context.Context, t *tenants.Token) error {
	if !parseID(t.TenantID) {
		return notFound("tenant")
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if !validHash(t.Hash) {
		return tenants.Invalid("hash", "must be the hex SHA-256 of the token")
	}
	var saved *tenants.Token
	err := db.change(ctx, false, func(tx pgx.Tx) error {
		var err error
		saved, err = scanToken(tx.QueryRow(ctx, `INSERT INTO tokens (tenant_id, id, name, role, prefix, hash)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+tokenColumns, t.TenantID, newID(), t.Name, t.Role, t.Prefix, t.Hash))
		if err == nil {
			auditObject(tx, saved.TenantID, saved.ID)
		}
		return err
	})
	if err != nil {
		return constraintError(err, "create token", map[string]*tenants.Error{
			"tokens_hash_key": tenants.Errorf(tenants.EConflict, "this token is already registered"),
		})
	}
	*t = *saved
	return nil
}

// FindTokenByHash: ENotFound.
func (db *DB) FindTokenByHash(ctx context.Context, hash string) (*tenants.Token, error) {
	t, err := scanToken(db.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("token")
	}
	return t, constraintError(err, "find token", nil)
}

// ListTokens returns a page of the tenant's tokens in creation order and the cursor of the
// next page ("" after the last).
func (db *DB) ListTokens(ctx context.Context, tenantID string, p tenants.Page) ([]*tenants.Token, string, error) {
	limit, cursor, err := page(p)
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) {
		return []*tenants.Token{}, "", nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+tokenColumns+` FROM tokens
		WHERE tenant_id = $1 AND id > $2 ORDER BY tokens.id LIMIT $3`, tenantID, cursor, limit+1)
	if err != nil {
		return nil, "", constraintError(err, "list tokens", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Token, error) { return scanToken(r) })
	if err != nil {
		return nil, "", constraintError(err, "list tokens", nil)
	}
	list, next := nextCursor(list, limit, func(t *tenants.Token) string { return t.ID })
	return list, next, nil
}

// DeleteToken: ENotFound.
func (db *DB) DeleteToken(ctx context.Context, tenantID, id string) error {
	if !parseID(tenantID) || !parseID(id) {
		return notFound("token")
	}
	err := db.change(ctx, false, func(tx pgx.Tx) error {
		auditObject(tx, tenantID, id)
		tag, err := tx.Exec(ctx, `DELETE FROM tokens WHERE tenant_id = $1 AND id = $2`, tenantID, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound("token")
		}
		return nil
	})
	return constraintError(err, "delete token", nil)
}

var _ tenants.TokenService = (*DB)(nil)
