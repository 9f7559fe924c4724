// Package soak is the bench's soak scenario: the api, billing and one metered edge,
// driven for the whole -duration (10 min unless given) by what a fleet lives with at
// once: mixed traffic at a fixed rate over three tenants (GETs and small POSTs, key auth
// and JWT, a share of 4xx: a wrong key, a path with no route, a policy denial, an
// upstream's own 404), a route change every second and a key rotation every few seconds
// with the clients switching keys. It samples the edge's memory, goroutines and open
// files and the p99 of every minute, so drift shows as start against end, and at the end
// checks that billing folded exactly what the clients were served.
//
// The load is generated in the bench's own process rather than the pinned child the
// other fixed-rate scenarios use: the clients must switch to each new key as the
// rotation issues it.
package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

const (
	DefaultDuration    = 10 * time.Minute // -duration unless given
	soakRouteEvery     = time.Second      // a route change through the api
	soakRotateEvery    = 5 * time.Second  // a key rotation, the tenants in turn
	soakSampleEvery    = 10 * time.Second // the edge's /metrics
	soakUpstreamHeader = "X-Soak-Upstream"
	soakWrongKey       = "tg_soak_not_a_key"
)

// soakKind is one kind of request of the mix.
type soakKind struct {
	name   string
	tenant string // slug
	method string
	path   func(i int) string
	auth   string // "key" (the tenant's current key), "wrong", "jwt" or ""
	body   string
	weight int
	want   int // the status it should get
	note   string
}

// soakSample is one reading of the edge's /metrics.
type soakSample struct {
	at                         time.Duration // since the load started
	rss, heap, goroutines, fds float64
	meterRequests              float64 // tollgate_meter_requests_total
	load1                      float64 // the machine's 1-minute load average
	clientConns                int     // the bench's open connections to the edge
}

// soakMinute is one minute of the load: its answers' latencies and the last sample in it.
type soakMinute struct {
	n, errors     int64
	p50, p99, max float64 // µs
	sample        *soakSample
}

// soakCounts is what the clients saw of one tenant, counted as the meter counts: every
// answer of a known tenant is a request; billable when the upstream produced it.
type soakCounts struct{ requests, billable int64 }

type soakTenantResult struct {
	slug           string
	served, folded soakCounts
}

type Result struct {
	duration      time.Duration
	rate          int
	kinds         []soakKind
	kindStats     []soakKindStats
	idle          *soakSample // before the load
	samples       []soakSample
	minutes       []soakMinute
	statuses      map[int]int64
	sent, late    int64
	socketErrors  int64
	fiveXX        int64
	routeChanges  int
	routeErrors   []string
	rotations     int
	rotateErrors  []string
	newKeyServed  []time.Duration // key created → the edge answers 200 with it
	oldKeyRefused []time.Duration // key revoked → the edge answers 401 with it
	tenants       []soakTenantResult
	meterRequests float64 // the edge's own count of metered requests at the end
	settled       time.Duration
	goroutines    []goroutineGroup // the edge's largest goroutine groups at the end
	billedEqual   bool
}

// soakTally counts the answers of every request the bench sends to the edge (load,
// probes and warm-up alike), per tenant and status.
type soakTally struct {
	mu       sync.Mutex
	tenants  map[string]*soakCounts
	statuses map[int]int64
	fiveXX   int64
	sockErrs int64
}

func (t *soakTally) add(tenant string, status int, upstream bool, body []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.statuses[status]++
	if status >= 500 {
		t.fiveXX++
	}
	c := t.tenants[tenant]
	if c == nil {
		c = &soakCounts{}
		t.tenants[tenant] = c
	}
	if upstream {
		c.requests++
		c.billable++
		return
	}
	// The edge's own answer: metered, never billed, unless it named no tenant or the
	// edge was not ready (then not metered at all).
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &env)
	if env.Error.Code == tenants.ETenantNotFound || env.Error.Code == tenants.ENotReady {
		return
	}
	c.requests++
}

func (t *soakTally) socketError() {
	t.mu.Lock()
	t.sockErrs++
	t.mu.Unlock()
}

func (t *soakTally) counts(tenant string) soakCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.tenants[tenant]; c != nil {
		return *c
	}
	return soakCounts{}
}

// soakKey is a consumer's API key as the clients send it and the rotation revokes it.
type soakKey struct{ consumer, id, key string }

// soakRun is one soak's moving parts.
type soakRun struct {
	env      *harness.Env
	duration time.Duration
	rate     int // requests per second
	s        *harness.Stack
	hc       *fasthttp.HostClient
	tally    *soakTally
	keys     map[string]*atomic.Pointer[soakKey] // slug → the key clients send now
	jwt      string
	upA      string
	upB      string
	hotID    string // the route PUT every third change
	res      *Result
	start    time.Time
}

