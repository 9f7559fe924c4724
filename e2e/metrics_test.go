package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"tollgate/infra/testenv"
)

// The api's admin listener: /healthz, /readyz, and /metrics whose request series are
// labelled by route template and whose outbox backlog rises while NATS is unreachable
// and drains once it is back, with the relay's publish errors and lag counted.
func TestAPIAdminMetrics(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	admin := freeAddr(t)
	_, api := s.startAPI("TOLLGATE_API_ADMIN_ADDR=" + admin)
	up := echoUpstream(t, "up")
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := adminGet(t, admin, path); code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	api.createTenant("metrics")
	api.must(200, "GET", "/v1/tenants/metrics", nil)
	metric := func(series string) float64 {
		_, body := adminGet(t, admin, "/metrics")
		return sampleOf(body, series)
	}
	if v := metric(`tollgate_api_http_requests_total{method="GET",route="/v1/tenants/:slug",status="2xx"}`); v != 1 {
		t.Errorf("GET /v1/tenants/:slug counted %v times, want 1", v)
	}
	eventually(t, 10*time.Second, "the relay is reported active", func() error {
		if v := metric("tollgate_relay_active"); v != 1 {
			return fmt.Errorf("tollgate_relay_active %v", v)
		}
		return nil
	})

	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	for i := range 3 {
		api.createRoute("metrics", routeSpec(fmt.Sprint("r", i), fmt.Sprint("/r", i), up.URL, "none"))
	}
	eventually(t, 15*time.Second, "the backlog shows the unsent changes", func() error {
		if v := metric("tollgate_outbox_unsent_rows"); v < 3 {
			return fmt.Errorf("tollgate_outbox_unsent_rows %v", v)
		}
		if v := metric("tollgate_outbox_oldest_unsent_age_seconds"); v <= 0 {
			return fmt.Errorf("tollgate_outbox_oldest_unsent_age_seconds %v", v)
		}
		if v := metric("tollgate_relay_publish_errors_total"); v < 1 {
			return fmt.Errorf("tollgate_relay_publish_errors_total %v", v)
		}
		return nil
	})
	published := metric("tollgate_relay_publish_lag_seconds_count")

	s.ns = testenv.RestartNATS(t, s.ns)
	eventually(t, outageDeadline, "the backlog drains after NATS returned", func() error {
		if v := metric("tollgate_outbox_unsent_rows"); v != 0 {
			return fmt.Errorf("tollgate_outbox_unsent_rows %v", v)
		}
		if v := metric("tollgate_outbox_oldest_unsent_age_seconds"); v != 0 {
			return fmt.Errorf("tollgate_outbox_oldest_unsent_age_seconds %v", v)
		}
		return nil
	})
	if v := metric("tollgate_relay_publish_lag_seconds_count"); v < published+3 {
		t.Errorf("publish lag observations %v, want at least %v", v, published+3)
	}
	// The changes waited out the outage: their lag lands above the fast buckets.
	if v := metric(`tollgate_relay_publish_lag_seconds_bucket{le="0.5"}`); v > metric("tollgate_relay_publish_lag_seconds_count")-3 {
		t.Errorf("the outage's changes were published within 0.5s (%v of them)", v)
	}
}

func adminGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sampleOf is a sample's value in a text exposition; -1 when it is not there.
func sampleOf(body, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
