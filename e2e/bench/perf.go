package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"tollgate/e2e/bench/cpustat"
	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
)

// perfScenario is one proxy scenario, configured the same way on every gateway.
type perfScenario struct {
	id, desc string
	host     string
	hit      string   // the path requested under load
	paths    []string // every path of the scenario (all must be served before measuring)
	headers  map[string]string
	key      string // S2: the API key nginx checks and Tollgate issued
	limit    bool   // S2: the never-reached rate limit
	mode     string // S2l/S2x/S2a: the limit's mode (flow.go)
	jwt      *harness.JWT
	method   string // S3: POST, with body
	body     string
	upstream string // the nginx upstream block (S4's weighted split); empty: bench_upstream
	loader   string // "" wrk; "go": the bench's own closed-loop client (S9, load.go); "h2load": S1h2, S1grpc (h2.go)
	tls      bool   // S9, S9h, S1h2: over the gateways' TLS listeners
	h2       bool   // S1h2, S1grpc: HTTP/2 from the client (h2.go), on nginx's HTTP/2 ports
	grpc     bool   // S1grpc: gRPC calls to the gRPC upstream
	newConn  bool   // S9h: a new connection, and so a full TLS handshake, per request
	ws       bool   // S6: WebSocket tunnels, measured by measureWS rather than as requests
	half     bool   // S3b, S9p, S9h: measured over half the window (at least 2 s), so S3 and S9 stay well under a minute
	// sign, when set, gives the headers anew for each measurement (S2hmac's dated signature).
	sign func() map[string]string
}

// perfResult is one measured window of one gateway.
type perfResult struct {
	scenario, gateway string
	procs             int
	load              loadResult
	cpuSec            float64 // gateway CPU (user+system) during the window
	usPerReq          float64
	busy              float64 // cpuSec / wall seconds: cores the gateway kept busy
	redisPerReq       float64 // Tollgate: limiter Redis commands per request (flow.go)
	rssKB             int64
	rssPeakKB         int64 // the gateway's largest RSS sampled during the window (S5)
	rssStartKB        int64 // its RSS as the window began
	split             *splitCount
	sys0, sys1        cpustat.Times // every CPU's busy and total ticks as the window began and ended (/proc/stat)
}