// do sends one request to the edge and tallies its answer.
func (r *soakRun) do(tenant, method, path string, header map[string]string, body string) (int, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + r.s.EdgeAddr + path)
	req.UseHostHeader = true
	req.Header.SetHost(tenant + ".localhost")
	req.Header.SetMethod(method)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
	}
	if err := r.hc.DoTimeout(req, resp, 10*time.Second); err != nil {
		r.tally.socketError()
		return 0, err
	}
	code := resp.StatusCode()
	r.tally.add(tenant, code, len(resp.Header.Peek(soakUpstreamHeader)) > 0, resp.Body())
	return code, nil
}

func (r *soakRun) headers(k *soakKind) map[string]string {
	switch k.auth {
	case "key":
		return map[string]string{"X-API-Key": r.keys[k.tenant].Load().key}
	case "wrong":
		return map[string]string{"X-API-Key": soakWrongKey}
	case "jwt":
		return map[string]string{"Authorization": "Bearer " + r.jwt}
	}
	return nil
}

func soakKinds() []soakKind {
	n := func(prefix string) func(int) string {
		return func(i int) string { return fmt.Sprintf("%s%d", prefix, i%1000) }
	}
	fixed := func(p string) func(int) string { return func(int) string { return p } }
	post := `{"sku":"SKU-001234","qty":2,"note":"soak"}`
	return []soakKind{
		{name: "items", tenant: "soak-a", method: "GET", path: n("/items/"), auth: "key", weight: 5, want: 200},
		{name: "orders", tenant: "soak-a", method: "POST", path: fixed("/orders"), auth: "key", body: post, weight: 3, want: 201},
		{name: "hot", tenant: "soak-a", method: "GET", path: n("/hot/"), weight: 3, want: 200, note: "its route is PUT every 3 s (upstream A ↔ B)"},
		{name: "missing", tenant: "soak-a", method: "GET", path: fixed("/items/missing"), auth: "key", weight: 1, want: 404, note: "the upstream's 404: billable"},
		{name: "wrong key", tenant: "soak-a", method: "GET", path: n("/items/"), auth: "wrong", weight: 1, want: 401},
		{name: "no route", tenant: "soak-a", method: "GET", path: fixed("/nowhere"), weight: 1, want: 404, note: "route_not_found"},
		{name: "catalog", tenant: "soak-b", method: "GET", path: n("/catalog/"), auth: "key", weight: 3, want: 200},
		{name: "search", tenant: "soak-b", method: "POST", path: fixed("/catalog/search"), auth: "key", body: post, weight: 1, want: 201},
		{name: "jwt orders", tenant: "soak-j", method: "GET", path: n("/orders/"), auth: "jwt", weight: 2, want: 200, note: "RS256 + policy"},
		{name: "jwt denied", tenant: "soak-j", method: "GET", path: fixed("/orders/admin/x"), auth: "jwt", weight: 1, want: 403, note: "denied by the policy"},
	}
}

