package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/infra/testenv"
)

// Flow control end to end: two edge processes sharing the machine's Redis (under a key
// prefix of the test's own, deleted at the end), driven by a paced load that alternates
// between them.

const redisAddr = "127.0.0.1:6379"

// redisPrefix returns a key prefix for the test and deletes its keys when the test ends.
func redisPrefix(t *testing.T) string {
	t.Helper()
	prefix := testenv.RedisPrefix(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		t.Fatalf("Redis at %s: %v (bash .ci/services starts it)", redisAddr, err)
	}
	t.Cleanup(func() {
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var keys []string
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scanning Redis keys %s:*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("deleting Redis keys %s:*: %v", prefix, err)
			}
		}
	})
	return prefix
}

// limitEdge is one edge process of a flow-control test.
type limitEdge struct {
	name   string
	p      *proc
	client *edgeClient
	admin  string
	env    []string
}

// startLimitEdge starts an edge of the stack on addresses of its own (a stack's
// startEdge uses the stack's one pair), with extra environment.
func (s *stack) startLimitEdge(name string, extra ...string) *limitEdge {
	t := s.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		pub, adm := freeAddr(t), freeAddr(t)
		env := s.env(append([]string{"TOLLGATE_EDGE_ADDR=" + pub, "TOLLGATE_EDGE_ADMIN_ADDR=" + adm,
			"TOLLGATE_EDGE_ID=" + name}, extra...)...)
		p := startProc(t, fmt.Sprintf("%s@%s", name, pub), []string{"edge"}, env)
		err := p.waitReady("http://"+adm+"/readyz", readyTimeout)
		if err == nil {
			p.addr, p.adminAddr = pub, adm
			return &limitEdge{name: name, p: p, client: newEdgeClient(pub), admin: adm, env: env}
		}
		if p.bindFailed() && attempt < 5 {
			continue
		}
		t.Fatalf("%s did not become ready: %v (its output is below)", name, err)
	}
}

// restart stops the edge cleanly and starts it again on the same addresses.
func (e *limitEdge) restart(t *testing.T) {
	t.Helper()
	e.p.stopClean(t, stopTimeout)
	e.client.close()
	p := startProc(t, fmt.Sprintf("%s@%s (restarted)", e.name, e.p.addr), []string{"edge"}, e.env)
	if err := p.waitReady("http://"+e.admin+"/readyz", readyTimeout); err != nil {
		t.Fatalf("%s did not come back: %v", e.name, err)
	}
	p.addr, p.adminAddr = e.p.addr, e.admin
	e.p, e.client = p, newEdgeClient(p.addr)
}

// limiterState is the limiter part of the edge's /readyz.
type limiterState struct {
	Mode      string `json:"mode"`
	Degraded  bool   `json:"degraded"`
	LiveEdges int    `json:"live_edges"`
	LastError string `json:"last_error"`
}

func (e *limitEdge) limiter() (limiterState, error) {
	var body struct {
		Status  string       `json:"status"`
		Limiter limiterState `json:"limiter"`
	}
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + e.admin + "/readyz")
	if err != nil {
		return body.Limiter, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return body.Limiter, fmt.Errorf("/readyz %d %s", resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &body); err != nil || body.Limiter.Mode == "" {
		return body.Limiter, fmt.Errorf("/readyz has no limiter state: %s", raw)
	}
	return body.Limiter, nil
}

// waitCluster waits until every edge limits cluster-wide and counts them all.
func waitCluster(t *testing.T, edges ...*limitEdge) {
	t.Helper()
	eventually(t, 10*time.Second, "every edge in cluster mode, seeing the others", func() error {
		for _, e := range edges {
			st, err := e.limiter()
			if err != nil {
				return err
			}
			if st.Mode != "cluster" || st.LiveEdges != len(edges) {
				return fmt.Errorf("%s: mode %s, %d live edges (%s)", e.name, st.Mode, st.LiveEdges, st.LastError)
			}
		}
		return nil
	})
}

// ---------------------------------------------------------------------------------------
// Paced load

// shot is one request of a paced load.
type shot struct {
	at      time.Duration // scheduled, from the start
	sent    time.Duration // actually sent, from the start
	edge    int
	status  int // 0: transport error
	code    string
	latency time.Duration
	err     error
}

