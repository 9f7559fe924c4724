package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres/jsonspec"
)

// planLimits is the limits column of a platform plan (platform.go); a tenant's plan
// stores its limits as specOf.
type planLimits struct {
	RateLimit   *tenants.RateLimit `json:"rate_limit,omitempty"`
	Quota       *tenants.Quota     `json:"quota,omitempty"`
	Concurrency int                `json:"concurrency"`
	Mode        string             `json:"mode,omitempty"`
	Logs        *tenants.LogPolicy `json:"logs,omitempty"`
}

// planColumns puts the limits first, so the columns of their own fill in the rest.
const planColumns = `limits, tenant_id::text, id::text, name, version, created_at, updated_at`

func scanPlan(row pgx.Row) (*tenants.ConsumerPlan, error) {
	var p tenants.ConsumerPlan
	if err := row.Scan(&p, &p.TenantID, &p.ID, &p.Name, &p.Version, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return nil, err
	}
	p.CreatedAt, p.UpdatedAt = utc(p.CreatedAt), utc(p.UpdatedAt)
	return &p, nil
}

func planChange(p *tenants.ConsumerPlan) change {
	c := *p
	return put(p.TenantID, tenants.ObjectKey(p.TenantID, tenants.KindPlan, p.ID), &tenants.Entry{Plan: &c})
}

func planConflicts(p *tenants.ConsumerPlan) map[string]*tenants.Error {
	return map[string]*tenants.Error{
		"plans_name_key": {Code: tenants.EConflict, Field: "name", Message: fmt.Sprintf("a plan named %q already exists", p.Name)},
		// Renaming a plan that consumers name.
		"consumers_plan_fkey": {Code: tenants.EConflict, Field: "name", Message: "the plan is assigned to consumers, so it cannot be renamed; move them to another plan first"},
	}
}

// CreatePlan validates p, stores it with a new id and version 1, and fills in p.
// EValidation (also past the platform plan's plans), EConflict (name taken), ENotFound
// (tenant).
func (db *DB) CreatePlan(ctx context.Context, p *tenants.ConsumerPlan) error {
	if !parseID(p.TenantID) {
		return notFound("tenant")
	}
	if err := p.Validate(); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return insertPlan(ctx, tx, p) })
	return constraintError(err, "create plan", planConflicts(p))
}

// insertPlan is CreatePlan's work in tx, on a validated p.
func insertPlan(ctx context.Context, tx pgx.Tx, p *tenants.ConsumerPlan) error {
	if err := checkCount(ctx, tx, p.TenantID, tenants.ResConsumerPlans); err != nil {
		return err
	}
	saved, err := scanPlan(tx.QueryRow(ctx, `INSERT INTO plans (tenant_id, id, name, limits) VALUES ($1, $2, $3, $4)
		RETURNING `+planColumns, p.TenantID, newID(), p.Name, jsonspec.Of(p, "name")))
	if err != nil {
		return err
	}
	*p = *saved
	return emit(ctx, tx, planChange(p))
}