// upstream answers every request itself and marks it, so the clients can tell the
// upstream's answers (billable, whatever their status) from the edge's own.
func upstream(b *harness.Env, name string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		w.Header().Set(soakUpstreamHeader, name)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(req.URL.Path, "/missing"):
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"no such item"}`)
		case req.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"ord_1","status":"accepted"}`)
		default:
			io.WriteString(w, `{"ok":true}`)
		}
	})}
	go srv.Serve(ln)
	b.Clean.Add(func() { srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// Run runs the scenario on a stack of its own: rate requests per second for duration.
// The result is partial when an error stopped it.
func Run(ctx context.Context, b *harness.Env, duration time.Duration, rate int) (*Result, error) {
	res := &Result{duration: duration, rate: rate, kinds: soakKinds()}
	r := &soakRun{env: b, duration: duration, rate: rate, res: res, tally: &soakTally{tenants: map[string]*soakCounts{}, statuses: map[int]int64{}},
		keys: map[string]*atomic.Pointer[soakKey]{}}
	var err error
	if r.upA, err = upstream(b, "A"); err != nil {
		return res, err
	}
	if r.upB, err = upstream(b, "B"); err != nil {
		return res, err
	}
	if r.s, err = b.NewStack(ctx, "soak", ""); err != nil {
		return res, err
	}
	if err := r.startBilling(ctx); err != nil {
		return res, err
	}
	if err := r.configure(ctx); err != nil {
		return res, err
	}
	// pprof on the admin port: the end's goroutine profile says what any growth is.
	if err := r.s.StartEdge(ctx, 0, "", "TOLLGATE_EDGE_ID=soak-"+harness.RandomHex(4), "TOLLGATE_PPROF=true"); err != nil {
		return res, err
	}
	defer r.s.StopEdge()
	r.hc = &fasthttp.HostClient{Addr: r.s.EdgeAddr, MaxConns: 4096, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, MaxIdleConnDuration: time.Minute}
	if err := r.warm(ctx); err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second) // let the warm-up's garbage go before the idle reading
	if smp, err := r.sample(); err == nil {
		res.idle = &smp
	}

	fmt.Fprintf(os.Stderr, "bench: soak: %d req/s for %s, a route change every %s, a key rotation every %s\n",
		rate, duration, soakRouteEvery, soakRotateEvery)
	r.start = time.Now()
	lctx, stopSide := context.WithCancel(ctx)
	var side sync.WaitGroup
	side.Add(3)
	go func() { defer side.Done(); r.changeRoutes(lctx) }()
	go func() { defer side.Done(); r.rotateKeys(lctx) }()
	go func() { defer side.Done(); r.sampleLoop(lctx) }()
	lat := r.load(ctx)
	stopSide()
	side.Wait()
	if smp, err := r.sample(); err == nil {
		res.samples = append(res.samples, smp)
	}
	res.minutes = soakMinutes(lat, res.samples)
	res.goroutines = r.goroutineProfile()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}

	r.tally.mu.Lock()
	res.statuses = maps.Clone(r.tally.statuses)
	res.fiveXX, res.socketErrors = r.tally.fiveXX, r.tally.sockErrs
	r.tally.mu.Unlock()
	if err := r.settle(ctx); err != nil {
		return res, err
	}
	if !res.billedEqual {
		return res, fmt.Errorf("billed ≠ served: the folded totals last moved %s after the load stopped (see the report's billing table)", res.settled.Round(time.Second))
	}
	return res, nil
}

// startBilling runs `tollgate billing` on the stack, its admin listener on a free port.
func (r *soakRun) startBilling(ctx context.Context) error {
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := harness.StartProc("tollgate billing", filepath.Join(r.s.Dir, "billing.log"), "", r.s.Env("TOLLGATE_BILLING_ADMIN_ADDR="+admin), r.s.Bin, "billing")
	if err != nil {
		return err
	}
	r.env.Clean.Add(p.Stop)
	return r.env.WaitHTTP(ctx, "tollgate billing /readyz", "http://"+admin+"/readyz", r.env.ReadyTimeout, p)
}

// configure creates the three tenants: soak-a and soak-b with key-auth routes and a
// consumer each, soak-j with a JWT issuer, a policy and a JWT route.
func (r *soakRun) configure(ctx context.Context) error {
	c := r.s.Client
	route := func(slug, name, path, auth, up string) (string, error) {
		var out harness.Created
		err := c.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody(name, path, up, auth, false), &out)
		return out.ID, err
	}
	for _, slug := range []string{"soak-a", "soak-b", "soak-j"} {
		if _, err := c.CreateTenant(ctx, slug); err != nil {
			return err
		}
	}
	for _, x := range []struct{ slug, name, path, auth string }{
		{"soak-a", "items", "/items", "key"}, {"soak-a", "orders", "/orders", "key"},
		{"soak-b", "catalog", "/catalog", "key"},
	} {
		if _, err := route(x.slug, x.name, x.path, x.auth, r.upA); err != nil {
			return err
		}
	}
	var err error
	if r.hotID, err = route("soak-a", "hot", "/hot", "none", r.upA); err != nil {
		return err
	}
	for _, slug := range []string{"soak-a", "soak-b"} {
		var cons, k harness.Created
		if err := c.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers", map[string]any{"name": slug + "-app"}, &cons); err != nil {
			return err
		}
		if err := c.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers/"+cons.ID+"/keys", nil, &k); err != nil {
			return err
		}
		p := &atomic.Pointer[soakKey]{}
		p.Store(&soakKey{consumer: cons.ID, id: k.ID, key: k.Key})
		r.keys[slug] = p
	}
	j, err := harness.NewJWT()
	if err != nil {
		return err
	}
	r.jwt = j.Token
	if err := c.Call(ctx, "POST", "/v1/tenants/soak-j/jwt-issuers", j.IssuerBody(), nil); err != nil {
		return err
	}
	policy := map[string]any{
		"rules": [][]string{{"reader", "/orders/:id", "GET"}, {"*", "/orders/admin/*", "*", "deny"}},
	}
	if err := c.Call(ctx, "PUT", "/v1/tenants/soak-j/policy", policy, nil); err != nil {
		return err
	}
	jr := harness.RouteBody("orders", "/orders", r.upA, "jwt", false)
	jr["policy"] = true
	return c.Call(ctx, "POST", "/v1/tenants/soak-j/routes", jr, nil)
}