func buildPerfScenarios(b *bench, ids []string) []*perfScenario {
	var out []*perfScenario
	for _, id := range ids {
		switch id {
		case "S1":
			out = append(out, &perfScenario{id: "S1", desc: "1 route, no plugins",
				host: "bench.localhost", hit: "/hello", paths: []string{"/hello"}})
		case "S2":
			desc := "key auth"
			if b.s2Limit {
				desc += " + rate limit (never reached)"
			}
			key := "bench-" + harness.RandomHex(16) // replaced by the key Tollgate issues when it runs
			out = append(out, &perfScenario{id: "S2", desc: desc,
				host: "bench.localhost", hit: "/keyed", paths: []string{"/keyed"},
				key: key, headers: map[string]string{"X-API-Key": key}, limit: b.s2Limit})
		case "S2j":
			// Built here, not at configuration, so an nginx-only run checks the same token.
			j, err := harness.NewJWT()
			if err != nil {
				panic(err) // crypto/rand does not fail on Linux
			}
			out = append(out, &perfScenario{id: "S2j",
				desc: "JWT RS256 + policy + rate limit (never reached); nginx: exact Authorization match + limit_req",
				host: "jwt.localhost", hit: "/orders/1", paths: []string{"/orders/1"},
				headers: map[string]string{"Authorization": "Bearer " + j.Token}, limit: true, jwt: j})
		case "S2l", "S2x", "S2a":
			out = append(out, flowPerfScenario(id))
		case "S1f", "S1h", "S2hmac":
			out = append(out, functionPerfScenario(id)) // functions.go
		case "S1h2", "S1grpc":
			out = append(out, h2PerfScenario(id)) // h2.go
		case "S3":
			// The transform's baseline first: the same POST through a plain route.
			out = append(out,
				&perfScenario{id: "S3b", desc: "POST of a 1 KB JSON body, plain proxy (S3's baseline)",
					host: "bench.localhost", hit: "/s3-plain", paths: []string{"/s3-plain"}, half: true,
					method: "POST", body: s3Body, headers: map[string]string{"Content-Type": "application/json"}},
				&perfScenario{id: "S3", desc: "POST of a 1 KB JSON body rewritten (set/remove/rename); nginx: plain proxy",
					host: "bench.localhost", hit: "/s3", paths: []string{"/s3"},
					method: "POST", body: s3Body, headers: map[string]string{"Content-Type": "application/json"}})
		case "S4":
			out = append(out, &perfScenario{id: "S4", desc: fmt.Sprintf("canary %d%% to a second upstream; nginx: weighted upstream %d/%d", s4Weight, 100-s4Weight, s4Weight),
				host: "bench.localhost", hit: "/canary", paths: []string{"/canary"}, upstream: "bench_canary_split"})
		case "S5":
			out = append(out, &perfScenario{id: "S5", desc: "1 MiB responses",
				host: "bench.localhost", hit: s5Path, paths: []string{s5Path}})
		case "S6":
			out = append(out, &perfScenario{id: "S6", desc: fmt.Sprintf("%d WebSocket tunnels, %d messages/s", b.wsConns, b.wsRate),
				host: "bench.localhost", hit: "/ws", paths: []string{"/ws"}, ws: true})
		case "S9":
			// The same closed-loop client for all three, so the TLS tax is S9 ÷ S9p.
			tlsSc := func(id, desc string, tls, newConn, half bool) *perfScenario {
				return &perfScenario{id: id, desc: desc, host: "tls.localhost", hit: "/tls", paths: []string{"/tls"},
					loader: "go", tls: tls, newConn: newConn, half: half}
			}
			out = append(out,
				tlsSc("S9p", "plain HTTP, keep-alive, bench client (S9's baseline)", false, false, true),
				tlsSc("S9", "TLS 1.3, keep-alive, bench client", true, false, false),
				tlsSc("S9h", "TLS 1.3, a new connection (full handshake) per request, bench client", true, true, true))
		case "S4r":
			sc := &perfScenario{id: "S4r", desc: fmt.Sprintf("%d routes, hit one", b.routes), host: "routes.localhost"}
			for i := range b.routes {
				sc.paths = append(sc.paths, routePath(i))
			}
			sc.hit = sc.paths[b.routes*2/3]
			out = append(out, sc)
		}
	}
	return out
}

// routePath spreads routes over distinct first segments, as real APIs do.
func routePath(i int) string { return fmt.Sprintf("/api-%d/v1/items", i) }

// proxySites mirrors the scenarios as nginx virtual hosts, one per host.
func proxySites(scs []*perfScenario) []harness.ProxySite {
	var sites []harness.ProxySite
	idx := map[string]int{}
	for _, sc := range scs {
		i, ok := idx[sc.host]
		if !ok {
			i = len(sites)
			idx[sc.host] = i
			sites = append(sites, harness.ProxySite{Host: sc.host})
		}
		for _, p := range sc.paths {
			if slices.ContainsFunc(sites[i].Locs, func(l harness.ProxyLoc) bool { return l.Path == p }) {
				continue // S9's three scenarios share one location
			}
			loc := harness.ProxyLoc{Path: p, Key: sc.key, Limit: sc.limit, Upstream: sc.upstream, WS: sc.ws, GRPC: sc.grpc}
			if sc.jwt != nil {
				loc.Authz = "Bearer " + sc.jwt.Token
			}
			sites[i].Locs = append(sites[i].Locs, loc)
		}
	}
	return sites
}

