package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// platformPlanOfTenant is the select-list expression of a tenant's platform plan as the
// JSON of a tenants.PlatformPlan (NULL when the plan names none), for tenantColumns. It
// refers to the tenants row by its table name, so it works after SELECT … FROM tenants
// and in RETURNING of INSERT and UPDATE.
const platformPlanOfTenant = `(SELECT jsonb_build_object('name', pp.name, 'version', pp.version,
	'created_at', pp.created_at, 'updated_at', pp.updated_at, 'resources', ` + resourcesObject + `) || pp.limits
	FROM platform_plans pp WHERE pp.name = tenants.plan)`

// resourcesObject is a platform_plans row's resource limits as the JSON of a
// tenants.ResourceLimits (pp is the row).
const resourcesObject = `jsonb_build_object('routes', pp.routes, 'consumers', pp.consumers,
	'keys_per_consumer', pp.keys_per_consumer, 'plans', pp.plans, 'domains', pp.domains,
	'jwt_issuers', pp.jwt_issuers, 'policy_rules', pp.policy_rules, 'cache_bytes', pp.cache_bytes,
	'functions', pp.functions, 'function_bytes', pp.function_bytes,
	'function_timeout_ms', pp.function_timeout_ms, 'function_concurrency', pp.function_concurrency)`

const platformPlanColumns = `name, limits, version, created_at, updated_at,
	routes, consumers, keys_per_consumer, plans, domains, jwt_issuers, policy_rules, cache_bytes,
	functions, function_bytes, function_timeout_ms, function_concurrency`

func scanPlatformPlan(row pgx.Row) (*tenants.PlatformPlan, error) {
	var (
		p tenants.PlatformPlan
		l planLimits
		r tenants.ResourceLimits
	)
	if err := row.Scan(&p.Name, &l, &p.Version, &p.CreatedAt, &p.UpdatedAt,
		&r.Routes, &r.Consumers, &r.KeysPerConsumer, &r.ConsumerPlans, &r.Domains, &r.JWTIssuers, &r.AccessRules, &r.CacheBytes,
		&r.Functions, &r.FunctionBytes, &r.FunctionTimeoutMS, &r.FunctionConcurrency); err != nil {
		return nil, err
	}
	p.RateLimit, p.Quota, p.Concurrency, p.Mode, p.Logs = l.RateLimit, l.Quota, l.Concurrency, l.Mode, l.Logs
	p.Resources = &r
	normalizePlatformPlan(&p)
	return &p, nil
}

// normalizePlatformPlan fills the defaults a stored plan may lack (seeded rows) and puts
// its times in UTC.
func normalizePlatformPlan(p *tenants.PlatformPlan) {
	if p == nil {
		return
	}
	p.CreatedAt, p.UpdatedAt = utc(p.CreatedAt), utc(p.UpdatedAt)
	_ = p.Validate() // stored plans were validated; this only fills defaults
}

func noPlatformPlan(name string) *tenants.Error {
	return tenants.Invalid("plan", "there is no platform plan named %q (GET /v1/platform/plans lists them)", name)
}

// lockPlatformPlan checks that the platform plan name exists and locks it shared until the
// transaction ends. A tenant write takes it before it touches the tenant row, as
// PutPlatformPlan takes the plan before the tenant rows: the two never deadlock, and a
// tenant entry written after a plan change carries the changed limits.
func lockPlatformPlan(ctx context.Context, tx pgx.Tx, name string) error {
	err := tx.QueryRow(ctx, `SELECT name FROM platform_plans WHERE name = $1 FOR SHARE`, name).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return noPlatformPlan(name)
	}
	return err
}

// ListPlatformPlans returns every platform plan, by name.
func (db *DB) ListPlatformPlans(ctx context.Context) ([]*tenants.PlatformPlan, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+platformPlanColumns+` FROM platform_plans ORDER BY name`)
	if err != nil {
		return nil, constraintError(err, "list platform plans", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.PlatformPlan, error) { return scanPlatformPlan(r) })
	if err != nil {
		return nil, constraintError(err, "list platform plans", nil)
	}
	return list, nil
}

