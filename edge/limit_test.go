package edge_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"tollgate/edge"
	"tollgate/tenants"
)

// limitedTenant files a tenant on a platform plan with the given limits.
func (h *harness) limitedTenant(slug string, limits *tenants.PlatformPlan) string {
	id := "t-" + slug
	h.put(&tenants.Tenant{ID: id, Slug: slug, Name: slug, PlatformPlan: limits.Name, Limits: limits})
	return id
}

func (h *harness) limitedRoute(tenantID, id, path, auth string, rl *tenants.RateLimit, upstream string) {
	h.put(&tenants.Route{ID: id, TenantID: tenantID, Name: id, Paths: []string{path}, Auth: auth, RateLimit: rl,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upstream, Weight: 1}}}})
}

// rateHeaders is RateLimit-Limit and RateLimit-Remaining of r, -1 when absent.
func rateHeaders(r result) (limit, remaining int) {
	num := func(k string) int {
		v := r.header.Get(k)
		if v == "" {
			return -1
		}
		n, _ := strconv.Atoi(v)
		return n
	}
	return num("RateLimit-Limit"), num("RateLimit-Remaining")
}

func wantLimited(t *testing.T, r result, status int, code string, limit, remaining int) {
	t.Helper()
	if r.status != status || (code != "" && r.errCode() != code) {
		t.Fatalf("got %s, want %d %s", r, status, code)
	}
	if l, rem := rateHeaders(r); l != limit || rem != remaining {
		t.Fatalf("RateLimit-Limit %d, -Remaining %d; want %d, %d (%s)", l, rem, limit, remaining, r)
	}
	if limit >= 0 && r.header.Get("RateLimit-Reset") == "" {
		t.Fatalf("no RateLimit-Reset: %v", r.header)
	}
	if status == 429 || status == 503 {
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || ra < 1 {
			t.Fatalf("Retry-After %q on a %d", r.header.Get("Retry-After"), status)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
	} else if r.header.Get("Retry-After") != "" {
		t.Fatalf("Retry-After on a %d", status)
	}
}

// The tenant's platform plan limits the tenant: headers on every answer, a 429 envelope
// with Retry-After past the burst, the upstream never sees a refused request, and
// /readyz and the metrics say how the limiter runs.
func TestLimitTenantPlan(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	// rpm: the bucket does not refill during the test.
	acme := h.limitedTenant("acme", &tenants.PlatformPlan{Name: "small", RateLimit: &tenants.RateLimit{RPM: 60, Burst: 3}})
	h.route(acme, "r1", []string{"/a"}, nil, "", up.URL)
	free := h.tenant("free")
	h.route(free, "r2", []string{"/a"}, nil, "", up.URL)
	h.e.Loaded()

	host := "acme." + domain
	for i := 0; i < 3; i++ {
		wantLimited(t, h.get(host, "/a"), 200, "", 3, 2-i)
	}
	r := h.get(host, "/a")
	wantLimited(t, r, 429, tenants.ERateLimited, 3, 0)
	var env struct {
		Error struct {
			Code, Message string
			RequestID     string `json:"request_id"`
		}
	}
	if err := json.Unmarshal([]byte(r.body), &env); err != nil || env.Error.Message == "" || env.Error.RequestID != r.header.Get("X-Request-Id") {
		t.Fatalf("envelope %s: %v", r.body, err)
	}
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %d, want about 1 s (one request per second)", ra)
	}
	if n := up.hits.Load(); n != 3 {
		t.Fatalf("the upstream saw %d requests, want 3", n)
	}
	// Another tenant is not limited and gets no headers.
	if r := h.get("free."+domain, "/a"); r.status != 200 || r.header.Get("RateLimit-Limit") != "" {
		t.Fatalf("unlimited tenant: %s %v", r, r.header)
	}
	if got := h.metric("tollgate_edge_limited_total", map[string]string{"code": "rate_limited"}); got != 1 {
		t.Fatalf("tollgate_edge_limited_total{rate_limited} = %v", got)
	}
	resp, err := http.Get("http://" + h.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ready struct {
		Status  string
		Limiter struct {
			Mode      string `json:"mode"`
			Degraded  bool   `json:"degraded"`
			LiveEdges int    `json:"live_edges"`
		}
	}
	if err := json.Unmarshal(body, &ready); err != nil || resp.StatusCode != 200 || ready.Status != "ready" ||
		ready.Limiter.Mode != "local" || ready.Limiter.Degraded || ready.Limiter.LiveEdges != 1 {
		t.Fatalf("/readyz %d %s", resp.StatusCode, body)
	}

	// A new plan applies at once; the counts carry over (same scope).
	h.put(&tenants.Tenant{ID: acme, Slug: "acme", Name: "acme", PlatformPlan: "small",
		Limits: &tenants.PlatformPlan{Name: "small", RateLimit: &tenants.RateLimit{RPM: 60, Burst: 5}}})
	waitFor(t, 2*time.Second, func() string {
		if l, _ := rateHeaders(h.get(host, "/a")); l != 5 {
			return "plan change not applied"
		}
		return ""
	})
}

// The tightest limit is the one reported and the one that refuses, across the tenant's
// plan, the consumer's plan, the route's own limit and a per-IP limit; a request one of
// them refuses consumes none of the others.
func TestLimitTightestWins(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	per := func(n, burst int, per string) *tenants.RateLimit {
		return &tenants.RateLimit{RPM: n, Burst: burst, Per: per, Mode: tenants.ModeLocal}
	}
	acme := h.limitedTenant("acme", &tenants.PlatformPlan{Name: "mid", RateLimit: &tenants.RateLimit{RPM: 60, Burst: 20}})
	h.put(&tenants.ConsumerPlan{ID: "p-gold", TenantID: acme, Name: "gold", RateLimit: &tenants.RateLimit{RPM: 60, Burst: 8}})
	h.put(&tenants.Consumer{ID: "c-1", TenantID: acme, Name: "one", Plan: "gold"})
	key := h.key(acme, "c-1", "k-1")
	h.limitedRoute(acme, "plain", "/plain", tenants.AuthKey, nil, up.URL)
	h.limitedRoute(acme, "tight", "/tight", tenants.AuthKey, per(60, 2, tenants.PerRoute), up.URL)
	h.limitedRoute(acme, "login", "/login", tenants.AuthNone, per(60, 3, tenants.PerIP), up.URL)
	h.limitedRoute(acme, "open", "/open", tenants.AuthNone, nil, up.URL)
	h.e.Loaded()
	host := "acme." + domain
	withKey := "X-API-Key: " + key

	// The consumer's plan (8) is tighter than the tenant's (20).
	wantLimited(t, h.get(host, "/plain", withKey), 200, "", 8, 7)
	// The route's own limit (2) is tighter still; past it the route refuses, and those
	// refusals cost neither the consumer nor the tenant anything.
	wantLimited(t, h.get(host, "/tight", withKey), 200, "", 2, 1)
	wantLimited(t, h.get(host, "/tight", withKey), 200, "", 2, 0)
	for i := 0; i < 5; i++ {
		wantLimited(t, h.get(host, "/tight", withKey), 429, tenants.ERateLimited, 2, 0)
	}
	// 3 admitted so far: the consumer has 5 left.
	wantLimited(t, h.get(host, "/plain", withKey), 200, "", 8, 4)
	// Without a key there is no consumer: only the tenant's limit (20, 4 taken).
	wantLimited(t, h.get(host, "/open"), 200, "", 20, 15)
	// Per client address: 3 for this client, then refused; the tenant keeps the rest.
	for i := 0; i < 3; i++ {
		wantLimited(t, h.get(host, "/login"), 200, "", 3, 2-i)
	}
	wantLimited(t, h.get(host, "/login"), 429, tenants.ERateLimited, 3, 0)
	wantLimited(t, h.get(host, "/open"), 200, "", 20, 11)
	// Drain the consumer: its plan refuses, and the tenant loses only what was admitted.
	for i := 3; i > 0; i-- {
		wantLimited(t, h.get(host, "/plain", withKey), 200, "", 8, i)
	}
	wantLimited(t, h.get(host, "/plain", withKey), 200, "", 8, 0)
	for i := 0; i < 4; i++ {
		wantLimited(t, h.get(host, "/plain", withKey), 429, tenants.ERateLimited, 8, 0)
	}
	wantLimited(t, h.get(host, "/open"), 200, "", 20, 6)
	if n := up.hits.Load(); n != 1+2+1+1+3+1+4+1 {
		t.Fatalf("the upstream saw %d requests, want 14", n)
	}
}

// A refused request consumes nothing: after a storm of refusals, the bucket refills at
// its rate as if they had never been sent.
func TestLimitRefusalsNotCounted(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.limitedRoute(acme, "r", "/r", tenants.AuthNone, &tenants.RateLimit{RPS: 4, Burst: 1, Mode: tenants.ModeLocal}, up.URL)
	h.e.Loaded()
	host := "acme." + domain
	wantLimited(t, h.get(host, "/r"), 200, "", 1, 0)
	for i := 0; i < 20; i++ {
		if r := h.get(host, "/r"); r.status != 429 {
			t.Fatalf("refusal %d: %s", i, r)
		}
	}
	// One emission interval (250 ms) after the admitted request, one more is admitted.
	time.Sleep(300 * time.Millisecond)
	wantLimited(t, h.get(host, "/r"), 200, "", 1, 0)
}

// A monthly quota: exactly N admitted, then 429 quota_exceeded until the month ends.
func TestLimitQuota(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(&tenants.ConsumerPlan{ID: "p-trial", TenantID: acme, Name: "trial", Quota: &tenants.Quota{Requests: 3}})
	h.put(&tenants.Consumer{ID: "c-1", TenantID: acme, Name: "one", Plan: "trial"})
	h.put(&tenants.Consumer{ID: "c-2", TenantID: acme, Name: "two", Plan: "trial"})
	k1, k2 := h.key(acme, "c-1", "k-1"), h.key(acme, "c-2", "k-2")
	h.route(acme, "r", []string{"/r"}, nil, tenants.AuthKey, up.URL)
	h.e.Loaded()
	host := "acme." + domain
	for i := 0; i < 3; i++ {
		wantLimited(t, h.get(host, "/r", "X-API-Key: "+k1), 200, "", 3, 2-i)
	}
	r := h.get(host, "/r", "X-API-Key: "+k1)
	wantLimited(t, r, 429, tenants.EQuotaExceeded, 3, 0)
	now := time.Now().UTC()
	monthEnd := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < int(time.Until(monthEnd).Seconds())-5 {
		t.Fatalf("Retry-After %d, want the end of the month", ra)
	}
	// Each consumer has its own quota.
	wantLimited(t, h.get(host, "/r", "X-API-Key: "+k2), 200, "", 3, 2)
}

// A tenant at its concurrency cap is refused at once with 503 overloaded and Retry-After,
// while another tenant's requests go through untouched.
func TestLimitConcurrencyIsolation(t *testing.T) {
	h := newHarness(t)
	slow := newUpstream(t, "slow")
	slow.setDelay(400 * time.Millisecond)
	fast := newUpstream(t, "fast")
	acme := h.limitedTenant("acme", &tenants.PlatformPlan{Name: "capped", Concurrency: 2})
	h.route(acme, "r", []string{"/r"}, nil, "", slow.URL)
	other := h.limitedTenant("other", &tenants.PlatformPlan{Name: "capped", Concurrency: 2})
	h.route(other, "r", []string{"/r"}, nil, "", fast.URL)
	h.e.Loaded()

	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := h.get("acme."+domain, "/r"); r.status != 200 {
				t.Errorf("in-flight request: %s", r)
			}
		}()
	}
	waitFor(t, 2*time.Second, func() string {
		if slow.hits.Load() < 2 {
			return "requests not in flight yet"
		}
		return ""
	})
	start := time.Now()
	r := h.get("acme."+domain, "/r")
	wantLimited(t, r, 503, tenants.EOverloaded, -1, -1)
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Fatalf("the refusal took %s: it must not wait", d)
	}
	for i := 0; i < 5; i++ {
		if r := h.get("other."+domain, "/r"); r.status != 200 {
			t.Fatalf("the other tenant: %s", r)
		}
	}
	wg.Wait()
	if r := h.get("acme."+domain, "/r"); r.status != 200 {
		t.Fatalf("after the in-flight requests ended: %s", r)
	}
	if got := h.metric("tollgate_edge_limited_total", map[string]string{"code": "overloaded"}); got != 1 {
		t.Fatalf("tollgate_edge_limited_total{overloaded} = %v", got)
	}
}

