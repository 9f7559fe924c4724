package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/infra/reqlog"
	"tollgate/tenants"
)

// The request log (migration 00024): batches stored once each, in day partitions of
// request_log that are created ahead and dropped whole past the longest retention.

// logPartitions remembers the days whose partition exists, so inserting a batch
// creates one only the first time a day is seen.
type logPartitions struct {
	mu   sync.Mutex
	days map[string]bool
}

func (p *logPartitions) has(day string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.days[day]
}

func (p *logPartitions) add(day string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.days == nil {
		p.days = map[string]bool{}
	}
	p.days[day] = true
}

func (p *logPartitions) forget(day string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.days, day)
}

// logDayFormat names a partition: request_log_p20261206.
const logDayFormat = "20060102"

// logPartitionsAhead is how many days past today have their partition made in advance.
const logPartitionsAhead = 2

// logLockID serializes partition changes of billing replicas.
const logLockID = 0x7265716c6f67 // "reqlog"

// ensureLogPartition creates the partition of day (UTC midnight) unless it exists.
func (s *Store) ensureLogPartition(ctx context.Context, day time.Time) error {
	name := day.Format(logDayFormat)
	if s.logs.has(name) {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(logLockID)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS request_log_p%s PARTITION OF request_log
			FOR VALUES FROM ('%s') TO ('%s')`, name, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339)))
		return err
	})
	if err != nil {
		return fmt.Errorf("request log partition %s: %w", name, err)
	}
	s.logs.add(name)
	return nil
}

// LogRetentionMax is the longest request log retention of any platform plan, in days.
func (s *Store) LogRetentionMax(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(max(NULLIF((limits->'logs'->>'retention_days')::int, 0)), 0) FROM platform_plans`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("request log retention: %w", err)
	}
	return max(n, tenants.DefaultLogRetentionDays), nil
}

// MaintainLogs creates the partitions of today and the days ahead, and drops those whose
// day ended more than the longest retention ago; it returns the partitions dropped.
// The batch table forgets ids older than two days: the stream keeps a batch one.
func (s *Store) MaintainLogs(ctx context.Context) (dropped []string, err error) {
	today := s.clock().UTC().Truncate(24 * time.Hour)
	for i := 0; i <= logPartitionsAhead; i++ {
		if err := s.ensureLogPartition(ctx, today.AddDate(0, 0, i)); err != nil {
			return nil, err
		}
	}
	keep, err := s.LogRetentionMax(ctx)
	if err != nil {
		return nil, err
	}
	oldest := today.AddDate(0, 0, -keep).Format(logDayFormat)
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = 'request_log' AND p.relnamespace = c.relnamespace
		  AND p.relnamespace = to_regnamespace(current_schema())::oid`)
	if err != nil {
		return nil, fmt.Errorf("request log partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("request log partitions: %w", err)
	}
	for _, n := range names {
		day, ok := strings.CutPrefix(n, "request_log_p")
		if !ok || len(day) != len(logDayFormat) || day >= oldest {
			continue
		}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(logLockID)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{n}.Sanitize())
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("drop request log partition %s: %w", n, err)
		}
		s.logs.forget(day)
		dropped = append(dropped, n)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM request_log_batches WHERE stored_at < $1`, s.clock().Add(-48*time.Hour)); err != nil {
		return dropped, fmt.Errorf("request log batches: %w", err)
	}
	return dropped, nil
}

