package edgecmd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge/tenantstore"
	"tollgate/infra/config"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// bucketWriter writes config entries to a bucket as the api's publisher does.
type bucketWriter struct {
	t   *testing.T
	kv  jetstream.KeyValue
	rev atomic.Int64
}

func newBucketWriter(t *testing.T, url, prefix string) *bucketWriter {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := tgnats.EnsureBucket(ctx, js, prefix+"_config", 1)
	if err != nil {
		t.Fatal(err)
	}
	return &bucketWriter{t: t, kv: kv}
}

func (w *bucketWriter) put(obj any) {
	w.t.Helper()
	e := tenants.Entry{Rev: w.rev.Add(1)}
	switch o := obj.(type) {
	case *tenants.Tenant:
		e.Tenant = o
	case *tenants.Route:
		e.Route = o
	}
	key, err := e.EntryKey()
	if err != nil {
		w.t.Fatal(err)
	}
	b, _ := json.Marshal(&e)
	if _, err := w.kv.Put(context.Background(), key, b); err != nil {
		w.t.Fatal(err)
	}
}

func (w *bucketWriter) del(key string) {
	w.t.Helper()
	if err := w.kv.Delete(context.Background(), key); err != nil {
		w.t.Fatal(err)
	}
}

func (w *bucketWriter) tenant(n int) string {
	id := fmt.Sprintf("t%04d", n)
	w.put(&tenants.Tenant{ID: id, Slug: fmt.Sprintf("s%04d", n), Name: id})
	return id
}

func (w *bucketWriter) route(tenantID, id, path, upstream string) {
	w.put(&tenants.Route{ID: id, TenantID: tenantID, Name: id, Paths: []string{path}, Methods: []string{"GET"},
		Auth: tenants.AuthNone, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upstream, Weight: 1}}}})
}

// diskEdge is an edge process (Serve) with TOLLGATE_EDGE_CONFIG_STORE=disk.
type diskEdge struct {
	t        *testing.T
	pub, adm string
	cancel   context.CancelFunc
	done     chan error
	ready    chan struct{}
}

