package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres/jsonspec"
)

// accessRulesColumns puts the spec first, so the columns of their own fill in the rest.
const accessRulesColumns = `spec, tenant_id::text, version, created_at, updated_at`

func scanAccessRules(row pgx.Row) (*tenants.AccessRules, error) {
	var p tenants.AccessRules
	if err := row.Scan(&p, &p.TenantID, &p.Version, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return nil, err
	}
	if p.Rules == nil {
		p.Rules = [][]string{}
	}
	if p.Roles == nil {
		p.Roles = [][]string{}
	}
	p.CreatedAt, p.UpdatedAt = utc(p.CreatedAt), utc(p.UpdatedAt)
	return &p, nil
}

func accessRulesChange(p *tenants.AccessRules) change {
	c := *p
	return put(p.TenantID, tenants.AccessRulesKey(p.TenantID), &tenants.Entry{AccessRules: &c})
}

// FindAccessRules: ENotFound when the tenant has no access rules.
func (db *DB) FindAccessRules(ctx context.Context, tenantID string) (*tenants.AccessRules, error) {
	if !parseID(tenantID) {
		return nil, notFound("policy")
	}
	p, err := scanAccessRules(db.pool.QueryRow(ctx, `SELECT `+accessRulesColumns+` FROM policies WHERE tenant_id = $1`, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("policy")
	}
	return p, constraintError(err, "find policy", nil)
}

// PutAccessRules creates the tenant's access rules or replaces them (version + 1), and fills in p.
// When p.Version is not 0 the replacement happens only at that version. The caller has
// validated p (accessrules.Compile). ENotFound (tenant, or no access rules to replace),
// EVersionConflict, EValidation (more rules and role links than the platform plan's
// policy_rules, and than the current access rules have).
func (db *DB) PutAccessRules(ctx context.Context, p *tenants.AccessRules) error {
	if !parseID(p.TenantID) {
		return notFound("tenant")
	}
	if p.Rules == nil {
		p.Rules = [][]string{}
	}
	if p.Roles == nil {
		p.Roles = [][]string{}
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return putAccessRules(ctx, tx, p) })
	return constraintError(err, "put policy", nil)
}

// putAccessRules is PutAccessRules's work in tx.
func putAccessRules(ctx context.Context, tx pgx.Tx, p *tenants.AccessRules) error {
	if err := checkAccessRulesSize(ctx, tx, p.TenantID, len(p.Rules)+len(p.Roles)); err != nil {
		return err
	}
	spec := jsonspec.Of(p)
	before, err := stateBefore(ctx, tx, scanAccessRules, `SELECT `+accessRulesColumns+` FROM policies WHERE tenant_id = $1`, p.TenantID)
	if err != nil {
		return err
	}
	var saved *tenants.AccessRules
	if p.Version == 0 {
		saved, err = scanAccessRules(tx.QueryRow(ctx, `INSERT INTO policies (tenant_id, spec) VALUES ($1, $2)
			ON CONFLICT (tenant_id) DO UPDATE SET spec = EXCLUDED.spec, version = policies.version + 1, updated_at = now()
			RETURNING `+accessRulesColumns, p.TenantID, spec))
	} else {
		saved, err = scanAccessRules(tx.QueryRow(ctx, `UPDATE policies SET spec = $3, version = version + 1, updated_at = now()
			WHERE tenant_id = $1 AND version = $2 RETURNING `+accessRulesColumns, p.TenantID, p.Version, spec))
		if errors.Is(err, pgx.ErrNoRows) {
			return versionOrNotFound(ctx, tx, "policy", `SELECT version FROM policies WHERE tenant_id = $1`, p.Version, p.TenantID)
		}
	}
	if err != nil {
		return err
	}
	*p = *saved
	auditUpdate(tx, before, p)
	return emit(ctx, tx, accessRulesChange(p))
}

var _ tenants.AccessRulesService = (*DB)(nil)