// FindPlatformPlan: ENotFound.
func (db *DB) FindPlatformPlan(ctx context.Context, name string) (*tenants.PlatformPlan, error) {
	p, err := scanPlatformPlan(db.pool.QueryRow(ctx, `SELECT `+platformPlanColumns+` FROM platform_plans WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, tenants.Errorf(tenants.ENotFound, "no platform plan %q", name)
	}
	return p, constraintError(err, "find platform plan", nil)
}

// PutPlatformPlan creates or replaces the platform plan p.Name (only at version
// p.Version when that is not 0), fills in p, and re-emits the config entry of every
// tenant on the plan in the same transaction, so the edges apply the new limits.
// EValidation, ENotFound, EVersionConflict.
func (db *DB) PutPlatformPlan(ctx context.Context, p *tenants.PlatformPlan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	l := planLimits{RateLimit: p.RateLimit, Quota: p.Quota, Concurrency: p.Concurrency, Mode: p.Mode, Logs: p.Logs}
	r := p.Resources
	err := db.write(ctx, func(tx pgx.Tx) error {
		var row pgx.Row
		if p.Version == 0 {
			row = tx.QueryRow(ctx, `INSERT INTO platform_plans (name, limits, routes, consumers, keys_per_consumer,
					plans, domains, jwt_issuers, policy_rules, cache_bytes,
					functions, function_bytes, function_timeout_ms, function_concurrency)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
				ON CONFLICT (name) DO UPDATE SET limits = EXCLUDED.limits, routes = EXCLUDED.routes,
					consumers = EXCLUDED.consumers, keys_per_consumer = EXCLUDED.keys_per_consumer,
					plans = EXCLUDED.plans, domains = EXCLUDED.domains, jwt_issuers = EXCLUDED.jwt_issuers,
					policy_rules = EXCLUDED.policy_rules, cache_bytes = EXCLUDED.cache_bytes,
					functions = EXCLUDED.functions, function_bytes = EXCLUDED.function_bytes,
					function_timeout_ms = EXCLUDED.function_timeout_ms, function_concurrency = EXCLUDED.function_concurrency,
					version = platform_plans.version + 1, updated_at = now()
				RETURNING `+platformPlanColumns, p.Name, l,
				r.Routes, r.Consumers, r.KeysPerConsumer, r.ConsumerPlans, r.Domains, r.JWTIssuers, r.AccessRules, r.CacheBytes,
				r.Functions, r.FunctionBytes, r.FunctionTimeoutMS, r.FunctionConcurrency)
		} else {
			row = tx.QueryRow(ctx, `UPDATE platform_plans SET limits = $3, routes = $4, consumers = $5,
					keys_per_consumer = $6, plans = $7, domains = $8, jwt_issuers = $9, policy_rules = $10,
					cache_bytes = $11, functions = $12, function_bytes = $13, function_timeout_ms = $14,
					function_concurrency = $15, version = version + 1, updated_at = now()
				WHERE name = $1 AND version = $2 RETURNING `+platformPlanColumns, p.Name, p.Version, l,
				r.Routes, r.Consumers, r.KeysPerConsumer, r.ConsumerPlans, r.Domains, r.JWTIssuers, r.AccessRules, r.CacheBytes,
				r.Functions, r.FunctionBytes, r.FunctionTimeoutMS, r.FunctionConcurrency)
		}
		saved, err := scanPlatformPlan(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return versionOrNotFound(ctx, tx, "platform plan", `SELECT version FROM platform_plans WHERE name = $1`, p.Version, p.Name)
		}
		if err != nil {
			return err
		}
		*p = *saved
		// The plan row is locked by the write above; now the tenants on it, in id order.
		rows, err := tx.Query(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE plan = $1 ORDER BY id FOR UPDATE OF tenants`, p.Name)
		if err != nil {
			return err
		}
		ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.Tenant, error) { return scanTenant(r) })
		if err != nil {
			return fmt.Errorf("tenants on plan %s: %w", p.Name, err)
		}
		changes := make([]change, len(ts))
		for i, t := range ts {
			changes[i] = tenantChange(t)
		}
		return emit(ctx, tx, changes...)
	})
	return constraintError(err, "put platform plan", nil)
}

var _ tenants.PlatformPlanService = (*DB)(nil)
