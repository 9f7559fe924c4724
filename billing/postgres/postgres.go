// Package postgres stores billing's data in PostgreSQL (tables of migration
// tenants/postgres/migrations/00002_usage.sql): hourly usage rollups folded exactly once
// per batch, plan prices, Stripe customers and the record of every usage push.
//
// It reads the tenants table (slug and plan, for exports) but never writes tenant
// config: that is the api's, through tenants/postgres and its outbox. The one column of
// the config tables it writes, keys.last_used_at (keyuse.go), is not config: no edge
// reads it.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tollgate/billing"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// Store is billing's Postgres store. Its methods are safe for concurrent use, and folds
// may run in several processes at once.
type Store struct {
	pool *pgxpool.Pool
	own  bool
	now  func() time.Time // the clock of price changes (prices.go); nil: time.Now
	logs *logPartitions   // the request log's partitions known to exist (reqlog.go)
}

// ConnectTimeout bounds connecting when the url (or PGCONNECT_TIMEOUT) sets no
// connect_timeout: a frozen server accepts the TCP connection and never answers, and a
// new connection would otherwise wait for it as long as the freeze lasts.
const ConnectTimeout = 5 * time.Second

// Open connects to the database at url (migrated by tenants/postgres.Migrate).
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("billing postgres: database url: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("billing postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("billing postgres: %w", err)
	}
	return &Store{pool: pool, own: true, logs: &logPartitions{}}, nil
}

// New uses a pool the caller owns (and closes).
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool, logs: &logPartitions{}} }

// Close closes the pool if Open made it.
func (s *Store) Close() {
	if s.own {
		s.pool.Close()
	}
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

type rollupKey struct {
	tenant, route, consumer string
	hour                    int64
	class                   int
}

// Fold adds a batch to the rollups, once: in one transaction it records the batch id in
// usage_batches (ON CONFLICT DO NOTHING) and, only if that inserted a row, adds every
// record to its usage_hourly row (ON CONFLICT DO UPDATE … + EXCLUDED) and the batch's
// requests (and function time) per tenant and hour to its edge's and boot's
// usage_edge_hourly row. folded is false
// when the batch had been folded before; then nothing changed. Rows are upserted in
// primary-key order so that concurrent folds never deadlock.
func (s *Store) Fold(ctx context.Context, b *usage.Batch) (folded bool, err error) {
	merged := map[rollupKey]*usage.Counts{}
	for i := range b.Records {
		r := &b.Records[i]
		k := rollupKey{strings.ToLower(r.TenantID), r.RouteID, r.ConsumerID, r.Hour.Unix(), r.Class}
		c := merged[k]
		if c == nil {
			c = &usage.Counts{}
			merged[k] = c
		}
		c.Add(r.Counts)
	}
	keys := make([]rollupKey, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		switch {
		case a.tenant != b.tenant:
			return a.tenant < b.tenant
		case a.hour != b.hour:
			return a.hour < b.hour
		case a.route != b.route:
			return a.route < b.route
		case a.consumer != b.consumer:
			return a.consumer < b.consumer
		}
		return a.class < b.class
	})
	n := len(keys)
	var (
		tenantIDs = make([]string, n)
		hours     = make([]time.Time, n)
		routes    = make([]string, n)
		consumers = make([]string, n)
		classes   = make([]int16, n)
		requests  = make([]int64, n)
		billable  = make([]int64, n)
		bytesIn   = make([]int64, n)
		bytesOut  = make([]int64, n)
		function  = make([]int64, n)
	)
	for i, k := range keys {
		c := merged[k]
		tenantIDs[i], hours[i], routes[i], consumers[i], classes[i] = k.tenant, time.Unix(k.hour, 0).UTC(), k.route, k.consumer, int16(k.class)
		requests[i], billable[i], bytesIn[i], bytesOut[i], function[i] = c.Requests, c.Billable, c.BytesIn, c.BytesOut, c.FunctionUS
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO usage_batches (batch_id, edge_id, records, requests)
			VALUES ($1, $2, $3, $4) ON CONFLICT (batch_id) DO NOTHING`,
			b.ID, b.EdgeID, len(b.Records), b.Requests())
		if err != nil {
			return fmt.Errorf("record batch: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // folded before
		}
		folded = true
		if err := foldKeyUses(ctx, tx, b.KeyUses); err != nil {
			return err
		}
		if err := foldLatencies(ctx, tx, b.Latencies); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO usage_hourly
				(tenant_id, hour, route_id, consumer_id, status_class, requests, billable, bytes_in, bytes_out, function_us)
			SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::smallint[],
				$6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
			ON CONFLICT (tenant_id, hour, route_id, consumer_id, status_class) DO UPDATE SET
				requests    = usage_hourly.requests    + EXCLUDED.requests,
				billable    = usage_hourly.billable    + EXCLUDED.billable,
				bytes_in    = usage_hourly.bytes_in    + EXCLUDED.bytes_in,
				bytes_out   = usage_hourly.bytes_out   + EXCLUDED.bytes_out,
				function_us = usage_hourly.function_us + EXCLUDED.function_us`,
			tenantIDs, hours, routes, consumers, classes, requests, billable, bytesIn, bytesOut, function)
		if err != nil {
			return fmt.Errorf("upsert rollups: %w", err)
		}
		// The same counts by edge and boot, so reconcile can set each edge's folded
		// usage beside its own totals. keys are in (tenant, hour) order, and so is this.
		_, err = tx.Exec(ctx, `INSERT INTO usage_edge_hourly (tenant_id, hour, edge_id, boot_id, requests, billable, function_us)
			SELECT t, h, $3, $4, sum(r), sum(b), sum(f)
			FROM unnest($1::uuid[], $2::timestamptz[], $5::bigint[], $6::bigint[], $7::bigint[]) AS u(t, h, r, b, f)
			GROUP BY t, h ORDER BY t, h
			ON CONFLICT (tenant_id, hour, edge_id, boot_id) DO UPDATE SET
				requests    = usage_edge_hourly.requests    + EXCLUDED.requests,
				billable    = usage_edge_hourly.billable    + EXCLUDED.billable,
				function_us = usage_edge_hourly.function_us + EXCLUDED.function_us`,
			tenantIDs, hours, b.EdgeID, b.BootID, requests, billable, function)
		if err != nil {
			return fmt.Errorf("upsert edge rollups: %w", err)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("fold batch %s: %w", b.ID, err)
	}
	return folded, nil
}

