package edge_test

import (
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// TestRetries: a GET that gets 502 is sent again to the other target; a POST is not,
// unless its first attempt never connected.
func TestRetries(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	bad, good := newBackend(t, "bad"), newBackend(t, "good")
	bad.status.Store(502)
	retries := &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 100}
	h.resilientRoute(acme, "api", tenants.Upstream{Retries: retries}, bad.URL, good.URL)
	h.resilientRoute(acme, "dead", tenants.Upstream{Retries: retries}, deadURL(t), good.URL)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/api"); r.status != 200 {
			return r.String()
		}
		return ""
	})

	badBefore, goodBefore := bad.hits.Load(), good.hits.Load()
	for range 10 {
		if r := h.get(host, "/api"); r.status != 200 || r.body != "good" {
			t.Fatalf("GET: want good's 200 (retried when bad answered), got %s", r)
		}
	}
	badN, goodN := bad.hits.Load()-badBefore, good.hits.Load()-goodBefore
	if badN != 5 || goodN != 10 {
		t.Fatalf("10 GETs: bad got %d, good %d; want 5 (each retried) and 10", badN, goodN)
	}
	if n := h.metric("tollgate_edge_upstream_retries_total", map[string]string{"route": "api", "result": "success"}); n < 5 {
		t.Errorf("successful retries counted %v, want ≥ 5", n)
	}

	badBefore, goodBefore = bad.hits.Load(), good.hits.Load()
	failed := 0
	for range 10 {
		r := send(t, h.public, "POST", host, "/api", nil, `{"x":1}`)
		switch {
		case r.status == 502 && r.header.Get("X-Backend") == "bad":
			failed++ // the upstream's own 502, passed on
		case r.status == 200:
		default:
			t.Fatalf("POST: %s", r)
		}
	}
	badN, goodN = bad.hits.Load()-badBefore, good.hits.Load()-goodBefore
	if failed != 5 || badN != 5 || goodN != 5 {
		t.Fatalf("10 POSTs: %d failed, bad got %d, good %d; want 5, 5, 5 (no retry)", failed, badN, goodN)
	}

	// A POST whose target refused the connection never reached it: retried.
	goodBefore = good.hits.Load()
	for range 6 {
		r := send(t, h.public, "POST", host, "/dead", nil, `{"x":1}`)
		if r.status != 200 || r.body != "good" {
			t.Fatalf("POST to a dead target: want a retry to good, got %s", r)
		}
	}
	if n := good.hits.Load() - goodBefore; n != 6 {
		t.Fatalf("good got %d of 6 POSTs", n)
	}
}

// TestRetryBudget: once retries use up the budget, failures go to the client as they are.
func TestRetryBudget(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	bad := newBackend(t, "bad")
	bad.status.Store(503)
	// No request volume to speak of: min_per_second 1 allows 10 retries in 10 s.
	h.resilientRoute(acme, "api", tenants.Upstream{Retries: &tenants.Retries{Attempts: 5, BudgetPercent: 1, MinPerSecond: 1}}, bad.URL)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/api"); r.status != 503 || r.header.Get("X-Backend") != "bad" {
			return r.String()
		}
		return ""
	})
	for range 5 {
		if r := h.get(host, "/api"); r.status != 503 || r.header.Get("X-Backend") != "bad" {
			t.Fatalf("want the upstream's 503, got %s", r)
		}
	}
	// Each request tries at most 1 + 5 times; the budget's 10 retries are spent.
	if n := bad.hits.Load(); n > 6+10 {
		t.Fatalf("%d upstream hits for 6 requests: the budget of 10 retries was exceeded", n)
	}
	if n := h.metric("tollgate_edge_upstream_retries_total", map[string]string{"route": "api", "result": "budget_exhausted"}); n == 0 {
		t.Error("budget_exhausted retries not counted")
	}
	if n := h.metric("tollgate_edge_upstream_retries_total", map[string]string{"route": "api", "result": "failure"}); n == 0 {
		t.Error("failed retries not counted")
	}
}

// TestRetryDiscardsStreamedFailure: a failed answer whose body streams is released
// before the retry, and the client gets the retry's answer whole.
func TestRetryDiscardsStreamedFailure(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	bad, good := newBackend(t, "bad"), newBackend(t, "good")
	bad.status.Store(503)
	bad.bigBody.Store(true)
	h.resilientRoute(acme, "api", tenants.Upstream{Retries: &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 100}}, bad.URL, good.URL)
	h.e.Loaded()
	host := "acme." + domain
	for i := range 10 {
		var r result
		waitFor(t, 5*time.Second, func() string {
			if r = h.get(host, "/api"); r.status == 404 {
				return r.String()
			}
			return ""
		})
		if r.status != 200 || r.body != "good" {
			t.Fatalf("request %d: want good's 200, got %d %.100s", i, r.status, r.body)
		}
	}
	if bad.hits.Load() == 0 {
		t.Fatal("bad never tried")
	}
}

// TestRetryStreamedBodyNotRetried: a request body too big to hold in memory streams to
// the upstream and cannot be sent twice.
func TestRetryStreamedBodyNotRetried(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	bad, good := newBackend(t, "bad"), newBackend(t, "good")
	bad.status.Store(502)
	h.resilientRoute(acme, "api", tenants.Upstream{Retries: &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 100}}, bad.URL, good.URL)
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/api"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	big := strings.Repeat("b", 256<<10) // over the edge's 64 KiB in-memory body
	badBefore, goodBefore := bad.hits.Load(), good.hits.Load()
	failed := 0
	for range 6 {
		r := send(t, h.public, "PUT", host, "/api", nil, big)
		switch {
		case r.status == 502 && r.header.Get("X-Backend") == "bad":
			failed++
		case r.status == 200:
		default:
			t.Fatalf("PUT: %d %.100s", r.status, r.body)
		}
	}
	if badN, goodN := bad.hits.Load()-badBefore, good.hits.Load()-goodBefore; failed != 3 || badN != 3 || goodN != 3 {
		t.Fatalf("6 streamed PUTs: %d failed, bad got %d, good %d; want 3 each (no retry)", failed, badN, goodN)
	}
	// The same PUT with a small body is retried.
	for range 6 {
		if r := send(t, h.public, "PUT", host, "/api", nil, "small"); r.status != 200 {
			t.Fatalf("small PUT: %s", r)
		}
	}
}

// TestRetryWithinTimeout: an attempt that used up the route's timeout is not retried.
func TestRetryWithinTimeout(t *testing.T) {
	h := newHarness(t)
	acme := h.tenant("acme")
	slow := newBackend(t, "slow")
	slow.delay.Store(int64(3 * time.Second))
	r := h.resilientRoute(acme, "api", tenants.Upstream{Retries: &tenants.Retries{Attempts: 3, BudgetPercent: 100, MinPerSecond: 100}}, slow.URL)
	r.TimeoutMS = 200
	h.put(r)
	h.e.Loaded()
	host := "acme." + domain
	var res result
	waitFor(t, 5*time.Second, func() string {
		if res = h.get(host, "/api"); res.status == 404 {
			return res.String()
		}
		return ""
	})
	if res.status != 504 || res.errCode() != tenants.EUpstreamTimeout {
		t.Fatalf("want 504 upstream_timeout, got %s", res)
	}
	if n := slow.hits.Load(); n != 1 {
		t.Fatalf("slow got %d attempts, want 1: no time was left to retry", n)
	}
}
