package stripe_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/admin"
)

// A push Stripe refuses is counted as a failure, the retry that stripe-mock accepts as a
// push, with its time as the last success; all read from an admin listener's /metrics.
func TestPushMetrics(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	proxy := newProxy(t)
	clk := &clock{}
	reg := admin.NewRegistry()
	m, err := billing.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := billingstripe.New(billingstripe.Config{Key: "sk_test_123", URL: proxy.URL, Store: db.Store, Now: clk.now, Logger: quiet, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := admin.Serve(ln, reg, quiet)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	ctx := context.Background()
	if _, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name); err != nil {
		t.Fatal(err)
	}
	db.Fold(t, billingtest.Batch(1, billingtest.Record(tn.ID, time.Now().Add(-2*time.Hour), "r", "", 200, true, 1)))

	proxy.fail.Store(1)
	if n, err := ps.PushDue(ctx); n != 0 || err != nil {
		t.Fatalf("pushed %d, %v while Stripe fails", n, err)
	}
	body := scrape(t, ln.Addr().String())
	wantSample(t, body, `tollgate_billing_stripe_push_failures_total{kind="retry"}`, 1)
	wantSample(t, body, `tollgate_billing_stripe_pushes_total`, 0)
	wantSample(t, body, `tollgate_billing_stripe_last_push_success_timestamp_seconds`, 0)

	clk.advance(time.Hour) // past the backoff
	if n, err := ps.PushDue(ctx); n != 1 || err != nil {
		t.Fatalf("pushed %d, %v after the failure", n, err)
	}
	body = scrape(t, ln.Addr().String())
	wantSample(t, body, `tollgate_billing_stripe_push_failures_total{kind="retry"}`, 1)
	wantSample(t, body, `tollgate_billing_stripe_pushes_total`, 1)
	last := sample(t, body, `tollgate_billing_stripe_last_push_success_timestamp_seconds`)
	if d := clk.now().Sub(time.Unix(int64(last), 0)); d < -time.Second || d > time.Minute {
		t.Fatalf("last push at %v, the clock says %v", time.Unix(int64(last), 0), clk.now())
	}

	proxy.badInput.Store(1)
	db.Fold(t, billingtest.Batch(2, billingtest.Record(tn.ID, clk.now().Add(-3*time.Hour), "r", "", 200, true, 1)))
	ps.PushDue(ctx)
	wantSample(t, scrape(t, ln.Addr().String()), `tollgate_billing_stripe_push_failures_total{kind="permanent"}`, 1)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

func sample(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no %s:\n%s", series, body)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantSample(t *testing.T, body, series string, want float64) {
	t.Helper()
	if got := sample(t, body, series); got != want {
		t.Errorf("%s = %v, want %v", series, got, want)
	}
}