func startDiskEdge(t *testing.T, url, prefix, dir string, env map[string]string) *diskEdge {
	t.Helper()
	vars := map[string]string{
		"TOLLGATE_NATS_URL": url, "TOLLGATE_NATS_PREFIX": prefix, "TOLLGATE_METER": "off",
		"TOLLGATE_METER_SPOOL_DIR": dir, "TOLLGATE_EDGE_CONFIG_STORE": "disk",
		"TOLLGATE_EDGE_DOMAIN": "gw.test", "TOLLGATE_UPSTREAM_ALLOW_CIDRS": "127.0.0.0/8",
		"TOLLGATE_LOG_LEVEL": "warn",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.FromEnv(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &diskEdge{t: t, pub: pub.Addr().String(), adm: adm.Addr().String(), cancel: cancel, done: make(chan error, 1), ready: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() { d.done <- Serve(ctx, cfg, url, pub, adm, log, func() { close(d.ready) }) }()
	t.Cleanup(d.stop)
	select {
	case <-d.ready:
	case err := <-d.done:
		t.Fatalf("edge stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("edge not ready after 30s")
	}
	return d
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (d *diskEdge) stop() {
	d.cancel()
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Errorf("edge: %v", err)
		}
		d.done <- nil
	case <-time.After(30 * time.Second):
		d.t.Error("edge did not stop")
	}
}

// get asks the edge for path on the tenant's host: the status and body.
func (d *diskEdge) get(slug, path string) (int, string) {
	d.t.Helper()
	code, body, err := d.try(slug, path)
	if err != nil {
		d.t.Fatal(err)
	}
	return code, body
}

// try is get for another goroutine than the test's.
func (d *diskEdge) try(slug, path string) (int, string, error) {
	req, _ := http.NewRequest("GET", "http://"+d.pub+path, nil)
	req.Host = slug + ".gw.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// eventually waits until the tenant's path answers want.
func (d *diskEdge) eventually(slug, path string, want int) {
	d.t.Helper()
	testenv.WaitFor(d.t, 10*time.Second, func() error {
		if got, body := d.get(slug, path); got != want {
			return fmt.Errorf("%s%s: %d %s, want %d", slug, path, got, body, want)
		}
		return nil
	})
}

// metric is the value of an unlabelled metric on /metrics.
func (d *diskEdge) metric(name string) float64 {
	d.t.Helper()
	resp, err := http.Get("http://" + d.adm + "/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	d.t.Fatalf("no metric %s", name)
	return 0
}

// backfilled waits until a fast start's backfill is through.
func (d *diskEdge) backfilled() {
	d.t.Helper()
	testenv.WaitFor(d.t, 30*time.Second, func() error {
		if got := d.metric("tollgate_edge_config_store_backfilling"); got != 0 {
			return fmt.Errorf("still backfilling")
		}
		return nil
	})
}

func echoUpstream(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "up "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func natsURL(ns *server.Server) string { return "nats://" + ns.Addr().String() }

// diskBucket is a disk-store test's setting: a NATS server of its own, its URL, a bucket
// prefix named after name, a state directory, an echo upstream and a writer of the bucket.
func diskBucket(t *testing.T, name string) (ns *server.Server, url, prefix, dir, up string, w *bucketWriter) {
	ns = testenv.NATS(t)
	url, prefix, dir = natsURL(ns), testenv.Name(name), t.TempDir()
	return ns, url, prefix, dir, echoUpstream(t), newBucketWriter(t, url, prefix)
}

// TestDiskStoreLoadsEvictsAndResumes: with the disk store an edge compiles nothing to be
// ready, loads each tenant on its first request, evicts under a small budget and loads
// again, follows changes of tenants it holds compiled and of those it does not, and after
// a restart resumes its watch from its store, seeing what changed while it was down.
func TestDiskStoreLoadsEvictsAndResumes(t *testing.T) {
	_, url, prefix, dir, up, w := diskBucket(t, "tglazy")
	const n = 80
	for i := range n {
		id := w.tenant(i)
		for r := range 3 {
			w.route(id, fmt.Sprintf("r%d", r), fmt.Sprintf("/p%d", r), up)
		}
	}
	d := startDiskEdge(t, url, prefix, dir, map[string]string{"TOLLGATE_EDGE_TENANT_MEMORY": "1MiB"})
	d.backfilled() // loads from the store alone; fetches ahead of a backfill are TestDiskStoreFastStart's
	if got := d.metric("tollgate_edge_tenant_loads_total"); got != 0 {
		t.Fatalf("loads before any request: %v, want 0", got)
	}
	// Concurrent first requests of a tenant wait on one load.
	var wg sync.WaitGroup
	codes := make([]int, 16)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _ = d.try("s0000", "/p1")
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("concurrent first request %d: %d", i, c)
		}
	}
	if got := d.metric("tollgate_edge_tenant_loads_total"); got != 1 {
		t.Errorf("loads after 16 concurrent first requests of one tenant: %v, want 1", got)
	}
	for i := range n - 2 {
		if code, body := d.get(fmt.Sprintf("s%04d", i), "/p1"); code != 200 || body != "up /p1" {
			t.Fatalf("tenant %d: %d %s", i, code, body)
		}
	}
	if got := d.metric("tollgate_edge_tenant_loads_total"); got != n-2 {
		t.Errorf("loads: %v, want %d", got, n-2)
	}
	ev := d.metric("tollgate_edge_tenant_evictions_total")
	res := d.metric("tollgate_edge_tenants_resident")
	if ev == 0 || res >= n-2 || res+ev != n-2 {
		t.Errorf("under a 1 MiB budget: %v evictions, %v resident of %d loaded", ev, res, n-2)
	}
	if b := d.metric("tollgate_edge_tenants_resident_bytes"); b > 1<<20 {
		t.Errorf("resident bytes %v beyond the budget", b)
	}
	// The evicted tenants load again. Which ones went is not asked: use is stamped by a
	// one-second clock, so tenants served within one second are equally idle to the
	// eviction.
	loads := d.metric("tollgate_edge_tenant_loads_total")
	for i := range n - 2 {
		if code, _ := d.get(fmt.Sprintf("s%04d", i), "/p0"); code != 200 {
			t.Fatalf("tenant %d again: %d", i, code)
		}
	}
	if got := d.metric("tollgate_edge_tenant_loads_total"); got < loads+1 {
		t.Errorf("loads after asking every tenant again, %v of them evicted: %v, want over %v", ev, got, loads)
	}

	// A tenant never loaded: its change is a store write; its first request sees it.
	res = d.metric("tollgate_edge_tenants_resident")
	cold := fmt.Sprintf("t%04d", n-1)
	w.route(cold, "r9", "/new", up)
	w.del(tenants.ObjectKey(cold, tenants.KindRoute, "r0"))
	time.Sleep(200 * time.Millisecond)
	if got := d.metric("tollgate_edge_tenants_resident"); got != res {
		t.Errorf("resident tenants went from %v to %v with a store write", res, got)
	}
	d.eventually(fmt.Sprintf("s%04d", n-1), "/new", 200)
	d.eventually(fmt.Sprintf("s%04d", n-1), "/p0", 404)
	// A resident tenant recompiles.
	hot := "t0000"
	w.route(hot, "r9", "/hot", up)
	d.eventually("s0000", "/hot", 200)
	w.del(tenants.ObjectKey(hot, tenants.KindRoute, "r1"))
	d.eventually("s0000", "/p1", 404)
	// A stale entry (an older rev) changes nothing, resident or not.
	old := w.rev.Load()
	w.rev.Store(1)
	w.route(fmt.Sprintf("t%04d", n-2), "r0", "/stale", up)
	w.rev.Store(old)
	d.eventually(fmt.Sprintf("s%04d", n-2), "/p0", 200)
	d.eventually(fmt.Sprintf("s%04d", n-2), "/stale", 404)
	// A deleted tenant is gone, resident or not.
	w.del(tenants.TenantKey("t0001"))
	w.del(tenants.TenantKey("t0002"))
	d.eventually("s0001", "/p0", 404)
	d.eventually("s0002", "/p0", 404)
	d.backfilled()
	d.stop()

	// While the edge is down: a route added, one deleted, a tenant deleted.
	w.route("t0003", "r8", "/while-down", up)
	w.del(tenants.ObjectKey("t0004", tenants.KindRoute, "r2"))
	w.del(tenants.TenantKey("t0005"))
	d = startDiskEdge(t, url, prefix, dir, map[string]string{"TOLLGATE_EDGE_TENANT_MEMORY": "1MiB"})
	if got := d.metric("tollgate_edge_config_store_updates_total"); got > 5 {
		t.Errorf("the restarted edge received %v updates: it replayed the bucket rather than resuming", got)
	}
	d.eventually("s0003", "/while-down", 200)
	d.eventually("s0004", "/p2", 404)
	d.eventually("s0004", "/p1", 200)
	d.eventually("s0005", "/p0", 404)
	d.eventually("s0001", "/p0", 404)
	d.eventually("s0000", "/hot", 200)
	d.eventually(fmt.Sprintf("s%04d", n-1), "/new", 200)
	// A tenant made again after its deletion (a newer rev) comes back.
	w.put(&tenants.Tenant{ID: "t0001", Slug: "s0001", Name: "again"})
	w.route("t0001", "r0", "/back", up)
	d.eventually("s0001", "/back", 200)
}

// TestDiskStoreEvictionStopsHealthChecks: an evicted tenant's active health checks stop,
// and resume when its next request loads it again.
func TestDiskStoreEvictionStopsHealthChecks(t *testing.T) {
	ns := testenv.NATS(t)
	url, prefix, dir := natsURL(ns), testenv.Name("tglazy"), t.TempDir()
	up := echoUpstream(t)
	var probes atomic.Int64
	checked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			probes.Add(1)
		}
	}))
	t.Cleanup(checked.Close)
	w := newBucketWriter(t, url, prefix)
	w.put(&tenants.Tenant{ID: "checked", Slug: "checked", Name: "checked"})
	w.put(&tenants.Route{ID: "r0", TenantID: "checked", Name: "r0", Paths: []string{"/p0"}, Auth: tenants.AuthNone,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: checked.URL, Weight: 1}},
			HealthCheck: &tenants.HealthCheck{Path: "/health", IntervalMS: 100}}})
	const n = 40
	for i := range n {
		w.route(w.tenant(i), "r0", "/p0", up)
	}
	d := startDiskEdge(t, url, prefix, dir, map[string]string{"TOLLGATE_EDGE_TENANT_MEMORY": "1MiB"})
	time.Sleep(300 * time.Millisecond)
	if got := probes.Load(); got != 0 {
		t.Fatalf("%d health probes of a tenant not loaded", got)
	}
	d.eventually("checked", "/p0", 200)
	testenv.WaitFor(t, 10*time.Second, func() error {
		if probes.Load() == 0 {
			return fmt.Errorf("no health probe of the loaded tenant")
		}
		return nil
	})
	time.Sleep(1100 * time.Millisecond) // a tick of the idle clock: it is the idlest
	for i := range n {
		d.eventually(fmt.Sprintf("s%04d", i), "/p0", 200)
	}
	if d.metric("tollgate_edge_tenant_evictions_total") == 0 {
		t.Fatal("no eviction under a 1 MiB budget")
	}
	time.Sleep(300 * time.Millisecond) // a probe in flight when it was evicted
	before := probes.Load()
	time.Sleep(500 * time.Millisecond)
	if got := probes.Load(); got != before {
		t.Fatalf("%d health probes after the tenant was evicted", got-before)
	}
	d.eventually("checked", "/p0", 200)
	testenv.WaitFor(t, 10*time.Second, func() error {
		if probes.Load() == before {
			return fmt.Errorf("health checks did not resume with the reload")
		}
		return nil
	})
}

