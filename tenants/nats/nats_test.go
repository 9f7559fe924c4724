package nats_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
	"tollgate/infra/natsserver"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// env is one test's NATS: an in-process server, a connection, and the config bucket.
type env struct {
	s        *server.Server
	storeDir string
	port     int
	nc       *nats.Conn
	js       jetstream.JetStream
	bucket   string
	kv       jetstream.KeyValue
}

func TestMain(m *testing.M) {
	// Connect logs every connect and disconnect at info; keep test output to what fails.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 1})))
	os.Exit(m.Run())
}

func newEnv(t testing.TB) *env {
	t.Helper()
	s := testenv.NATS(t)
	e := &env{s: s, storeDir: filepath.Dir(s.StoreDir()), port: s.Addr().(*net.TCPAddr).Port, bucket: testenv.Name("tgcfg_")}
	e.nc, e.js = connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if e.kv, err = tgnats.EnsureBucket(ctx, e.js, e.bucket, 1); err != nil {
		t.Fatal(err)
	}
	return e
}

func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsconn.Connect(url, t.Name(), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// restart shuts the server down (if it is not already) and starts it again on the same
// port and store. testenv.RestartNATS cannot be used: it asks the stopped server for its
// address and store directory, which a stopped server no longer knows.
func (e *env) restart(t testing.TB) {
	t.Helper()
	e.s.Shutdown()
	e.s.WaitForShutdown()
	var err error
	for range 50 {
		var ns *server.Server
		if ns, err = natsserver.Start(natsserver.Options{Port: e.port, StoreDir: e.storeDir}); err == nil {
			e.s = ns
			t.Cleanup(ns.Shutdown)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("restart nats: %v", err)
}

func (e *env) publisher(t testing.TB) *tgnats.Publisher {
	t.Helper()
	p, err := tgnats.NewPublisher(e.nc, e.bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func value(rev int64, s string) []byte { return fmt.Appendf(nil, `{"rev":%d,"x":%q}`, rev, s) }

func put(rev int64, key, s string) tenants.Change {
	return tenants.Change{Rev: rev, Key: key, Value: value(rev, s)}
}
func del(rev int64, key string) tenants.Change { return tenants.Change{Rev: rev, Key: key} }

func key(tenant string, i int) string {
	return tenants.ObjectKey(tenant, tenants.KindRoute, fmt.Sprint(i))
}

// bucketState reads the bucket through the KV API: live keys and their values.
func bucketState(t testing.TB, kv jetstream.KeyValue) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := map[string]string{}
	for e := range w.Updates() {
		if e == nil {
			return got
		}
		got[e.Key()] = string(e.Value())
	}
	t.Fatal("watch closed")
	return nil
}

func TestEnsureBucket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st, err := e.kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	if cfg.MaxMsgsPerSubject != 1 || cfg.Storage != jetstream.FileStorage || cfg.MaxMsgSize != tgnats.MaxValueSize || cfg.Description == "" {
		t.Errorf("bucket config: history %d, storage %v, max value %d, description %q",
			cfg.MaxMsgsPerSubject, cfg.Storage, cfg.MaxMsgSize, cfg.Description)
	}
	// Idempotent, and it fixes a bucket created with other settings.
	if err := e.js.DeleteKeyValue(ctx, e.bucket); err != nil {
		t.Fatal(err)
	}
	// The server removes a deleted stream's files after answering; a create of the same
	// name meanwhile can fail to make its store ("error creating store for stream"), so
	// it is tried again for a while.
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		if _, err = e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: e.bucket, History: 5, Storage: jetstream.FileStorage}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tgnats.EnsureBucket(ctx, e.js, e.bucket, 1); err != nil {
			t.Fatal(err)
		}
	}
	st, _ = e.kv.Status(ctx)
	if h := st.History(); h != 1 {
		t.Errorf("history after EnsureBucket = %d, want 1", h)
	}
}

func TestPublishInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(t)
	ctx := context.Background()

	// A batch of 1000 distinct keys lands in the stream in batch order.
	var batch []tenants.Change
	for i := range 1000 {
		batch = append(batch, put(int64(i+1), key("t1", i), "v1"))
	}
	start := time.Now()
	if err := p.Publish(ctx, batch); err != nil {
		t.Fatal(err)
	}
	t.Logf("published 1000 changes in %v", time.Since(start))
	stream, err := e.js.Stream(ctx, "KV_"+e.bucket)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range batch {
		m, err := stream.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if want := "$KV." + e.bucket + "." + c.Key; m.Subject != want || string(m.Data) != string(c.Value) {
			t.Fatalf("stream seq %d = %s %s, want %s %s", i+1, m.Subject, m.Data, want, c.Value)
		}
	}

	// Overwrites and deletes within one batch apply in order: the last change of a key wins.
	second := []tenants.Change{
		put(1001, key("t1", 0), "v2"),
		del(1002, key("t1", 1)),
		put(1003, key("t1", 0), "v3"),
		del(1004, key("t1", 2)),
		put(1005, key("t1", 2), "back"),
		put(1006, key("t1", 3), "v2"),
		del(1007, key("t1", 3)),
	}
	if err := p.Publish(ctx, second); err != nil {
		t.Fatal(err)
	}
	got := bucketState(t, e.kv)
	if len(got) != 998 {
		t.Errorf("bucket holds %d keys, want 998", len(got))
	}
	for k, want := range map[string]string{key("t1", 0): string(value(1003, "v3")), key("t1", 2): string(value(1005, "back")), key("t1", 4): string(value(5, "v1"))} {
		if got[k] != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
	for _, k := range []string{key("t1", 1), key("t1", 3)} {
		if _, ok := got[k]; ok {
			t.Errorf("%s still present", k)
		}
		// The KV API sees the delete as a delete.
		if _, err := e.kv.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("Get(%s) = %v, want ErrKeyNotFound", k, err)
		}
	}
}

func TestPublishRefusesBadBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(t)
	ctx := context.Background()
	for _, bad := range []tenants.Change{
		{Rev: 2, Key: "t1.route.a b", Value: []byte("{}")},
		{Rev: 2, Key: "t1.route.", Value: []byte("{}")},
		{Rev: 2, Key: "t1..x", Value: []byte("{}")},
		{Rev: 2, Key: "t1.route.*", Value: []byte("{}")},
		{Rev: 2, Key: "", Value: []byte("{}")},
		{Rev: 2, Key: "t1.route.x", Value: make([]byte, tgnats.MaxValueSize+1)},
	} {
		if err := p.Publish(ctx, []tenants.Change{put(1, key("t1", 1), "ok"), bad}); err == nil {
			t.Errorf("Publish with %q (%d bytes) succeeded", bad.Key, len(bad.Value))
		}
	}
	if got := bucketState(t, e.kv); len(got) != 0 {
		t.Errorf("a refused batch wrote %v", got)
	}
	// A bucket that does not exist fails at once rather than after the timeout.
	p2, _ := tgnats.NewPublisher(e.nc, "nosuchbucket", 0)
	start := time.Now()
	if err := p2.Publish(ctx, []tenants.Change{put(1, key("t1", 1), "x")}); err == nil {
		t.Error("publish to a missing bucket succeeded")
	} else if d := time.Since(start); d > 2*time.Second {
		t.Errorf("publish to a missing bucket took %v", d)
	}
}

func TestPublishDuringOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(t)
	ctx := context.Background()
	if err := p.Publish(ctx, []tenants.Change{put(1, key("t1", 1), "before")}); err != nil {
		t.Fatal(err)
	}

	e.s.Shutdown()
	e.s.WaitForShutdown()
	testenv.WaitFor(t, 5*time.Second, func() error {
		if e.nc.IsConnected() {
			return errors.New("client has not noticed the outage")
		}
		return nil
	})
	batch := []tenants.Change{put(2, key("t1", 2), "during"), del(3, key("t1", 1)), put(4, key("t1", 3), "during")}
	start := time.Now()
	err := p.Publish(ctx, batch)
	if err == nil {
		t.Fatal("publish with the server down succeeded")
	}
	if d := time.Since(start); d > tgnats.DefaultPublishTimeout+time.Second {
		t.Errorf("publish with the server down took %v", d)
	}
	t.Logf("down: %v after %v", err, time.Since(start))

	e.restart(t)
	// The relay retries the same batch until it goes through.
	testenv.WaitFor(t, 15*time.Second, func() error { return p.Publish(ctx, batch) })
	got := bucketState(t, e.kv)
	want := map[string]string{key("t1", 2): string(value(2, "during")), key("t1", 3): string(value(4, "during"))}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the outage the bucket holds %v, want %v", got, want)
	}
}

// A server that takes a message and never acks it must not hang Publish past its timeout.
// A plain subscriber on the subjects of a bucket that has no stream stands in for it.
func TestPublishTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub, err := e.nc.Subscribe("$KV.blackhole.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	p, err := tgnats.NewPublisher(e.nc, "blackhole", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Publish(context.Background(), []tenants.Change{put(1, key("t1", 1), "x")}); err == nil {
		t.Fatal("publish without an ack succeeded")
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("publish without an ack returned after %v, want about 300ms", d)
	}
}

