package main

// Config at scale (README, "Benchmarks"):
//
//   - hotupdate: a route changed under load while a stack holds -hot-routes routes spread
//     over -hot-tenants tenants: from the api's 200 to the edge's first answer from the
//     new upstream, the calls that failed meanwhile, and the edge's RSS after the changes.
//   - cold: a fresh edge started against a bucket that already holds -cold-routes routes:
//     from exec to /readyz, to the first answer, and its RSS then.
//
// Routes go in through the fastest documented bulk path, PUT /v1/tenants/{slug}/config
// (config as code) without prune, in chunks that stay under the api's 1 MB body limit: a
// POST per route costs a transaction, an outbox row and a round trip each.

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/probe"
	"tollgate/e2e/bench/rateload"
	"tollgate/e2e/bench/tenantscale"

	"tollgate/tenants"
)

// intList is a comma-separated flag of positive integers.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out intList
	for _, f := range splitList(v) {
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return fmt.Errorf("empty list")
	}
	*l = out
	return nil
}

// scaleSettings are the flags of rss10k, hotupdate and cold.
type scaleSettings struct {
	rssRoutes             intList // rss10k: route counts, each loaded on top of the one before
	hotRoutes, hotTenants intList
	hotN, hotRate         int
	coldRoutes            int
	coldTenants, coldRuns int
	tenants               tenantscale.Settings // the scale scenario's -scale-* flags

	// What rss10k leaves for cold when the counts agree: its stack, its routes and the
	// time they took to load.
	rssStack *harness.Stack
	rssSet   *routeSet
	rssFill  time.Duration
}

func (c *scaleSettings) register(fs *flag.FlagSet) {
	c.rssRoutes, c.hotRoutes, c.hotTenants = intList{10000}, intList{5000, 50000}, intList{1, 1000}
	fs.Var(&c.rssRoutes, "rss-routes", "rss10k: route counts of one tenant, loaded one on top of the other (e.g. 10000,100000)")
	fs.Var(&c.hotRoutes, "hot-routes", "hotupdate: routes loaded (each count on top of the one before)")
	fs.Var(&c.hotTenants, "hot-tenants", "hotupdate: tenants the routes are spread over (a stack of its own for each)")
	fs.IntVar(&c.hotN, "hot-n", 100, "hotupdate: route changes timed per routes × tenants")
	fs.IntVar(&c.hotRate, "hot-rate", 1000, "hotupdate: requests per second to the changed route meanwhile (fixed-rate generator)")
	fs.IntVar(&c.coldRoutes, "cold-routes", 100000, "cold: routes in the bucket when the edge starts")
	fs.IntVar(&c.coldTenants, "cold-tenants", 10, "cold: tenants they are spread over (a tenant holds at most 50,000)")
	fs.IntVar(&c.coldRuns, "cold-runs", 3, "cold: fresh edges started one after the other")
	c.tenants.Register(fs)
}

func (c *scaleSettings) check() error {
	if c.hotN < 1 || c.hotRate < 1 || c.coldRoutes < 1 || c.coldTenants < 1 || c.coldRuns < 1 {
		return fmt.Errorf("-hot-n, -hot-rate, -cold-routes, -cold-tenants and -cold-runs must be at least 1")
	}
	// A platform plan holds at most tenants.MaxResources.Routes routes per tenant.
	maxPer := tenants.MaxResources.Routes
	if c.coldTenants > c.coldRoutes || (c.coldRoutes+c.coldTenants-1)/c.coldTenants > maxPer {
		return fmt.Errorf("-cold-tenants: %d routes over %d tenants: at most %d routes per tenant and a route for each", c.coldRoutes, c.coldTenants, maxPer)
	}
	if err := c.tenants.Check(); err != nil {
		return err
	}
	for _, n := range c.hotRoutes {
		for _, t := range c.hotTenants {
			if (n+t-1)/t > maxPer {
				return fmt.Errorf("-hot-routes %d over -hot-tenants %d: a tenant holds at most %d routes", n, t, maxPer)
			}
		}
	}
	return nil
}

// configChunk is how many routes one config apply carries: about 120 bytes each, so a
// chunk stays well under the api's 1 MB body limit.
const configChunk = 2000