// TestDiskStoreServesWhileNATSIsDown: an edge started while NATS is unreachable serves
// from its store, answering a Host it does not know 503 not_ready; when NATS returns it
// catches up, and such a Host is 404.
func TestDiskStoreServesWhileNATSIsDown(t *testing.T) {
	ns, url, prefix, dir, up, w := diskBucket(t, "tglazy")
	for i := range 5 {
		w.route(w.tenant(i), "r0", "/p0", up)
	}
	d := startDiskEdge(t, url, prefix, dir, nil)
	d.eventually("s0001", "/p0", 200)
	d.backfilled() // a partial store is not served without NATS
	d.stop()
	ns.Shutdown()
	ns.WaitForShutdown()

	d = startDiskEdge(t, url, prefix, dir, nil)
	d.eventually("s0002", "/p0", 200)
	// A Host the store does not name may be a tenant newer than it: not ready, retry.
	if code, body := d.get("s0009", "/p0"); code != 503 || !strings.Contains(body, "not_ready") {
		t.Fatalf("unknown host while NATS is down: %d %s, want 503 not_ready", code, body)
	}
	d.stop()

	// With NATS back the edge follows the bucket again.
	testenv.RestartNATS(t, ns)
	w = newBucketWriter(t, url, prefix)
	w.rev.Store(100)
	w.route("t0002", "r1", "/after", up)
	d = startDiskEdge(t, url, prefix, dir, nil)
	d.eventually("s0002", "/after", 200)
	d.eventually("s0009", "/p0", 404)
}

