package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// tenantColumns ends with the tenant's platform plan (Tenant.Limits), so every read and
// every entry carries the limits the edges enforce. It may follow INSERT or UPDATE of
// tenants as RETURNING.
const tenantColumns = `id::text, slug, name, plan, cell, version, created_at, updated_at, ` + platformPlanOfTenant

func scanTenant(row pgx.Row) (*tenants.Tenant, error) {
	var t tenants.Tenant
	if err := row.Scan(&t.ID, &t.Slug, &t.Name, &t.PlatformPlan, &t.Cell, &t.Version, &t.CreatedAt, &t.UpdatedAt, &t.Limits); err != nil {
		return nil, err
	}
	t.CreatedAt, t.UpdatedAt = utc(t.CreatedAt), utc(t.UpdatedAt)
	normalizePlatformPlan(t.Limits)
	return &t, nil
}

func tenantChange(t *tenants.Tenant) change {
	c := *t
	return put(t.ID, tenants.TenantKey(t.ID), &tenants.Entry{Tenant: &c})
}

// CreateTenant validates t, stores it with a new id and version 1, and fills in t's id,
// version and timestamps. EValidation, EConflict (slug taken).
func (db *DB) CreateTenant(ctx context.Context, t *tenants.Tenant) error {
	if err := t.Validate(); err != nil {
		return err
	}
	id := newID()
	err := db.write(ctx, func(tx pgx.Tx) error {
		if err := lockPlatformPlan(ctx, tx, t.PlatformPlan); err != nil {
			return err
		}
		cell, err := db.placement(ctx, tx, t.Cell)
		if err != nil {
			return err
		}
		row := tx.QueryRow(ctx, `INSERT INTO tenants (id, slug, name, plan, cell) VALUES ($1, $2, $3, $4, $5)
			RETURNING `+tenantColumns, id, t.Slug, t.Name, t.PlatformPlan, cell)
		saved, err := scanTenant(row)
		if err != nil {
			return err
		}
		*t = *saved
		return emit(ctx, tx, tenantChange(t))
	})
	return constraintError(err, "create tenant", map[string]*tenants.Error{
		"tenants_slug_key":  {Code: tenants.EConflict, Field: "slug", Message: `slug "` + t.Slug + `" is taken`},
		"tenants_plan_fkey": noPlatformPlan(t.PlatformPlan),
	})
}