// pacedLoad sends GET slug path at rate requests per second for d, request i to edge
// i mod len(edges) at start + i/rate whatever the previous ones are doing (an open loop,
// so a slow answer does not slow the load), and returns every request's outcome.
func pacedLoad(t *testing.T, edges []*limitEdge, rate int, d time.Duration, slug, path string, header ...string) []shot {
	t.Helper()
	n := int(d.Seconds() * float64(rate))
	period := time.Second / time.Duration(rate)
	shots := make([]shot, n)
	jobs := make(chan int, n)
	var wg sync.WaitGroup
	start := time.Now().Add(5 * time.Millisecond)
	for range 32 {
		wg.Go(func() {
			for i := range jobs {
				s := &shots[i]
				e := edges[s.edge]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				t0 := time.Now()
				s.sent = t0.Sub(start)
				r, err := e.client.doCtx(ctx, "GET", slug, path, header...)
				s.latency = time.Since(t0)
				cancel()
				if err != nil {
					s.err = err
					continue
				}
				s.status = r.Status
				if r.Status != 200 {
					var env struct {
						Error struct{ Code string }
					}
					_ = json.Unmarshal(r.Body, &env)
					s.code = env.Error.Code
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		at := time.Duration(i) * period
		if w := time.Until(start.Add(at)); w > 0 {
			time.Sleep(w)
		}
		shots[i].at, shots[i].edge = at, i%len(edges)
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return shots
}

// gcraAdmits is how many of shots one GCRA of rate per second and burst would admit,
// given when they were actually sent: what a perfect cluster-wide limiter admits of this
// very load, stalls of the (shared, busy) machine included.
func gcraAdmits(shots []shot, rate, burst int) int {
	return gcraAt(shots, rate, burst, func(s shot) time.Duration { return s.sent })
}

func gcraAt(shots []shot, rate, burst int, when func(shot) time.Duration) int {
	sent := make([]time.Duration, len(shots))
	for i, s := range shots {
		sent[i] = when(s)
	}
	slices.Sort(sent)
	t := time.Second / time.Duration(rate)
	tau := t * time.Duration(burst)
	tat, n := time.Duration(-1<<62), 0
	for _, now := range sent {
		next := max(tat, now) + t
		if next-now <= tau {
			tat = next
			n++
		}
	}
	return n
}

// tally counts outcomes by status and code, within [from, to) of the schedule.
type tally struct {
	ok, limited, other, serverErr, transport int
	perEdge                                  []int // 200s by edge
	p50, maxLatency                          time.Duration
	stalled                                  int // requests that took 450 ms or more
	examples                                 []string
}

func count(shots []shot, edges int, from, to time.Duration) tally {
	tl := tally{perEdge: make([]int, edges)}
	var lats []time.Duration
	for _, s := range shots {
		if s.at < from || s.at >= to {
			continue
		}
		lats = append(lats, s.latency)
		tl.maxLatency = max(tl.maxLatency, s.latency)
		if s.latency >= 450*time.Millisecond {
			tl.stalled++
		}
		switch {
		case s.err != nil:
			tl.transport++
		case s.status == 200:
			tl.ok++
			tl.perEdge[s.edge]++
			continue
		case s.status == 429 && (s.code == "rate_limited" || s.code == "quota_exceeded"):
			tl.limited++
			continue
		case s.status >= 500:
			tl.serverErr++
		default:
			tl.other++
		}
		if len(tl.examples) < 5 {
			tl.examples = append(tl.examples, fmt.Sprintf("at %s on edge %d: status %d %s %v", s.at.Round(time.Millisecond), s.edge, s.status, s.code, s.err))
		}
	}
	if len(lats) > 0 {
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		tl.p50 = lats[len(lats)/2]
	}
	return tl
}

func (tl tally) String() string {
	return fmt.Sprintf("200: %d (per edge %v), 429: %d, 5xx: %d, other: %d, transport errors: %d, latency p50 %s max %s",
		tl.ok, tl.perEdge, tl.limited, tl.serverErr, tl.other, tl.transport, tl.p50.Round(100*time.Microsecond), tl.maxLatency.Round(time.Millisecond))
}

// ---------------------------------------------------------------------------------------
// Tests

// limitStack is an api and two edges sharing Redis (or whatever redisURL names), with
// extra environment for the edges.
func limitStack(t *testing.T, redisURL string, extra ...string) (*stack, *apiClient, []*limitEdge) {
	t.Helper()
	s := newStack(t)
	_, api := s.startAPI()
	env := append([]string{"TOLLGATE_REDIS_URL=" + redisURL, "TOLLGATE_REDIS_PREFIX=" + redisPrefix(t)}, extra...)
	edges := []*limitEdge{s.startLimitEdge("edge-a", env...), s.startLimitEdge("edge-b", env...)}
	for _, e := range edges {
		t.Cleanup(e.client.close)
	}
	return s, api, edges
}

// settle waits until every edge serves slug path (the first answer that is not 404),
// then lets the route's bucket refill.
func settle(t *testing.T, edges []*limitEdge, slug, path string, refill time.Duration, header ...string) {
	t.Helper()
	for _, e := range edges {
		eventually(t, applyDeadline, e.name+" serves "+path, func() error {
			r, err := e.client.do("GET", slug, path, header...)
			if err != nil {
				return err
			}
			if r.Status != 200 && r.Status != 429 {
				return fmt.Errorf("%s", r)
			}
			return nil
		})
	}
	time.Sleep(refill)
}

// TestLimitClusterRate: a route limited to 100 requests/s, driven at 300/s for 10 s
// across two edges (alternating), admits 100/s across the fleet: in exact mode no more
// than the README's r·w + b (1,010 for burst 10) and no fewer than 98% of r·w; in
// approximate mode no more than the documented bound (edge/limit/doc.go:
// r·w + b + (E−1)·(b + 2·r·I'), with I' = 100 ms sync + 50 ms timeout: 1,070) and no
// fewer than 95% of the rate. The upper bounds have no slack: w is the window the edges
// could have seen the admitted requests in (admittedSpan), which is the 10 s of the
// schedule unless the machine held the load back.
func TestLimitClusterRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  string
		burst int
	}{{"exact", 10}, {"approximate", 20}} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			// A generous Redis timeout: this test is about counting, and on a shared
			// 2-core machine a Redis call may take longer than the default 50 ms, which
			// would hand the decision to the local fallback (TestLimitRedisFault's part).
			_, api, es := limitStack(t, "redis://"+redisAddr, "TOLLGATE_REDIS_TIMEOUT=1s")
			up := echoUpstream(t, "up")
			api.createTenant("rl")
			// A run the machine visibly disturbed (answers held 100 ms or more) is
			// measured once more on a fresh route; the second run is the verdict.
			for attempt := 1; ; attempt++ {
				path := fmt.Sprintf("/limited%d", attempt)
				ok, tl, msg := measureClusterRate(t, api, es, up.URL, path, tc.mode, tc.burst)
				if ok {
					break
				}
				if attempt == 1 && tl.maxLatency >= 100*time.Millisecond {
					t.Logf("attempt 1 disturbed (answers held up to %s): %s; measuring again", tl.maxLatency.Round(time.Millisecond), msg)
					continue
				}
				t.Fatal(msg)
			}
		})
	}
}