// FindPlan: ENotFound.
func (db *DB) FindPlan(ctx context.Context, tenantID, id string) (*tenants.ConsumerPlan, error) {
	if !parseID(tenantID) || !parseID(id) {
		return nil, notFound("plan")
	}
	p, err := scanPlan(db.pool.QueryRow(ctx, `SELECT `+planColumns+` FROM plans WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("plan")
	}
	return p, constraintError(err, "find plan", nil)
}

// ListPlans returns a page of the tenant's plans in creation order and the cursor of the
// next page ("" after the last).
func (db *DB) ListPlans(ctx context.Context, tenantID string, pg tenants.Page) ([]*tenants.ConsumerPlan, string, error) {
	limit, cursor, err := page(pg)
	if err != nil {
		return nil, "", err
	}
	if !parseID(tenantID) {
		return []*tenants.ConsumerPlan{}, "", nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+planColumns+` FROM plans
		WHERE tenant_id = $1 AND id > $2 ORDER BY plans.id LIMIT $3`, tenantID, cursor, limit+1)
	if err != nil {
		return nil, "", constraintError(err, "list plans", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.ConsumerPlan, error) { return scanPlan(r) })
	if err != nil {
		return nil, "", constraintError(err, "list plans", nil)
	}
	list, next := nextCursor(list, limit, func(p *tenants.ConsumerPlan) string { return p.ID })
	return list, next, nil
}

// UpdatePlan replaces the plan's name and limits when p.Version is current and fills in
// p's new version and timestamps. A plan consumers are assigned to keeps its name.
// ENotFound, EVersionConflict, EConflict, EValidation.
func (db *DB) UpdatePlan(ctx context.Context, p *tenants.ConsumerPlan) error {
	if !parseID(p.TenantID) || !parseID(p.ID) {
		return notFound("plan")
	}
	if err := p.Validate(); err != nil {
		return err
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return updatePlan(ctx, tx, p) })
	return constraintError(err, "update plan", planConflicts(p))
}

// updatePlan is UpdatePlan's work in tx, on a validated p.
func updatePlan(ctx context.Context, tx pgx.Tx, p *tenants.ConsumerPlan) error {
	before, err := stateBefore(ctx, tx, scanPlan, `SELECT `+planColumns+` FROM plans WHERE tenant_id = $1 AND id = $2`, p.TenantID, p.ID)
	if err != nil {
		return err
	}
	saved, err := scanPlan(tx.QueryRow(ctx, `UPDATE plans SET name = $4, limits = $5, version = version + 1, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND version = $3 RETURNING `+planColumns,
		p.TenantID, p.ID, p.Version, p.Name, jsonspec.Of(p, "name")))
	if errors.Is(err, pgx.ErrNoRows) {
		return versionOrNotFound(ctx, tx, "plan", `SELECT version FROM plans WHERE tenant_id = $1 AND id = $2`, p.Version, p.TenantID, p.ID)
	}
	if err != nil {
		return err
	}
	*p = *saved
	auditUpdate(tx, before, p)
	return emit(ctx, tx, planChange(p))
}

// DeletePlan: ENotFound, EConflict while a consumer is assigned to it.
func (db *DB) DeletePlan(ctx context.Context, tenantID, id string) error {
	if !parseID(tenantID) || !parseID(id) {
		return notFound("plan")
	}
	err := db.write(ctx, func(tx pgx.Tx) error { return deletePlan(ctx, tx, tenantID, id) })
	return constraintError(err, "delete plan", planDeleteConflicts)
}

var planDeleteConflicts = map[string]*tenants.Error{
	"consumers_plan_fkey": {Code: tenants.EConflict, Message: "the plan is assigned to consumers; move them to another plan first"},
}

// deletePlan is DeletePlan's work in tx.
func deletePlan(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	// Lock the plan so no consumer is assigned to it between the check and the delete
	// (assigning one locks the plan row shared through the foreign key).
	var tid, pid, name string
	err := tx.QueryRow(ctx, `SELECT tenant_id::text, id::text, name FROM plans WHERE tenant_id = $1 AND id = $2 FOR UPDATE`,
		tenantID, id).Scan(&tid, &pid, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("plan")
	}
	if err != nil {
		return err
	}
	var users int64
	var consumer string
	if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(min(name), '') FROM consumers WHERE tenant_id = $1 AND plan = $2`,
		tid, name).Scan(&users, &consumer); err != nil {
		return err
	}
	if users > 0 {
		return tenants.Errorf(tenants.EConflict, "plan %q is assigned to %d consumer(s), e.g. %q; move them to another plan first", name, users, consumer)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM plans WHERE tenant_id = $1 AND id = $2`, tid, pid); err != nil {
		return err
	}
	uncount(ctx, tx, tid, tenants.ResConsumerPlans)
	return emit(ctx, tx, del(tid, tenants.ObjectKey(tid, tenants.KindPlan, pid)))
}

var _ tenants.ConsumerPlanService = (*DB)(nil)
