package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// The resource limits of a tenant's platform plan (tenants.ResourceLimits), checked when
// an object is saved, against counts kept in tenant_counts (and consumer_key_counts for
// keys) by the transactions that insert and delete the objects (migration 00026).
//
// A creation must never take a tenant past its limit, even when two race for the last
// place. Far below the limit, creations need not wait for each other: a check then locks
// the tenant row FOR SHARE, and passes when the committed count plus the most
// transactions that can be in flight at once (the server's max_connections) is below the
// limit, since each of those adds at most one; the creation adds to its connection's own
// stripe of the counts at the end of its transaction. Near the limit a check locks the
// tenant row FOR NO KEY UPDATE, which waits out every creation in flight and blocks new
// ones, and then the committed count is exact. A check that finds the tenant near the
// limit only once it holds the shared lock (a race) cannot upgrade it without risking a
// deadlock: the transaction is run again from the start, checking the exclusive way
// (errNearLimit). Transactions that create several objects of a kind (an apply) check the
// exclusive way from the first. FOR NO KEY UPDATE and FOR SHARE do not block the
// foreign-key checks of other objects' writes, and the plan row is read without a lock,
// so the order "plan, then tenants" that PutPlatformPlan and tenant writes follow cannot
// deadlock against them.

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

// countColumns are the tenant_counts columns, by resource.
var countColumns = map[string]string{
	tenants.ResRoutes:        "routes",
	tenants.ResConsumers:     "consumers",
	tenants.ResConsumerPlans: "plans",
	tenants.ResJWTIssuers:    "jwt_issuers",
	tenants.ResDomains:       "domains",
	tenants.ResFunctions:     "functions",
}

// WithSharedLimitChecks(false) makes every limit check take the tenant's row exclusively,
// as near a limit: creations in one tenant then wait for each other's commits. Default:
// true.
func WithSharedLimitChecks(on bool) Option {
	return func(db *DB) { db.exclusiveChecks = !on }
}

// errNearLimit asks change to run a write again with exclusive checks (see above).
var errNearLimit = errors.New("postgres: the tenant is near a limit: check again exclusively")

// inFlightBound is the most transactions that can be in flight on the server at once.
const inFlightBound = `current_setting('max_connections')::bigint + current_setting('max_prepared_transactions')::bigint`

