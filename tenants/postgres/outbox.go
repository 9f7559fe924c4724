package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/infra/tracing"
	"tollgate/tenants"
)

// change is one KV entry a write transaction changes: put entry under key, or delete key
// when entry is nil.
type change struct {
	tenantID string
	key      string
	entry    *tenants.Entry
	cell     string // "": the tenant's cell as the transaction sees it when emitting
}

func put(tenantID, key string, e *tenants.Entry) change {
	return change{tenantID: tenantID, key: key, entry: e}
}

func del(tenantID, key string) change { return change{tenantID: tenantID, key: key} }

// emit writes the outbox rows of changes, in order, and notifies the relay on commit.
//
// It must be the last statement of its transaction that takes row locks: a rev is drawn
// from the sequence only once the rows it describes are locked, so two changes of one
// object (or of objects that lock each other, like a consumer and its plan) get revs in
// commit order, which the edges rely on to drop stale entries. The rev lock extends that
// to unrelated changes: taken shared before the revs are drawn and held to commit, it
// lets the relay, which takes it exclusive for an instant, wait until every rev drawn so
// far is committed or rolled back and then publish only up to there (see Relay.horizon).
// Writers do not wait for each other, so their commits (and their WAL flushes) overlap,
// and the bucket's revs still rise in publish order.
func emit(ctx context.Context, tx pgx.Tx, changes ...change) error {
	if len(changes) == 0 {
		return nil
	}
	if wt, ok := tx.(*writeTx); ok {
		if wt.deferred {
			wt.pending = append(wt.pending, changes...)
			return nil
		}
		wt.emitted(changes)
	}
	b := &pgx.Batch{}
	if err := queueEmit(ctx, tx, b, changes); err != nil {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// queueEmit draws the revs of changes and queues their outbox rows and the notification
// in b, which the caller sends. Folded (see WithFoldedRoundTrips), the insert draws the
// revs itself, in the changes' order, under the rev lock queued before it: each value goes
// without its leading `{"rev":0`, which the insert writes back with the row's rev.
func queueEmit(ctx context.Context, tx pgx.Tx, b *pgx.Batch, changes []change) error {
	shared, fold := true, false
	if wt, ok := tx.(*writeTx); ok {
		shared, fold = !wt.exclusiveRevs, !wt.separateTrips
	}
	var (
		revs []int64
		err  error
	)
	if fold {
		queueRevLock(b, shared)
	} else if revs, err = drawRevs(ctx, tx, len(changes), shared); err != nil {
		return err
	}
	tp := tracing.Traceparent(ctx)
	tenantIDs := make([]string, len(changes))
	keys := make([]string, len(changes))
	values := make([][]byte, len(changes))
	cells := make([]string, len(changes))
	for i, c := range changes {
		tenantIDs[i], keys[i], cells[i] = c.tenantID, c.key, c.cell
		if c.entry != nil {
			if c.entry.Rev = 0; !fold {
				c.entry.Rev = revs[i]
			}
			c.entry.Trace = tp
			if values[i], err = json.Marshal(c.entry); err != nil {
				return fmt.Errorf("encode entry %s: %w", c.key, err)
			}
			if fold { // rev is the first member, and 0
				values[i] = bytes.TrimPrefix(values[i], []byte(`{"rev":0`))
			}
		}
	}
	// A change goes to its tenant's cell, read after the rev lock is held: a move of the
	// tenant takes that lock exclusively, so it either committed before (and this sees its
	// cell) or waits for this commit (and republishes this change's object to the new cell).
	// The cell is a subquery per row rather than a join: a join's cached generic plan may
	// hash the whole tenants table for the few rows of one write.
	const cell = `coalesce(nullif(u.cell, ''), (SELECT t.cell FROM tenants t WHERE t.id = u.tenant_id), 'default')`
	if fold {
		b.Queue(`INSERT INTO outbox (id, tenant_id, key, value, cell)
		SELECT u.id, u.tenant_id, u.key, convert_to('{"rev":' || u.id, 'UTF8') || u.value, `+cell+`
		FROM (SELECT nextval('outbox_id_seq') AS id, v.* FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::text[])
			WITH ORDINALITY AS v(tenant_id, key, value, cell, n) ORDER BY v.n) u`, tenantIDs, keys, values, cells)
	} else {
		b.Queue(`INSERT INTO outbox (id, tenant_id, key, value, cell)
		SELECT u.id, u.tenant_id, u.key, u.value, `+cell+`
		FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::bytea[], $5::text[]) AS u(id, tenant_id, key, value, cell)`,
			revs, tenantIDs, keys, values, cells)
	}
	if wt, ok := tx.(*writeTx); !ok || wt.notifyInTx {
		b.Queue(`SELECT pg_notify($1, '')`, NotifyChannel)
	}
	return nil
}

// A write's emits (see change) collect their changes, in order, until the write's work
// is done, and flushEmits emits them all at once: a write of thousands of objects (an
// apply) draws its revs and writes its outbox rows in one go, the rows go out in one
// round trip with the write's last statements, and emit stays the last statement that
// takes row locks.

// flushEmits draws the revs of the changes held back and queues their rows in b.
func (wt *writeTx) flushEmits(ctx context.Context, b *pgx.Batch) error {
	if !wt.deferred || len(wt.pending) == 0 {
		return nil
	}
	wt.deferred = false
	pending := wt.pending
	wt.pending = nil
	wt.emitted(pending)
	return queueEmit(ctx, wt, b, pending)
}

// Waking the relay. A NOTIFY in a transaction takes a lock that the server holds from the
// commit's start to its end, WAL flush included, and that is one for the whole cluster:
// every write that notifies waits for the commits of all the others, which capped writes
// at one per flush. So a write's notification is sent after it commits, by one goroutine
// per store that folds the writes of a moment into one notification, in a transaction
// that writes no WAL and is over at once. A notification lost to a crash between the
// commit and the send costs the relay's poll interval; WithNotifyInTransaction restores
// the notification in the transaction.

// WithSharedRevLock(false) makes writers take the rev lock exclusively, as they did
// before the relay waited for it (see emit): writes that emit then commit one at a time.
// Default: true.
func WithSharedRevLock(on bool) Option {
	return func(db *DB) { db.exclusiveRevs = !on }
}

// WithNotifyInTransaction makes every write notify the relay in its own transaction, as
// it commits, instead of after (see above).
func WithNotifyInTransaction(on bool) Option {
	return func(db *DB) { db.notifyInTx = on }
}

// notified tells the notifier that a write with outbox rows committed.
func (db *DB) notified() {
	select {
	case db.kick <- struct{}{}:
	default: // a notification is due already, and covers this write
	}
}

// notifier sends a notification for every kick, folding kicks that come while it sends.
func (db *DB) notifier() {
	defer close(db.notifierDone)
	for {
		select {
		case <-db.stop:
			return
		case <-db.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(db.timeout, time.Second))
		_, _ = db.pool.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel) // the relay's poll covers a failure
		cancel()
	}
}

// drawRevs takes the rev lock shared (see emit; exclusive with WithSharedRevLock(false))
// and draws n revs, in one round trip.
func drawRevs(ctx context.Context, tx pgx.Tx, n int, shared bool) ([]int64, error) {
	b := &pgx.Batch{}
	queueRevLock(b, shared)
	b.Queue(`SELECT nextval('outbox_id_seq') FROM generate_series(1, $1)`, n)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	revs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	slices.Sort(revs)
	return revs, br.Close()
}

func queueRevLock(b *pgx.Batch, shared bool) {
	if shared {
		b.Queue("SELECT pg_advisory_xact_lock_shared($1)", revLockID)
	} else {
		b.Queue("SELECT pg_advisory_xact_lock($1)", revLockID)
	}
}

// OutboxPending counts the changes not yet published, for readiness and metrics.
func (db *DB) OutboxPending(ctx context.Context) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`).Scan(&n)
	return n, err
}

// Entries calls fn with the current entry of every object of every tenant, each with a
// fresh Rev, in Rev order: tenants first, then plans, consumers, keys, routes, JWT issuers
// and access rules. It is
// how the KV bucket is rebuilt from Postgres (see Relay.Resync).
//
// The entries are read from one snapshot taken while no write is in flight, and their revs
// are reserved at that moment: every change committed before has a smaller rev and is
// reflected in the entries, every change committed after has a larger one. firstRev is the
// smallest rev handed out (or the next rev to come when there is no object), so outbox
// rows below it are superseded by the entries.
func (db *DB) Entries(ctx context.Context, fn func(tenants.Change) error) (firstRev int64, err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	locked := false
	defer func() {
		if locked {
			// A pooled connection must never go back holding the writer lock.
			if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", writerLockID); err != nil {
				conn.Conn().Close(context.Background())
			}
		}
		conn.Release()
	}()
	// The session lock is taken before the transaction begins, so its snapshot (taken at
	// its first statement) sees every writer that held the shared lock before us.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", writerLockID); err != nil {
		return 0, fmt.Errorf("postgres: entries: %w", err)
	}
	locked = true
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, fmt.Errorf("postgres: entries: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The snapshot streams every entry to fn, which may publish as it goes: it may
	// outlast the statement timeout that bounds the api's requests.
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
		return 0, fmt.Errorf("postgres: entries: %w", err)
	}
	var n int64
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM tenants) + (SELECT count(*) FROM plans)
		+ (SELECT count(*) FROM consumers) + (SELECT count(*) FROM keys) + (SELECT count(*) FROM routes)
		+ (SELECT count(*) FROM jwt_issuers) + (SELECT count(*) FROM policies)
		+ (SELECT count(*) FROM domains)`).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: entries: %w", err)
	}
	// Reserve n revs. Only holders of the writer lock draw from the sequence, so the range
	// is contiguous.
	if err := tx.QueryRow(ctx, `SELECT nextval('outbox_id_seq')`).Scan(&firstRev); err != nil {
		return 0, fmt.Errorf("postgres: entries: %w", err)
	}
	if n > 1 {
		if _, err := tx.Exec(ctx, `SELECT setval('outbox_id_seq', $1)`, firstRev+n-1); err != nil {
			return 0, fmt.Errorf("postgres: entries: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", writerLockID); err != nil {
		return 0, fmt.Errorf("postgres: entries: %w", err)
	}
	locked = false

	rev, last := firstRev, firstRev+n-1
	cells := map[string]string{} // tenant id → cell; tenants are read first
	emitEntry := func(tenantID, key string, e *tenants.Entry) error {
		if rev > last {
			return fmt.Errorf("more objects than counted in the snapshot")
		}
		if e.Tenant != nil {
			cells[tenantID] = e.Tenant.Cell
		}
		e.Rev = rev
		rev++
		v, err := json.Marshal(e)
		if err != nil {
			return err
		}
		return fn(tenants.Change{Rev: e.Rev, Key: key, Value: v, Cell: cells[tenantID]})
	}
	if err := scanEntries(ctx, tx, "", emitEntry); err != nil {
		return 0, fmt.Errorf("postgres: entries: %w", err)
	}
	if rev != last+1 {
		return 0, fmt.Errorf("postgres: entries: read %d objects, counted %d", rev-firstRev, n)
	}
	return firstRev, tx.Commit(ctx)
}

// scanEntries calls fn with the current entry of every object, tenants first, then plans,
// consumers, keys, routes, JWT issuers, access rules and domains; with tenantID set, of
// that tenant only. The entries have no Rev yet.
func scanEntries(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tenantID string, fn func(tenantID, key string, e *tenants.Entry) error) error {
	where, whereTenant := "", ""
	var args []any
	if tenantID != "" {
		where, whereTenant, args = " WHERE id = $1", " WHERE tenant_id = $1", []any{tenantID}
	}
	scans := []struct {
		query string
		each  func(pgx.Rows) error
	}{
		{`SELECT ` + tenantColumns + ` FROM tenants` + where + ` ORDER BY id`, func(rows pgx.Rows) error {
			t, err := scanTenant(rows)
			if err != nil {
				return err
			}
			return fn(t.ID, tenants.TenantKey(t.ID), &tenants.Entry{Tenant: t})
		}},
		{`SELECT ` + planColumns + ` FROM plans` + whereTenant + ` ORDER BY tenant_id, id`, func(rows pgx.Rows) error {
			p, err := scanPlan(rows)
			if err != nil {
				return err
			}
			return fn(p.TenantID, tenants.ObjectKey(p.TenantID, tenants.KindPlan, p.ID), &tenants.Entry{Plan: p})
		}},
		{`SELECT ` + consumerColumns + ` FROM consumers` + whereTenant + ` ORDER BY tenant_id, id`, func(rows pgx.Rows) error {
			c, err := scanConsumer(rows)
			if err != nil {
				return err
			}
			return fn(c.TenantID, tenants.ObjectKey(c.TenantID, tenants.KindConsumer, c.ID), &tenants.Entry{Consumer: c})
		}},
		{`SELECT ` + keyColumns + ` FROM keys` + whereTenant + ` ORDER BY tenant_id, id`, func(rows pgx.Rows) error {
			k, err := scanKey(rows)
			if err != nil {
				return err
			}
			return fn(k.TenantID, tenants.ObjectKey(k.TenantID, tenants.KindKey, k.ID), &tenants.Entry{Key: keyEntry(k)})
		}},
		{`SELECT ` + routeColumns + ` FROM routes` + whereTenant + ` ORDER BY tenant_id, id`, func(rows pgx.Rows) error {
			r, err := scanRoute(rows)
			if err != nil {
				return err
			}
			return fn(r.TenantID, tenants.ObjectKey(r.TenantID, tenants.KindRoute, r.ID), &tenants.Entry{Route: r})
		}},
		{`SELECT ` + issuerColumns + ` FROM jwt_issuers` + whereTenant + ` ORDER BY tenant_id, id`, func(rows pgx.Rows) error {
			is, err := scanIssuer(rows)
			if err != nil {
				return err
			}
			return fn(is.TenantID, tenants.ObjectKey(is.TenantID, tenants.KindJWTIssuer, is.ID), &tenants.Entry{JWTIssuer: is})
		}},
		{`SELECT ` + accessRulesColumns + ` FROM policies` + whereTenant + ` ORDER BY tenant_id`, func(rows pgx.Rows) error {
			p, err := scanAccessRules(rows)
			if err != nil {
				return err
			}
			return fn(p.TenantID, tenants.AccessRulesKey(p.TenantID), &tenants.Entry{AccessRules: p})
		}},
		{`SELECT ` + domainColumns + ` FROM domains` + whereTenant + ` ORDER BY tenant_id, id`, func(rows pgx.Rows) error {
			d, err := scanDomain(rows)
			if err != nil {
				return err
			}
			return fn(d.TenantID, tenants.ObjectKey(d.TenantID, tenants.KindDomain, d.ID), domainEntry(d))
		}},
	}
	for _, s := range scans {
		rows, err := q.Query(ctx, s.query, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := s.each(rows); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// WithFoldedRoundTrips(false) gives a write's revs and its COMMIT round trips of their
// own, and an apply's limit counts too, as before they were folded into the write's
// other statements. Default: true.
func WithFoldedRoundTrips(on bool) Option {
	return func(db *DB) { db.separateTrips = !on }
}
