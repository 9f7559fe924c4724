// Package tenantscale is the bench's scale scenario: one stack filled to a size set by
// flags and measured as a fleet of that size lives. The api's write rates come first
// (single route POSTs into one tenant, tenant creation, then one config document per
// tenant), each with the relay's lag behind its last write; then an edge is started
// against the filled bucket and restarted with its local state kept, its memory read
// idle and after serving a share of the tenants, the first request of tenants it has
// not served timed beside their second, and a route change timed from the api's 200 to
// the edge's first answer from the new upstream.
//
// No edge runs while the stack fills: the writes are the api's and the relay's alone,
// and the edge that is measured starts against everything at once, as one does after a
// deploy.
package tenantscale

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/probe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/tenants"
)

// The targets the report sets each figure beside.
const (
	TargetPostRate  = 1000            // single route POSTs per second
	TargetDocRate   = 5000            // routes per second through config documents
	TargetReady     = 5 * time.Second // exec → /readyz, fresh and restarted
	TargetIdleKB    = 160 * 1024      // idle RSS
	TargetColdFirst = 20 * time.Millisecond
)

// rateWindow is how many POSTs the first and last rates are taken over.
const rateWindow = 1000

// Settings are the scenario's flags.
type Settings struct {
	Tenants, Routes int           // tenants filled with one config document of Routes routes each
	Posts           int           // single route POSTs into one tenant
	Clients         int           // concurrent api clients of every write phase
	Sample          int           // unserved tenants whose first request is timed
	Changes         int           // route changes timed
	Settle          time.Duration // wait before each RSS reading
	EdgeEnv         string        // comma-separated VAR=value for the measured edges
}

// Register adds the -scale-* flags.
func (c *Settings) Register(fs *flag.FlagSet) {
	fs.IntVar(&c.Tenants, "scale-tenants", 1000, "scale: tenants, each filled with one PUT /v1/tenants/{slug}/config of -scale-routes routes")
	fs.IntVar(&c.Routes, "scale-routes", 10, "scale: routes per tenant")
	fs.IntVar(&c.Posts, "scale-posts", 10000, "scale: single POST /v1/tenants/{slug}/routes into one tenant")
	fs.IntVar(&c.Clients, "scale-clients", 16, "scale: concurrent api clients of each write phase")
	fs.IntVar(&c.Sample, "scale-sample", 200, "scale: tenants the edge has not served whose first request is timed")
	fs.IntVar(&c.Changes, "scale-changes", 20, "scale: route changes timed from the api's 200 to the edge's first answer from the new upstream")
	fs.DurationVar(&c.Settle, "scale-settle", 3*time.Second, "scale: wait before each RSS reading")
	fs.StringVar(&c.EdgeEnv, "scale-edge-env", "TOLLGATE_EDGE_CONFIG_STORE=disk", "scale: comma-separated VAR=value settings of the measured edge (\"\": the default, in-memory config)")
}

// Check refuses settings the scenario cannot run with.
func (c *Settings) Check() error {
	if c.Tenants < 10 {
		return fmt.Errorf("-scale-tenants must be at least 10 (1%% and 10%% of them are served apart)")
	}
	maxPer := tenants.MaxResources.Routes
	if c.Routes < 1 || c.Routes > maxPer || c.Posts < 1 || c.Posts > maxPer {
		return fmt.Errorf("-scale-routes and -scale-posts must be between 1 and %d (a tenant's routes)", maxPer)
	}
	if c.Clients < 1 || c.Sample < 1 || c.Changes < 1 || c.Settle < 0 {
		return fmt.Errorf("-scale-clients, -scale-sample and -scale-changes must be at least 1, -scale-settle not negative")
	}
	for _, kv := range c.edgeEnv() {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("-scale-edge-env: %q is not VAR=value", kv)
		}
	}
	return nil
}