// rssPerTenant is how many routes rss10k puts in a tenant (and cold's default, so cold
// can start from rss10k's bucket): every route a tenant gains is counted against its
// plan with a count of its routes, so loading one tenant's routes takes time quadratic
// in their number (50,000 take minutes here); 10,000 is a large API's size.
const rssPerTenant = 10_000

// bulkAPIEnv is the environment of an api that takes configChunk routes an apply: each
// insert counts the tenant's routes against its plan, so an apply into a tenant of 50,000
// routes outlasts the default TOLLGATE_DB_TIMEOUT (5s) on a loaded machine.
var bulkAPIEnv = []string{"TOLLGATE_DB_TIMEOUT=2m"}

// routeSet is routes spread over tenants slugs, named route-i at routePath(i): route i
// is in tenant i/per when per is set (blocks, so tenants can be added as the set grows),
// else round-robin in tenant i mod len(slugs).
type routeSet struct {
	slugs  []string
	per    int
	loaded int // routes 0..loaded-1 exist
	upURL  string
}

func (rs *routeSet) tenantOf(i int) int {
	if rs.per > 0 {
		return i / rs.per
	}
	return i % len(rs.slugs)
}

func (rs *routeSet) slugOf(i int) string { return rs.slugs[rs.tenantOf(i)] }

// hostOf is the virtual host of route i.
func (rs *routeSet) hostOf(i int) string { return rs.slugOf(i) + ".localhost" }

// newRouteSet creates n tenants named prefix-0…, workers at a time; per is routeSet's.
func (b *bench) newRouteSet(ctx context.Context, s *harness.Stack, prefix string, n, per int, upURL string) (*routeSet, error) {
	rs := &routeSet{per: per, upURL: upURL}
	return rs, b.addTenants(ctx, s, rs, prefix, n)
}

// addTenants creates tenants prefix-k… until rs has n of them.
func (b *bench) addTenants(ctx context.Context, s *harness.Stack, rs *routeSet, prefix string, n int) error {
	from := len(rs.slugs)
	for k := from; k < n; k++ {
		rs.slugs = append(rs.slugs, fmt.Sprintf("%s-%d", prefix, k))
	}
	return tenantscale.Parallel(ctx, n-from, b.workers, func(i int) error {
		_, err := s.Client.CreateTenant(ctx, rs.slugs[from+i])
		return err
	})
}