// TestDiskStoreOfAnotherBucketIsDiscarded: a store written from another bucket (another
// prefix, another cell) is not served; the edge replays its own bucket.
func TestDiskStoreOfAnotherBucketIsDiscarded(t *testing.T) {
	ns := testenv.NATS(t)
	url, dir := natsURL(ns), t.TempDir()
	up := echoUpstream(t)
	a, b := testenv.Name("tglazya"), testenv.Name("tglazyb")
	wa := newBucketWriter(t, url, a)
	wa.route(wa.tenant(1), "r0", "/a", up)
	wb := newBucketWriter(t, url, b)
	wb.route(wb.tenant(2), "r0", "/b", up)

	d := startDiskEdge(t, url, a, dir, nil)
	d.eventually("s0001", "/a", 200)
	d.stop()
	d = startDiskEdge(t, url, b, dir, nil)
	d.backfilled()
	d.eventually("s0002", "/b", 200)
	d.eventually("s0001", "/a", 404)
	if got := d.metric("tollgate_edge_config_store_updates_total"); got != 2 {
		t.Errorf("updates into the new store: %v, want the bucket's 2", got)
	}
}

// TestDiskStoreCorrupt: a store that cannot be read is discarded and the bucket replayed;
// the edge does not crash.
func TestDiskStoreCorrupt(t *testing.T) {
	_, url, prefix, dir, up, w := diskBucket(t, "tglazy")
	w.route(w.tenant(1), "r0", "/p0", up)
	d := startDiskEdge(t, url, prefix, dir, nil)
	d.eventually("s0001", "/p0", 200)
	d.stop()
	files, err := filepath.Glob(filepath.Join(dir, tenantstore.Dir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("store files: %v %v", files, err)
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte("not a pebble file\x00\xff"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.route("t0001", "r1", "/p1", up)
	d = startDiskEdge(t, url, prefix, dir, nil)
	d.backfilled()
	d.eventually("s0001", "/p0", 200)
	d.eventually("s0001", "/p1", 200)
	if got := d.metric("tollgate_edge_config_store_updates_total"); got != 3 {
		t.Errorf("updates into the new store: %v, want the bucket's 3", got)
	}
}

// holdBackfill makes the backfill of a fast start wait before its update n until release
// is called (or the edge stops). Tests that use it do not run in parallel.
func holdBackfill(t *testing.T, at int) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	backfillHook = func(ctx context.Context, n int) {
		if n != at {
			return
		}
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	t.Cleanup(func() {
		release()
		backfillHook = nil
	})
	return release
}

// TestDiskStoreFastStart: an edge with an empty store is ready with every tenant's host
// entries while its backfill has not written a single route; a tenant a request needs is
// fetched on its own, changes made meanwhile are seen (of fetched tenants, of others, of a
// new tenant), a deleted tenant stays deleted, and once the backfill is through every
// tenant is served from the store.
func TestDiskStoreFastStart(t *testing.T) {
	_, url, prefix, dir, up, w := diskBucket(t, "tgfast")
	const n = 30
	for i := range n {
		id := w.tenant(i)
		for r := range 3 {
			w.route(id, fmt.Sprintf("r%d", r), fmt.Sprintf("/p%d", r), up)
		}
	}
	release := holdBackfill(t, 0)
	d := startDiskEdge(t, url, prefix, dir, nil)
	if got := d.metric("tollgate_edge_config_store_backfilling"); got != 1 {
		t.Fatalf("backfilling: %v, want 1 while the backfill is held", got)
	}
	if got := d.metric("tollgate_edge_tenants"); got != n {
		t.Errorf("tenants in the host index: %v, want %d", got, n)
	}
	// Fetched on demand, since the backfill has written nothing.
	if code, body := d.get("s0003", "/p1"); code != 200 || body != "up /p1" {
		t.Fatalf("a tenant before the backfill reached it: %d %s", code, body)
	}
	if got := d.metric("tollgate_edge_tenant_fetches_total"); got != 1 {
		t.Errorf("fetches: %v, want 1", got)
	}
	// Changes during the backfill: of a fetched (and compiled) tenant, of one not
	// fetched yet, a route deleted, a new tenant, a tenant deleted before and after its
	// fetch.
	w.route("t0003", "r9", "/new", up)
	w.route("t0004", "r9", "/new", up)
	w.del(tenants.ObjectKey("t0007", tenants.KindRoute, "r0"))
	w.route(w.tenant(n), "r0", "/p0", up)
	d.eventually("s0003", "/new", 200)
	d.eventually("s0004", "/new", 200)
	d.eventually("s0007", "/p0", 404)
	d.eventually("s0007", "/p1", 200)
	d.eventually(fmt.Sprintf("s%04d", n), "/p0", 200)
	d.eventually("s0006", "/p0", 200)
	w.del(tenants.TenantKey("t0005"))
	w.del(tenants.TenantKey("t0006"))
	for _, id := range []string{"t0005", "t0006"} {
		for r := range 3 {
			w.del(tenants.ObjectKey(id, tenants.KindRoute, fmt.Sprintf("r%d", r)))
		}
	}
	d.eventually("s0005", "/p0", 404)
	d.eventually("s0006", "/p0", 404)

	release()
	d.backfilled()
	fetches := d.metric("tollgate_edge_tenant_fetches_total")
	for i := range n + 1 {
		slug := fmt.Sprintf("s%04d", i)
		switch i {
		case 5, 6:
			d.eventually(slug, "/p0", 404)
		case 7:
			d.eventually(slug, "/p0", 404)
			d.eventually(slug, "/p2", 200)
		default:
			d.eventually(slug, "/p0", 200)
		}
	}
	d.eventually("s0003", "/new", 200)
	d.eventually("s0004", "/new", 200)
	if got := d.metric("tollgate_edge_tenant_fetches_total"); got != fetches {
		t.Errorf("%v fetches after the backfill, want none", got-fetches)
	}
	// A change after the backfill comes through the one watch left.
	w.route("t0010", "r9", "/later", up)
	d.eventually("s0010", "/later", 200)
	d.stop()

	// The store is whole: a restart resumes after its revision.
	d = startDiskEdge(t, url, prefix, dir, nil)
	if got := d.metric("tollgate_edge_config_store_backfilling"); got != 0 {
		t.Errorf("a restart with a whole store backfills")
	}
	if got := d.metric("tollgate_edge_config_store_updates_total"); got > 3 {
		t.Errorf("the restarted edge received %v updates: it replayed the bucket rather than resuming", got)
	}
	d.eventually("s0010", "/later", 200)
	d.eventually("s0005", "/p0", 404)
	d.eventually("s0012", "/p2", 200)
}

// TestDiskStoreFetchFailsWhileNATSDown: a tenant the backfill has not reached, whose
// fetch fails because NATS went away, is answered 503 not_ready with Retry-After (it
// exists; the edge cannot load it yet), not 404; with NATS back it is served.
func TestDiskStoreFetchFailsWhileNATSDown(t *testing.T) {
	ns, url, prefix, dir, up, w := diskBucket(t, "tgfetch")
	for i := range 5 {
		w.route(w.tenant(i), "r0", "/p0", up)
	}
	release := holdBackfill(t, 0)
	d := startDiskEdge(t, url, prefix, dir, nil)
	ns.Shutdown()
	ns.WaitForShutdown()
	if code, body := d.get("s0003", "/p0"); code != 503 || !strings.Contains(body, "not_ready") {
		t.Fatalf("a tenant whose fetch failed: %d %s, want 503 not_ready", code, body)
	}
	if code, _ := d.get("s0099", "/p0"); code != 404 {
		t.Errorf("a host no tenant has: %d, want 404", code)
	}
	testenv.RestartNATS(t, ns)
	release()
	d.eventually("s0003", "/p0", 200)
}

// TestDiskStoreFastStartResumes: an edge stopped partway through its backfill restarts
// fast again from its half-filled store, resumes the backfill where it got to rather
// than from the start, and ends with every tenant whole, including changes made while it
// was down.
func TestDiskStoreFastStartResumes(t *testing.T) {
	_, url, prefix, dir, up, w := diskBucket(t, "tgfast")
	const n = 20
	for i := range n {
		id := w.tenant(i)
		for r := range 4 {
			w.route(id, fmt.Sprintf("r%d", r), fmt.Sprintf("/p%d", r), up)
		}
	}
	total := n * 5
	holdBackfill(t, total/2)
	d := startDiskEdge(t, url, prefix, dir, nil)
	d.eventually("s0001", "/p3", 200)
	testenv.WaitFor(t, 10*time.Second, func() error {
		if got := d.metric("tollgate_edge_config_store_updates_total"); got != float64(total/2) {
			return fmt.Errorf("backfilled %v updates, want %d before the hold", got, total/2)
		}
		return nil
	})
	d.stop()
	backfillHook = nil

	// While it is down: a route of a tenant early in the bucket (already backfilled) and
	// of one late in it, and a tenant deleted.
	w.route("t0000", "r9", "/while-down", up)
	w.route("t0019", "r9", "/while-down", up)
	w.del(tenants.TenantKey("t0002"))

	d = startDiskEdge(t, url, prefix, dir, nil)
	d.backfilled()
	if got := d.metric("tollgate_edge_config_store_updates_total"); got >= float64(total) {
		t.Errorf("the restarted backfill delivered %v updates: it started over rather than resuming", got)
	}
	for i := range n {
		slug := fmt.Sprintf("s%04d", i)
		if i == 2 {
			d.eventually(slug, "/p0", 404)
			continue
		}
		for r := range 4 {
			d.eventually(slug, fmt.Sprintf("/p%d", r), 200)
		}
	}
	d.eventually("s0000", "/while-down", 200)
	d.eventually("s0019", "/while-down", 200)
}

// TestDiskStoreFastStartOff: with TOLLGATE_EDGE_FAST_START=off an edge with an empty
// store is ready only with the whole bucket in its store.
func TestDiskStoreFastStartOff(t *testing.T) {
	_, url, prefix, dir, up, w := diskBucket(t, "tgfast")
	for i := range 5 {
		w.route(w.tenant(i), "r0", "/p0", up)
	}
	d := startDiskEdge(t, url, prefix, dir, map[string]string{"TOLLGATE_EDGE_FAST_START": "off"})
	if got := d.metric("tollgate_edge_config_store_updates_total"); got != 10 {
		t.Errorf("updates in the store when ready: %v, want the bucket's 10", got)
	}
	d.eventually("s0004", "/p0", 200)
	if got := d.metric("tollgate_edge_tenant_fetches_total"); got != 0 {
		t.Errorf("fetches: %v, want 0", got)
	}
}

// TestDiskStoreEvictionLetsGoOfMeterState: the meter's per-route state of an evicted
// tenant (its latency counters) goes with it, so the routes holding some follow the
// tenants compiled, not every tenant served in the hour; tollgate_edge_routes counts the
// compiled tenants' routes.
func TestDiskStoreEvictionLetsGoOfMeterState(t *testing.T) {
	_, url, prefix, dir, up, w := diskBucket(t, "tglazy")
	const n = 40
	for i := range n {
		w.route(w.tenant(i), "r0", "/p0", up)
	}
	d := startDiskEdge(t, url, prefix, dir, map[string]string{"TOLLGATE_EDGE_TENANT_MEMORY": "1MiB", "TOLLGATE_METER": "on"})
	if got := d.metric("tollgate_edge_routes"); got != 0 {
		t.Fatalf("tollgate_edge_routes %v before any load, want 0", got)
	}
	for i := range n {
		d.eventually(fmt.Sprintf("s%04d", i), "/p0", 200)
	}
	if d.metric("tollgate_edge_tenant_evictions_total") == 0 {
		t.Fatal("no eviction under a 1 MiB budget")
	}
	resident := d.metric("tollgate_edge_tenants_resident")
	if got := d.metric("tollgate_edge_routes"); got != resident {
		t.Fatalf("tollgate_edge_routes %v, want the %v compiled tenants' one route each", got, resident)
	}
	// The flush after an eviction lets go; every tenant served a request.
	testenv.WaitFor(t, 10*time.Second, func() error {
		if got := d.metric("tollgate_meter_latency_routes"); got > resident || got == 0 {
			return fmt.Errorf("%v routes hold latency counters, want between 1 and the %v compiled tenants' routes", got, resident)
		}
		return nil
	})
}
