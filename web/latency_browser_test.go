package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// TestLatencyCharts: the usage page of a five-day range labels each of its days, draws
// the hours' requests by status class as shares, and p50/p95/p99 lines of the busiest
// route's upstream and gateway time from the sketches billing folded; another route is
// chosen from the list.
func TestLatencyCharts(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser)
	}
	s := startDev(t)
	suffix := strings.ReplaceAll(strings.ToLower(testenv.Name("")), "_", "")
	suffix = suffix[len(suffix)-6:]
	slug := "lat-" + suffix
	owner := newBrowser(t, s.api)
	owner.signUp("lat-"+suffix+"@example.com", slug)
	tenantID := jsonField(s.adminSend(t, "GET", "/v1/tenants/"+slug, ""), "id")
	route := func(name string) string {
		return jsonField(s.adminSend(t, "POST", "/v1/tenants/"+slug+"/routes",
			`{"name":"`+name+`","paths":["/`+name+`"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]}}`), "id")
	}
	orders, search := route("orders"), route("search")
	store, err := billingpg.Open(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	first := today.Add(-4 * 24 * time.Hour)
	b := &usage.Batch{ID: usage.BatchID("web-lat", suffix, 1), EdgeID: "web-lat", BootID: suffix, Seq: 1, Created: now}
	sketch := func(base float64, n int) []byte {
		bins := make([]uint64, usage.SketchBins)
		for i := 0; i < n; i++ {
			// A long tail: most near base, a few up to 4×.
			f := 1 + 3*float64(i*i)/float64(n*n)
			bins[usage.SketchBin(time.Duration(base*f*float64(time.Millisecond)))]++
		}
		return usage.EncodeSketch(usage.SketchFromBins(bins))
	}
	for h := first; h.Before(billing.Hour(now).Add(time.Hour)); h = h.Add(time.Hour) {
		i := int(h.Sub(first) / time.Hour)
		rec := func(route string, class int, n int64) usage.Record {
			return usage.Record{TenantID: tenantID, Hour: h, RouteID: route, Class: class, Counts: usage.Counts{Requests: n, Billable: n}}
		}
		b.Records = append(b.Records, rec(orders, 2, int64(40+i%24*3)), rec(orders, 4, int64(i%7)), rec(search, 2, 10))
		if i%11 == 0 {
			b.Records = append(b.Records, rec(orders, 5, 6))
		}
		b.Latencies = append(b.Latencies,
			usage.Latency{TenantID: tenantID, RouteID: orders, Hour: h, Gateway: sketch(0.2+float64(i%5)*0.05, 40), Upstream: sketch(30+float64(i%24), 40)},
			usage.Latency{TenantID: tenantID, RouteID: search, Hour: h, Gateway: sketch(0.3, 10), Upstream: sketch(120, 10)})
	}
	if _, err := store.Fold(context.Background(), b); err != nil {
		t.Fatal(err)
	}

	base := "/console/t/" + slug + "/usage?from=" + first.Format(time.DateOnly) + "&to=" + today.Format(time.DateOnly)
	owner.open(base)
	owner.contains("Error rate by status class", "Latency", "Upstream time, ms", "Gateway time, ms", "gateway p50")
	// Five days, five labels under the requests chart.
	labels := owner.eval(`Array.from(document.querySelectorAll("section.card svg.chart")[0].querySelectorAll("text.axis[text-anchor=middle]")).map(e => e.textContent).join(",")`)
	if n := len(strings.Split(labels, ",")); n != 5 {
		t.Errorf("requests chart labels %q, want each of the 5 days", labels)
	}
	if n := owner.count(`[data-testid=latency] polyline`); n < 6 {
		t.Errorf("latency charts have %d lines, want p50, p95 and p99 of upstream and gateway", n)
	}
	if n := owner.count(`[data-testid=status-share] rect.s5`); n == 0 {
		t.Error("the status chart shows no 5xx share")
	}
	if sel := owner.eval(`document.querySelector("#latency-route").value`); sel != orders {
		t.Errorf("latency route %q, want the busiest (orders)", sel)
	}
	// Everything fits at 1280 px: nothing wider than the window.
	if w := owner.eval(`document.documentElement.scrollWidth + " in " + document.documentElement.clientWidth`); strings.Split(w, " in ")[0] != strings.Split(w, " in ")[1] {
		t.Errorf("page is %s px wide at 1280: it scrolls sideways", w)
	}
	owner.screenshot("latency-charts")

	owner.open(base + "&route=" + search)
	owner.contains("upstream p50 1")
	if sel := owner.eval(`document.querySelector("#latency-route").value`); sel != search {
		t.Errorf("latency route %q after choosing search", sel)
	}
	owner.screenshot("latency-charts-search")
}