// checkCount refuses one more object of resource when that would take the tenant past
// its plan's limit (EValidation with Field resource; ENotFound: tenant), and otherwise
// counts it in tx, which adds it to the stored counts when the write ends. It must come
// before the insert it guards, in the same transaction (a db.write).
func checkCount(ctx context.Context, tx pgx.Tx, tenantID, resource string) error {
	b := &pgx.Batch{}
	finish, err := queueCount(ctx, tx, b, tenantID, resource)
	if err != nil || finish == nil {
		return err
	}
	br := tx.SendBatch(ctx, b)
	err = finish(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// queueCount is checkCount with its queries queued in b, so the caller can send its own
// statements in the same round trip: finish reads their results from b's, first, and
// says what checkCount would. A nil finish (and error) means the check needed no query.
func queueCount(ctx context.Context, tx pgx.Tx, b *pgx.Batch, tenantID, resource string) (finish func(pgx.BatchResults) error, err error) {
	col, ok := countColumns[resource]
	if !ok {
		return nil, fmt.Errorf("postgres: unknown counted resource %q", resource)
	}
	wt, _ := tx.(*writeTx)
	if wt == nil {
		return nil, fmt.Errorf("postgres: %s counted outside a write", resource)
	}
	key := countKey{tenantID, resource}
	memo, _ := ctx.Value(countMemoKey{}).(countMemo)
	if m, ok := memo[key]; ok {
		if m.count >= m.limit {
			return nil, tenants.OverLimit(resource, m.plan, m.limit)
		}
		m.count++
		memo[key] = m
		wt.counted(key, 1)
		return nil, nil
	}
	exclusive := wt.exclusive || memo != nil || !wt.sharedChecks
	if !exclusive && (wt.counts[key] != 0 || wt.sharedLocks[tenantID]) {
		// A second object of the tenant's in one transaction: the in-flight bound
		// assumes one each, and upgrading the shared lock could deadlock. Check
		// everything exclusively instead.
		return nil, errNearLimit
	}
	lock := "FOR SHARE OF t"
	if exclusive {
		lock = "FOR NO KEY UPDATE OF t"
	} else {
		if wt.sharedLocks == nil {
			wt.sharedLocks = map[string]bool{}
		}
		wt.sharedLocks[tenantID] = true
	}
	b.Queue(`SELECT t.plan, pp.`+resourceColumns[resource]+`::bigint, `+inFlightBound+` FROM tenants t
		JOIN platform_plans pp ON pp.name = t.plan
		WHERE t.id = $1 `+lock, tenantID)
	// A statement of its own, so its snapshot is taken once the lock is held.
	b.Queue(`SELECT coalesce(sum(`+col+`), 0)::bigint FROM tenant_counts WHERE tenant_id = $1`, tenantID)
	return func(br pgx.BatchResults) error {
		var (
			plan            string
			limit, inFlight int64
			n               int64
		)
		err := br.QueryRow().Scan(&plan, &limit, &inFlight)
		if err == nil {
			err = br.QueryRow().Scan(&n)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("tenant")
		}
		if err != nil {
			return err
		}
		n += wt.counts[key] // what this transaction added and removed already
		if n >= limit {
			return tenants.OverLimit(resource, plan, limit)
		}
		if !exclusive && n+inFlight >= limit {
			return errNearLimit
		}
		if memo != nil {
			memo[key] = memoCount{count: n + 1, limit: limit, plan: plan}
		}
		wt.counted(key, 1)
		return nil
	}, nil
}

// uncount records in tx that an object of resource was deleted. Call it once the delete
// deleted a row.
func uncount(ctx context.Context, tx pgx.Tx, tenantID, resource string) {
	key := countKey{tenantID, resource}
	if memo, _ := ctx.Value(countMemoKey{}).(countMemo); memo != nil {
		if m, ok := memo[key]; ok {
			m.count--
			memo[key] = m
		}
	}
	if wt, ok := tx.(*writeTx); ok {
		wt.counted(key, -1)
	}
}

// counted adds delta to tx's pending count of key.
func (wt *writeTx) counted(key countKey, delta int64) {
	if wt.counts == nil {
		wt.counts = map[countKey]int64{}
	}
	wt.counts[key] += delta
}

// queueCounts queues the statements that add the transaction's pending counts to its
// connection's stripe of each tenant's counts: among the last statements of the write
// (after its revs are drawn, so it never waits for the rev lock holding a stripe), so the
// stripe row is locked only for the commit. A tenant deleted by the transaction has no
// counts left to add to.
func (wt *writeTx) queueCounts(b *pgx.Batch) {
	byTenant := map[string]map[string]int64{}
	for k, d := range wt.counts {
		if d == 0 {
			continue
		}
		if byTenant[k.tenantID] == nil {
			byTenant[k.tenantID] = map[string]int64{}
		}
		byTenant[k.tenantID][countColumns[k.resource]] = d
	}
	for tenantID, d := range byTenant {
		b.Queue(`INSERT INTO tenant_counts (tenant_id, stripe, routes, consumers, plans, jwt_issuers, domains, functions)
			SELECT id, mod(pg_backend_pid(), $8), $2, $3, $4, $5, $6, $7 FROM tenants WHERE id = $1
			ON CONFLICT (tenant_id, stripe) DO UPDATE SET
				routes = tenant_counts.routes + excluded.routes,
				consumers = tenant_counts.consumers + excluded.consumers,
				plans = tenant_counts.plans + excluded.plans,
				jwt_issuers = tenant_counts.jwt_issuers + excluded.jwt_issuers,
				domains = tenant_counts.domains + excluded.domains,
				functions = tenant_counts.functions + excluded.functions`,
			tenantID, d["routes"], d["consumers"], d["plans"], d["jwt_issuers"], d["domains"], d["functions"], countStripes)
	}
}

// countStripes is how many rows a tenant's counts may be spread over: at least the
// connections that write at once, so that they rarely share one.
const countStripes = 64

// checkKeyCount refuses one more key of the consumer past the plan's keys_per_consumer
// and otherwise counts it. It locks the consumer's count row until the transaction ends,
// so two creations at the limit are serialized. ENotFound (tenant or consumer).
func checkKeyCount(ctx context.Context, tx pgx.Tx, tenantID, consumerID string) error {
	var (
		plan  string
		limit int64
	)
	err := tx.QueryRow(ctx, `SELECT t.plan, pp.keys_per_consumer::bigint FROM tenants t
		JOIN platform_plans pp ON pp.name = t.plan WHERE t.id = $1`, tenantID).Scan(&plan, &limit)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("tenant")
	}
	if err != nil {
		return err
	}
	var n int64
	err = tx.QueryRow(ctx, `INSERT INTO consumer_key_counts (tenant_id, consumer_id, keys)
		SELECT tenant_id, id, 1 FROM consumers WHERE tenant_id = $1 AND id = $2
		ON CONFLICT (tenant_id, consumer_id) DO UPDATE SET keys = consumer_key_counts.keys + 1
		RETURNING keys`, tenantID, consumerID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("consumer")
	}
	if err != nil {
		return err
	}
	if n > limit {
		// The transaction fails, and its increment with it.
		return tenants.OverLimit(tenants.ResKeysPerConsumer, plan, limit)
	}
	return nil
}

// uncountKey records that one of the consumer's keys was deleted.
func uncountKey(ctx context.Context, tx pgx.Tx, tenantID, consumerID string) error {
	_, err := tx.Exec(ctx, `UPDATE consumer_key_counts SET keys = keys - 1 WHERE tenant_id = $1 AND consumer_id = $2`, tenantID, consumerID)
	return err
}

// countMemo carries a transaction's counts of a tenant's objects from one checkCount to
// the next, so a config apply that creates thousands of routes locks and counts once.
// Its checks are exclusive: the tenant row's lock keeps other transactions out.
type countMemo map[countKey]memoCount

type memoCount struct {
	count, limit int64
	plan         string
}

type countKey struct{ tenantID, resource string }

type countMemoKey struct{}

// queueCountMemo queues in b, behind the statement that locks the tenant exclusively, the
// read of its limits and counts of every counted resource into ctx's memo, so the checks
// of an apply need no round trip of their own (see WithFoldedRoundTrips).
func queueCountMemo(ctx context.Context, b *pgx.Batch, tenantID string) {
	memo, _ := ctx.Value(countMemoKey{}).(countMemo)
	res := []string{tenants.ResRoutes, tenants.ResConsumers, tenants.ResConsumerPlans, tenants.ResJWTIssuers, tenants.ResDomains, tenants.ResFunctions}
	var plan string
	limits, sums, v, dst := "", "", make([]int64, 2*len(res)), make([]any, 1+2*len(res))
	dst[0] = &plan
	for i, r := range res {
		limits, sums = limits+", pp."+resourceColumns[r]+"::bigint", sums+", coalesce(sum("+countColumns[r]+"), 0)::bigint"
		dst[1+i], dst[1+len(res)+i] = &v[i], &v[len(res)+i] // the limits, then the counts
	}
	b.Queue(`SELECT t.plan`+limits+`, c.* FROM tenants t JOIN platform_plans pp ON pp.name = t.plan,
		LATERAL (SELECT `+sums[2:]+` FROM tenant_counts WHERE tenant_id = t.id) c WHERE t.id = $1`, tenantID).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(dst...); memo == nil || errors.Is(err, pgx.ErrNoRows) {
			return nil // no tenant: loadConfig says so
		} else if err != nil {
			return err
		}
		for i, r := range res {
			memo[countKey{tenantID, r}] = memoCount{count: v[len(res)+i], limit: v[i], plan: plan}
		}
		return nil
	})
}

func withCountMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, countMemoKey{}, countMemo{})
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