// StoreLogBatch inserts a batch's entries and adds its not-logged counts, in one
// transaction that records the batch id; stored is false when the id was recorded
// already (nothing changed). Entries of a day older than the longest retention, or more
// than the partitions ahead in the future (an edge's clock far off), are skipped.
func (s *Store) StoreLogBatch(ctx context.Context, b *reqlog.Batch) (stored bool, err error) {
	now := s.clock().UTC()
	keep, err := s.LogRetentionMax(ctx)
	if err != nil {
		return false, err
	}
	from := now.Truncate(24*time.Hour).AddDate(0, 0, -keep)
	to := now.Truncate(24*time.Hour).AddDate(0, 0, logPartitionsAhead+1)
	rows := make([][]any, 0, len(b.Entries))
	for i := range b.Entries {
		e := &b.Entries[i]
		if e.Time.Before(from) || !e.Time.Before(to) {
			continue
		}
		if err := s.ensureLogPartition(ctx, e.Time.UTC().Truncate(24*time.Hour)); err != nil {
			return false, err
		}
		rows = append(rows, []any{e.Time, e.TenantID, e.RequestID, e.Method, e.Path, e.RouteID, e.RouteName, e.ConsumerID,
			int16(e.Status), e.Code, e.GatewayUS, e.UpstreamUS, e.BytesIn, e.BytesOut, e.Reason, b.EdgeID})
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO request_log_batches (id) VALUES ($1) ON CONFLICT DO NOTHING`, b.ID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		stored = true
		if len(rows) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"request_log"}, []string{"time", "tenant_id", "request_id", "method", "path",
				"route_id", "route_name", "consumer_id", "status", "code", "gateway_us", "upstream_us", "bytes_in", "bytes_out",
				"reason", "edge_id"}, pgx.CopyFromRows(rows)); err != nil {
				return err
			}
		}
		for _, n := range b.NotLogged {
			if _, err := tx.Exec(ctx, `INSERT INTO request_log_not_logged (tenant_id, hour, sampled, dropped) VALUES ($1, $2, $3, $4)
				ON CONFLICT (tenant_id, hour) DO UPDATE SET sampled = request_log_not_logged.sampled + EXCLUDED.sampled,
				dropped = request_log_not_logged.dropped + EXCLUDED.dropped`, n.TenantID, n.Hour, n.Sampled, n.Dropped); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store request log batch %s: %w", b.ID, err)
	}
	return stored, nil
}

// LogRetention is tenant's request log retention in days: its platform plan's.
func (s *Store) LogRetention(ctx context.Context, tenantID string) (int, error) {
	var n *int
	err := s.pool.QueryRow(ctx, `SELECT NULLIF((pp.limits->'logs'->>'retention_days')::int, 0)
		FROM tenants t JOIN platform_plans pp ON pp.name = t.plan WHERE t.id = $1`, tenantID).Scan(&n)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("request log retention: %w", err)
	}
	if n == nil {
		return tenants.DefaultLogRetentionDays, nil
	}
	return *n, nil
}

// Logs lists a tenant's entries, newest first, within its retention.
func (s *Store) Logs(ctx context.Context, q reqlog.Query) (*reqlog.Page, error) {
	if !validUUID(q.TenantID) {
		return &reqlog.Page{RetentionDays: tenants.DefaultLogRetentionDays}, nil
	}
	days, err := s.LogRetention(ctx, q.TenantID)
	if err != nil {
		return nil, err
	}
	now := s.clock().UTC()
	since := now.Add(-time.Duration(days) * 24 * time.Hour)
	if q.Since.After(since) {
		since = q.Since
	}
	until := now.Add(time.Hour) // a little ahead: edges' clocks differ from ours
	if !q.Until.IsZero() && q.Until.Before(until) {
		until = q.Until
	}
	limit := q.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	args := []any{q.TenantID, since, until}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"tenant_id = $1", "time >= $2", "time < $3"}
	switch {
	case q.Status != 0:
		where = append(where, "status = "+arg(q.Status))
	case q.StatusClass != 0:
		where = append(where, "status >= "+arg(q.StatusClass*100)+" AND status < "+arg(q.StatusClass*100+100))
	}
	if q.RouteID != "" {
		p := arg(q.RouteID)
		where = append(where, "(route_id = "+p+" OR route_name = "+p+")")
	}
	if q.ConsumerID != "" {
		where = append(where, "consumer_id = "+arg(q.ConsumerID))
	}
	if q.RequestID != "" {
		where = append(where, "request_id = "+arg(q.RequestID))
	}
	if q.After != nil {
		where = append(where, "(time, id) < ("+arg(q.After.Time)+", "+arg(q.After.ID)+")")
	}
	args = append(args, limit+1)
	rows, err := s.pool.Query(ctx, `SELECT id, time, request_id, method, path, route_id, route_name, consumer_id, status, code,
		gateway_us, upstream_us, bytes_in, bytes_out, reason FROM request_log WHERE `+strings.Join(where, " AND ")+
		fmt.Sprintf(` ORDER BY time DESC, id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	p := &reqlog.Page{RetentionDays: days, Items: []reqlog.Item{}}
	for rows.Next() {
		var it reqlog.Item
		var status int16
		if err := rows.Scan(&it.ID, &it.Time, &it.RequestID, &it.Method, &it.Path, &it.RouteID, &it.RouteName, &it.ConsumerID,
			&status, &it.Code, &it.GatewayUS, &it.UpstreamUS, &it.BytesIn, &it.BytesOut, &it.Reason); err != nil {
			rows.Close()
			return nil, fmt.Errorf("request log: %w", err)
		}
		it.Status, it.TenantID, it.Time = int(status), q.TenantID, it.Time.UTC()
		p.Items = append(p.Items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	if len(p.Items) > limit {
		p.Items = p.Items[:limit]
		last := p.Items[limit-1]
		p.Next = &reqlog.Cursor{Time: last.Time, ID: last.ID}
	}
	err = s.pool.QueryRow(ctx, `SELECT COALESCE(sum(sampled), 0), COALESCE(sum(dropped), 0) FROM request_log_not_logged
		WHERE tenant_id = $1 AND hour >= $2 AND hour < $3`, q.TenantID, since.Truncate(time.Hour), until).Scan(&p.Sampled, &p.Dropped)
	if err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	return p, nil
}
