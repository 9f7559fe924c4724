package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/tenants"
)

// Latency: 20 calls to a route whose upstream takes 30 ms are timed by the edge's meter,
// shipped as sketches in the usage batches, merged by billing and read back as
// percentiles per route and hour: the upstream's near its 30 ms, the gateway's apart
// from it, every call counted once.
func TestLatencyPercentilesAfter20Calls(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "latency")
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(slow.Close)
	rt := b.api.createRoute(b.slug, routeSpec("slow", "/slow", slow.URL, tenants.AuthNone))
	routeID := str(t, rt, "id")
	b.startBilling()
	_, e := b.startMeteredEdge("edge-lat", t.TempDir())
	eventually(t, 10*time.Second, "route served", func() error {
		r, err := e.do("GET", b.slug, "/slow/warm")
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	for i := 0; i < 20; i++ {
		if r := e.get(t, b.slug, "/slow/x"); r.Status != 200 {
			t.Fatalf("call %d: %s", i, r)
		}
	}
	var rep billing.LatencyReport
	eventually(t, usageDeadline, "latency of 21 calls", func() error {
		r := b.api.call("GET", "/v1/tenants/"+b.slug+"/usage/latency?route="+routeID, nil)
		if r.Status != 200 {
			return fmt.Errorf("%s", r)
		}
		rep = billing.LatencyReport{}
		if err := json.Unmarshal(r.Raw, &rep); err != nil {
			return err
		}
		if len(rep.Routes) != 1 || rep.Routes[0].Gateway.Count != 21 {
			return fmt.Errorf("latency %s, want 21 calls (the warm-up and 20)", r.Raw)
		}
		return nil
	})
	rr := rep.Routes[0]
	t.Logf("route %s: gateway %+v, upstream %+v", rr.RouteID, rr.Gateway, rr.Upstream)
	if rr.RouteID != routeID || rr.Upstream.Count != 21 || len(rep.Items) == 0 {
		t.Fatalf("report %+v", rep)
	}
	up, gw := rr.Upstream, rr.Gateway
	if up.P50 < 29 || up.P50 > up.P95 || up.P95 > up.P99 {
		t.Fatalf("upstream %+v, want p50 ≥ 29 ms (the upstream sleeps 30) and p50 ≤ p95 ≤ p99", up)
	}
	if gw.P50 <= 0 || gw.P50 >= up.P50 || gw.P50 > gw.P95 || gw.P95 > gw.P99 {
		t.Fatalf("gateway %+v, want a positive p50 under the upstream's and p50 ≤ p95 ≤ p99", gw)
	}
	// Every route: the same route (nothing else was called); another tenant cannot see it.
	all := b.api.call("GET", "/v1/tenants/"+b.slug+"/usage/latency", nil)
	if all.Status != 200 {
		t.Fatalf("every route: %s", all)
	}
	if r := b.api.call("GET", "/v1/tenants/"+b.slug+"/usage/latency?to=nonsense", nil); r.Status != 400 {
		t.Fatalf("bad to: %s", r)
	}
}