// measureClusterRate drives a fresh route limited to 100/s at 300/s for 10 s across the
// edges and judges the count; it returns whether the count is within bounds.
func measureClusterRate(t *testing.T, api *apiClient, es []*limitEdge, upURL, path, mode string, burst int) (bool, tally, string) {
	t.Helper()
	const (
		rate  = 100
		load  = 300
		edges = 2
		w     = 10 * time.Second
	)
	tc := struct {
		mode  string
		burst int
	}{mode, burst}
	api.createRoute("rl", routeSpec("limited"+path[len("/limited"):], path, upURL, "none",
		"rate_limit", map[string]any{"rps": rate, "burst": tc.burst, "mode": tc.mode}))
	waitCluster(t, es...)
	settle(t, es, "rl", path, 500*time.Millisecond)

	shots := pacedLoad(t, es, load, w, "rl", path)
	tl := count(shots, edges, 0, w)
	t.Logf("%s, limit %d/s burst %d, %d/s for %s over %d edges: %s", tc.mode, rate, tc.burst, load, w, edges, tl)
	for _, e := range es {
		t.Logf("%s: %s", e.name, strings.ReplaceAll(grepLines(scrape(t, e.admin), "tollgate_limit_redis"), "\n", ", "))
	}
	if tl.serverErr+tl.other+tl.transport > 0 {
		t.Fatalf("requests failed: %v", tl.examples)
	}
	want := rate * int(w/time.Second)
	// What one perfect limiter admits of the load as it was actually sent: 1,009
	// for an undisturbed run at burst 10 (1,019 at 20); less when the machine stalled the load generator
	// for longer than a burst's worth (the edges cannot admit what was not sent).
	ideal := gcraAdmits(shots, rate, tc.burst)
	t.Logf("a single GCRA would admit %d of this load as sent", ideal)
	// The upper bounds are the README's, with no slack: r·w + b in exact mode (the
	// edges share this machine's clock, so no skew adds to it), the documented worst
	// case in approximate mode. w is the schedule's 10 s unless the edges could have
	// seen the admitted requests over a longer span (a stalled generator, answers held
	// back): a limiter is only bound to r·w + b over the window it was offered. The
	// lower bound follows the load as sent: the edges cannot admit what a stalled
	// generator did not send.
	seen := max(w, admittedSpan(shots))
	lo, hi := want*98/100, int(rate*seen.Seconds())+tc.burst
	if seen > w {
		t.Logf("the admitted requests reached the edges over %s, not %s: r·w + b = %d", seen.Round(time.Millisecond), w, hi)
	}
	if ideal < lo {
		t.Logf("the load generator was stalled: at least %d (a single GCRA's %d − 2%%)", ideal-want*2/100, ideal)
		lo = ideal - want*2/100
	}
	if tc.mode == "approximate" {
		iPrime := 0.15
		hi += (edges - 1) * (tc.burst + int(2*rate*iPrime))
		lo = min(want, ideal) * 95 / 100
	}
	if tl.ok < lo || tl.ok > hi {
		return false, tl, fmt.Sprintf("%s mode admitted %d, want %d..%d", tc.mode, tl.ok, lo, hi)
	}
	return true, tl, ""
}

