package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// recorder is an in-memory publisher that records every successful Publish call. While
// down, or for its next `fail` calls, Publish fails like NATS being unreachable.
type recorder struct {
	mu     sync.Mutex
	calls  [][]tenants.Change
	fail   int
	down   bool
	failed int
}

func (p *recorder) Publish(ctx context.Context, changes []tenants.Change) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.fail > 0 {
		if p.fail > 0 {
			p.fail--
		}
		p.failed++
		return errors.New("nats: no responders available for request")
	}
	p.calls = append(p.calls, slices.Clone(changes))
	return nil
}

func (p *recorder) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func (p *recorder) changes() []tenants.Change {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []tenants.Change
	for _, c := range p.calls {
		out = append(out, c...)
	}
	return out
}

func revsOf(cs []tenants.Change) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Rev
	}
	return out
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newRelay(t *testing.T, db *postgres.DB, pub *recorder, batch int) *postgres.Relay {
	r := postgres.NewRelay(db, pub, testLogger(t))
	postgres.SetRelayTimings(r, 50*time.Millisecond, 200*time.Millisecond, batch)
	return r
}

// start runs r until the returned stop is called (also at cleanup).
func start(t *testing.T, r *postgres.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// allRows returns every outbox row.
func allRows(t *testing.T, conn *pgx.Conn) []outboxRow { return outboxAfter(t, conn, 0) }

// waitSent waits until every outbox row is marked sent.
func waitSent(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	checkFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE sent_at IS NULL`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%d rows unsent", n)
		}
		return nil
	})
}

// wantPublishedExactly checks that pub received exactly the rows, once each, in id order.
func wantPublishedExactly(t *testing.T, pub *recorder, rows []outboxRow) {
	t.Helper()
	got := pub.changes()
	if len(got) != len(rows) {
		t.Fatalf("published %d changes, outbox has %d rows\npublished revs %v", len(got), len(rows), revsOf(got))
	}
	for i, c := range got {
		r := rows[i]
		if c.Rev != r.ID || c.Key != r.Key || string(c.Value) != string(r.Value) || (c.Value == nil) != (r.Value == nil) {
			t.Fatalf("change %d: published %d %s %s, outbox row %v", i, c.Rev, c.Key, c.Value, r)
		}
	}
}

var churned atomic.Int64

// churn makes n config changes, one after another, of every kind.
func churn(t *testing.T, db *postgres.DB, tenantID string, n int) {
	t.Helper()
	ctx := context.Background()
	var routes []*tenants.Route
	for i := 0; i < n; i++ {
		switch {
		case i%5 == 3 && len(routes) > 0:
			r := routes[len(routes)-1]
			r.TimeoutMS++
			if err := db.UpdateRoute(ctx, r); err != nil {
				t.Fatal(err)
			}
		case i%7 == 6 && len(routes) > 0:
			r := routes[0]
			routes = routes[1:]
			if err := db.DeleteRoute(ctx, tenantID, r.ID); err != nil {
				t.Fatal(err)
			}
		default:
			n := churned.Add(1)
			routes = append(routes, mustRoute(t, db, newRoute(tenantID, fmt.Sprintf("r%d", n), fmt.Sprintf("/r%d", n))))
		}
	}
}

func TestRelayPublishesInOrder(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	churn(t, db, tn.ID, 12) // waiting before the relay starts
	pub := &recorder{}
	r := newRelay(t, db, pub, 5)
	start(t, r)
	churn(t, db, tn.ID, 30) // published as they come
	waitSent(t, conn)
	rows := allRows(t, conn)
	wantPublishedExactly(t, pub, rows)
	for _, c := range pub.calls {
		if len(c) > 5 {
			t.Fatalf("a batch of %d, over the limit 5", len(c))
		}
	}
	for _, row := range rows {
		if row.Value != nil {
			decode(t, row)
		}
	}
	st := r.Status()
	if !st.Active || st.LastRev != rows[len(rows)-1].ID || st.Failing != "" {
		t.Fatalf("status %+v", st)
	}
}

// A notification wakes the relay long before its poll interval.
func TestRelayWakesOnNotify(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	pub := &recorder{}
	r := postgres.NewRelay(db, pub, testLogger(t))
	postgres.SetRelayTimings(r, 50*time.Millisecond, time.Minute, 1000)
	start(t, r)
	checkFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !r.Status().Active {
			return errors.New("relay not active")
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // let it settle into its wait
	began := time.Now()
	mustTenant(t, db, "acme")
	waitSent(t, conn)
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("published after %v", d)
	}
	wantPublishedExactly(t, pub, allRows(t, conn))
}

// While the publisher fails, nothing is marked sent; once it works again everything goes
// out once, in order.
func TestRelayRetriesPublishErrors(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	pub := &recorder{fail: 3}
	r := newRelay(t, db, pub, 4)
	churn(t, db, tn.ID, 10)
	start(t, r)
	waitSent(t, conn)
	if pub.failed != 3 {
		t.Fatalf("%d failed calls", pub.failed)
	}

	// An outage: changes pile up unsent, then all go out.
	pub.setDown(true)
	churn(t, db, tn.ID, 15)
	checkFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if r.Status().Failing == "" {
			return errors.New("relay reports no failure")
		}
		return nil
	})
	var unsent int
	conn.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE sent_at IS NULL`).Scan(&unsent)
	if unsent != 15 {
		t.Fatalf("%d unsent during the outage, want 15", unsent)
	}
	pub.setDown(false)
	waitSent(t, conn)
	wantPublishedExactly(t, pub, allRows(t, conn))
	if st := r.Status(); st.Failing != "" {
		t.Fatalf("status %+v", st)
	}
}

