package api_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"tollgate/api"
	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/usage"
	"tollgate/tenants/postgres"
)

// TestUsageAndExport: usage is tenant-scoped, the export needs the admin token (or the
// finance role), and both answer what billing folded, as the document says.
func TestUsageAndExport(t *testing.T) {
	t.Parallel()
	var store *billingpg.Store
	e := newEnv(t, func(c *api.Config) {
		store = billingpg.New(c.Tenants.(*postgres.DB).Pool())
		c.Usage = store
	})
	id := e.tenant("acme")
	e.tenant("other")
	other := e.token("other")

	now := time.Now().UTC()
	hour := billing.Hour(now)
	b := billingtest.Batch(1,
		billingtest.Record(id, hour, "", "", 200, true, 5),
		billingtest.Record(id, hour, "", "", 429, false, 2),
	)
	b.Records[0].FunctionUS = 1234 // the tenant's functions ran 1.234 ms
	if _, err := store.Fold(context.Background(), b); err != nil {
		t.Fatalf("fold: %v", err)
	}

	r := e.do("GET", "/v1/tenants/acme/usage", adminToken, nil).want(200)
	total := r.json["total"].(map[string]any)
	if total["requests"] != 7.0 || total["billable"] != 5.0 || total["function_us"] != 1234.0 {
		t.Fatalf("usage total %v, want 7 requests, 5 billable, 1234 µs of function time", total)
	}
	e.do("GET", "/v1/tenants/acme/usage?group_by=status&granularity=day", adminToken, nil).want(200)
	e.do("GET", "/v1/tenants/acme/usage?bogus=1", adminToken, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme/usage", other, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/tenants/acme/usage", "", nil).want(401)

	// Latency: per route and hour, tenant-scoped, bad parameters refused.
	lb := billingtest.Batch(2)
	bins := make([]uint64, usage.SketchBins)
	for i := 1; i <= 20; i++ {
		bins[usage.SketchBin(time.Duration(i)*time.Millisecond)]++
	}
	lb.Latencies = []usage.Latency{{TenantID: id, RouteID: "r1", Hour: hour, Gateway: usage.EncodeSketch(usage.SketchFromBins(bins)), Upstream: usage.EncodeSketch(usage.SketchFromBins(bins))}}
	if _, err := store.Fold(context.Background(), lb); err != nil {
		t.Fatalf("fold latency: %v", err)
	}
	r = e.do("GET", "/v1/tenants/acme/usage/latency?route=r1", adminToken, nil).want(200)
	items := r.items()
	if len(items) != 1 {
		t.Fatalf("latency items %s", r.body)
	}
	up := items[0].(map[string]any)["upstream"].(map[string]any)
	if up["count"] != 20.0 || up["p50"].(float64) < 9.8 || up["p50"].(float64) > 10.2 || up["p99"].(float64) < 18.6 {
		t.Fatalf("latency upstream %v, want 20 times, p50 ≈ 10 ms, p99 ≈ 19 ms", up)
	}
	if routes := r.json["routes"].([]any); len(routes) != 1 {
		t.Fatalf("latency routes %s", r.body)
	}
	if r := e.do("GET", "/v1/tenants/acme/usage/latency?route=nope", adminToken, nil).want(200); len(r.items()) != 0 {
		t.Fatalf("another route's latency: %s", r.body)
	}
	e.do("GET", "/v1/tenants/acme/usage/latency?from=yesterday", adminToken, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme/usage/latency?from=2024-01-01T00:30:00Z", adminToken, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme/usage/latency?route=", adminToken, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme/usage/latency", other, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/tenants/acme/usage/latency", "", nil).want(401)

	period := billing.PeriodOf(now).String()
	r = e.do("GET", "/v1/billing/export?format=json&period="+period, adminToken, nil).want(200)
	var requests, fn float64
	for _, it := range r.items() {
		requests += it.(map[string]any)["requests"].(float64)
		fn += it.(map[string]any)["function_us"].(float64)
	}
	if requests != 7 || fn != 1234 {
		t.Fatalf("export requests %v, want 7: %s", requests, r.body)
	}
	e.do("GET", "/v1/billing/export?format=json&period="+period, other, nil).wantErr(403, "forbidden", "")
	e.do("GET", "/v1/billing/export?format=json&period=2026-13", adminToken, nil).want(400)

	// CSV: the conformance checker reads JSON only, so this one goes around it.
	req := httptest.NewRequest("GET", "/v1/billing/export?period="+period, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := e.srv.App().Test(req, 30_000)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") || !strings.HasPrefix(string(body), strings.Join(billing.ExportHeader, ",")) {
		t.Fatalf("csv export: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
}

// TestUsageDisabled: without a usage service the endpoints exist and answer 404.
func TestUsageDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	e.do("GET", "/v1/tenants/acme/usage", adminToken, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/billing/export?period=2026-01", adminToken, nil).wantErr(404, "not_found", "")
}