// configureTollgate creates the scenarios' tenants, routes, consumer and key through the
// management API.
func (b *bench) configureTollgate(ctx context.Context, s *harness.Stack, upURL string, scs []*perfScenario) error {
	tenants := map[string]bool{}
	for _, sc := range scs {
		slug := strings.TrimSuffix(sc.host, ".localhost")
		if !tenants[slug] {
			if sc.id == "S2j" {
				// Its own tenant on the platform plan without limits: only the route's
				// never-reached limit is counted, as nginx's limit_req.
				if err := s.Client.Call(ctx, "POST", "/v1/tenants", map[string]any{"slug": slug, "name": slug, "plan": "unlimited"}, nil); err != nil {
					return err
				}
			} else if _, err := s.Client.CreateTenant(ctx, slug); err != nil {
				return err
			}
			tenants[slug] = true
		}
		switch sc.id {
		case "S1":
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("r1", sc.hit, upURL, "none", false), nil); err != nil {
				return err
			}
		case "S2":
			var c, k harness.Created
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers", map[string]any{"name": "bench-client"}, &c); err != nil {
				return err
			}
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers/"+c.ID+"/keys", nil, &k); err != nil {
				return err
			}
			if k.Key == "" {
				return fmt.Errorf("POST /v1/tenants/%s/consumers/%s/keys returned no key", slug, c.ID)
			}
			sc.key = k.Key
			sc.headers = map[string]string{"X-API-Key": k.Key}
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("keyed", sc.hit, upURL, "key", sc.limit), nil); err != nil {
				return err
			}
		case "S2j":
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/jwt-issuers", sc.jwt.IssuerBody(), nil); err != nil {
				return err
			}
			policy := map[string]any{
				"rules": [][]string{{"reader", "/orders/:id", "GET"}, {"*", "/orders/admin/*", "*", "deny"}},
				"roles": [][]string{{"ops", "reader"}},
			}
			if err := s.Client.Call(ctx, "PUT", "/v1/tenants/"+slug+"/policy", policy, nil); err != nil {
				return err
			}
			r := harness.RouteBody("orders", "/orders", upURL, "jwt", sc.limit)
			r["policy"] = true
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil); err != nil {
				return err
			}
		case "S2l", "S2x", "S2a":
			if err := b.configureFlowScenario(ctx, s, slug, upURL, sc); err != nil {
				return err
			}
		case "S1f", "S1h", "S2hmac":
			if err := b.configureFunctionScenario(ctx, s, slug, upURL, sc); err != nil {
				return err
			}
		case "S1h2", "S1grpc":
			if err := b.configureH2Scenario(ctx, s, slug, upURL, sc); err != nil {
				return err
			}
		case "S3b":
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("s3-plain", sc.hit, upURL, "none", false), nil); err != nil {
				return err
			}
		case "S3":
			if err := b.configureS3(ctx, s, slug, upURL, sc); err != nil {
				return err
			}
		case "S4":
			r := harness.RouteBody("canary", sc.hit, upURL, "none", false)
			r["canary"] = map[string]any{"weight": s4Weight,
				"upstream": map[string]any{"targets": []map[string]any{{"url": fmt.Sprintf("http://127.0.0.1:%d", b.CanaryPort)}}}}
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil); err != nil {
				return err
			}
		case "S5":
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("s5", sc.hit, upURL, "none", false), nil); err != nil {
				return err
			}
		case "S6":
			r := harness.RouteBody("ws", sc.hit, fmt.Sprintf("http://127.0.0.1:%d", b.WSPort), "none", false)
			r["websocket"] = true
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil); err != nil {
				return err
			}
		case "S9p":
			// One route serves S9p, S9 and S9h: plain and TLS listeners alike.
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("tls", sc.hit, upURL, "none", false), nil); err != nil {
				return err
			}
		case "S4r":
			// Through config applies (scale.go): a POST per route is a transaction each.
			d, err := b.fill(ctx, s, &routeSet{slugs: []string{slug}, upURL: upURL}, len(sc.paths))
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bench: S4r: created %d routes in %s (%.0f/s, %d an apply)\n",
				len(sc.paths), d.Round(time.Millisecond), float64(len(sc.paths))/d.Seconds(), configChunk)
		}
	}
	return nil
}