// FindTenant looks a tenant up by slug: ENotFound.
func (db *DB) FindTenant(ctx context.Context, slug string) (*tenants.Tenant, error) {
	t, err := scanTenant(db.pool.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE slug = $1`, slug))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, tenants.Errorf(tenants.ENotFound, "no tenant %q", slug)
	}
	return t, constraintError(err, "find tenant", nil)
}

// FindTenantByID looks a tenant up by id: ENotFound.
func (db *DB) FindTenantByID(ctx context.Context, id string) (*tenants.Tenant, error) {
	if !parseID(id) {
		return nil, notFound("tenant")
	}
	t, err := scanTenant(db.pool.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("tenant")
	}
	return t, constraintError(err, "find tenant", nil)
}

// ListTenants returns a page of tenants in creation order and the cursor of the next page
// ("" after the last).
func (db *DB) ListTenants(ctx context.Context, p tenants.Page) ([]*tenants.Tenant, string, error) {
	limit, cursor, err := page(p)
	if err != nil {
		return nil, "", err
	}
	rows, err := db.pool.Query(ctx, `SELECT `+tenantColumns+` FROM tenants
		WHERE id > $1 ORDER BY tenants.id LIMIT $2`, cursor, limit+1)
	if err != nil {
		return nil, "", constraintError(err, "list tenants", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Tenant, error) { return scanTenant(r) })
	if err != nil {
		return nil, "", constraintError(err, "list tenants", nil)
	}
	list, next := nextCursor(list, limit, func(t *tenants.Tenant) string { return t.ID })
	return list, next, nil
}

// UpdateTenant changes t's name and plan when t.Version is current, and fills in the new
// version and timestamps. The slug never changes. ENotFound, EVersionConflict, EValidation.
func (db *DB) UpdateTenant(ctx context.Context, t *tenants.Tenant) error {
	if !parseID(t.ID) {
		return notFound("tenant")
	}
	cur, err := db.FindTenantByID(ctx, t.ID)
	if err != nil {
		return err
	}
	// Validate with the stored slug: the caller may not have sent it, and may not change it.
	t.Slug = cur.Slug
	if err := t.Validate(); err != nil {
		return err
	}
	err = db.write(ctx, func(tx pgx.Tx) error {
		if err := lockPlatformPlan(ctx, tx, t.PlatformPlan); err != nil {
			return err
		}
		row := tx.QueryRow(ctx, `UPDATE tenants SET name = $3, plan = $4, version = version + 1, updated_at = now()
			WHERE id = $1 AND version = $2 RETURNING `+tenantColumns, t.ID, t.Version, t.Name, t.PlatformPlan)
		saved, err := scanTenant(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return versionOrNotFound(ctx, tx, "tenant", `SELECT version FROM tenants WHERE id = $1`, t.Version, t.ID)
		}
		if err != nil {
			return err
		}
		*t = *saved
		auditUpdate(tx, &tenantView{cur.Name, cur.PlatformPlan}, &tenantView{t.Name, t.PlatformPlan})
		return emit(ctx, tx, tenantChange(t))
	})
	return constraintError(err, "update tenant", map[string]*tenants.Error{"tenants_plan_fkey": noPlatformPlan(t.PlatformPlan)})
}

// DeleteTenant removes the tenant and everything it owns, and deletes every one of its
// config entries: ENotFound.
func (db *DB) DeleteTenant(ctx context.Context, tenantID string) error {
	if !parseID(tenantID) {
		return notFound("tenant")
	}
	err := db.write(ctx, func(tx pgx.Tx) error {
		// Locking the tenant row first waits out, and then blocks, every write that adds an
		// object to the tenant (their foreign key checks lock it shared), so the list of
		// entries to delete below is complete.
		var cell string
		if err := tx.QueryRow(ctx, `SELECT id::text, cell FROM tenants WHERE id = $1 FOR UPDATE`, tenantID).Scan(&tenantID, &cell); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("tenant")
			}
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT 'plan', id::text FROM plans WHERE tenant_id = $1
			UNION ALL SELECT 'consumer', id::text FROM consumers WHERE tenant_id = $1
			UNION ALL SELECT 'key', id::text FROM keys WHERE tenant_id = $1
			UNION ALL SELECT 'route', id::text FROM routes WHERE tenant_id = $1
			UNION ALL SELECT 'jwt-issuer', id::text FROM jwt_issuers WHERE tenant_id = $1
			UNION ALL SELECT 'policy', '' FROM policies WHERE tenant_id = $1
			UNION ALL SELECT 'domain', id::text FROM domains WHERE tenant_id = $1`, tenantID)
		if err != nil {
			return err
		}
		auditObject(tx, tenantID, "") // the tenant itself, not the first object deleted
		// The tenant entry goes first: an edge drops the whole tenant on it, and the
		// object deletes that follow are then no-ops.
		changes := []change{del(tenantID, tenants.TenantKey(tenantID))}
		var kind, id string
		_, err = pgx.ForEachRow(rows, []any{&kind, &id}, func() error {
			key := tenants.ObjectKey(tenantID, kind, id)
			if kind == tenants.KindAccessRules {
				key = tenants.AccessRulesKey(tenantID)
			}
			changes = append(changes, del(tenantID, key))
			return nil
		})
		if err != nil {
			return err
		}
		// Functions (and their versions) before the tenant: the cascade from tenants would
		// reach function_modules first, which the versions still reference.
		if _, err := tx.Exec(ctx, `DELETE FROM functions WHERE tenant_id = $1`, tenantID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenants WHERE id = $1`, tenantID); err != nil {
			return err
		}
		// The tenant's row is gone by the time emit looks its cell up.
		for i := range changes {
			changes[i].cell = cell
		}
		return emit(ctx, tx, changes...)
	})
	return constraintError(err, "delete tenant", nil)
}

// versionOrNotFound explains why an optimistic update matched no row: the object is gone
// (ENotFound) or its version moved on (EVersionConflict).
func versionOrNotFound(ctx context.Context, tx pgx.Tx, what, query string, sent int64, args ...any) error {
	var cur int64
	err := tx.QueryRow(ctx, query, args...).Scan(&cur)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(what)
	}
	if err != nil {
		return err
	}
	return tenants.Errorf(tenants.EVersionConflict, "the %s changed since you read it: it is at version %d, you sent version %d; re-read it and retry", what, cur, sent)
}

var _ tenants.TenantService = (*DB)(nil)

// tenantView is what a tenant's update may change, for its audit entry: the Tenant's
// version and timestamps are the store's, not the writer's.
type tenantView struct {
	Name         string `json:"name"`
	PlatformPlan string `json:"plan"`
}
