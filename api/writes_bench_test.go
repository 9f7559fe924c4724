package api_test

import (
	"context"

	"golang.org/x/sync/errgroup"

	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/api"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

// The write benchmarks drive a real server over HTTP from 16 clients, as an operator's
// scripts would; the figures in docs/performance.md come from them:
//
//	go test -run '^$' -bench 'APIWritesRoutes|APIWritesTenants|APIWritesConfigs' -benchtime 10000x ./api/
//	go test -run '^$' -bench 'APIWritesBigConfig' -benchtime 1x ./api/

type benchAPI struct {
	b    *testing.B
	url  string
	http *http.Client
}

func newBenchAPI(b *testing.B) *benchAPI {
	b.Helper()
	db, _ := pgtest.Open(b, postgres.WithUpstreamAddressRule(policy))
	srv := api.New(api.Config{
		Tenants: db, Routes: db, Consumers: db, Plans: db, Tokens: db,
		JWTIssuers: db, AccessRules: db, Domains: db, EdgeDomain: "edge.test",
		AdminToken: adminToken, Upstreams: policy, Ready: db.Ping,
		RequestTimeout: 5 * time.Second, HeavyCalls: -1,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.App().Shutdown() })
	return &benchAPI{b: b, url: "http://" + ln.Addr().String(),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 2 * time.Minute}}
}

func (a *benchAPI) call(method, path string, body any, want int) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(method, a.url+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, out)
	}
	return nil
}

// fan runs n calls of fn over 16 clients and returns how long they took.
func (a *benchAPI) fan(n int, fn func(i int) error) time.Duration {
	// The first error stops handing out calls; those under way finish.
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(16)
	start := time.Now()
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(i) })
	}
	if err := g.Wait(); err != nil {
		a.b.Fatal(err)
	}
	return time.Since(start)
}

func benchRouteBody(name, path string) map[string]any {
	return map[string]any{"name": name, "paths": []string{path},
		"upstream": map[string]any{"targets": []map[string]any{{"url": "http://127.0.0.1:9"}}}}
}

// BenchmarkAPIWritesRoutes: b.N POST /v1/tenants/{slug}/routes into one tenant.
func BenchmarkAPIWritesRoutes(b *testing.B) {
	a := newBenchAPI(b)
	if err := a.call("POST", "/v1/tenants", map[string]any{"slug": "big", "plan": tenants.PlatformUnlimited}, 201); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	tenth := max(b.N/10, 1)
	var lastStart atomic.Int64
	start := time.Now()
	d := a.fan(b.N, func(i int) error {
		if i == b.N-tenth {
			lastStart.Store(int64(time.Since(start)))
		}
		return a.call("POST", "/v1/tenants/big/routes", benchRouteBody(fmt.Sprintf("r%06d", i), fmt.Sprintf("/r%06d", i)), 201)
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/d.Seconds(), "routes/s")
	if l := time.Duration(lastStart.Load()); l > 0 && d > l {
		b.ReportMetric(float64(tenth)/(d-l).Seconds(), "last-tenth-routes/s")
	}
}

// BenchmarkAPIWritesTenants: b.N POST /v1/tenants.
func BenchmarkAPIWritesTenants(b *testing.B) {
	a := newBenchAPI(b)
	b.ResetTimer()
	d := a.fan(b.N, func(i int) error {
		return a.call("POST", "/v1/tenants", map[string]any{"slug": fmt.Sprintf("t%07d", i)}, 201)
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/d.Seconds(), "tenants/s")
}

// BenchmarkAPIWritesConfigs: a document of 10 routes PUT to each of b.N tenants.
func BenchmarkAPIWritesConfigs(b *testing.B) {
	a := newBenchAPI(b)
	a.fan(b.N, func(i int) error {
		return a.call("POST", "/v1/tenants", map[string]any{"slug": fmt.Sprintf("d%07d", i), "plan": tenants.PlatformUnlimited}, 201)
	})
	b.ResetTimer()
	d := a.fan(b.N, func(i int) error {
		slug := fmt.Sprintf("d%07d", i)
		doc := map[string]any{"version": tenants.ConfigDocumentVersion, "tenant": slug}
		var routes []any
		for j := range 10 {
			routes = append(routes, benchRouteBody(fmt.Sprintf("r%02d", j), fmt.Sprintf("/r%02d", j)))
		}
		doc["routes"] = routes
		return a.call("PUT", "/v1/tenants/"+slug+"/config", doc, 200)
	})
	b.StopTimer()
	b.ReportMetric(float64(10*b.N)/d.Seconds(), "routes/s")
}

// BenchmarkAPIWritesBigConfig: a document of 50,000 routes PUT to a new tenant, b.N times.
func BenchmarkAPIWritesBigConfig(b *testing.B) {
	a := newBenchAPI(b)
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		slug := fmt.Sprintf("big%d", i)
		if err := a.call("POST", "/v1/tenants", map[string]any{"slug": slug, "plan": tenants.PlatformUnlimited}, 201); err != nil {
			b.Fatal(err)
		}
		var routes []any
		for j := range 50_000 {
			routes = append(routes, benchRouteBody(fmt.Sprintf("r%06d", j), fmt.Sprintf("/r%06d/{id}", j)))
		}
		doc := map[string]any{"version": tenants.ConfigDocumentVersion, "tenant": slug, "routes": routes}
		b.StartTimer()
		start := time.Now()
		if err := a.call("PUT", "/v1/tenants/"+slug+"/config", doc, 200); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/apply")
}