// perfSweep runs the proxy scenarios: for each procs value, nginx with that many workers
// and an edge with that GOMAXPROCS, each scenario measured on every gateway back to back so
// drift of the shared machine hits both alike.
func (b *bench) perfSweep(ctx context.Context, ids []string, rep *report) error {
	upPort, err := b.upstream(ctx)
	if err != nil {
		return err
	}
	upURL := fmt.Sprintf("http://127.0.0.1:%d", upPort)
	scs := buildPerfScenarios(b, ids)
	if err := b.scenarioServices(ctx, ids); err != nil {
		return err
	}

	var st *harness.Stack
	if b.has("tollgate") {
		// The api is idle while measuring; it stays off the gateway's CPU.
		if st, err = b.NewStack(ctx, "perf", b.LoadCPUs, bulkAPIEnv...); err != nil { // S4r's routes in bulk (scale.go)
			return err
		}
		if err := b.configureTollgate(ctx, st, upURL, scs); err != nil {
			return err
		}
	}

	withS1h2, withGRPC := slices.Contains(ids, "S1h2"), slices.Contains(ids, "S1grpc")
	withTLS := slices.Contains(ids, "S9") || withS1h2 // the edge's one TLS listener serves both
	for _, procs := range b.cores {
		cpus := gatewayCPUs(procs)
		targets := map[string]*harness.Proc{}
		bases := map[string]string{}
		tlsAddrs := map[string]string{}
		h2Addrs := map[string]map[bool]string{} // gateway → TLS (S1h2) or h2c (S1grpc) → host:port
		if b.has("nginx") {
			port, err := harness.FreePort()
			if err != nil {
				return err
			}
			var ls harness.ProxyListeners
			if slices.Contains(ids, "S9") {
				if ls.TLS, err = harness.FreePort(); err != nil {
					return err
				}
				tlsAddrs["nginx"] = fmt.Sprintf("127.0.0.1:%d", ls.TLS)
			}
			h2Addrs["nginx"] = map[bool]string{}
			if withS1h2 {
				if ls.H2TLS, err = harness.FreePort(); err != nil {
					return err
				}
				h2Addrs["nginx"][true] = fmt.Sprintf("127.0.0.1:%d", ls.H2TLS)
			}
			if withGRPC {
				if ls.H2C, err = harness.FreePort(); err != nil {
					return err
				}
				h2Addrs["nginx"][false] = fmt.Sprintf("127.0.0.1:%d", ls.H2C)
			}
			p, err := b.StartProxyOn(ctx, port, ls, upPort, procs, cpus, proxySites(scs))
			if err != nil {
				return err
			}
			targets["nginx"], bases["nginx"] = p, fmt.Sprintf("http://127.0.0.1:%d", port)
		}
		var edgeEnv []string
		if st != nil {
			var extra []string
			if withTLS {
				port, err := harness.FreePort()
				if err != nil {
					return err
				}
				tlsAddrs["tollgate"] = fmt.Sprintf("127.0.0.1:%d", port)
				extra = append(extra, "TOLLGATE_EDGE_TLS_ADDR="+tlsAddrs["tollgate"],
					"TOLLGATE_EDGE_TLS_CERT="+b.TLSCert, "TOLLGATE_EDGE_TLS_KEY="+b.TLSKey)
			}
			if err := st.StartEdge(ctx, procs, cpus, extra...); err != nil {
				return err
			}
			edgeEnv = extra
			targets["tollgate"], bases["tollgate"] = st.Edge, "http://"+st.EdgeAddr
			// ALPN h2 on the TLS listener, h2c with prior knowledge on the plain one.
			h2Addrs["tollgate"] = map[bool]string{true: tlsAddrs["tollgate"], false: st.EdgeAddr}
			b.perfAdmin = st.EdgeAdmin
		}
		for _, gw := range b.gateways {
			for _, sc := range scs {
				if sc.h2 {
					// Its own check, over HTTP/2: a gRPC route answers no HTTP/1.1 GET.
					if err := b.verifyH2(ctx, gw, targets[gw], sc, h2Addrs[gw][sc.tls]); err != nil {
						return fmt.Errorf("%s %s: %w", gw, sc.id, err)
					}
					continue
				}
				if err := b.WaitServed(ctx, targets[gw], bases[gw], sc.host, sc.paths, sc.headers); err != nil {
					return fmt.Errorf("%s %s: %w", gw, sc.id, err)
				}
				if err := b.verify(ctx, gw, sc, bases[gw]); err != nil {
					return fmt.Errorf("%s %s: %w", gw, sc.id, err)
				}
			}
		}
		addr := func(gw string, sc *perfScenario) string {
			if sc.h2 {
				return h2Addrs[gw][sc.tls]
			}
			if sc.tls {
				return tlsAddrs[gw]
			}
			return bases[gw]
		}
		for _, sc := range scs {
			if sc.ws {
				// S6 in rounds too, the gateways' order alternating, for a per-round ratio.
				for round := 1; round <= max(1, b.rnd.rounds); round++ {
					for _, gw := range roundOrder(b.gateways, round) {
						w, err := b.measureWS(ctx, gw, procs, sc, targets[gw], bases[gw])
						if err != nil {
							return err
						}
						w.round = round
						rep.ws = append(rep.ws, w)
						fmt.Fprintf(os.Stderr, "bench: %-4s %-8s procs=%d  round %d  %d tunnels  RSS +%.1f KiB/tunnel  %.1f µs CPU/upgrade  settling %.0f ms CPU  %.2f µs CPU/message  p99 %s  lost %d\n",
							sc.id, gw, procs, round, w.client.Opened, w.kibPerConn(), w.usPerUpgrade, w.settleCPUSec*1000, w.usPerMsg, figures.FmtUS(w.client.P99), w.client.Sent-w.client.Received)
					}
				}
				continue
			}
			for _, gw := range b.gateways {
				if b.rnd.rounds > 1 {
					continue // measured in rounds, below
				}
				r, err := b.measure(ctx, gw, procs, sc, targets[gw], addr(gw, sc))
				if err != nil {
					return err
				}
				rep.perf = append(rep.perf, r)
				fmt.Fprintf(os.Stderr, "bench: %-4s %-8s procs=%d  %8.0f req/s  p50 %s  p99 %s  %6.2f µs/req  busy %.2f  rss %s (peak %s)  non-2xx %d  sock-err %d%s\n",
					sc.id, gw, procs, r.load.qps(), figures.FmtUS(r.load.P50), figures.FmtUS(r.load.P99), r.usPerReq, r.busy,
					figures.FmtKB(r.rssKB), figures.FmtKB(r.rssPeakKB), r.load.Status, r.load.socketErrors(), r.split.String())
				b.settleAfterStorm(sc, gw, procs, targets[gw], r)
			}
		}
		if b.rnd.rounds > 1 {
			if err := b.sweepRounds(ctx, procs, scs, targets, addr, rep); err != nil {
				return err
			}
		}
		if p := targets["nginx"]; p != nil {
			p.Stop()
		}
		if st != nil {
			if err := b.traceRuns(ctx, st, procs, cpus, edgeEnv, scs, rep); err != nil {
				return err
			}
			st.StopEdge()
		}
	}
	return nil
}

