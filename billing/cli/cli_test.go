package cli_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	"tollgate/billing/cli"
	"tollgate/edge/meter"
	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// The billing process folds what an edge meters, and `billing reconcile` agrees with it;
// a stray batch (from an edge that published no totals) makes it fail.
func TestRunAndReconcile(t *testing.T) {
	ns := testenv.NATS(t)
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	prefix := testenv.Name("tg")
	t.Setenv("TOLLGATE_DATABASE_URL", db.URL)
	t.Setenv("TOLLGATE_NATS_URL", ns.ClientURL())
	t.Setenv("TOLLGATE_NATS_PREFIX", prefix)
	t.Setenv("TOLLGATE_LOG_LEVEL", "error")
	o, _, err := cli.OptionsFromEnv(func(k string) string {
		return map[string]string{
			"TOLLGATE_DATABASE_URL": db.URL, "TOLLGATE_NATS_URL": ns.ClientURL(), "TOLLGATE_NATS_PREFIX": prefix,
		}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx, o) }()
	defer func() { cancel(); <-done }()

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
	// An hour that has settled, so that a difference in it is a discrepancy, not pending.
	at := time.Now().UTC().Add(-2 * time.Hour)
	for i := 0; i < 25; i++ {
		m.Record(tn.ID, "r", "", 200, true, 0, 0, at)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, _ := db.Sum(t); r == 25 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("billing did not fold the edge's batch")
		}
	}
	period := billing.PeriodOf(at).String()
	if err := billingCmd(ctx, "reconcile", "--period", period); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if err := billingCmd(ctx, "export", "--period", period, "--format", "json"); err != nil {
		t.Fatalf("export: %v", err)
	}
	db.Fold(t, billingtest.Batch(9, billingtest.Record(tn.ID, at, "r", "", 200, true, 1)))
	if err := billingCmd(ctx, "reconcile", "--period", period); !errors.Is(err, cli.ErrDiscrepancies) {
		t.Fatalf("reconcile after a stray batch: %v", err)
	}
	if err := billingCmd(ctx, "reconcile", "--period", "May"); err == nil {
		t.Fatal("a bad period was accepted")
	}
	if err := billingCmd(ctx, "reconcile", "--period", period, "--settle", "-1s"); err == nil {
		t.Fatal("a negative --settle was accepted")
	}
}

// billingCmd runs `tollgate billing args...` as the binary does, short of exiting.
func billingCmd(ctx context.Context, args ...string) error {
	c := cli.Command()
	c.SetArgs(args)
	c.SilenceErrors, c.SilenceUsage = true, true
	return c.ExecuteContext(ctx)
}