// warm waits until every kind of the mix gets the answer it should: routes, keys, the
// issuer and the policy are all on the edge.
func (r *soakRun) warm(ctx context.Context) error {
	for i := range r.res.kinds {
		k := &r.res.kinds[i]
		err := harness.WaitFor(ctx, fmt.Sprintf("the edge to answer %s %s of %s with %d", k.method, k.path(0), k.tenant, k.want),
			r.env.ReadyTimeout, 50*time.Millisecond, r.s.Edge, func() error {
				code, err := r.do(k.tenant, k.method, k.path(0), r.headers(k), k.body)
				if err == nil && code != k.want {
					err = fmt.Errorf("status %d", code)
				}
				return err
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// soakLat is one request of the load: when it fell due (since the start), how long its
// answer took, and whether it failed (a socket error or a 5xx).
type soakLat struct {
	due  time.Duration
	us   float64
	fail bool
}

// load sends the mix at the fixed rate for the whole duration (an open loop: a slow
// answer does not delay the next send) and returns every request's latency.
func (r *soakRun) load(ctx context.Context) []soakLat {
	rate, kinds := r.rate, r.res.kinds
	n := int(float64(rate) * r.duration.Seconds())
	var mix []int
	for i, k := range kinds {
		for range k.weight {
			mix = append(mix, i)
		}
	}
	stats := make([]soakKindStats, len(kinds))
	r.res.kindStats = stats
	lat := make([]soakLat, n)
	due := func(i int) time.Duration { return time.Duration(float64(i) / float64(rate) * float64(time.Second)) }
	var (
		late atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
	)
	jobs := make(chan int, 1024)
	for range min(1024, rate/20+32) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				ki := mix[i%len(mix)]
				k := &kinds[ki]
				t0 := time.Now()
				if t0.Sub(r.start.Add(due(i))) > 5*time.Millisecond {
					late.Add(1) // the generator fell behind: its latencies are then suspect
				}
				code, err := r.do(k.tenant, k.method, k.path(i), r.headers(k), k.body)
				lat[i] = soakLat{due: due(i), us: float64(time.Since(t0)) / float64(time.Microsecond), fail: err != nil || code >= 500}
				stats[ki].sent.Add(1)
				if code != k.want {
					mu.Lock()
					if stats[ki].other == nil {
						stats[ki].other = map[int]int64{}
					}
					stats[ki].other[code]++ // 0: a socket error
					mu.Unlock()
				}
			}
		}()
	}
	sent := 0
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if d := time.Until(r.start.Add(due(i))); d > time.Millisecond {
			time.Sleep(d)
		}
		jobs <- i
		sent++
	}
	close(jobs)
	wg.Wait()
	r.res.sent, r.res.late = int64(sent), late.Load()
	return lat[:sent]
}

// soakKindStats is what one kind of the mix got: requests sent, and answers other than
// the one it should get, by status (0: a socket error).
type soakKindStats struct {
	sent  atomic.Int64
	other map[int]int64
}

// changeRoutes makes one route change a second through the api, in turn: the hot
// route (under load) PUT to the other upstream, a new route created, the oldest new
// route deleted (once there are three).
func (r *soakRun) changeRoutes(ctx context.Context) {
	t := time.NewTicker(soakRouteEvery)
	defer t.Stop()
	var churn []string
	toB := true
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		switch {
		case i%3 == 0:
			up := r.upA
			if toB {
				up = r.upB
			}
			err = r.s.Client.CallMatch(ctx, "PUT", "/v1/tenants/soak-a/routes/"+r.hotID, harness.RouteBody("hot", "/hot", up, "none", false))
			if err == nil {
				toB = !toB
			}
		case i%3 == 2 && len(churn) >= 3:
			if err = r.s.Client.Call(ctx, "DELETE", "/v1/tenants/soak-a/routes/"+churn[0], nil, nil); err == nil {
				churn = churn[1:]
			}
		default:
			var c harness.Created
			body := harness.RouteBody(fmt.Sprintf("churn-%d", i), fmt.Sprintf("/churn-%d", i), r.upA, "none", false)
			if err = r.s.Client.Call(ctx, "POST", "/v1/tenants/soak-a/routes", body, &c); err == nil {
				churn = append(churn, c.ID)
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.res.routeChanges++
		if err != nil {
			r.res.routeErrors = append(r.res.routeErrors, err.Error())
		}
	}
}

// rotateKeys rotates soak-a's and soak-b's keys in turn, one every soakRotateEvery.
func (r *soakRun) rotateKeys(ctx context.Context) {
	t := time.NewTicker(soakRotateEvery)
	defer t.Stop()
	slugs := []string{"soak-a", "soak-b"}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.rotate(ctx, slugs[i%2])
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.res.rotateErrors = append(r.res.rotateErrors, err.Error())
		}
	}
}

