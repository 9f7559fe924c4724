package cli_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"tollgate/billing/billingtest"
	"tollgate/billing/cli"
	"tollgate/edge/meter"
	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// A cell with a NATS of its own: its edges meter there, and billing folds that cluster's
// usage as well as the main one's.
func TestRunFoldsCellUsage(t *testing.T) {
	main, cell := testenv.NATS(t), testenv.NATS(t)
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	prefix := testenv.Name("tg")
	o, _, err := cli.OptionsFromEnv(func(k string) string {
		return map[string]string{
			"TOLLGATE_DATABASE_URL": db.URL, "TOLLGATE_NATS_URL": main.ClientURL(), "TOLLGATE_NATS_PREFIX": prefix,
			"TOLLGATE_CELLS": "default;b=" + cell.ClientURL(),
		}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.CellNATS["b"] != cell.ClientURL() || len(o.CellNATS) != 1 {
		t.Fatalf("cell NATS: %v", o.CellNATS)
	}
	o.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx, o) }()
	defer func() { cancel(); <-done }()

	at := time.Now().UTC().Add(-2 * time.Hour)
	for i, url := range []string{main.ClientURL(), cell.ClientURL()} {
		nc, err := natsconn.Connect(url, "edge")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		edgeID := []string{"edge-main", "edge-b"}[i]
		pub, err := usage.NewPublisher(nc, prefix, edgeID)
		if err != nil {
			t.Fatal(err)
		}
		m, err := meter.New(meter.Config{EdgeID: edgeID, Sink: pub, SpoolDir: t.TempDir(), Logger: o.Logger})
		if err != nil {
			t.Fatal(err)
		}
		for range 10 * (i + 1) {
			m.Record(tn.ID, "r", "", 200, true, 0, 0, at)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, _ := db.Sum(t); r == 30 {
			break
		}
		if time.Now().After(deadline) {
			r, _ := db.Sum(t)
			t.Fatalf("billing folded %d requests, want 10 from the main NATS and 20 from cell b's", r)
		}
	}
}
