package api_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/api"
)

// Requests are counted by route template, never by raw path: two tenants' GETs are one
// series, and a path that matches no endpoint is "unmatched".
func TestMetricsCountByRouteTemplate(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := api.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *api.Config) { c.Metrics = m })
	e.tenant("acme")
	e.tenant("beta")
	e.do("GET", "/v1/tenants/acme", adminToken, nil).want(200)
	e.do("GET", "/v1/tenants/beta", adminToken, nil).want(200)
	e.do("GET", "/v1/tenants/nope", adminToken, nil).want(404)
	e.do("GET", "/v1/no/such/thing", adminToken, nil).want(404)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "tollgate_api_http_requests_total" {
			n = len(mf.GetMetric())
		}
	}
	for _, c := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/v1/tenants/:slug", "GET", "2xx", 2},
		{"/v1/tenants/:slug", "GET", "4xx", 1},
		{"/v1/tenants", "POST", "2xx", 2},
		{"unmatched", "GET", "4xx", 1},
	} {
		vec := mustVec(t, reg, "tollgate_api_http_requests_total", map[string]string{"route": c.route, "method": c.method, "status": c.status})
		if vec != c.want {
			t.Errorf("%s %s %s: %v, want %v", c.method, c.route, c.status, vec, c.want)
		}
	}
	if got := mustVec(t, reg, "tollgate_api_http_requests_total", map[string]string{"route": "/v1/tenants/acme"}); got != 0 {
		t.Errorf("a raw path became a label value")
	}
	if n > 10 {
		t.Errorf("%d request series for a handful of routes", n)
	}
	if got := mustVec(t, reg, "tollgate_api_http_request_duration_seconds", map[string]string{"route": "/v1/tenants/:slug", "status": "2xx"}); got != 2 {
		t.Errorf("duration observations: %v, want 2", got)
	}

	m.SetOutboxBacklog(3, 1500*time.Millisecond)
	m.PublishFailed()
	m.Published(20 * time.Millisecond)
	for name, want := range map[string]float64{
		"tollgate_outbox_unsent_rows": 3, "tollgate_outbox_oldest_unsent_age_seconds": 1.5,
		"tollgate_relay_publish_errors_total": 1, "tollgate_relay_publish_lag_seconds": 1,
	} {
		if got := mustVec(t, reg, name, nil); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// mustVec sums the samples of a family whose labels include want (histograms: their
// observation count).
func mustVec(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			n := 0
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok {
					if v != lp.GetValue() {
						continue next
					}
					n++
				}
			}
			if n != len(want) {
				continue
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return total
}