func (c *Settings) edgeEnv() []string {
	var out []string
	for _, f := range strings.Split(c.EdgeEnv, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// shares are how many tenants the 1% and 10% readings have served (at least one, and
// the second more than the first).
func (c *Settings) shares() (one, ten int) {
	one = max(1, c.Tenants/100)
	return one, max(one+1, c.Tenants/10)
}

// Setup is what the scenario runs on.
type Setup struct {
	Env      *harness.Env
	Stack    *harness.Stack // its api running, no edge
	Procs    int            // the edge's GOMAXPROCS
	CPUs     string         // the edge's CPUs
	LoadCPUs string         // the route-change poller's
	EdgeEnv  []string       // beside -scale-edge-env: the bench's -edge-env, metering off
	Ups      [2]string      // two upstreams, and what each answers
	Answers  [2]string
}

// Writes is one write phase.
type Writes struct {
	Calls, Items int // calls made; routes or tenants they wrote
	Elapsed      time.Duration
	Lat          figures.LatStats // per call
	First, Last  float64          // items per second over the first and last rateWindow calls answered
	Lag          time.Duration    // the 200 answered last → what it wrote in the bucket
	LagErr       string
}

// Rate is items per second over the phase.
func (w Writes) Rate() float64 {
	if w.Elapsed <= 0 {
		return 0
	}
	return float64(w.Items) / w.Elapsed.Seconds()
}

// Mem is a process's memory, in KB, from /proc/PID/status.
type Mem struct{ RSS, Anon, File int64 }

// Start is an edge started against the filled bucket.
type Start struct {
	Ready time.Duration // exec → /readyz 200
	Mem   Mem           // right then
	// Backfilled is exec → the edge's store holding the whole bucket, for an edge that
	// became ready before (a disk store's fast start); 0 when it had nothing to backfill.
	Backfilled    time.Duration
	BackfilledMem Mem // right then
}

// Share is the edge's memory after serving a share of the tenants.
type Share struct {
	Pct, Tenants, Failed int
	Mem                  Mem
}

// Result is one run of the scenario; a run an error stopped holds what it got to.
type Result struct {
	Set                  Settings
	Procs                int
	Date                 time.Time
	Posts, Tenants, Docs Writes
	Fresh, Restart       Start
	Idle                 Mem
	Shares               []Share
	Cold, Second         figures.LatStats
	ColdFailed           int
	ChangeAPI, Change    figures.LatStats
	ChangeFailed         int // polls not answered 200 while the changes ran
}

type runner struct {
	Setup
	set  Settings
	res  *Result
	kv   jetstream.KeyValue
	hc   *http.Client // the edge's listeners
	ids  []string     // tenant ids, by index
	edge *harness.Proc
}

func slug(k int) string { return fmt.Sprintf("scale-%d", k) }

const postSlug = "scale-posts"

// Run runs the scenario on su's stack.
func Run(ctx context.Context, su Setup, set Settings) (*Result, error) {
	r := &runner{Setup: su, set: set, res: &Result{Set: set, Procs: su.Procs, Date: time.Now().UTC()},
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	defer r.hc.CloseIdleConnections()
	nc, err := nats.Connect(su.Env.NatsURL, nats.Timeout(5*time.Second))
	if err != nil {
		return r.res, fmt.Errorf("NATS at %s: %v", su.Env.NatsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return r.res, err
	}
	bucket := su.Stack.Prefix + "_config"
	err = harness.WaitFor(ctx, "KV bucket "+bucket, su.Env.ReadyTimeout, 100*time.Millisecond, su.Stack.API, func() error {
		kv, kerr := js.KeyValue(ctx, bucket)
		r.kv = kv
		return kerr
	})
	if err != nil {
		return r.res, err
	}
	for _, step := range []func(context.Context) error{r.posts, r.tenants, r.docs, r.starts, r.shares, r.cold, r.changes} {
		if err := step(ctx); err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

// phase is one write phase's calls: their latencies, when each was answered, and the
// key the call answered last gave.
type phase struct {
	lat     []time.Duration
	done    []time.Duration // since the start, each call's answer
	lastAt  time.Time
	lastKey string
}

// phase makes n calls with the settings' clients; call(i) makes call i and returns a key
// of what it wrote, for the relay lag of the call answered last.
func (r *runner) phase(ctx context.Context, what string, n int, call func(i int) (string, error)) (*phase, time.Duration, error) {
	p := &phase{lat: make([]time.Duration, n), done: make([]time.Duration, 0, n)}
	var mu sync.Mutex
	start := time.Now()
	err := Parallel(ctx, n, r.set.Clients, func(i int) error {
		t0 := time.Now()
		key, err := call(i)
		if err != nil {
			return fmt.Errorf("%s %d of %d: %w", what, i+1, n, err)
		}
		t := time.Now()
		p.lat[i] = t.Sub(t0)
		mu.Lock()
		p.done = append(p.done, t.Sub(start))
		if t.After(p.lastAt) {
			p.lastAt, p.lastKey = t, key
		}
		mu.Unlock()
		return nil
	})
	elapsed := time.Since(start)
	fmt.Fprintf(os.Stderr, "bench: scale: %d %s in %s\n", n, what, elapsed.Round(time.Millisecond))
	return p, elapsed, err
}

// lag polls every millisecond until there is true, and returns how long after at that was.
func (r *runner) lag(ctx context.Context, at time.Time, there func() (bool, error)) (time.Duration, error) {
	deadline := time.Now().Add(r.Env.ReadyTimeout)
	for {
		ok, err := there()
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(at), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("not in the bucket %s after the last 200", r.Env.ReadyTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// posts makes the single POSTs into one tenant.
func (r *runner) posts(ctx context.Context) error {
	c := r.Stack.Client
	tid, err := c.CreateTenant(ctx, postSlug)
	if err != nil {
		return err
	}
	n := r.set.Posts
	p, elapsed, err := r.phase(ctx, "route POSTs into one tenant", n, func(i int) (string, error) {
		var cr harness.Created
		err := c.Call(ctx, "POST", "/v1/tenants/"+postSlug+"/routes", harness.RouteBody(fmt.Sprintf("p-%d", i), fmt.Sprintf("/p-%d", i), r.Ups[0], "none", false), &cr)
		return tenants.ObjectKey(tid, tenants.KindRoute, cr.ID), err
	})
	if err != nil {
		return err
	}
	w := &r.res.Posts
	*w = Writes{Calls: n, Items: n, Elapsed: elapsed, Lat: figures.Summarize(p.lat)}
	slices.Sort(p.done)
	w.First, w.Last = windowRates(p.done, rateWindow)
	w.Lag, err = r.lag(ctx, p.lastAt, func() (bool, error) { return r.has(ctx, p.lastKey) })
	if err != nil {
		w.LagErr = err.Error()
	}
	return nil
}

// tenants creates the tenants.
func (r *runner) tenants(ctx context.Context) error {
	c := r.Stack.Client
	n := r.set.Tenants
	r.ids = make([]string, n)
	p, elapsed, err := r.phase(ctx, "tenants created", n, func(k int) (string, error) {
		id, err := c.CreateTenant(ctx, slug(k))
		r.ids[k] = id
		return id, err
	})
	if err != nil {
		return err
	}
	r.res.Tenants = Writes{Calls: n, Items: n, Elapsed: elapsed, Lat: figures.Summarize(p.lat)}
	w := &r.res.Tenants
	w.Lag, err = r.lag(ctx, p.lastAt, func() (bool, error) { return r.has(ctx, tenants.TenantKey(p.lastKey)) })
	if err != nil {
		w.LagErr = err.Error()
	}
	return nil
}

// has says whether the bucket holds key.
func (r *runner) has(ctx context.Context, key string) (bool, error) {
	_, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// docs fills every tenant with one config document.
func (r *runner) docs(ctx context.Context) error {
	c := r.Stack.Client
	n, per := r.set.Tenants, r.set.Routes
	p, elapsed, err := r.phase(ctx, "config documents", n, func(k int) (string, error) {
		routes := make([]map[string]any, per)
		for j := range per {
			routes[j] = harness.RouteBody(fmt.Sprintf("r-%d", j), routePath(j), r.Ups[0], "none", false)
		}
		doc := map[string]any{"version": 1, "tenant": slug(k), "routes": routes}
		return r.ids[k], c.CallRetry(ctx, "PUT", "/v1/tenants/"+slug(k)+"/config", doc)
	})
	if err != nil {
		return err
	}
	w := &r.res.Docs
	*w = Writes{Calls: n, Items: n * per, Elapsed: elapsed, Lat: figures.Summarize(p.lat)}
	// The document answered last is in the bucket when all its routes are.
	w.Lag, err = r.lag(ctx, p.lastAt, func() (bool, error) {
		l, err := r.kv.ListKeysFiltered(ctx, p.lastKey+"."+tenants.KindRoute+".*")
		if err != nil {
			return false, err
		}
		got := 0
		for range l.Keys() {
			got++
		}
		_ = l.Stop() // the lister has ended with its keys: stopping it again only says so
		return got >= per, nil
	})
	if err != nil {
		w.LagErr = err.Error()
	}
	return nil
}

func routePath(j int) string { return fmt.Sprintf("/api-%d", j) }

// startEdge starts an edge with spool as its local state directory and waits for its
// /readyz.
func (r *runner) startEdge(ctx context.Context, name, spool string) (*harness.Proc, Start, error) {
	env := append([]string{"TOLLGATE_METER_SPOOL_DIR=" + spool, fmt.Sprintf("GOMAXPROCS=%d", r.Procs)}, r.EdgeEnv...)
	env = append(env, r.set.edgeEnv()...)
	t0 := time.Now()
	p, err := harness.StartProc(name, filepath.Join(r.Stack.Dir, strings.ReplaceAll(name, " ", "-")+".log"), r.CPUs, r.Stack.Env(env...), r.Stack.EdgeArgv()...)
	if err != nil {
		return nil, Start{}, err
	}
	r.Env.Clean.Add(p.Stop)
	err = harness.WaitFor(ctx, name+" /readyz", r.Env.ReadyTimeout, 2*time.Millisecond, p, func() error {
		code, err := harness.EdgeStatus(ctx, r.hc, "http://"+r.Stack.EdgeAdmin, "", "/readyz", nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
	if err != nil {
		p.Stop()
		return nil, Start{}, err
	}
	st := Start{Ready: time.Since(t0), Mem: readMem(p.Pid())}
	fmt.Fprintf(os.Stderr, "bench: scale: %s ready after %s, RSS %s\n", name, figures.FmtDur(st.Ready), figures.FmtKB(st.Mem.RSS))
	return p, st, nil
}

// starts starts a fresh edge against the filled bucket, then restarts it with its state
// directory kept; the restarted one serves the rest.
func (r *runner) starts(ctx context.Context) error {
	spool := filepath.Join(r.Stack.Dir, "scale-edge-state")
	p, st, err := r.startEdge(ctx, "scale edge fresh", spool)
	if err != nil {
		return err
	}
	// A fast start is ready before its store holds the whole bucket: the restart measured
	// is that of an edge whose store is complete, so the fresh one finishes first.
	if err := r.awaitBackfill(ctx, p, &st); err != nil {
		p.Stop()
		return err
	}
	r.res.Fresh = st
	p.Stop()
	r.hc.CloseIdleConnections()
	if r.edge, r.res.Restart, err = r.startEdge(ctx, "scale edge restarted", spool); err != nil {
		return err
	}
	time.Sleep(r.set.Settle)
	r.res.Idle = readMem(r.edge.Pid())
	return nil
}

// awaitBackfill waits until the edge's store holds the whole bucket
// (tollgate_edge_config_store_backfilling 0, or absent: nothing to backfill), and notes
// when in st.
func (r *runner) awaitBackfill(ctx context.Context, p *harness.Proc, st *Start) error {
	started := time.Now().Add(-st.Ready)
	busy := false
	err := harness.WaitFor(ctx, "scale edge fresh backfill", r.Env.ReadyTimeout, 100*time.Millisecond, p, func() error {
		m := r.Env.ScrapeMetrics(r.Stack.EdgeAdmin)
		if len(m) == 0 {
			return fmt.Errorf("no metrics")
		}
		if m["tollgate_edge_config_store_backfilling"] > 0 {
			busy = true
			return fmt.Errorf("backfilling")
		}
		return nil
	})
	if err != nil || !busy {
		return err
	}
	st.Backfilled, st.BackfilledMem = time.Since(started), readMem(p.Pid())
	fmt.Fprintf(os.Stderr, "bench: scale: scale edge fresh backfill through after %s, RSS %s\n", figures.FmtDur(st.Backfilled), figures.FmtKB(st.BackfilledMem.RSS))
	return nil
}

// get asks the edge for tenant k's first route: its latency, or why it was not a 200.
func (r *runner) get(ctx context.Context, hc *http.Client, k int) (time.Duration, error) {
	t0 := time.Now()
	code, err := harness.EdgeStatus(ctx, hc, "http://"+r.Stack.EdgeAddr, slug(k)+".localhost", routePath(0), nil)
	d := time.Since(t0)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d", code)
	}
	return d, err
}

// shares serves the first 1% of the tenants, then up to 10%, one call each, reading the
// edge's memory a settle after each.
func (r *runner) shares(ctx context.Context) error {
	one, ten := r.set.shares()
	from := 0
	for _, sh := range []Share{{Pct: 1, Tenants: one}, {Pct: 10, Tenants: ten}} {
		var failed atomic.Int64
		_ = Parallel(ctx, sh.Tenants-from, 8, func(i int) error {
			if _, err := r.get(ctx, r.hc, from+i); err != nil {
				failed.Add(1)
			}
			return nil
		})
		if err := ctx.Err(); err != nil {
			return err
		}
		from = sh.Tenants
		time.Sleep(r.set.Settle)
		sh.Failed, sh.Mem = int(failed.Load()), readMem(r.edge.Pid())
		r.res.Shares = append(r.res.Shares, sh)
		fmt.Fprintf(os.Stderr, "bench: scale: %d tenants served (%d not 200), RSS %s\n", sh.Tenants, sh.Failed, figures.FmtKB(sh.Mem.RSS))
	}
	return nil
}

// cold times the first and second request of a sample of the tenants not served yet,
// one at a time over one kept-alive connection.
func (r *runner) cold(ctx context.Context) error {
	_, ten := r.set.shares()
	m := min(r.set.Sample, r.set.Tenants-ten)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	if _, err := r.get(ctx, hc, 0); err != nil { // the connection, with a tenant served before
		return fmt.Errorf("tenant %s, served before: %w", slug(0), err)
	}
	var first, second []time.Duration
	for _, k := range spread(ten, r.set.Tenants, m) {
		d1, err1 := r.get(ctx, hc, k)
		d2, err2 := r.get(ctx, hc, k)
		if err1 != nil || err2 != nil {
			r.res.ColdFailed++
			continue
		}
		first, second = append(first, d1), append(second, d2)
	}
	r.res.Cold, r.res.Second = figures.Summarize(first), figures.Summarize(second)
	fmt.Fprintf(os.Stderr, "bench: scale: first request of %d unserved tenants p50 %s p99 %s max %s (second p50 %s); %d failed\n",
		r.res.Cold.N, figures.FmtDur(r.res.Cold.P50), figures.FmtDur(r.res.Cold.P99), figures.FmtDur(r.res.Cold.Max), figures.FmtDur(r.res.Second.P50), r.res.ColdFailed)
	if r.res.Cold.N == 0 {
		return fmt.Errorf("none of %d unserved tenants answered 200", m)
	}
	return nil
}

// changes adds a route to tenant 0 and PUTs it to the other upstream, one change at a
// time, timing each from the api's 200 to the edge's first answer from that upstream.
func (r *runner) changes(ctx context.Context) error {
	const path = "/scale-probe"
	var cr harness.Created
	if err := r.Stack.Client.Call(ctx, "POST", "/v1/tenants/"+slug(0)+"/routes", harness.RouteBody("probe", path, r.Ups[0], "none", false), &cr); err != nil {
		return err
	}
	poll, err := probe.New(r.Stack.EdgeAddr, slug(0)+".localhost", path, r.LoadCPUs)
	if err != nil {
		return err
	}
	defer poll.Close()
	cur := 1 // so that the first "change" waits for the new route
	var api, edge []time.Duration
	for i := range r.set.Changes + 1 {
		next := 1 - cur
		put := func() error {
			return r.Stack.Client.CallMatch(ctx, "PUT", "/v1/tenants/"+slug(0)+"/routes/"+cr.ID, harness.RouteBody("probe", path, r.Ups[next], "none", false))
		}
		if i == 0 {
			put = func() error { return nil } // the route as created
		}
		a, e, failed, err := poll.Change(put, r.Answers[next], 250*time.Microsecond, 30*time.Second)
		if err != nil {
			return fmt.Errorf("route change %d: %w", i, err)
		}
		if i > 0 {
			api, edge = append(api, a), append(edge, e)
			r.res.ChangeFailed += failed
		}
		cur = next
		time.Sleep(50 * time.Millisecond)
	}
	r.res.ChangeAPI, r.res.Change = figures.Summarize(api), figures.Summarize(edge)
	fmt.Fprintf(os.Stderr, "bench: scale: route change 200 → new upstream p50 %s p99 %s max %s\n",
		figures.FmtDur(r.res.Change.P50), figures.FmtDur(r.res.Change.P99), figures.FmtDur(r.res.Change.Max))
	return nil
}
