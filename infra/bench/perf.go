package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
	jwt      *jwtSetup
}

// jwtSetup is S2j's identity provider: an RSA key whose public half is the tenant's
// inline JWK, and one RS256 token signed with it (clients reuse their token, so the
// edge verifies its signature once and then answers from its verified-token cache).
type jwtSetup struct {
	key    *rsa.PrivateKey
	token  string
	issuer string
}

const (
	s2jIssuer   = "https://idp.bench.example"
	s2jAudience = "bench-api"
	s2jConsumer = "bench-client"
)

func newJWTSetup() (*jwtSetup, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": s2jIssuer, "aud": s2jAudience, "sub": s2jConsumer, "roles": []string{"reader"},
		"iat": now.Unix(), "exp": now.Add(24 * time.Hour).Unix(),
	})
	tok.Header["kid"] = "bench-1"
	signed, err := tok.SignedString(k)
	if err != nil {
		return nil, err
	}
	return &jwtSetup{key: k, token: signed, issuer: s2jIssuer}, nil
}

// issuerBody is the tenant's issuer: the key inline, RS256.
func (j *jwtSetup) issuerBody() map[string]any {
	enc := base64.RawURLEncoding.EncodeToString
	return map[string]any{
		"issuer": j.issuer, "audiences": []string{s2jAudience}, "algorithms": []string{"RS256"},
		"keys": []any{map[string]any{"kty": "RSA", "kid": "bench-1", "alg": "RS256", "use": "sig",
			"n": enc(j.key.N.Bytes()), "e": enc(big.NewInt(int64(j.key.E)).Bytes())}},
	}
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
			key := "bench-" + randomHex(16) // replaced by the key Tollgate issues when it runs
			out = append(out, &perfScenario{id: "S2", desc: desc,
				host: "bench.localhost", hit: "/keyed", paths: []string{"/keyed"},
				key: key, headers: map[string]string{"X-API-Key": key}, limit: b.s2Limit})
		case "S2j":
			// Built here, not at configuration, so an nginx-only run checks the same token.
			j, err := newJWTSetup()
			if err != nil {
				panic(err) // crypto/rand does not fail on Linux
			}
			out = append(out, &perfScenario{id: "S2j",
				desc: "JWT RS256 + policy + rate limit (never reached); nginx: exact Authorization match + limit_req",
				host: "jwt.localhost", hit: "/orders/1", paths: []string{"/orders/1"},
				headers: map[string]string{"Authorization": "Bearer " + j.token}, limit: true, jwt: j})
		case "S2l", "S2x", "S2a":
			out = append(out, flowPerfScenario(id))
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
func proxySites(scs []*perfScenario) []proxySite {
	var sites []proxySite
	idx := map[string]int{}
	for _, sc := range scs {
		i, ok := idx[sc.host]
		if !ok {
			i = len(sites)
			idx[sc.host] = i
			sites = append(sites, proxySite{host: sc.host})
		}
		for _, p := range sc.paths {
			loc := proxyLoc{path: p, key: sc.key, limit: sc.limit}
			if sc.jwt != nil {
				loc.authz = "Bearer " + sc.jwt.token
			}
			sites[i].locs = append(sites[i].locs, loc)
		}
	}
	return sites
}

// configureTollgate creates the scenarios' tenants, routes, consumer and key through the
// management API.
func (b *bench) configureTollgate(ctx context.Context, s *stack, upURL string, scs []*perfScenario) error {
	tenants := map[string]bool{}
	for _, sc := range scs {
		slug := strings.TrimSuffix(sc.host, ".localhost")
		if !tenants[slug] {
			if sc.id == "S2j" {
				// Its own tenant on the platform plan without limits: only the route's
				// never-reached limit is counted, as nginx's limit_req.
				if err := s.client.call(ctx, "POST", "/v1/tenants", map[string]any{"slug": slug, "name": slug, "plan": "unlimited"}, nil); err != nil {
					return err
				}
			} else if _, err := s.client.createTenant(ctx, slug); err != nil {
				return err
			}
			tenants[slug] = true
		}
		switch sc.id {
		case "S1":
			if err := s.client.call(ctx, "POST", "/v1/tenants/"+slug+"/routes", routeBody("r1", sc.hit, upURL, "none", false), nil); err != nil {
				return err
			}
		case "S2":
			var c, k created
			if err := s.client.call(ctx, "POST", "/v1/tenants/"+slug+"/consumers", map[string]any{"name": "bench-client"}, &c); err != nil {
				return err
			}
			if err := s.client.call(ctx, "POST", "/v1/tenants/"+slug+"/consumers/"+c.ID+"/keys", nil, &k); err != nil {
				return err
			}
			if k.Key == "" {
				return fmt.Errorf("POST /v1/tenants/%s/consumers/%s/keys returned no key", slug, c.ID)
			}
			sc.key = k.Key
			sc.headers = map[string]string{"X-API-Key": k.Key}
			if err := s.client.call(ctx, "POST", "/v1/tenants/"+slug+"/routes", routeBody("keyed", sc.hit, upURL, "key", sc.limit), nil); err != nil {
				return err
			}
		case "S2j":
			if err := s.client.call(ctx, "POST", "/v1/tenants/"+slug+"/jwt-issuers", sc.jwt.issuerBody(), nil); err != nil {
				return err
			}
			policy := map[string]any{
				"rules": [][]string{{"reader", "/orders/:id", "GET"}, {"*", "/orders/admin/*", "*", "deny"}},
				"roles": [][]string{{"ops", "reader"}},
			}
			if err := s.client.call(ctx, "PUT", "/v1/tenants/"+slug+"/policy", policy, nil); err != nil {
				return err
			}
			r := routeBody("orders", "/orders", upURL, "jwt", sc.limit)
			r["policy"] = true
			if err := s.client.call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil); err != nil {
				return err
			}
		case "S2l", "S2x", "S2a":
			if err := b.configureFlowScenario(ctx, s, slug, upURL, sc); err != nil {
				return err
			}
		case "S4r":
			start := time.Now()
			err := s.client.createRoutes(ctx, slug, len(sc.paths), b.workers, func(i int) map[string]any {
				return routeBody(fmt.Sprintf("route-%d", i), sc.paths[i], upURL, "none", false)
			}, nil)
			if err != nil {
				return err
			}
			d := time.Since(start)
			fmt.Fprintf(os.Stderr, "bench: S4r: created %d routes in %s (%.0f/s, %d clients)\n",
				len(sc.paths), d.Round(time.Millisecond), float64(len(sc.paths))/d.Seconds(), b.workers)
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

	var st *stack
	if b.has("tollgate") {
		// The api is idle while measuring; it stays off the gateway's CPU.
		if st, err = b.newStack(ctx, "perf", b.loadCPUs); err != nil {
			return err
		}
		if err := b.configureTollgate(ctx, st, upURL, scs); err != nil {
			return err
		}
	}

	for _, procs := range b.cores {
		cpus := gatewayCPUs(procs)
		targets := map[string]*proc{}
		bases := map[string]string{}
		if b.has("nginx") {
			port, err := freePort()
			if err != nil {
				return err
			}
			p, err := startProxy(ctx, b, port, upPort, procs, cpus, proxySites(scs))
			if err != nil {
				return err
			}
			targets["nginx"], bases["nginx"] = p, fmt.Sprintf("http://127.0.0.1:%d", port)
		}
		if st != nil {
			if err := st.startEdge(ctx, procs, cpus); err != nil {
				return err
			}
			targets["tollgate"], bases["tollgate"] = st.edge, "http://"+st.edgeAddr
			b.perfAdmin = st.edgeAdmin
		}
		for _, gw := range b.gateways {
			for _, sc := range scs {
				if err := waitServed(ctx, b, targets[gw], bases[gw], sc.host, sc.paths, sc.headers); err != nil {
					return fmt.Errorf("%s %s: %w", gw, sc.id, err)
				}
			}
		}
		for _, sc := range scs {
			for _, gw := range b.gateways {
				r, err := b.measure(ctx, gw, procs, sc, targets[gw], bases[gw])
				if err != nil {
					return err
				}
				rep.perf = append(rep.perf, r)
				fmt.Fprintf(os.Stderr, "bench: %-4s %-8s procs=%d  %8.0f req/s  p50 %s  p99 %s  %6.2f µs/req  busy %.2f  rss %s  non-2xx %d  sock-err %d\n",
					sc.id, gw, procs, r.load.qps(), fmtUS(r.load.P50), fmtUS(r.load.P99), r.usPerReq, r.busy,
					fmtKB(r.rssKB), r.load.Status, r.load.socketErrors())
			}
		}
		if p := targets["nginx"]; p != nil {
			p.stop()
		}
		if st != nil {
			st.stopEdge()
		}
	}
	return nil
}

// measure warms up, then runs wrk for the window while reading the gateway's CPU time from
// /proc before and after.
func (b *bench) measure(ctx context.Context, gw string, procs int, sc *perfScenario, p *proc, base string) (perfResult, error) {
	t := loadTarget{url: base + sc.hit, host: sc.host, headers: sc.headers}
	tag := fmt.Sprintf("%s-%s-%d", sc.id, gw, procs)
	if b.warmup > 0 {
		if _, err := runWrk(ctx, b, t, b.warmup, tag+"-warmup"); err != nil {
			return perfResult{}, err
		}
	}
	redis0 := 0.0
	if gw == "tollgate" {
		redis0 = b.redisCommands(b.perfAdmin)
	}
	u0, err := groupUsage(p.pid())
	if err != nil {
		return perfResult{}, p.failure(err.Error())
	}
	start := time.Now()
	lr, err := runWrk(ctx, b, t, b.duration, tag)
	wall := time.Since(start)
	if err != nil {
		return perfResult{}, err
	}
	u1, err := groupUsage(p.pid())
	if err != nil {
		return perfResult{}, p.failure(err.Error())
	}
	r := perfResult{scenario: sc.id, gateway: gw, procs: procs, load: lr, rssKB: u1.rssKB}
	if gw == "tollgate" && lr.Requests > 0 {
		r.redisPerReq = (b.redisCommands(b.perfAdmin) - redis0) / float64(lr.Requests)
	}
	r.cpuSec = float64(u1.ticks-u0.ticks) / float64(b.tick)
	if lr.Requests > 0 {
		r.usPerReq = r.cpuSec * 1e6 / float64(lr.Requests)
	}
	r.busy = r.cpuSec / wall.Seconds()
	if lr.Requests == 0 {
		return r, fmt.Errorf("%s %s: wrk completed no request (see %s)", gw, sc.id, p.log)
	}
	return r, nil
}

// upstream starts the shared upstream on first use and returns its port.
func (b *bench) upstream(ctx context.Context) (int, error) {
	if b.upPort != 0 {
		return b.upPort, nil
	}
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	if _, err := startUpstream(ctx, b, port); err != nil {
		return 0, err
	}
	b.upPort = port
	return port, nil
}