// Per-IP limits key on the peer address; X-Forwarded-For counts only from a trusted
// proxy, and then its rightmost address that is not a trusted proxy.
func TestLimitPerIPTrustedProxies(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(map[bool]string{false: "untrusted", true: "trusted"}[trusted], func(t *testing.T) {
			h := newHarness(t, func(c *edge.Config) {
				if trusted {
					c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
				}
			})
			up := newUpstream(t, "up")
			acme := h.tenant("acme")
			h.limitedRoute(acme, "login", "/login", tenants.AuthNone, &tenants.RateLimit{RPM: 60, Burst: 1, Per: tenants.PerIP}, up.URL)
			h.e.Loaded()
			host := "acme." + domain
			if r := h.get(host, "/login", "X-Forwarded-For: 203.0.113.1"); r.status != 200 {
				t.Fatal(r)
			}
			// Another claimed client, behind a trusted hop.
			r := h.get(host, "/login", "X-Forwarded-For: 203.0.113.2, 10.1.2.3")
			if trusted && r.status != 200 || !trusted && r.status != 429 {
				t.Fatalf("second client: %s", r)
			}
			// The first client again, spoofing an address in front of it.
			r = h.get(host, "/login", "X-Forwarded-For: 198.51.100.7, 203.0.113.1")
			if r.status != 429 {
				t.Fatalf("the first client again: %s", r)
			}
		})
	}
}
