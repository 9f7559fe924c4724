package postgres

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/jackc/pgx/v5"

	"tollgate/billing"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// Latency sketches (usage_latency, migration 00023). Fold merges a batch's sketches into
// their route-hour rows inside the batch's own transaction, after its usage_batches row
// was inserted, so a batch folded before merges nothing. Sketches are merged here, not in
// SQL: each row is made if missing, then all of the batch's rows are locked in key order
// (concurrent folds never deadlock, and one waits for the other's merge), merged in
// memory and written back.

type latencyKey struct {
	tenant, route string
	hour          int64
}

type latencyRow struct {
	gw, up *ddsketch.DDSketch
}

// foldLatencies merges lats into usage_latency within tx.
func foldLatencies(ctx context.Context, tx pgx.Tx, lats []usage.Latency) error {
	if len(lats) == 0 {
		return nil
	}
	add := map[latencyKey]*latencyRow{}
	for i := range lats {
		l := &lats[i]
		k := latencyKey{strings.ToLower(l.TenantID), l.RouteID, l.Hour.Unix()}
		r := add[k]
		if r == nil {
			r = &latencyRow{}
			add[k] = r
		}
		var err error
		if r.gw, err = mergeSketch(r.gw, l.Gateway); err != nil {
			return err
		}
		if r.up, err = mergeSketch(r.up, l.Upstream); err != nil {
			return err
		}
	}
	keys := make([]latencyKey, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		switch {
		case a.tenant != b.tenant:
			return a.tenant < b.tenant
		case a.route != b.route:
			return a.route < b.route
		}
		return a.hour < b.hour
	})
	tids, routes, hours := make([]string, len(keys)), make([]string, len(keys)), make([]time.Time, len(keys))
	for i, k := range keys {
		tids[i], routes[i], hours[i] = k.tenant, k.route, time.Unix(k.hour, 0).UTC()
	}
	if _, err := tx.Exec(ctx, `INSERT INTO usage_latency (tenant_id, route_id, hour)
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[])
		ON CONFLICT (tenant_id, route_id, hour) DO NOTHING`, tids, routes, hours); err != nil {
		return fmt.Errorf("make latency rows: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT l.tenant_id::text, l.route_id, l.hour, l.gateway, l.upstream
		FROM usage_latency l JOIN unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS k(t, r, h)
			ON l.tenant_id = k.t AND l.route_id = k.r AND l.hour = k.h
		ORDER BY l.tenant_id, l.route_id, l.hour FOR UPDATE OF l`, tids, routes, hours)
	if err != nil {
		return fmt.Errorf("lock latency rows: %w", err)
	}
	for rows.Next() {
		var (
			tid, route string
			hour       time.Time
			gw, up     []byte
		)
		if err := rows.Scan(&tid, &route, &hour, &gw, &up); err != nil {
			rows.Close()
			return fmt.Errorf("lock latency rows: %w", err)
		}
		r := add[latencyKey{tid, route, hour.Unix()}]
		if r == nil {
			continue
		}
		if r.gw, err = mergeSketch(r.gw, gw); err == nil {
			r.up, err = mergeSketch(r.up, up)
		}
		if err != nil {
			rows.Close()
			return fmt.Errorf("stored latency of route %q at %s: %w", route, hour.UTC().Format(time.RFC3339), err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock latency rows: %w", err)
	}
	counts := make([]int64, len(keys))
	gws, ups := make([][]byte, len(keys)), make([][]byte, len(keys))
	for i, k := range keys {
		r := add[k]
		if r.gw != nil {
			counts[i] = int64(r.gw.GetCount())
			gws[i] = usage.EncodeSketch(r.gw)
		}
		if r.up != nil {
			ups[i] = usage.EncodeSketch(r.up)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE usage_latency l SET requests = k.n, gateway = k.g, upstream = k.u
		FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::bigint[], $5::bytea[], $6::bytea[]) AS k(t, r, h, n, g, u)
		WHERE l.tenant_id = k.t AND l.route_id = k.r AND l.hour = k.h`, tids, routes, hours, counts, gws, ups); err != nil {
		return fmt.Errorf("write latency rows: %w", err)
	}
	return nil
}

// mergeSketch merges an encoded sketch (none when empty) into s, which may be nil.
func mergeSketch(s *ddsketch.DDSketch, data []byte) (*ddsketch.DDSketch, error) {
	if len(data) == 0 {
		return s, nil
	}
	o, err := usage.DecodeSketch(data)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return o, nil
	}
	if err := s.MergeWith(o); err != nil {
		return nil, err
	}
	return s, nil
}

// Latency answers a latency query from usage_latency.
func (s *Store) Latency(ctx context.Context, q billing.LatencyQuery) (*billing.LatencyReport, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if !validUUID(q.TenantID) {
		return nil, tenants.Errorf(tenants.ENotFound, "no tenant %q", q.TenantID)
	}
	rows, err := s.pool.Query(ctx, `SELECT route_id, hour, gateway, upstream FROM usage_latency
		WHERE tenant_id = $1 AND hour >= $2 AND hour < $3 AND ($4 OR route_id = $5)
		ORDER BY route_id, hour`, q.TenantID, q.From, q.To, q.Every, q.RouteID)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	defer rows.Close()
	rep := &billing.LatencyReport{From: q.From, To: q.To, Items: []billing.LatencyItem{}, Routes: []billing.LatencyRoute{}}
	var total latencyRow
	flush := func(route string) {
		if total.gw != nil || total.up != nil {
			rep.Routes = append(rep.Routes, billing.LatencyRoute{RouteID: route, Gateway: billing.SketchStats(total.gw), Upstream: billing.SketchStats(total.up)})
		}
		total = latencyRow{}
	}
	route := ""
	for rows.Next() {
		var (
			it     billing.LatencyItem
			gw, up []byte
		)
		if err := rows.Scan(&it.RouteID, &it.Hour, &gw, &up); err != nil {
			return nil, fmt.Errorf("latency: %w", err)
		}
		it.Hour = it.Hour.UTC()
		if it.RouteID != route {
			flush(route)
			route = it.RouteID
		}
		g, err := mergeSketch(nil, gw)
		var u *ddsketch.DDSketch
		if err == nil {
			u, err = mergeSketch(nil, up)
		}
		if err != nil {
			return nil, fmt.Errorf("latency of route %q at %s: %w", it.RouteID, it.Hour.Format(time.RFC3339), err)
		}
		it.Gateway, it.Upstream = billing.SketchStats(g), billing.SketchStats(u)
		rep.Items = append(rep.Items, it)
		// The item's stats are read; its sketches can go into the range's.
		if total.gw, err = mergeSketch(total.gw, gw); err == nil {
			total.up, err = mergeSketch(total.up, up)
		}
		if err != nil {
			return nil, fmt.Errorf("latency: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	flush(route)
	return rep, nil
}

var _ billing.LatencyService = (*Store)(nil)