// admittedSpan is the longest span over which the edges could have read their clocks for
// the admitted requests: from the earliest one's sending to the latest one's answer. A
// GCRA that starts full admits at most r·W + b requests stamped within W.
func admittedSpan(shots []shot) time.Duration {
	first, last := time.Duration(1<<62), time.Duration(0)
	for _, s := range shots {
		if s.status != 200 {
			continue
		}
		first, last = min(first, s.sent), max(last, s.sent+s.latency)
	}
	return max(last-first, 0)
}

// flakyProxy is a TCP proxy in front of Redis that the test can slow down or cut, so the
// machine's Redis (which other tests share) keeps running.
type flakyProxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32 // 0 pass, 1 slow (500 ms per chunk), 2 cut
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

const (
	proxyPass = iota
	proxySlow
	proxyCut
)

func newFlakyProxy(t *testing.T, target string) *flakyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.set(proxyCut)
	})
	return p
}

func (p *flakyProxy) addr() string { return p.ln.Addr().String() }

// set changes the mode; cutting closes every open connection.
func (p *flakyProxy) set(mode int32) {
	p.mode.Store(mode)
	if mode == proxyCut {
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	}
}

func (p *flakyProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *flakyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.mode.Load() == proxyCut {
			c.Close()
			continue
		}
		go p.pipe(c)
	}
}

