package cli_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"tollgate/billing/billingtest"
	"tollgate/billing/cli"
	"tollgate/edge/meter"
	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// The billing process serves its admin listener: /healthz, /readyz while Postgres and
// NATS answer, and /metrics whose folded batches and fold lag move when an edge's batch
// is folded.
func TestAdminListener(t *testing.T) {
	ns := testenv.NATS(t)
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	prefix := testenv.Name("tg")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := cli.Options{DatabaseURL: db.URL, NATSURL: ns.ClientURL(), NATSPrefix: prefix, AdminAddr: addr, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx, o) }()
	defer func() { cancel(); <-done }()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("billing's /readyz did not answer 200")
		}
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	_, body := get("/metrics")
	if v := value(t, body, `tollgate_billing_batches_total{result="folded"}`); v != 0 {
		t.Fatalf("folded before any batch: %v", v)
	}

	nc, err := natsconn.Connect(ns.ClientURL(), "edge")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub, _ := usage.NewPublisher(nc, prefix, "edge-1")
	m, err := meter.New(meter.Config{EdgeID: "edge-1", Sink: pub, SpoolDir: t.TempDir(), Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		m.Record(tn.ID, "r", "", 200, true, 0, 0, time.Now().UTC())
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body = get("/metrics")
		if value(t, body, `tollgate_billing_batches_total{result="folded"}`) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no folded batch counted:\n%s", body)
		}
	}
	if n := value(t, body, `tollgate_billing_fold_lag_seconds_count`); n < 1 {
		t.Fatalf("fold lag observations: %v", n)
	}
	if s := value(t, body, `tollgate_billing_fold_lag_seconds_sum`); s < 0 || s > 10 {
		t.Fatalf("fold lag sum %vs for a batch folded at once", s)
	}
	cancel()
	<-done
	done <- nil // for the deferred receive
	if code, _ := get("/readyz"); code == http.StatusOK {
		t.Fatal("/readyz still answers after billing stopped")
	}
}

func value(t *testing.T, body, series string) float64 {
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
