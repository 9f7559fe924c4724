package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// The resource limits of a tenant's platform plan (tenants.ResourceLimits), checked when
// an object is saved. A check locks the tenant row before it counts, in the transaction
// that then inserts: two creations of one tenant at its limit are serialized by the lock,
// and the second counts the first's row once it commits (each statement of a READ
// COMMITTED transaction sees what committed before it began). FOR NO KEY UPDATE does
// not block the foreign-key checks of other objects' writes, and the plan row is read
// without a lock, so the order "plan, then tenants" that PutPlatformPlan and tenant
// writes follow cannot deadlock against it.

// resourceColumns are the platform_plans columns of the resource limits, by resource
// name (the same words).
var resourceColumns = map[string]string{
	tenants.ResRoutes:          "routes",
	tenants.ResConsumers:       "consumers",
	tenants.ResKeysPerConsumer: "keys_per_consumer",
	tenants.ResConsumerPlans:   "plans",
	tenants.ResDomains:         "domains",
	tenants.ResJWTIssuers:      "jwt_issuers",
	tenants.ResAccessRules:     "policy_rules",
	tenants.ResCacheBytes:      "cache_bytes",
	tenants.ResFunctions:       "functions",
	tenants.ResFunctionBytes:   "function_bytes",
}

// lockTenantLimit locks the tenant row until the transaction ends and returns its
// platform plan's name and limit of resource. ENotFound (tenant).
func lockTenantLimit(ctx context.Context, tx pgx.Tx, tenantID, resource string) (plan string, limit int64, err error) {
	col, ok := resourceColumns[resource]
	if !ok {
		return "", 0, fmt.Errorf("postgres: unknown resource %q", resource)
	}
	err = tx.QueryRow(ctx, `SELECT t.plan, pp.`+col+`::bigint FROM tenants t
		JOIN platform_plans pp ON pp.name = t.plan
		WHERE t.id = $1 FOR NO KEY UPDATE OF t`, tenantID).Scan(&plan, &limit)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, notFound("tenant")
	}
	return plan, limit, err
}

// Counts of a tenant's objects, for checkCount. $1 is the tenant id.
const (
	countRoutes    = `SELECT count(*) FROM routes WHERE tenant_id = $1`
	countConsumers = `SELECT count(*) FROM consumers WHERE tenant_id = $1`
	countPlans     = `SELECT count(*) FROM plans WHERE tenant_id = $1`
	countIssuers   = `SELECT count(*) FROM jwt_issuers WHERE tenant_id = $1`
	countDomains   = `SELECT count(*) FROM domains WHERE tenant_id = $1`
	countFunctions = `SELECT count(*) FROM functions WHERE tenant_id = $1`
	// $2 is the consumer id.
	countKeys = `SELECT count(*) FROM keys WHERE tenant_id = $1 AND consumer_id = $2`
)

// checkCount locks the tenant row, counts its objects with count (args follow the tenant
// id), and refuses one more when that would take the tenant past its plan's limit of
// resource: EValidation with Field resource, ENotFound (tenant). It must come before
// the insert it guards, in the same transaction.
func checkCount(ctx context.Context, tx pgx.Tx, tenantID, resource, count string, args ...any) error {
	plan, limit, err := lockTenantLimit(ctx, tx, tenantID, resource)
	if err != nil {
		return err
	}
	memo, _ := ctx.Value(countMemoKey{}).(countMemo)
	key := countKey{tenantID, resource}
	n, known := memo[key]
	if !known || len(args) > 0 {
		if err := tx.QueryRow(ctx, count, append([]any{tenantID}, args...)...).Scan(&n); err != nil {
			return err
		}
	}
	if n >= limit {
		return tenants.OverLimit(resource, plan, limit)
	}
	if memo != nil && len(args) == 0 {
		memo[key] = n + 1 // the caller inserts one next, or the transaction fails
	}
	return nil
}

// countMemo carries a transaction's counts of a tenant's objects from one checkCount to
// the next, so a config apply that creates thousands of routes counts the tenant's routes
// once rather than once per route (which made filling a tenant of 50,000 routes quadratic).
// It holds only while every change of those objects in the transaction goes through
// checkCount (an insert) or forgetCount (a delete); the tenant row's lock, taken by every
// check, keeps other transactions out. Counts with arguments (keys per consumer) are not
// kept.
type countMemo map[countKey]int64

type countKey struct{ tenantID, resource string }

type countMemoKey struct{}

func withCountMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, countMemoKey{}, countMemo{})
}

// forgetCount drops a kept count after a delete: the next check counts again.
func forgetCount(ctx context.Context, tenantID, resource string) {
	if memo, _ := ctx.Value(countMemoKey{}).(countMemo); memo != nil {
		delete(memo, countKey{tenantID, resource})
	}
}

// checkAccessRulesSize refuses access rules of entries rules and role links when the tenant's plan
// allows fewer, unless the tenant's current access rules are at least as large (a plan lowered
// under access rules keeps them, and lets the tenant edit them down). It locks the tenant row.
func checkAccessRulesSize(ctx context.Context, tx pgx.Tx, tenantID string, entries int) error {
	plan, limit, err := lockTenantLimit(ctx, tx, tenantID, tenants.ResAccessRules)
	if err != nil || int64(entries) <= limit {
		return err
	}
	var current int64
	err = tx.QueryRow(ctx, `SELECT jsonb_array_length(spec->'rules') + jsonb_array_length(spec->'roles')
		FROM policies WHERE tenant_id = $1`, tenantID).Scan(&current)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if int64(entries) <= current {
		return nil
	}
	e := tenants.OverLimit(tenants.ResAccessRules, plan, limit)
	e.Message += fmt.Sprintf(" (this policy has %d)", entries)
	return e
}

// checkCacheAllowed refuses a route with a response cache when the tenant's plan gives
// it no cache memory (cache_bytes 0), unless the stored route (routeID, "" for a new
// one) has a cache already: a plan lowered under a cached route keeps it, and its edits.
// How many bytes the tenant's answers take is the edges' to bound (each edge holds the
// tenant to cache_bytes); the store only refuses what the plan rules out.
func checkCacheAllowed(ctx context.Context, tx pgx.Tx, r *tenants.Route, routeID string) error {
	if r.Cache == nil {
		return nil
	}
	var (
		plan  string
		bytes int64
		had   bool
	)
	err := tx.QueryRow(ctx, `SELECT t.plan, pp.cache_bytes,
			EXISTS (SELECT 1 FROM routes r WHERE r.tenant_id = t.id AND r.id::text = lower($2) AND r.spec ? 'cache')
		FROM tenants t JOIN platform_plans pp ON pp.name = t.plan
		WHERE t.id = $1`, r.TenantID, routeID).Scan(&plan, &bytes, &had)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("tenant")
	}
	if err != nil || bytes > 0 || had {
		return err
	}
	return tenants.OverLimit(tenants.ResCacheBytes, plan, 0)
}