// rotate issues a new key, switches the clients to it once the edge takes it, revokes
// the old one and waits until the edge refuses it.
func (r *soakRun) rotate(ctx context.Context, slug string) error {
	cur := r.keys[slug].Load()
	probePath := map[string]string{"soak-a": "/items/probe", "soak-b": "/catalog/probe"}[slug]
	probe := func(key string, want int) func() error {
		return func() error {
			code, err := r.do(slug, "GET", probePath, map[string]string{"X-API-Key": key}, "")
			if err == nil && code != want {
				err = fmt.Errorf("status %d", code)
			}
			return err
		}
	}
	issued := time.Now()
	var k harness.Created
	if err := r.s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers/"+cur.consumer+"/keys", nil, &k); err != nil {
		return err
	}
	if err := harness.WaitFor(ctx, "the edge to take "+slug+"'s new key", 30*time.Second, 20*time.Millisecond, r.s.Edge, probe(k.Key, 200)); err != nil {
		return err
	}
	r.res.newKeyServed = append(r.res.newKeyServed, time.Since(issued))
	r.keys[slug].Store(&soakKey{consumer: cur.consumer, id: k.ID, key: k.Key})
	revoked := time.Now()
	if err := r.s.Client.Call(ctx, "DELETE", "/v1/tenants/"+slug+"/consumers/"+cur.consumer+"/keys/"+cur.id, nil, nil); err != nil {
		return err
	}
	if err := harness.WaitFor(ctx, "the edge to refuse "+slug+"'s revoked key", 30*time.Second, 20*time.Millisecond, r.s.Edge, probe(cur.key, 401)); err != nil {
		return err
	}
	r.res.oldKeyRefused = append(r.res.oldKeyRefused, time.Since(revoked))
	r.res.rotations++
	return nil
}

// sampleLoop reads the edge's /metrics every soakSampleEvery.
func (r *soakRun) sampleLoop(ctx context.Context) {
	t := time.NewTicker(soakSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if smp, err := r.sample(); err == nil {
			r.res.samples = append(r.res.samples, smp)
		} else {
			fmt.Fprintf(os.Stderr, "bench: soak: reading the edge's /metrics: %v\n", err)
		}
	}
}

// sample reads the edge's process and runtime gauges and its meter's count.
func (r *soakRun) sample() (soakSample, error) {
	smp := soakSample{clientConns: r.hc.ConnsCount()}
	if !r.start.IsZero() {
		smp.at = time.Since(r.start)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			smp.load1, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	resp, err := r.env.HTTP.Get("http://" + r.s.EdgeAdmin + "/metrics")
	if err != nil {
		return smp, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return smp, fmt.Errorf("status %d", resp.StatusCode)
	}
	seen := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		name, v, ok := harness.MetricLine(sc.Text())
		if !ok {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			smp.rss, seen = v, seen+1
		case "go_memstats_heap_inuse_bytes":
			smp.heap, seen = v, seen+1
		case "go_goroutines":
			smp.goroutines, seen = v, seen+1
		case "process_open_fds":
			smp.fds, seen = v, seen+1
		case "tollgate_meter_requests_total":
			smp.meterRequests += v
		}
	}
	if err := sc.Err(); err != nil {
		return smp, err
	}
	if seen < 4 {
		return smp, fmt.Errorf("/metrics lacks some of process_resident_memory_bytes, go_memstats_heap_inuse_bytes, go_goroutines, process_open_fds")
	}
	return smp, nil
}

// goroutineGroup is one stack of the edge's goroutine profile and how many goroutines
// share it.
type goroutineGroup struct {
	n      int
	frames []string // function names, innermost first
}