// fill creates routes rs.loaded..total-1 through config applies without prune, one
// tenant's chunks in order and up to 4 tenants at once (Postgres shares the machine).
func (b *bench) fill(ctx context.Context, s *harness.Stack, rs *routeSet, total int) (time.Duration, error) {
	start := time.Now()
	if total <= rs.loaded {
		return 0, nil
	}
	err := tenantscale.Parallel(ctx, len(rs.slugs), 4, func(j int) error {
		var chunk []map[string]any
		flush := func() error {
			if len(chunk) == 0 {
				return nil
			}
			doc := map[string]any{"version": 1, "tenant": rs.slugs[j], "routes": chunk}
			err := s.Client.CallRetry(ctx, "PUT", "/v1/tenants/"+rs.slugs[j]+"/config", doc)
			chunk = chunk[:0]
			return err
		}
		for i := rs.loaded; i < total; i++ {
			if rs.tenantOf(i) != j {
				continue
			}
			chunk = append(chunk, harness.RouteBody(fmt.Sprintf("route-%d", i), routePath(i), rs.upURL, "none", false))
			if len(chunk) == configChunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return flush()
	})
	if err != nil {
		return time.Since(start), err
	}
	rs.loaded = total
	return time.Since(start), nil
}

// served waits until the edge at base serves the last route of every tenant and a
// spread of 200 others: polling every one of 100,000 routes would take longer than
// loading them.
func (b *bench) served(ctx context.Context, s *harness.Stack, p *harness.Proc, base string, rs *routeSet) error {
	idx := map[int]bool{}
	last := map[int]int{} // tenant → its last route
	for i := rs.loaded - 1; i >= 0 && len(last) < len(rs.slugs); i-- {
		if _, ok := last[rs.tenantOf(i)]; !ok {
			last[rs.tenantOf(i)] = i
			idx[i] = true
		}
	}
	for k := range 200 {
		idx[k*rs.loaded/200] = true
	}
	byHost := map[string][]string{}
	for i := range idx {
		byHost[rs.hostOf(i)] = append(byHost[rs.hostOf(i)], routePath(i))
	}
	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return tenantscale.Parallel(ctx, len(hosts), 8, func(i int) error {
		return b.WaitServed(ctx, p, base, hosts[i], byHost[hosts[i]], nil)
	})
}

// ---------------------------------------------------------------------------------------
// hotupdate

// hotResult is one hotupdate run: a route changed hotN times under load.
type hotResult struct {
	routes, tenants int
	procs           int
	loadRate        int
	fill            time.Duration    // creating the routes added for this run
	served          time.Duration    // from the first create to the edge serving them
	api             figures.LatStats // PUT sent → 200
	edge            figures.LatStats // 200 → first answer from the new upstream
	changes         int
	underLoad       int   // changes made while the load ran
	failed          int64 // load requests not answered 200 during the run, plus polls
	sent            int64
	loadP99         float64 // µs
	late            int64   // load requests sent 5 ms or more behind schedule
	rssBefore       int64   // KB, idle after loading
	rssAfter        int64   // KB, after the changes
	err             string
}

// hotScenario runs hotupdate for every -hot-tenants value on a stack of its own, growing
// its routes through each -hot-routes value.
func (b *bench) hotScenario(ctx context.Context) ([]hotResult, error) {
	upPort, err := b.upstream(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.scenarioServices(ctx, []string{"S4"}); err != nil { // the second upstream
		return nil, err
	}
	ups := [2]string{fmt.Sprintf("http://127.0.0.1:%d", upPort), fmt.Sprintf("http://127.0.0.1:%d", b.CanaryPort)}
	answers := [2]string{"ok", s4Answer}
	counts := slices.Sorted(slices.Values(b.scale.hotRoutes))
	var out []hotResult
	for _, nt := range b.scale.hotTenants {
		// The api shares the load CPUs: the edge's CPUs are the edge's alone.
		s, err := b.NewStack(ctx, fmt.Sprintf("hot%d", nt), b.LoadCPUs, bulkAPIEnv...)
		if err != nil {
			return out, err
		}
		procs := b.cores[0]
		if err := s.StartEdge(ctx, procs, gatewayCPUs(procs)); err != nil {
			return out, err
		}
		base := "http://" + s.EdgeAddr
		rs, err := b.newRouteSet(ctx, s, "hot", nt, 0, ups[0])
		if err != nil {
			return out, err
		}
		// The changed route lives in tenant hot-0 beside that tenant's share of the routes.
		slug, host, path := rs.slugs[0], rs.slugs[0]+".localhost", "/hot-probe"
		var probe harness.Created
		if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("probe", path, ups[0], "none", false), &probe); err != nil {
			return out, err
		}
		cur := 0
		for _, n := range counts {
			r := hotResult{routes: n, tenants: nt, procs: procs, loadRate: b.scale.hotRate, changes: b.scale.hotN}
			start := time.Now()
			// n routes with the probe.
			if r.fill, err = b.fill(ctx, s, rs, n-1); err != nil {
				return out, fmt.Errorf("loading %d routes over %d tenants: %w", n, nt, err)
			}
			if err := b.served(ctx, s, s.Edge, base, rs); err != nil {
				return out, err
			}
			r.served = time.Since(start)
			fmt.Fprintf(os.Stderr, "bench: hotupdate: %d routes over %d tenant(s): applied in %s, served after %s\n",
				n, nt, r.fill.Round(time.Millisecond), r.served.Round(time.Millisecond))
			time.Sleep(time.Second)
			r.rssBefore = harness.RSSKB(s.Edge.Pid())
			cur, err = b.hotChanges(ctx, s, &r, slug, host, path, probe.ID, ups, answers, cur)
			out = append(out, r)
			if err != nil {
				return out, err
			}
			fmt.Fprintf(os.Stderr, "bench: hotupdate: %d routes, %d tenant(s): 200→new upstream p50 %s p99 %s max %s; failed %d of %d; RSS %s → %s\n",
				n, nt, figures.FmtDur(r.edge.P50), figures.FmtDur(r.edge.P99), figures.FmtDur(r.edge.Max), r.failed, r.sent, figures.FmtKB(r.rssBefore), figures.FmtKB(r.rssAfter))
		}
		s.StopEdge()
	}
	return out, nil
}

// hotChanges PUTs the probe route to the other upstream r.changes times while the load
// generator sends -hot-rate requests per second to it, timing each change from the api's
// 200 to the first answer of the new upstream. cur is the upstream the route has; the
// one it has at the end is returned.
func (b *bench) hotChanges(ctx context.Context, s *harness.Stack, r *hotResult, slug, host, path, id string, ups, answers [2]string, cur int) (int, error) {
	poll, err := probe.New(s.EdgeAddr, host, path, b.LoadCPUs)
	if err != nil {
		return cur, err
	}
	defer poll.Close()
	change := func() (api, edge time.Duration, err error) {
		next := 1 - cur
		put := func() error {
			return s.Client.CallMatch(ctx, "PUT", "/v1/tenants/"+slug+"/routes/"+id, harness.RouteBody("probe", path, ups[next], "none", false))
		}
		api, edge, failed, err := poll.Change(put, answers[next], 250*time.Microsecond, 30*time.Second)
		r.failed += int64(failed)
		if err != nil {
			return 0, 0, fmt.Errorf("changing the route to %s: %w", ups[next], err)
		}
		cur = next
		return api, edge, nil
	}
	// Three changes before the load: a warm-up, and an estimate (their median) of how long
	// the load must run. The window is bounded; changes past it are counted as not under load.
	var est [3]time.Duration
	for i := range est {
		a, e, err := change()
		if err != nil {
			return cur, err
		}
		est[i] = a + e
	}
	slices.Sort(est[:])
	r.failed = 0
	window := min(90*time.Second, max(5*time.Second, time.Duration(r.changes)*(2*est[1]+50*time.Millisecond)))
	spec := lgSpec{Addr: s.EdgeAddr, Phases: []rateload.Phase{
		{Name: "warmup", Duration: time.Second, Streams: []rateload.Stream{{Name: "probe", Host: host, Path: path, Rate: b.scale.hotRate}}},
		{Name: "changes", Duration: window, Streams: []rateload.Stream{{Name: "probe", Host: host, Path: path, Rate: b.scale.hotRate}}},
	}}
	type lgOut struct {
		res []rateload.Result
		err error
	}
	done := make(chan lgOut, 1)
	lgStart := time.Now()
	go func() {
		res, err := b.loadgen(ctx, spec, fmt.Sprintf("hotupdate-%d-%d", r.routes, r.tenants))
		done <- lgOut{res, err}
	}()
	time.Sleep(1500 * time.Millisecond) // past the warm-up
	loadEnd := lgStart.Add(time.Second + window)
	var apiLat, edgeLat []time.Duration
	var cerr error
	for range r.changes {
		a, e, err := change()
		if err != nil {
			cerr = err
			break
		}
		apiLat, edgeLat = append(apiLat, a), append(edgeLat, e)
		if time.Now().Before(loadEnd) {
			r.underLoad++
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.api, r.edge = figures.Summarize(apiLat), figures.Summarize(edgeLat)
	r.rssAfter = harness.RSSKB(s.Edge.Pid())
	lg := <-done
	if lg.err != nil {
		return cur, lg.err
	}
	for _, x := range lg.res {
		if x.Phase == "changes" {
			r.sent += x.Sent
			r.failed += x.Sent - x.OK
			r.loadP99, r.late = x.P99, x.Late
		}
	}
	if cerr != nil {
		r.err = cerr.Error()
	}
	return cur, cerr
}

// hotMarkdown renders the hotupdate runs.
func (r *report) hotMarkdown(s *strings.Builder) {
	if len(r.hot) == 0 {
		return
	}
	x0 := r.hot[0]
	s.WriteString("## Hot update at scale\n\n")
	fmt.Fprintf(s, "One route of tenant hot-0 PUT to the other of two upstreams %d times, one change at a time, while the bench's fixed-rate "+
		"generator sends %d req/s to that route (edge at GOMAXPROCS=%d on CPU %s; load, poller and api on CPU %s). "+
		"\"200 → new upstream\": from the api's 200 reaching the bench to the edge's first answer from the new upstream, polled every 250 µs "+
		"over a connection of its own; \"failed\": load requests and polls not answered 200 while the changes ran (must be 0); "+
		"\"late\": load requests the generator sent 5 ms or more behind schedule (the load CPU was short). "+
		"Routes were loaded with PUT /v1/tenants/{slug}/config (config as code, %d routes an apply, no prune).\n\n",
		x0.changes, x0.loadRate, x0.procs, gatewayCPUs(x0.procs), r.b.LoadCPUs, configChunk)
	s.WriteString("| routes | tenants | loaded in | served after | PUT → 200 p50 | 200 → new upstream p50 | p99 | max | under load | failed / sent | load p99 | RSS before | RSS after changes |\n")
	s.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.hot {
		fmt.Fprintf(s, "| %d | %d | %s | %s | %s | %s | %s | %s | %d/%d | %d / %d | %s | %s | %s |\n",
			x.routes, x.tenants, x.fill.Round(time.Millisecond), x.served.Round(time.Millisecond), figures.FmtDur(x.api.P50),
			figures.FmtDur(x.edge.P50), figures.FmtDur(x.edge.P99), figures.FmtDur(x.edge.Max), x.underLoad, x.edge.N, x.failed, x.sent,
			loadP99(x), figures.FmtKB(x.rssBefore), figures.FmtKB(x.rssAfter))
		if x.err != "" {
			fmt.Fprintf(s, "\n%d routes, %d tenants stopped: %s\n\n", x.routes, x.tenants, x.err)
		}
	}
	s.WriteString("\n")
}

func loadP99(x hotResult) string {
	if x.late > 0 {
		return fmt.Sprintf("%s (%d late)", figures.FmtUS(x.loadP99), x.late)
	}
	return figures.FmtUS(x.loadP99)
}

// ---------------------------------------------------------------------------------------
// cold

// coldResult is fresh edges started against a bucket of coldRoutes routes.
type coldResult struct {
	routes, tenants int
	procs           int
	fill            time.Duration
	reused          bool // the routes rss10k loaded
	runs            []coldRun
}

type coldRun struct {
	ready, first time.Duration // exec → /readyz 200; exec → first 200 from a route
	rss          int64         // KB, at the first answer
	rssIdle      int64         // KB, 2 s later
}

// coldScenario loads -cold-routes routes over -cold-tenants tenants with no edge
// running, then starts -cold-runs fresh edges one after the other, each with an empty
// spool directory (no config snapshot: the config comes from the bucket).
func (b *bench) coldScenario(ctx context.Context) (*coldResult, error) {
	upPort, err := b.upstream(ctx)
	if err != nil {
		return nil, err
	}
	res := &coldResult{routes: b.scale.coldRoutes, tenants: b.scale.coldTenants, procs: b.cores[0]}
	per := (b.scale.coldRoutes + b.scale.coldTenants - 1) / b.scale.coldTenants
	s, rs := b.scale.rssStack, b.scale.rssSet
	if s != nil && rs.loaded == b.scale.coldRoutes && len(rs.slugs) == b.scale.coldTenants && rs.per == per {
		// rss10k left the same routes in the same tenants: start from its bucket rather
		// than load them again (its one-route tenant is there too).
		s.StopEdge()
		res.fill, res.reused = b.scale.rssFill, true
	} else {
		if s, err = b.NewStack(ctx, "cold", "", bulkAPIEnv...); err != nil {
			return nil, err
		}
		if rs, err = b.newRouteSet(ctx, s, "cold", b.scale.coldTenants, per, fmt.Sprintf("http://127.0.0.1:%d", upPort)); err != nil {
			return res, err
		}
		if res.fill, err = b.fill(ctx, s, rs, b.scale.coldRoutes); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: cold: %d routes over %d tenant(s) applied in %s\n", b.scale.coldRoutes, b.scale.coldTenants, res.fill.Round(time.Millisecond))
	// The last route applied, so an answer means the whole bucket was read.
	last := rs.loaded - 1
	host, path := rs.hostOf(last), routePath(last)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	for k := range b.scale.coldRuns {
		spool := filepath.Join(s.Dir, fmt.Sprintf("cold-spool-%d", k))
		env := s.Env("TOLLGATE_METER_SPOOL_DIR="+spool, fmt.Sprintf("GOMAXPROCS=%d", res.procs))
		t0 := time.Now()
		p, err := harness.StartProc(fmt.Sprintf("tollgate edge (cold start %d)", k+1), filepath.Join(s.Dir, fmt.Sprintf("edge-cold-%d.log", k)),
			gatewayCPUs(res.procs), env, s.EdgeArgv()...)
		if err != nil {
			return res, err
		}
		b.Clean.Add(p.Stop)
		var run coldRun
		err = harness.WaitFor(ctx, "cold edge /readyz", b.ReadyTimeout, 2*time.Millisecond, p, answers200(ctx, hc, "http://"+s.EdgeAdmin, "", "/readyz"))
		if err != nil {
			p.Stop()
			return res, err
		}
		run.ready = time.Since(t0)
		err = harness.WaitFor(ctx, "cold edge to serve "+host+path, b.ReadyTimeout, 2*time.Millisecond, p, answers200(ctx, hc, "http://"+s.EdgeAddr, host, path))
		if err != nil {
			p.Stop()
			return res, err
		}
		run.first = time.Since(t0)
		run.rss = harness.RSSKB(p.Pid())
		time.Sleep(2 * time.Second)
		run.rssIdle = harness.RSSKB(p.Pid())
		hc.CloseIdleConnections()
		p.Stop()
		res.runs = append(res.runs, run)
		fmt.Fprintf(os.Stderr, "bench: cold: start %d: ready after %s, first answer after %s, RSS %s (%s 2 s later)\n",
			k+1, figures.FmtDur(run.ready), figures.FmtDur(run.first), figures.FmtKB(run.rss), figures.FmtKB(run.rssIdle))
	}
	return res, nil
}

func reusedNote(reused bool) string {
	if reused {
		return " (by rss10k, whose one-route tenant is in the bucket too)"
	}
	return ""
}

func (r *report) coldMarkdown(s *strings.Builder) {
	c := r.cold
	if c == nil || len(c.runs) == 0 {
		return
	}
	s.WriteString("## Cold start from the bucket\n\n")
	fmt.Fprintf(s, "A fresh edge (GOMAXPROCS=%d on CPU %s, empty spool directory, so no config snapshot) started against a bucket holding "+
		"%d routes over %d tenant(s), loaded before with PUT /v1/tenants/{slug}/config in %s%s. Times from exec; "+
		"\"first answer\" is the last route loaded answering 200.\n\n",
		c.procs, gatewayCPUs(c.procs), c.routes, c.tenants, c.fill.Round(time.Millisecond), reusedNote(c.reused))
	s.WriteString("| start | /readyz 200 after | first answer after | RSS then | RSS 2 s later |\n|---:|---:|---:|---:|---:|\n")
	for i, x := range c.runs {
		fmt.Fprintf(s, "| %d | %s | %s | %s | %s |\n", i+1, figures.FmtDur(x.ready), figures.FmtDur(x.first), figures.FmtKB(x.rss), figures.FmtKB(x.rssIdle))
	}
	s.WriteString("\n")
}

// answers200 is a check for waitFor: base answers GET path on host with a 200.
func answers200(ctx context.Context, hc *http.Client, base, host, path string) func() error {
	return func() error {
		code, err := harness.EdgeStatus(ctx, hc, base, host, path, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		return err
	}
}

// heapInuseKB reads go_memstats_heap_inuse_bytes from an edge's /metrics (0 when it cannot).
func heapInuseKB(b *bench, admin string) int64 {
	return int64(b.ScrapeMetrics(admin)["go_memstats_heap_inuse_bytes"]) / 1024
}

// ---------------------------------------------------------------------------------------
// scale

// tenantScale runs the scale scenario (e2e/bench/tenantscale) on a stack of its own, its
// api anywhere (the writes are measured) and its edge on the gateway's CPUs.
func (b *bench) tenantScale(ctx context.Context) (*tenantscale.Result, error) {
	upPort, err := b.upstream(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.scenarioServices(ctx, []string{"S4"}); err != nil { // the second upstream
		return nil, err
	}
	s, err := b.NewStack(ctx, "scale", "", bulkAPIEnv...)
	if err != nil {
		return nil, err
	}
	env := slices.Clone(b.EdgeEnv)
	if b.MeterOff {
		env = append(env, "TOLLGATE_METER=off")
	}
	procs := b.cores[0]
	return tenantscale.Run(ctx, tenantscale.Setup{
		Env: b.Env, Stack: s, Procs: procs, CPUs: gatewayCPUs(procs), LoadCPUs: b.LoadCPUs, EdgeEnv: env,
		Ups:     [2]string{fmt.Sprintf("http://127.0.0.1:%d", upPort), fmt.Sprintf("http://127.0.0.1:%d", b.CanaryPort)},
		Answers: [2]string{"ok", s4Answer},
	}, b.scale.tenants)
}