func TestResync(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(t)
	ctx := context.Background()
	if err := p.Publish(ctx, []tenants.Change{
		put(1, "t1.tenant", "same"),
		put(2, key("t1", 1), "old"),
		put(3, key("t1", 2), "stale"),
		put(4, key("t2", 1), "stale"),
		put(50, key("t1", 3), "published after the snapshot"),
		put(60, key("t1", 4), "newer than the snapshot's"),
		put(5, key("t1", 5), "to delete"),
	}); err != nil {
		t.Fatal(err)
	}
	revBefore := map[string]uint64{}
	for _, k := range []string{"t1.tenant", key("t1", 3)} {
		en, err := e.kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		revBefore[k] = en.Revision()
	}

	snapshot := []tenants.Change{
		put(1, "t1.tenant", "same"),
		put(7, key("t1", 1), "new"),
		put(8, key("t1", 6), "missing"),
		put(9, key("t1", 4), "older than the bucket's"),
		del(10, key("t1", 5)),
	}
	if err := tgnats.Resync(ctx, e.kv, snapshot); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"t1.tenant":  string(value(1, "same")),
		key("t1", 1): string(value(7, "new")),
		key("t1", 6): string(value(8, "missing")),
		key("t1", 3): string(value(50, "published after the snapshot")),
		key("t1", 4): string(value(60, "newer than the snapshot's")),
	}
	got := bucketState(t, e.kv)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after resync:\n got %v\nwant %v", got, want)
	}
	for k, rev := range revBefore {
		if en, err := e.kv.Get(ctx, k); err != nil || en.Revision() != rev {
			t.Errorf("%s was rewritten by resync (revision %d → %v, %v)", k, rev, en.Revision(), err)
		}
	}

	// Resyncing the same snapshot again writes nothing.
	st, _ := e.kv.Status(ctx)
	last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	if err := tgnats.Resync(ctx, e.kv, snapshot); err != nil {
		t.Fatal(err)
	}
	st, _ = e.kv.Status(ctx)
	if now := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq; now != last {
		t.Errorf("a second resync wrote %d messages", now-last)
	}
}

// recorder collects what a Watcher delivers.
type recorder struct {
	mu      sync.Mutex
	state   map[string]string
	log     []string // "put k", "del k", "ready"
	lastRev uint64
	errs    []string
}

func newRecorder() *recorder { return &recorder{state: map[string]string{}} }

func (r *recorder) config(filter string) tgnats.WatchConfig {
	return tgnats.WatchConfig{
		Filter: filter,
		OnUpdate: func(u tgnats.Update) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if u.Revision <= r.lastRev {
				r.errs = append(r.errs, fmt.Sprintf("revision %d after %d", u.Revision, r.lastRev))
			}
			r.lastRev = u.Revision
			if u.Value == nil {
				delete(r.state, u.Key)
				r.log = append(r.log, "del "+u.Key)
			} else {
				r.state[u.Key] = string(u.Value)
				r.log = append(r.log, "put "+u.Key)
			}
		},
		OnReady: func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.log = append(r.log, "ready")
		},
	}
}

func (r *recorder) get(k string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.state[k]
	return v, ok
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.state)
}

func (r *recorder) check(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		t.Error(e)
	}
}

func watch(t testing.TB, js jetstream.JetStream, bucket string, cfg tgnats.WatchConfig) *tgnats.Watcher {
	t.Helper()
	w, err := tgnats.Watch(context.Background(), js, bucket, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func waitReady(t testing.TB, w *tgnats.Watcher) {
	t.Helper()
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("watcher not ready after 10s")
	}
}

func TestWatcherEmptyBucketIsReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newRecorder()
	w := watch(t, e.js, e.bucket, r.config(""))
	waitReady(t, w)
	if fmt.Sprint(r.log) != "[ready]" {
		t.Errorf("log = %v", r.log)
	}
}

func TestWatcherLoadsThenFollows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(t)
	ctx := context.Background()
	var batch []tenants.Change
	for i := range 100 {
		batch = append(batch, put(int64(i+1), key("t1", i), "v1"))
	}
	batch = append(batch, del(101, key("t1", 0)), put(102, "t2.tenant", "other tenant"))
	if err := p.Publish(ctx, batch); err != nil {
		t.Fatal(err)
	}

	r := newRecorder()
	w := watch(t, e.js, e.bucket, r.config(""))
	waitReady(t, w)
	r.mu.Lock()
	if n := len(r.state); n != 100 {
		t.Errorf("after the initial load the watcher holds %d keys, want 100", n)
	}
	if last := r.log[len(r.log)-1]; last != "ready" {
		t.Errorf("last event of the load is %q, want ready", last)
	}
	r.mu.Unlock()

	// One tenant only.
	r1 := newRecorder()
	w1 := watch(t, e.js, e.bucket, r1.config(tenants.TenantFilter("t2")))
	waitReady(t, w1)

	if err := p.Publish(ctx, []tenants.Change{put(103, key("t1", 1), "v2"), del(104, key("t1", 2)), put(105, "t2.tenant", "renamed")}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, func() error {
		if v, _ := r.get(key("t1", 1)); v != string(value(103, "v2")) {
			return fmt.Errorf("update not seen: %s", v)
		}
		if _, ok := r.get(key("t1", 2)); ok {
			return errors.New("delete not seen")
		}
		if v, _ := r1.get("t2.tenant"); v != string(value(105, "renamed")) {
			return fmt.Errorf("filtered watcher: %s", v)
		}
		return nil
	})
	r.check(t)
	r1.check(t)
	r1.mu.Lock()
	defer r1.mu.Unlock()
	if want := "[put t2.tenant ready put t2.tenant]"; fmt.Sprint(r1.log) != want {
		t.Errorf("filtered watcher saw %v, want %s", r1.log, want)
	}
}

func TestWatcherSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(t)
	ctx := context.Background()
	if err := p.Publish(ctx, []tenants.Change{put(1, key("t1", 1), "v1"), put(2, key("t1", 2), "v1")}); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	var errMu sync.Mutex
	var watchErrs []string
	cfg := r.config("")
	cfg.OnError = func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		watchErrs = append(watchErrs, err.Error())
	}
	w := watch(t, e.js, e.bucket, cfg)
	waitReady(t, w)

	for round := range 2 {
		e.restart(t)
		batch := []tenants.Change{
			put(int64(10*round+3), key("t1", 1), fmt.Sprint("after restart ", round)),
			del(int64(10*round+4), key("t1", 2)),
			put(int64(10*round+5), key("t1", 2), fmt.Sprint("recreated ", round)),
		}
		testenv.WaitFor(t, 15*time.Second, func() error { return p.Publish(ctx, batch) })
		start := time.Now()
		testenv.WaitFor(t, 20*time.Second, func() error {
			if v, _ := r.get(key("t1", 2)); v != string(batch[2].Value) {
				return fmt.Errorf("round %d: watcher holds %s", round, v)
			}
			return nil
		})
		t.Logf("round %d: watcher caught up %v after the publish", round, time.Since(start))
		if v, _ := r.get(key("t1", 1)); v != string(batch[0].Value) {
			t.Errorf("round %d: %s = %s", round, key("t1", 1), v)
		}
	}
	r.check(t)
	errMu.Lock()
	t.Logf("watcher reported %d errors: %s", len(watchErrs), strings.Join(watchErrs, "; "))
	errMu.Unlock()
}

func TestWatcherStartsDuringOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(t)
	if err := p.Publish(context.Background(), []tenants.Change{put(1, key("t1", 1), "v1")}); err != nil {
		t.Fatal(err)
	}
	e.s.Shutdown()
	e.s.WaitForShutdown()
	r := newRecorder()
	cfg := r.config("")
	start := time.Now()
	cfg.OnError = func(err error) { t.Logf("%v: %v", time.Since(start), err) }
	w := watch(t, e.js, e.bucket, cfg)
	select {
	case <-w.Ready():
		t.Fatal("ready without a server")
	case <-time.After(500 * time.Millisecond):
	}
	e.restart(t)
	t.Logf("%v: restarted", time.Since(start))
	waitReady(t, w)
	t.Logf("%v: ready", time.Since(start))
	if v, _ := r.get(key("t1", 1)); v != string(value(1, "v1")) {
		t.Errorf("loaded %q", v)
	}
	// And it follows from there.
	testenv.WaitFor(t, 10*time.Second, func() error { return p.Publish(context.Background(), []tenants.Change{put(2, key("t1", 1), "v2")}) })
	testenv.WaitFor(t, 5*time.Second, func() error {
		if v, _ := r.get(key("t1", 1)); v != string(value(2, "v2")) {
			return fmt.Errorf("holds %q", v)
		}
		return nil
	})
	r.check(t)
}

// TestWatcherWaitsWithoutLeaking: a watcher that sits idle for a few of its reconnect
// polls holds one waiter on its consumer's end, not one per poll.
func TestWatcherWaitsWithoutLeaking(t *testing.T) {
	// Not parallel: it counts goroutines, so no other test's watchers may run meanwhile.
	e := newEnv(t)
	r := newRecorder()
	w := watch(t, e.js, e.bucket, r.config(""))
	waitReady(t, w)
	time.Sleep(8 * 250 * time.Millisecond) // eight polls
	buf := make([]byte, 1<<22)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if n := strings.Count(stacks, "orderedSubscription).Closed"); n > 2 {
		t.Errorf("%d goroutines wait on consumers' Closed: a watcher leaks one per poll", n)
	}
}
