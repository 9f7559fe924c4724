package edge_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/tenants"
)

// backend is an upstream whose answers the test sets: status for traffic (0: 200),
// healthStatus for GET /health (0: 200). It counts both.
type backend struct {
	*httptest.Server
	name         string
	hits, checks atomic.Int64
	status       atomic.Int32
	healthStatus atomic.Int32
	bigBody      atomic.Bool  // failures carry a body large enough to be streamed
	delay        atomic.Int64 // before answering traffic, ns
}

func newBackend(t testing.TB, name string) *backend {
	b := &backend{name: name}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			b.checks.Add(1)
			if s := b.healthStatus.Load(); s != 0 {
				w.WriteHeader(int(s))
				return
			}
			_, _ = io.WriteString(w, "ok")
			return
		}
		b.hits.Add(1)
		if d := time.Duration(b.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Backend", name)
		if s := b.status.Load(); s != 0 {
			w.WriteHeader(int(s))
			if b.bigBody.Load() {
				_, _ = io.WriteString(w, strings.Repeat("x", 256<<10))
			}
			return
		}
		_, _ = io.WriteString(w, name)
	}))
	t.Cleanup(b.Close)
	return b
}

// resilientRoute files a route to the backends with up's resilience settings.
func (h *harness) resilientRoute(tenantID, id string, up tenants.Upstream, backends ...string) *tenants.Route {
	r := &tenants.Route{ID: id, TenantID: tenantID, Name: id, Paths: []string{"/" + id}, Auth: tenants.AuthNone, Upstream: up}
	for _, b := range backends {
		r.Upstream.Targets = append(r.Upstream.Targets, tenants.Target{URL: b, Weight: 1})
	}
	h.put(r)
	return r
}

// deadURL is a loopback URL nothing listens on.
func deadURL(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// TestActiveHealthCheck: a target failing its check leaves rotation (no request reaches
// it, none fails) and comes back once it passes again.
func TestActiveHealthCheck(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	a, b := newBackend(t, "a"), newBackend(t, "b")
	check := &tenants.HealthCheck{Path: "/health", IntervalMS: 100, TimeoutMS: 1000, HealthyThreshold: 2, UnhealthyThreshold: 2}
	h.resilientRoute(acme, "api", tenants.Upstream{HealthCheck: check}, a.URL, b.URL)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if a.checks.Load() < 2 || b.checks.Load() < 2 {
			return fmt.Sprintf("checks: a %d, b %d", a.checks.Load(), b.checks.Load())
		}
		return ""
	})
	if n := h.e.HealthCheckers(); n != 2 {
		t.Errorf("%d health checkers, want one per target", n)
	}
	for range 10 {
		if r := h.get(host, "/api"); r.status != 200 {
			t.Fatalf("healthy: %s", r)
		}
	}
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Fatalf("healthy targets share traffic: a %d, b %d", a.hits.Load(), b.hits.Load())
	}

	a.healthStatus.Store(503)
	waitFor(t, 10*time.Second, func() string {
		if n := h.metric("tollgate_edge_upstream_health_changes_total", map[string]string{"route": "api", "state": "unhealthy"}); n != 1 {
			return fmt.Sprintf("a not marked unhealthy (%v changes)", n)
		}
		return ""
	})
	before := a.hits.Load()
	for range 20 {
		if r := h.get(host, "/api"); r.status != 200 || r.header.Get("X-Backend") != "b" {
			t.Fatalf("a is out: want b's 200, got %s from %q", r, r.header.Get("X-Backend"))
		}
	}
	if n := a.hits.Load() - before; n != 0 {
		t.Fatalf("unhealthy a got %d requests", n)
	}

	a.healthStatus.Store(0)
	waitFor(t, 10*time.Second, func() string {
		if r := h.get(host, "/api"); r.header.Get("X-Backend") != "a" {
			return "a not back in rotation: " + r.String()
		}
		return ""
	})
	if n := h.metric("tollgate_edge_upstream_health_changes_total", map[string]string{"route": "api", "state": "healthy"}); n != 1 {
		t.Errorf("healthy changes %v, want 1", n)
	}

	// Every target out: 503 no_healthy_upstream, and back when one passes.
	a.healthStatus.Store(500)
	b.healthStatus.Store(500)
	waitFor(t, 10*time.Second, func() string {
		if r := h.get(host, "/api"); r.status != 503 || r.errCode() != tenants.ENoHealthyUpstream {
			return "want 503 no_healthy_upstream, got " + r.String()
		}
		return ""
	})
	if n := h.metric("tollgate_edge_upstream_errors_total", map[string]string{"kind": "no_healthy_upstream"}); n == 0 {
		t.Error("no_healthy_upstream not counted in tollgate_edge_upstream_errors_total")
	}
	b.healthStatus.Store(0)
	waitFor(t, 10*time.Second, func() string {
		if r := h.get(host, "/api"); r.status != 200 {
			return "b not back: " + r.String()
		}
		return ""
	})
}