// Relays of two replicas, stopped and restarted at random while changes are made one
// after another: only one publishes at a time, every change goes out exactly once, and
// the revs of all their Publish calls together strictly increase.
func TestTwoRelays(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	db2, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db2.Close)

	pub := &recorder{}
	relays := []*postgres.Relay{newRelay(t, db, pub, 3), newRelay(t, db2, pub, 3)}
	var mu sync.Mutex
	stops := []func(){start(t, relays[0]), start(t, relays[1])}
	var handovers atomic.Int32
	chaosDone := make(chan struct{})
	stopChaos := make(chan struct{})
	go func() {
		defer close(chaosDone)
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(time.Duration(30+rand.IntN(50)) * time.Millisecond):
			}
			for i, r := range relays {
				if r.Status().Active {
					mu.Lock()
					stops[i]()
					stops[i] = start(t, r)
					mu.Unlock()
					handovers.Add(1)
					break
				}
			}
		}
	}()
	churn(t, db, tn.ID, 150)
	close(stopChaos)
	<-chaosDone
	waitSent(t, conn)
	rows := allRows(t, conn)
	wantPublishedExactly(t, pub, rows)
	revs := revsOf(pub.changes())
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("rev %d published after %d", revs[i], revs[i-1])
		}
	}
	if handovers.Load() < 3 {
		t.Fatalf("only %d handovers", handovers.Load())
	}
	t.Logf("%d changes, %d handovers", len(rows), handovers.Load())
}