// goroutineProfile reads the edge's goroutine profile (debug=1: goroutines grouped by
// stack), keeps it in the run's directory and returns its five largest groups.
func (r *soakRun) goroutineProfile() []goroutineGroup {
	resp, err := r.env.HTTP.Get("http://" + r.s.EdgeAdmin + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	_ = os.WriteFile(filepath.Join(r.s.Dir, "edge-goroutines-end.txt"), raw, 0o644)
	groups := parseGoroutines(string(raw))
	return groups[:min(5, len(groups))]
}

// parseGoroutines reads a goroutine profile in its debug=1 text form, largest group first.
func parseGoroutines(raw string) []goroutineGroup {
	var groups []goroutineGroup
	for _, block := range strings.Split(raw, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if strings.HasPrefix(lines[0], "goroutine profile:") {
			lines = lines[1:] // the first block opens with the total
		}
		if len(lines) == 0 {
			continue
		}
		head := strings.Fields(lines[0])
		if len(head) < 2 || head[1] != "@" {
			continue
		}
		n, err := strconv.Atoi(head[0])
		if err != nil {
			continue
		}
		g := goroutineGroup{n: n}
		for _, l := range lines[1:] {
			// "#\t0x4a1b2c\tpkg.fn+0x1c\t/path/file.go:12"
			f := strings.Split(strings.TrimPrefix(strings.TrimSpace(l), "#"), "\t")
			if len(f) >= 3 {
				fn, _, _ := strings.Cut(f[2], "+")
				g.frames = append(g.frames, fn)
			}
		}
		groups = append(groups, g)
	}
	slices.SortStableFunc(groups, func(a, b goroutineGroup) int { return b.n - a.n })
	return groups
}

// soakMinutes cuts the latencies into minutes of the load (by when each request fell
// due) and gives each minute the last sample taken in it.
func soakMinutes(lat []soakLat, samples []soakSample) []soakMinute {
	var byMin [][]float64
	var mins []soakMinute
	for _, l := range lat {
		m := int(l.due / time.Minute)
		for len(mins) <= m {
			mins = append(mins, soakMinute{})
			byMin = append(byMin, nil)
		}
		if l.fail {
			mins[m].errors++
			continue
		}
		byMin[m] = append(byMin[m], l.us)
	}
	for m := range mins {
		ls := byMin[m]
		mins[m].n = int64(len(ls)) + mins[m].errors
		if len(ls) > 0 {
			slices.Sort(ls)
			pct := func(p float64) float64 { return ls[min(len(ls)-1, int(p*float64(len(ls))))] }
			mins[m].p50, mins[m].p99, mins[m].max = pct(0.50), pct(0.99), ls[len(ls)-1]
		}
		for i := range samples {
			if int(samples[i].at/time.Minute) == m || (m == len(mins)-1 && samples[i].at >= time.Duration(m)*time.Minute) {
				mins[m].sample = &samples[i]
			}
		}
	}
	return mins
}

// settle waits until billing has folded what the clients were served, tenant by
// tenant: until the folded totals equal the tally, or stop moving for 30 s (the last
// batch is in and the difference is real), at most 3 minutes.
func (r *soakRun) settle(ctx context.Context) error {
	begin := time.Now()
	from := r.start.Add(-time.Hour).UTC().Truncate(time.Hour).Format(time.RFC3339)
	slugs := []string{"soak-a", "soak-b", "soak-j"}
	var (
		last      []soakCounts
		moved     = time.Now()
		lastErr   error
		equalFrom time.Time
	)
	for {
		to := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour).Format(time.RFC3339)
		folded := make([]soakCounts, len(slugs))
		lastErr = nil
		for i, slug := range slugs {
			var rep struct {
				Total struct{ Requests, Billable int64 } `json:"total"`
			}
			if err := r.s.Client.Call(ctx, "GET", "/v1/tenants/"+slug+"/usage?from="+from+"&to="+to, nil, &rep); err != nil {
				lastErr = err
				break
			}
			folded[i] = soakCounts{requests: rep.Total.Requests, billable: rep.Total.Billable}
		}
		if lastErr == nil {
			equal := true
			for i, slug := range slugs {
				if folded[i] != r.tally.counts(slug) {
					equal = false
				}
			}
			if !slices.Equal(folded, last) {
				last, moved = folded, time.Now()
				equalFrom = time.Time{}
			}
			if equal && equalFrom.IsZero() {
				equalFrom = time.Now()
			}
			// Equal is final only once it has held over a few meter flushes: a batch
			// folded twice would show up after it.
			stayed := equal && time.Since(equalFrom) >= 5*time.Second
			if stayed || (!equal && time.Since(moved) > 30*time.Second) || time.Since(begin) > 3*time.Minute {
				r.res.billedEqual, r.res.settled = equal, moved.Sub(begin)
				r.res.tenants = nil
				for i, slug := range slugs {
					r.res.tenants = append(r.res.tenants, soakTenantResult{slug: slug, served: r.tally.counts(slug), folded: folded[i]})
				}
				if smp, err := r.sample(); err == nil {
					r.res.meterRequests = smp.meterRequests
				}
				return nil
			}
		} else if time.Since(begin) > 3*time.Minute {
			return fmt.Errorf("reading the folded usage: %w", lastErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Markdown renders the soak: the edge's figures at start, end and peak, every minute,
// the traffic's answers, the config churn and billed against served. A nil x renders
// nothing.
func (x *Result) Markdown(s *strings.Builder) {
	if x == nil || len(x.minutes) == 0 {
		return
	}
	fmt.Fprintf(s, "## Soak\n\n%s of %d req/s (fixed rate, open loop, from the bench's own process) to one metered edge (GOMAXPROCS unset, not pinned), "+
		"with the api and billing running; a route change every %s through the api (the hot route PUT to the other upstream, a route created, "+
		"the oldest created deleted), a key rotation every %s (soak-a's and soak-b's in turn: a new key, the clients switched to it once the edge takes it, "+
		"the old one revoked). The edge's /metrics sampled every %s. **The machine (%d CPUs) is shared with other engineers' builds and tests**: "+
		"the p99s carry their noise (the 1-minute load average is beside them).\n\n",
		x.duration, x.rate, soakRouteEvery, soakRotateEvery, soakSampleEvery, runtime.NumCPU())

	first, last := x.minutes[0], x.minutes[len(x.minutes)-1]
	var start, end *soakSample
	if len(x.samples) > 0 {
		start, end = &x.samples[0], &x.samples[len(x.samples)-1]
	}
	var peak soakSample
	var peakP99 float64
	for _, smp := range x.samples {
		peak.rss, peak.heap = max(peak.rss, smp.rss), max(peak.heap, smp.heap)
		peak.goroutines, peak.fds, peak.load1 = max(peak.goroutines, smp.goroutines), max(peak.fds, smp.fds), max(peak.load1, smp.load1)
	}
	for _, m := range x.minutes {
		peakP99 = max(peakP99, m.p99)
	}
	mib := func(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
	row := func(name string, smp *soakSample, p99 string) {
		if smp == nil {
			return
		}
		fmt.Fprintf(s, "| %s | %s | %s | %.0f | %.0f | %s | %.2f |\n", name, mib(smp.rss), mib(smp.heap), smp.goroutines, smp.fds, p99, smp.load1)
	}
	s.WriteString("| edge | RSS | Go heap in use | goroutines | open fds | p99 | load avg |\n|---|---:|---:|---:|---:|---:|---:|\n")
	row("idle, before the load", x.idle, "-")
	row(fmt.Sprintf("start (at %s; p99 of minute 1)", fmtSecs(start)), start, figures.FmtUS(first.p99))
	row(fmt.Sprintf("end (at %s; p99 of minute %d)", fmtSecs(end), len(x.minutes)), end, figures.FmtUS(last.p99))
	row("peak", &peak, figures.FmtUS(peakP99))
	if start != nil && end != nil {
		fmt.Fprintf(s, "| end − start | %+.1f MiB | %+.1f MiB | %+.0f | %+.0f | %s | |\n", (end.rss-start.rss)/(1<<20), (end.heap-start.heap)/(1<<20),
			end.goroutines-start.goroutines, end.fds-start.fds, figures.Ratio(last.p99, first.p99))
	}
	s.WriteString("\n")

	s.WriteString("Per minute (the figures of the last sample in it; client conns: the bench's open connections to the edge, which the edge's goroutines and fds follow):\n\n")
	s.WriteString("| minute | requests | p50 | p99 | max | 5xx + socket errors | RSS | heap | goroutines | fds | client conns | load avg |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, m := range x.minutes {
		fmt.Fprintf(s, "| %d | %d | %s | %s | %s | %d |", i+1, m.n, figures.FmtUS(m.p50), figures.FmtUS(m.p99), figures.FmtUS(m.max), m.errors)
		if m.sample != nil {
			fmt.Fprintf(s, " %s | %s | %.0f | %.0f | %d | %.2f |\n", mib(m.sample.rss), mib(m.sample.heap), m.sample.goroutines, m.sample.fds, m.sample.clientConns, m.sample.load1)
		} else {
			s.WriteString(" - | - | - | - | - | - |\n")
		}
	}
	s.WriteString("\n")

	if len(x.goroutines) > 0 {
		s.WriteString("The edge's largest goroutine groups at the end (its goroutine profile, outside the runtime's frames; the whole profile is kept with -keep):\n\n")
		for _, g := range x.goroutines {
			var fs []string
			for _, f := range g.frames {
				if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/") && len(fs) < 3 {
					fs = append(fs, "`"+f+"`")
				}
			}
			fmt.Fprintf(s, "- %d × %s\n", g.n, strings.Join(fs, " ← "))
		}
		s.WriteString("\n")
	}

	codes := make([]int, 0, len(x.statuses))
	for c := range x.statuses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d: %d", c, x.statuses[c]))
	}
	fmt.Fprintf(s, "Answers (load, warm-up and key probes): %s; **5xx: %d, socket errors: %d**; %d requests of the load sent, %d of them 5 ms or more behind schedule.\n\n",
		strings.Join(parts, ", "), x.fiveXX, x.socketErrors, x.sent, x.late)
	s.WriteString("| request | tenant | auth | share | wants | sent | other answers | note |\n|---|---|---|---:|---:|---:|---|---|\n")
	total := 0
	for _, k := range x.kinds {
		total += k.weight
	}
	for i, k := range x.kinds {
		sent, other := int64(0), "-"
		if i < len(x.kindStats) {
			sent = x.kindStats[i].sent.Load()
			if o := x.kindStats[i].other; len(o) > 0 {
				var ps []string
				for c, n := range o {
					ps = append(ps, fmt.Sprintf("%d×%d", n, c))
				}
				slices.Sort(ps)
				other = strings.Join(ps, ", ")
			}
		}
		auth := k.auth
		if auth == "" {
			auth = "none"
		}
		fmt.Fprintf(s, "| %s %s | %s | %s | %.0f%% | %d | %d | %s | %s |\n", k.method, k.path(0), k.tenant, auth, 100*float64(k.weight)/float64(total), k.want, sent, other, k.note)
	}
	s.WriteString("\n")

	fmt.Fprintf(s, "Route changes: %d, %d failed. Key rotations: %d", x.routeChanges, len(x.routeErrors), x.rotations)
	if n, o := figures.Summarize(x.newKeyServed), figures.Summarize(x.oldKeyRefused); n.N > 0 {
		fmt.Fprintf(s, "; a new key served after p50 %s, max %s; a revoked key refused after p50 %s, max %s", figures.FmtDur(n.P50), figures.FmtDur(n.Max), figures.FmtDur(o.P50), figures.FmtDur(o.Max))
	}
	fmt.Fprintf(s, "; %d failed.\n", len(x.rotateErrors))
	for _, e := range append(firstN(x.routeErrors, 3), firstN(x.rotateErrors, 3)...) {
		fmt.Fprintf(s, "- %s\n", e)
	}
	s.WriteString("\n")

	if len(x.tenants) == 0 {
		return
	}
	verdict := "**billed = served: yes**"
	if !x.billedEqual {
		verdict = "**billed = served: NO**"
	}
	fmt.Fprintf(s, "Billing, after the load stopped: %s (the folded totals read every second; they last moved %s after the load stopped and then held for 5 s or more). "+
		"Served = the answers the bench got, counted as the meter counts them: every answer of a known tenant is a request, billable when the upstream produced it "+
		"(marked by the bench's upstream), the edge's own answers (401, 403, 404 route_not_found) are requests but not billable. "+
		"Folded = the tenant's usage total from the api (billing's rollups).\n\n", verdict, x.settled.Round(time.Second))
	s.WriteString("| tenant | served requests | folded requests | served billable | folded billable |\n|---|---:|---:|---:|---:|\n")
	var sum soakTenantResult
	for _, t := range x.tenants {
		fmt.Fprintf(s, "| %s | %d | %d | %d | %d |\n", t.slug, t.served.requests, t.folded.requests, t.served.billable, t.folded.billable)
		sum.served.requests += t.served.requests
		sum.folded.requests += t.folded.requests
		sum.served.billable += t.served.billable
		sum.folded.billable += t.folded.billable
	}
	fmt.Fprintf(s, "| all | %d | %d | %d | %d |\n\n", sum.served.requests, sum.folded.requests, sum.served.billable, sum.folded.billable)
	same := "the same as served"
	if int64(x.meterRequests) != sum.served.requests {
		same = fmt.Sprintf("%+d against served", int64(x.meterRequests)-sum.served.requests)
	}
	fmt.Fprintf(s, "The edge's own count of requests metered (tollgate_meter_requests_total) at the end: %.0f, %s.\n\n", x.meterRequests, same)
}

func fmtSecs(smp *soakSample) string {
	if smp == nil {
		return "-"
	}
	return smp.at.Round(time.Second).String()
}

func firstN(xs []string, n int) []string { return xs[:min(n, len(xs))] }