func (p *flakyProxy) pipe(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.track(c, true)
	p.track(s, true)
	defer func() {
		p.track(c, false)
		p.track(s, false)
		c.Close()
		s.Close()
	}()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if p.mode.Load() == proxySlow {
					time.Sleep(500 * time.Millisecond)
				}
				if p.mode.Load() == proxyCut {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go cp(s, c)
	go cp(c, s)
	<-done
}

// TestLimitRedisFault: Redis slow (500 ms), then unreachable, then back, under load
// across two edges. No request gets a 5xx or waits on Redis; the edges say they are
// degraded (/readyz detail) and keep limiting at their local share (100/s ÷ 2 each);
// when Redis is back they return to cluster mode by themselves.
func TestLimitRedisFault(t *testing.T) {
	t.Parallel()
	proxy := newFlakyProxy(t, redisAddr)
	// 150 ms rather than the default 50 ms: on a busy 2-core machine a healthy Redis call
	// can take 50 ms, and this test is about Redis being 500 ms slow or gone.
	_, api, es := limitStack(t, "redis://"+proxy.addr(), "TOLLGATE_REDIS_TIMEOUT=150ms")
	up := echoUpstream(t, "up")
	api.createTenant("fault")
	api.createRoute("fault", routeSpec("limited", "/limited", up.URL, "none",
		"rate_limit", map[string]any{"rps": 100, "burst": 10, "mode": "exact"}))
	waitCluster(t, es...)
	settle(t, es, "fault", "/limited", 300*time.Millisecond)

	// Watch the edges' state while the load runs.
	var (
		mu          sync.Mutex
		degradedAt  = map[string][]time.Duration{} // when each edge was seen degraded
		stopWatch   = make(chan struct{})
		watchDone   = make(chan struct{})
		start       = time.Now()
		phaseChange = func(mode int32, after time.Duration) {
			time.Sleep(time.Until(start.Add(after)))
			proxy.set(mode)
		}
	)
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, e := range es {
				if st, err := e.limiter(); err == nil && st.Degraded {
					mu.Lock()
					degradedAt[e.name] = append(degradedAt[e.name], time.Since(start))
					mu.Unlock()
				}
			}
		}
	}()
	// Phases of the 9 s load: [0,2) healthy, [2,4) slow, [4,7) cut, [7,9) back.
	go func() {
		phaseChange(proxySlow, 2*time.Second)
		phaseChange(proxyCut, 4*time.Second)
		phaseChange(proxyPass, 7*time.Second)
	}()
	shots := pacedLoad(t, es, 200, 9*time.Second, "fault", "/limited")
	close(stopWatch)
	<-watchDone

	all := count(shots, 2, 0, 9*time.Second)
	t.Logf("whole run: %s", all)
	for _, ph := range []struct {
		name     string
		from, to time.Duration
	}{{"healthy", 0, 2 * time.Second}, {"slow", 2 * time.Second, 4 * time.Second}, {"cut", 4 * time.Second, 7 * time.Second}, {"back", 7 * time.Second, 9 * time.Second}} {
		tl := count(shots, 2, ph.from, ph.to)
		t.Logf("%-7s %s", ph.name, tl)
		// A request waits on Redis at most the limiter's timeout, and only until the
		// breaker opens (3 failures); waiting on the slow Redis would make most requests
		// of the phase take 500 ms. A few slow ones are the shared machine pausing a
		// process (more so in race builds), not Redis: they are bounded as a share.
		n := tl.ok + tl.limited + tl.other + tl.serverErr + tl.transport
		if tl.stalled > 2+n/10 || tl.p50 > 100*time.Millisecond {
			t.Errorf("%s: %d requests took 450 ms or more, median %s: Redis trouble must not stall requests", ph.name, tl.stalled, tl.p50)
		}
		if ph.name == "cut" {
			// Local shares: 50/s at each edge, bursts of 5: about 100/s in all.
			secs := int((ph.to - ph.from) / time.Second)
			if tl.ok > 100*secs*13/10+2*10 || tl.ok < 100*secs*7/10 {
				t.Errorf("while Redis was unreachable the edges admitted %d in %ds, want about %d (the limit at local shares)", tl.ok, secs, 100*secs)
			}
		}
	}
	if all.serverErr+all.transport+all.other > 0 {
		t.Fatalf("requests failed while Redis was in trouble: %v", all.examples)
	}
	mu.Lock()
	for _, e := range es {
		seen := false
		for _, at := range degradedAt[e.name] {
			// Well inside the cut: the breaker opened in the slow phase or at the cut.
			seen = seen || at > 4500*time.Millisecond && at < 7*time.Second
		}
		if !seen {
			t.Errorf("%s did not report degraded in /readyz while Redis was cut (seen degraded at %v)", e.name, degradedAt[e.name])
		}
	}
	mu.Unlock()
	// Back to cluster mode by itself.
	waitCluster(t, es...)
	for _, e := range es {
		metrics := scrape(t, e.admin)
		if !strings.Contains(metrics, "tollgate_limit_degraded 0") || strings.Contains(metrics, "tollgate_limit_mode_changes_total 0") {
			t.Errorf("%s /metrics does not show the episode:\n%s", e.name, grepLines(metrics, "tollgate_limit_"))
		}
	}
}