// Concurrent writers: every change goes out exactly once and, per key, in commit order,
// so an edge that drops entries not newer than the one it holds ends with the database's
// state.
func TestRelayConcurrentWriters(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	shared := mustRoute(t, db, newRoute(tn.ID, "shared", "/shared"))
	pub := &recorder{}
	start(t, newRelay(t, db, pub, 7))

	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				r := newRoute(tn.ID, fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("/w%d/%d", w, i))
				if err := db.CreateRoute(ctx, r); err != nil {
					t.Error(err)
					return
				}
				for { // bump the shared route, retrying version conflicts
					cur, err := db.FindRoute(ctx, tn.ID, shared.ID)
					if err != nil {
						t.Error(err)
						return
					}
					cur.TimeoutMS = 1000 + w*100 + i
					err = db.UpdateRoute(ctx, cur)
					if err == nil {
						break
					}
					if tenants.ErrorCode(err) != tenants.EVersionConflict {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	waitSent(t, conn)
	got := pub.changes()
	seen := map[int64]bool{}
	edge := map[string]*tenants.Entry{}
	for _, c := range got {
		if seen[c.Rev] {
			t.Fatalf("rev %d published twice", c.Rev)
		}
		seen[c.Rev] = true
		_, e, err := tenants.DecodeEntry(c.Key, c.Value)
		if err != nil {
			t.Fatal(err)
		}
		if old := edge[c.Key]; old != nil && old.Rev >= e.Rev {
			t.Fatalf("%s: rev %d published after rev %d", c.Key, e.Rev, old.Rev)
		}
		edge[c.Key] = e
	}
	if rows := allRows(t, conn); len(rows) != len(got) {
		t.Fatalf("published %d, outbox has %d", len(got), len(rows))
	}
	final, _ := db.FindRoute(ctx, tn.ID, shared.ID)
	if e := edge[tenants.ObjectKey(tn.ID, tenants.KindRoute, shared.ID)]; e.Route.Version != final.Version || e.Route.TimeoutMS != final.TimeoutMS {
		t.Fatalf("edge holds version %d, database %d", e.Route.Version, final.Version)
	}
}

// A relay whose connection is killed re-contends and carries on.
func TestRelayReconnects(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	pub := &recorder{}
	r := newRelay(t, db, pub, 100)
	start(t, r)
	waitSent(t, conn)
	var killed bool
	// The relay lock is the advisory lock 0x546f6c6c_00000001.
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = 1416588396 AND objid = 1 AND objsubid = 1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&killed); err != nil || !killed {
		t.Fatalf("kill the relay's connection: %v %v", killed, err)
	}
	churn(t, db, tn.ID, 5)
	waitSent(t, conn)
	wantPublishedExactly(t, pub, allRows(t, conn))
}

func TestRelayPrunesOldRows(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (tenant_id, key, value, sent_at) VALUES
		(gen_random_uuid(), 'old', NULL, now() - interval '25 hours'),
		(gen_random_uuid(), 'recent', NULL, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	start(t, newRelay(t, db, &recorder{}, 100))
	checkFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		var keys []string
		rows, _ := conn.Query(ctx, `SELECT key FROM outbox ORDER BY id`)
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if !slices.Equal(keys, []string{"recent"}) {
			return fmt.Errorf("outbox keys %v", keys)
		}
		return nil
	})
}

