package edge_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// The per-node series APISIX's and Kong's users read: the exact status code (a class for
// unlisted codes), the upstream/gateway latency split and body bytes, all labelled with
// the edge's id, on the admin listener's /metrics.
func TestNodeMetrics(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	up.setDelay(30 * time.Millisecond)
	a := h.tenant("a")
	h.route(a, "r", []string{"/"}, nil, "", up.URL)
	h.e.Loaded()
	for range 3 {
		if r := h.get("a."+domain, "/x"); r.status != 200 {
			t.Fatal(r)
		}
	}
	if r := send(t, h.public, "POST", "a."+domain, "/x", []string{"Content-Type: text/plain"}, "hello"); r.status != 200 {
		t.Fatal(r)
	}
	if r := h.get("a."+domain, "/%zz"); r.status != 400 {
		t.Fatalf("bad path: %v", r)
	}
	node := map[string]string{"node": "test", "tenant": "a", "route": "r"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for k, v := range node {
			m[k] = v
		}
		return m
	}
	if got := h.metric("tollgate_edge_responses_total", with("code", "200")); got != 4 {
		t.Errorf("code 200: %v, want 4", got)
	}
	if got := h.metric("tollgate_edge_responses_total", map[string]string{"node": "test", "tenant": "a", "code": "400"}); got != 1 {
		t.Errorf("code 400: %v, want 1", got)
	}
	if got := h.metric("tollgate_edge_upstream_duration_seconds", node); got != 4 {
		t.Errorf("upstream observations: %v, want 4 (only the proxied requests)", got)
	}
	if got := h.metric("tollgate_edge_gateway_duration_seconds", map[string]string{"node": "test", "tenant": "a"}); got != 5 {
		t.Errorf("gateway observations: %v, want 5", got)
	}
	if got := h.metric("tollgate_edge_request_bytes_total", node); got != 5 {
		t.Errorf("request bytes: %v, want 5", got)
	}
	if got := h.metric("tollgate_edge_response_bytes_total", node); got < 4*50 {
		t.Errorf("response bytes: %v, want the four echo bodies", got)
	}

	// The upstream's delay lands in the upstream histogram, not the gateway's.
	body := scrapeAdmin(t, h.admin)
	for _, want := range []string{
		`tollgate_edge_responses_total{code="200",node="test",route="r",tenant="a"} 4`,
		`tollgate_edge_upstream_duration_seconds_bucket{node="test",route="r",tenant="a",le="0.025"} 0`,
		`tollgate_edge_gateway_duration_seconds_bucket{node="test",route="r",tenant="a",le="0.025"} 4`,
		`http_requests_total{gateway="tollgate",route="r",status="2xx",tenant="a"} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A deleted route frees its label values: its per-node series go with it.
	h.del(tenants.ObjectKey(a, tenants.KindRoute, "r"))
	waitFor(t, 2*time.Second, func() string {
		for _, name := range []string{"tollgate_edge_responses_total", "tollgate_edge_upstream_duration_seconds", "tollgate_edge_gateway_duration_seconds", "tollgate_edge_request_bytes_total", "tollgate_edge_response_bytes_total"} {
			if got := h.metric(name, node); got != 0 {
				return fmt.Sprintf("%s still has the deleted route's series (%v)", name, got)
			}
		}
		return ""
	})
}

// A status without its own series is counted under its class, so a route has a bounded
// number of code series whatever its upstream answers.
func TestNodeMetricsUnlistedCode(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	up.hook = func(w http.ResponseWriter) { w.WriteHeader(299) }
	a := h.tenant("a")
	h.route(a, "r", []string{"/"}, nil, "", up.URL)
	h.e.Loaded()
	if r := h.get("a."+domain, "/"); r.status != 299 {
		t.Fatal(r)
	}
	if got := h.metric("tollgate_edge_responses_total", map[string]string{"tenant": "a", "code": "2xx"}); got != 1 {
		t.Errorf("code 2xx: %v, want 1", got)
	}
}

func scrapeAdmin(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}