// TestLimitQuotaExact: a consumer plan's monthly quota of N admits exactly N across two
// edges and a restart of one of them, then answers 429 quota_exceeded.
func TestLimitQuotaExact(t *testing.T) {
	t.Parallel()
	const quota = 40
	// A generous Redis timeout, as in TestLimitClusterRate: an exact call that times out
	// on a loaded machine may have counted in Redis while the edge decided locally, which
	// errs toward admitting fewer than N; this test is about the count, not the fallback.
	_, api, es := limitStack(t, "redis://"+redisAddr, "TOLLGATE_REDIS_TIMEOUT=1s")
	up := echoUpstream(t, "up")
	api.createTenant("quota")
	api.must(201, "POST", "/v1/tenants/quota/plans", map[string]any{"name": "trial", "quota": map[string]any{"requests": quota}, "mode": "exact"})
	consumer := str(t, api.must(201, "POST", "/v1/tenants/quota/consumers", map[string]any{"name": "c", "plan": "trial"}), "id")
	_, key := api.createKey("quota", consumer)
	// The quota is probed through an unlimited route first, so the polling does not
	// spend it; then the metered route is created.
	api.createRoute("quota", routeSpec("probe", "/probe", up.URL, "none"))
	for _, e := range es {
		eventually(t, applyDeadline, e.name+" serves /probe", served(e.client, "quota", "/probe", ""))
	}
	api.createRoute("quota", routeSpec("metered", "/metered", up.URL, "key"))
	for _, e := range es {
		eventually(t, applyDeadline, e.name+" knows /metered", func() error {
			r, err := e.client.do("GET", "quota", "/metered")
			if err != nil {
				return err
			}
			return checkEnvelope(r, 401, "unauthenticated") // routed, and no key sent
		})
	}
	waitCluster(t, es...)

	admitted, refused := 0, 0
	call := func(n int) {
		for i := 0; i < n; i++ {
			e := es[i%2]
			r := e.client.get(t, "quota", "/metered", "X-API-Key", key)
			switch {
			case r.Status == 200:
				admitted++
				if got, want := r.Header.Get("RateLimit-Remaining"), fmt.Sprint(quota-admitted); got != want {
					t.Errorf("request %d on %s: RateLimit-Remaining %s, want %s", admitted, e.name, got, want)
				}
			case checkEnvelope(r, 429, "quota_exceeded") == nil:
				refused++
				if r.Header.Get("Retry-After") == "" {
					t.Errorf("429 without Retry-After")
				}
			default:
				t.Fatalf("%s: %s", e.name, r)
			}
		}
	}
	call(25)
	if admitted != 25 {
		t.Fatalf("admitted %d of the first 25", admitted)
	}
	es[0].restart(t)
	waitCluster(t, es...)
	call(30)
	if admitted != quota || refused != 55-quota {
		t.Fatalf("admitted %d, refused %d; want exactly %d admitted", admitted, refused, quota)
	}
}

// TestPlatformPlanAtEdge: a tenant's platform plan limits it at the edge, and a change of
// the plan through PUT /v1/platform/plans/{name} reaches the edge by itself.
func TestPlatformPlanAtEdge(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")
	api.must(200, "PUT", "/v1/platform/plans/e2e-gold", map[string]any{"rate_limit": map[string]any{"rpm": 60, "burst": 3}}, "If-Match", "*")
	api.must(201, "POST", "/v1/tenants", map[string]any{"slug": "gold", "plan": "e2e-gold"})
	api.createRoute("gold", routeSpec("r", "/r", up.URL, "none"))
	eventually(t, applyDeadline, "the route is limited by the tenant's plan", func() error {
		r, err := edge.do("GET", "gold", "/r")
		if err != nil {
			return err
		}
		if r.Header.Get("RateLimit-Limit") != "3" {
			return fmt.Errorf("RateLimit-Limit %q: %s", r.Header.Get("RateLimit-Limit"), r)
		}
		return nil
	})
	for i := 0; i < 3; i++ {
		edge.get(t, "gold", "/r")
	}
	wantEnvelope(t, edge.get(t, "gold", "/r"), 429, "rate_limited")

	api.must(200, "PUT", "/v1/platform/plans/e2e-gold", map[string]any{"rate_limit": map[string]any{"rpm": 60, "burst": 50}, "version": 1})
	eventually(t, applyDeadline, "the plan change reaches the edge", func() error {
		r, err := edge.do("GET", "gold", "/r")
		if err != nil {
			return err
		}
		if r.Header.Get("RateLimit-Limit") != "50" {
			return fmt.Errorf("RateLimit-Limit %q: %s", r.Header.Get("RateLimit-Limit"), r)
		}
		return nil
	})
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