// liveKeys lists the key of every object in the database.
func liveKeys(t *testing.T, conn *pgx.Conn) map[string]bool {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT id::text || '.tenant' FROM tenants
		UNION ALL SELECT tenant_id::text || '.route.' || id::text FROM routes
		UNION ALL SELECT tenant_id::text || '.consumer.' || id::text FROM consumers
		UNION ALL SELECT tenant_id::text || '.key.' || id::text FROM keys
		UNION ALL SELECT tenant_id::text || '.plan.' || id::text FROM plans`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func populate(t *testing.T, db *postgres.DB) {
	t.Helper()
	ctx := context.Background()
	for _, slug := range []string{"a", "b"} {
		tn := mustTenant(t, db, slug)
		churn(t, db, tn.ID, 8)
		if err := db.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold"}); err != nil {
			t.Fatal(err)
		}
		c := &tenants.Consumer{TenantID: tn.ID, Name: "alice", Plan: "gold"}
		if err := db.CreateConsumer(ctx, c); err != nil {
			t.Fatal(err)
		}
		_, hash, _ := tenants.NewSecret(tenants.KeyPrefix)
		if err := db.CreateKey(ctx, &tenants.Key{TenantID: tn.ID, ConsumerID: c.ID, Hash: hash}); err != nil {
			t.Fatal(err)
		}
	}
	gone := mustTenant(t, db, "gone")
	churn(t, db, gone.ID, 3)
	if err := db.DeleteTenant(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
}

// Resync hands every live object to apply with revs above every earlier change, and
// supersedes the unsent rows; later changes follow it.
func TestResync(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	populate(t, db)
	before := maxOutboxID(t, conn)
	want := liveKeys(t, conn)

	pub := &recorder{}
	r := newRelay(t, db, pub, 4)
	pruned := map[string]bool{}
	res, err := r.Resync(ctx, func(ctx context.Context, live []tenants.Change) error {
		for _, c := range live {
			pruned[c.Key] = true
		}
		return pub.Publish(ctx, live)
	})
	if err != nil {
		t.Fatal(err)
	}
	got := pub.changes()
	if len(got) != len(want) || res.Entries != len(want) || len(pruned) != len(want) || res.FirstRev <= before {
		t.Fatalf("resync: %+v, %d published, %d live, %d objects, outbox before %d", res, len(got), len(pruned), len(want), before)
	}
	for i, c := range got {
		if !want[c.Key] || !pruned[c.Key] {
			t.Fatalf("published %s, not a live key", c.Key)
		}
		if c.Rev != res.FirstRev+int64(i) {
			t.Fatalf("change %d has rev %d, want %d", i, c.Rev, res.FirstRev+int64(i))
		}
		_, e, err := tenants.DecodeEntry(c.Key, c.Value)
		if err != nil || e.Rev != c.Rev {
			t.Fatalf("entry %s: %v rev %d", c.Key, err, e.Rev)
		}
	}
	if !strings.HasSuffix(got[0].Key, ".tenant") {
		t.Fatalf("tenants first: %s", got[0].Key)
	}
	// Every row was superseded: the deletes and the puts, by apply.
	if res.Superseded != int64(len(allRows(t, conn))) {
		t.Fatalf("superseded %d of %d rows", res.Superseded, len(allRows(t, conn)))
	}
	waitSent(t, conn)

	// Changes after the resync go out as usual, with higher revs.
	start(t, r)
	tn, _ := db.FindTenant(ctx, "a")
	newR := mustRoute(t, db, newRoute(tn.ID, "after", "/after"))
	waitSent(t, conn)
	got = pub.changes()[len(want):]
	if len(got) != 1 || got[0].Key != tenants.ObjectKey(tn.ID, tenants.KindRoute, newR.ID) || got[0].Rev <= res.FirstRev+int64(res.Entries)-1 {
		t.Fatalf("after resync: %v", got)
	}

	// A resync while Run is running is done by its loop.
	n := len(pub.changes())
	res2, err := r.Resync(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Entries != len(want)+1 || len(pub.changes()) != n+res2.Entries || res2.FirstRev <= got[0].Rev {
		t.Fatalf("second resync: %+v", res2)
	}
	if st := r.Status(); st.LastRev != res2.FirstRev+int64(res2.Entries)-1 {
		t.Fatalf("status %+v after resync %+v", st, res2)
	}
}

// Without apply, a resync publishes through the relay's publisher and leaves pending
// deletes to the relay.
func TestResyncWithoutApply(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	keep := mustRoute(t, db, newRoute(tn.ID, "keep", "/keep"))
	gone := mustRoute(t, db, newRoute(tn.ID, "gone", "/gone"))
	if err := db.DeleteRoute(ctx, tn.ID, gone.ID); err != nil {
		t.Fatal(err)
	}
	pub := &recorder{}
	r := newRelay(t, db, pub, 100)
	res, err := r.Resync(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 2 || res.Superseded != 3 {
		t.Fatalf("resync %+v", res)
	}
	start(t, r)
	waitSent(t, conn)
	got := pub.changes()
	keys := []string{got[0].Key, got[1].Key, got[2].Key}
	want := []string{tenants.TenantKey(tn.ID), tenants.ObjectKey(tn.ID, tenants.KindRoute, keep.ID), tenants.ObjectKey(tn.ID, tenants.KindRoute, gone.ID)}
	if len(got) != 3 || !slices.Equal(keys, want) || got[2].Value != nil {
		t.Fatalf("published %v", got)
	}
}

// Writes made while a snapshot is being read neither wait for it nor appear in it, and
// get revs above all of its revs.
func TestEntriesConcurrentWrites(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	churn(t, db, tn.ID, 20)
	want := liveKeys(t, conn)
	before := maxOutboxID(t, conn)
	var entries []tenants.Change
	first, err := db.Entries(ctx, func(c tenants.Change) error {
		entries = append(entries, c)
		r := newRoute(tn.ID, fmt.Sprintf("during-%d", c.Rev), fmt.Sprintf("/during/%d", c.Rev))
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return db.CreateRoute(wctx, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) || first <= before {
		t.Fatalf("%d entries of %d objects, first rev %d after outbox %d", len(entries), len(want), first, before)
	}
	for _, c := range entries {
		if !want[c.Key] {
			t.Fatalf("entry %s is not of the snapshot", c.Key)
		}
	}
	last := entries[len(entries)-1].Rev
	during := outboxAfter(t, conn, before)
	if len(during) != len(entries) {
		t.Fatalf("%d writes during the snapshot, %d entries", len(during), len(entries))
	}
	for _, r := range during {
		if r.ID <= last {
			t.Fatalf("a write during the snapshot got rev %d, not above the snapshot's %d..%d", r.ID, first, last)
		}
	}
}