// TestHealthCheckersStop: a route's checkers stop when the route changes (its new
// upstream gets its own), when it is deleted, when its tenant is, and at shutdown.
func TestHealthCheckersStop(t *testing.T) {
	var h *harness
	// Registered before newHarness, so it runs after the harness's Shutdown.
	t.Cleanup(func() {
		if h != nil && h.e.HealthCheckers() != 0 {
			t.Errorf("%d health checkers left after Shutdown", h.e.HealthCheckers())
		}
	})
	h = newHarness(t)
	acme := h.tenant("acme")
	beta := h.tenant("beta")
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	check := &tenants.HealthCheck{Path: "/health", IntervalMS: 100}
	h.resilientRoute(acme, "api", tenants.Upstream{HealthCheck: check}, a.URL, b.URL, c.URL)
	h.resilientRoute(acme, "plain", tenants.Upstream{}, a.URL)
	h.resilientRoute(beta, "api", tenants.Upstream{HealthCheck: check}, a.URL)
	// A canary's upstream is checked like the route's own.
	canary := &tenants.Route{ID: "canaried", TenantID: acme, Name: "canaried", Paths: []string{"/canaried"}, Auth: tenants.AuthNone,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: a.URL, Weight: 1}}},
		Canary: &tenants.Canary{Weight: 10, Upstream: tenants.Upstream{
			Targets: []tenants.Target{{URL: b.URL, Weight: 1}, {URL: c.URL, Weight: 1}}, HealthCheck: check}},
	}
	h.put(canary)
	h.e.Loaded()
	want := func(n int64, why string) {
		t.Helper()
		waitFor(t, 5*time.Second, func() string {
			if got := h.e.HealthCheckers(); got != n {
				return fmt.Sprintf("%s: %d checkers, want %d", why, got, n)
			}
			return ""
		})
	}
	want(6, "loaded")
	h.del(tenants.ObjectKey(acme, tenants.KindRoute, "canaried"))
	want(4, "route with a canary deleted")
	// Changing another route keeps api's upstream (and its checkers).
	h.resilientRoute(acme, "plain", tenants.Upstream{}, b.URL)
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/plain"); r.header.Get("X-Backend") != "b" {
			return "plain not changed: " + r.String()
		}
		return ""
	})
	want(4, "other route changed")
	h.resilientRoute(acme, "api", tenants.Upstream{HealthCheck: check}, a.URL, b.URL)
	want(3, "route changed to two targets")
	h.del(tenants.ObjectKey(acme, tenants.KindRoute, "api"))
	want(1, "route deleted")
	h.del(tenants.TenantKey(beta))
	want(0, "tenant deleted")
	h.resilientRoute(acme, "api", tenants.Upstream{HealthCheck: check}, a.URL, b.URL)
	want(2, "route filed again")
}

// TestPassiveHealth: a target whose answers fail in a row is ejected and the others take
// its traffic without errors.
func TestPassiveHealth(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.status.Store(502)
	h.resilientRoute(acme, "api", tenants.Upstream{Passive: &tenants.PassiveHealth{Failures: 2, EjectMS: 60_000}}, a.URL, b.URL)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if n := h.metric("tollgate_edge_upstream_ejections_total", map[string]string{"route": "api"}); n != 1 {
			h.get(host, "/api")
			return fmt.Sprintf("a not ejected (%v ejections)", n)
		}
		return ""
	})
	before := a.hits.Load()
	for range 20 {
		if r := h.get(host, "/api"); r.status != 200 || r.header.Get("X-Backend") != "b" {
			t.Fatalf("a ejected: want b's 200, got %s", r)
		}
	}
	if a.hits.Load() != before {
		t.Fatal("ejected a got requests")
	}
}

// TestCircuitBreakerOpens: a target failing half its requests has its circuit opened.
func TestCircuitBreakerOpens(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.status.Store(503)
	cb := &tenants.CircuitBreaker{ErrorPercent: 50, MinRequests: 3, WindowMS: 60_000, OpenMS: 60_000}
	h.resilientRoute(acme, "api", tenants.Upstream{CircuitBreaker: cb}, a.URL, b.URL)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if n := h.metric("tollgate_edge_upstream_breaker_opens_total", map[string]string{"route": "api"}); n != 1 {
			h.get(host, "/api")
			return fmt.Sprintf("a's circuit not open (%v opens)", n)
		}
		return ""
	})
	for range 20 {
		if r := h.get(host, "/api"); r.status != 200 {
			t.Fatalf("a's circuit is open: want b's 200, got %s", r)
		}
	}
}