// Usage answers a usage query from the rollups.
func (s *Store) Usage(ctx context.Context, q billing.UsageQuery) (*billing.UsageReport, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	cols := []string{fmt.Sprintf("date_trunc('%s', hour AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'", q.Granularity)}
	for _, g := range []struct {
		on  bool
		col string
	}{{q.ByRoute, "route_id"}, {q.ByConsumer, "consumer_id"}, {q.ByStatus, "status_class"}} {
		if g.on {
			cols = append(cols, g.col)
		}
	}
	groups := make([]string, len(cols))
	for i := range cols {
		groups[i] = fmt.Sprint(i + 1)
	}
	sql := fmt.Sprintf(`SELECT %s, sum(requests), sum(billable), sum(bytes_in), sum(bytes_out), sum(function_us)
		FROM usage_hourly WHERE tenant_id = $1 AND hour >= $2 AND hour < $3
		GROUP BY %s ORDER BY %s`, strings.Join(cols, ", "), strings.Join(groups, ", "), strings.Join(groups, ", "))
	if !validUUID(q.TenantID) {
		return nil, tenants.Errorf(tenants.ENotFound, "no tenant %q", q.TenantID)
	}
	rows, err := s.pool.Query(ctx, sql, q.TenantID, q.From, q.To)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	defer rows.Close()
	rep := &billing.UsageReport{From: q.From, To: q.To, Granularity: q.Granularity, Items: []billing.UsageItem{}}
	for rows.Next() {
		var (
			it              billing.UsageItem
			route, consumer string
			class           int16
		)
		dst := []any{&it.Start}
		if q.ByRoute {
			dst = append(dst, &route)
		}
		if q.ByConsumer {
			dst = append(dst, &consumer)
		}
		if q.ByStatus {
			dst = append(dst, &class)
		}
		dst = append(dst, &it.Requests, &it.Billable, &it.BytesIn, &it.BytesOut, &it.FunctionUS)
		if err := rows.Scan(dst...); err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		it.Start = it.Start.UTC()
		if q.ByRoute {
			it.RouteID = &route
		}
		if q.ByConsumer {
			it.ConsumerID = &consumer
		}
		if q.ByStatus {
			it.Status = billing.ClassLabel(int(class))
		}
		rep.Total.Add(it.Counts)
		rep.Items = append(rep.Items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	return rep, nil
}

// FoldedTotals sums the rollups per tenant and hour of period p.
func (s *Store) FoldedTotals(ctx context.Context, p billing.Period) ([]billing.HourTotal, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id::text, hour, sum(requests), sum(billable), sum(function_us)
		FROM usage_hourly WHERE hour >= $1 AND hour < $2 GROUP BY 1, 2 ORDER BY 1, 2`, p.Start(), p.End())
	if err != nil {
		return nil, fmt.Errorf("folded totals: %w", err)
	}
	defer rows.Close()
	var out []billing.HourTotal
	for rows.Next() {
		var t billing.HourTotal
		if err := rows.Scan(&t.TenantID, &t.Hour, &t.Requests, &t.Billable, &t.FunctionUS); err != nil {
			return nil, err
		}
		t.Hour = t.Hour.UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

// FoldedByEdge sums the per-edge rollups per edge, boot, tenant and hour of period p.
// Usage folded before they were kept is under billing.LegacyEdge.
func (s *Store) FoldedByEdge(ctx context.Context, p billing.Period) ([]billing.EdgeFolded, error) {
	rows, err := s.pool.Query(ctx, `SELECT edge_id, boot_id, tenant_id::text, hour, requests, billable, function_us
		FROM usage_edge_hourly WHERE hour >= $1 AND hour < $2 ORDER BY 3, 4, 1, 2`, p.Start(), p.End())
	if err != nil {
		return nil, fmt.Errorf("folded by edge: %w", err)
	}
	defer rows.Close()
	var out []billing.EdgeFolded
	for rows.Next() {
		var t billing.EdgeFolded
		if err := rows.Scan(&t.EdgeID, &t.BootID, &t.TenantID, &t.Hour, &t.Requests, &t.Billable, &t.FunctionUS); err != nil {
			return nil, fmt.Errorf("folded by edge: %w", err)
		}
		t.Hour = t.Hour.UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

// FoldedBatches says which of ids have been folded (are in usage_batches).
func (s *Store) FoldedBatches(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT batch_id FROM usage_batches WHERE batch_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("folded batches: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("folded batches: %w", err)
		}
		out[id] = true
	}
	return out, rows.Err()
}

// Sum adds up every rollup, for tests and operators.
func (s *Store) Sum(ctx context.Context) (usage.Counts, error) {
	var c usage.Counts
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(requests), 0), coalesce(sum(billable), 0),
		coalesce(sum(bytes_in), 0), coalesce(sum(bytes_out), 0), coalesce(sum(function_us), 0) FROM usage_hourly`).
		Scan(&c.Requests, &c.Billable, &c.BytesIn, &c.BytesOut, &c.FunctionUS)
	return c, err
}

// Batches is the number of batches folded, for tests and operators.
func (s *Store) Batches(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM usage_batches`).Scan(&n)
	return n, err
}

// TenantBySlug returns a tenant's id and name: ENotFound.
func (s *Store) TenantBySlug(ctx context.Context, slug string) (id, name string, err error) {
	err = s.pool.QueryRow(ctx, `SELECT id::text, name FROM tenants WHERE slug = $1`, slug).Scan(&id, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", tenants.Errorf(tenants.ENotFound, "no tenant %q", slug)
	}
	return id, name, err
}

func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// Interface guards.
var (
	_ billing.UsageService = (*Store)(nil)
	_ billing.FoldedSource = (*Store)(nil)
	_ billing.StripeSource = (*Store)(nil)
)