// measure warms up, then runs the load (wrk, or the bench's own client for S9) for the
// window while reading the gateway's CPU time from /proc before and after, and sampling
// its RSS meanwhile. base is the gateway's URL, or its TLS address for a TLS scenario,
// or its HTTP/2 address for S1h2 and S1grpc.
func (b *bench) measure(ctx context.Context, gw string, procs int, sc *perfScenario, p *harness.Proc, base string) (perfResult, error) {
	return b.measureWarm(ctx, b.warmup, gw, procs, sc, p, base)
}

// measureWarm is measure with warm as the warm-up: shorter in the sweep's later rounds,
// whose gateway is already warm (rounds.go).
func (b *bench) measureWarm(ctx context.Context, warm time.Duration, gw string, procs int, sc *perfScenario, p *harness.Proc, base string) (perfResult, error) {
	tag := fmt.Sprintf("%s-%s-%d", sc.id, gw, procs)
	load := func(d time.Duration, tag string) (loadResult, error) {
		if sc.loader == "h2load" {
			return b.runH2load(ctx, sc, base, d, tag)
		}
		if sc.loader == "go" {
			return b.runClosed(ctx, closedSpec{Addr: strings.TrimPrefix(base, "http://"), TLS: sc.tls, Host: sc.host,
				Path: sc.hit, Conns: b.conns, Duration: d, NewConn: sc.newConn}, tag)
		}
		if sc.sign != nil {
			sc.headers = sc.sign()
		}
		return runWrk(ctx, b, loadTarget{url: base + sc.hit, host: sc.host, headers: sc.headers, method: sc.method, body: sc.body}, d, tag)
	}
	window := b.duration
	if sc.half {
		window = max(b.duration/2, 2*time.Second)
	}
	// S9h's client connections are new on every request anyway, and S9 just before it
	// warmed the same route's upstream pool: a warm-up would only lengthen the run.
	if warm > 0 && !sc.newConn {
		if _, err := load(warm, tag+"-warmup"); err != nil {
			return perfResult{}, err
		}
	}
	redis0 := 0.0
	if gw == "tollgate" {
		redis0 = b.redisCommands(b.perfAdmin)
	}
	var split0 splitCount
	if sc.id == "S4" {
		var err error
		if split0, err = b.countSplit(ctx); err != nil {
			return perfResult{}, err
		}
	}
	u0, err := harness.GroupUsage(p.Pid())
	if err != nil {
		return perfResult{}, p.Failure(err.Error())
	}
	peak := sampleRSS(p.Pid())
	sys0 := cpustat.Read()
	start := time.Now()
	lr, err := load(window, tag)
	wall := time.Since(start)
	sys1 := cpustat.Read()
	peakKB := peak()
	if err != nil {
		return perfResult{}, err
	}
	u1, err := harness.GroupUsage(p.Pid())
	if err != nil {
		return perfResult{}, p.Failure(err.Error())
	}
	r := perfResult{scenario: sc.id, gateway: gw, procs: procs, load: lr, rssKB: u1.RSSKB, rssPeakKB: max(peakKB, u1.RSSKB), rssStartKB: u0.RSSKB, sys0: sys0, sys1: sys1}
	if sc.id == "S4" {
		split1, err := b.countSplit(ctx)
		if err != nil {
			return r, err
		}
		r.split = &splitCount{main: split1.main - split0.main, canary: split1.canary - split0.canary}
	}
	if gw == "tollgate" && lr.Requests > 0 {
		r.redisPerReq = (b.redisCommands(b.perfAdmin) - redis0) / float64(lr.Requests)
	}
	r.cpuSec = u1.CPUSince(u0, b.tick)
	if lr.Requests > 0 {
		r.usPerReq = r.cpuSec * 1e6 / float64(lr.Requests)
	}
	r.busy = r.cpuSec / wall.Seconds()
	if lr.Requests == 0 {
		return r, fmt.Errorf("%s %s: the load generator completed no request (see %s)", gw, sc.id, p.Log())
	}
	return r, nil
}

// sampleRSS samples the process group's RSS every 100 ms until the returned function is
// called, which returns the largest sample (KB). A 1 MiB response buffered per
// connection shows here, not in the RSS read after the window.
func sampleRSS(pgid int) func() int64 {
	stop := make(chan struct{})
	done := make(chan int64)
	go func() {
		var peak int64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
				if u, err := harness.GroupUsage(pgid); err == nil {
					peak = max(peak, u.RSSKB)
				}
			}
		}
	}()
	return func() int64 { close(stop); return <-done }
}

// upstream starts the shared upstream on first use and returns its port.
func (b *bench) upstream(ctx context.Context) (int, error) {
	if b.upPort != 0 {
		return b.upPort, nil
	}
	port, err := harness.FreePort()
	if err != nil {
		return 0, err
	}
	if _, err := b.StartUpstream(ctx, port); err != nil {
		return 0, err
	}
	b.upPort = port
	return port, nil
}
