package meter_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/meter"
)

// A spool on a full disk while the sink is down loses the batch: Flush says so, the
// requests are counted dropped (metric and totals, which reconciliation reports as
// dropped), and tollgate_meter_spool_failing is 1 until a write succeeds again. The disk
// is a real tmpfs of 64 KiB filled to the last byte.
func TestSpoolOnFullDiskTellsTheOperator(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount a tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	sink := &memSink{}
	reg := prometheus.NewRegistry()
	m := newMeter(t, meter.Config{Sink: sink, Registry: reg, SpoolDir: filepath.Join(dir, "spool")})
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	sink.setDown(true)
	r := m.Route(tenantA, "r")
	for range 5 {
		r.Record(nil, 200, true, 0, 0, time.Now())
	}
	if err := m.Flush(context.Background()); err == nil {
		t.Fatal("a batch neither published nor spooled, and Flush said nothing")
	}
	if v := gauge(t, reg, "tollgate_meter_spool_failing"); v != 1 {
		t.Fatalf("tollgate_meter_spool_failing %v on a full disk, want 1", v)
	}
	if v := metric(t, reg, "tollgate_meter_dropped_requests_total"); v != 5 {
		t.Fatalf("dropped %v, want 5", v)
	}
	var drop int64
	for _, et := range m.Totals() {
		drop += et.Dropped
	}
	if drop != 5 {
		t.Fatalf("the totals say %d dropped, want 5 (reconciliation reads them)", drop)
	}

	// Room again: the next batch spools and the gauge clears.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	r.Record(nil, 200, true, 0, 0, time.Now())
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, reg, "tollgate_meter_spool_failing"); v != 0 {
		t.Fatalf("tollgate_meter_spool_failing %v once the disk has room, want 0", v)
	}
	if m.Spooled() != 1 {
		t.Fatalf("%d batches spooled, want 1", m.Spooled())
	}
}

func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
