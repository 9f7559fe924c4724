package meter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/meter"
)

// mountDisk mounts a real tmpfs of size (mount's syntax: 64k, 4m) on a new directory.
func mountDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount a tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the disk refuses a byte more.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{1 << 20, 4096, 1} {
		page := make([]byte, n)
		for {
			if _, err := f.Write(page); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	return filler
}

// Without its space reserved (NoSpoolReserve, or a disk that had not the room when the
// edge started), a spool on a full disk while the sink is down loses the batch: Flush
// says so, the requests are counted dropped (metric and totals, which reconciliation
// reports as dropped), and tollgate_meter_spool_failing is 1 until a write succeeds
// again. The disk is a real tmpfs of 64 KiB filled to the last byte.
func TestSpoolOnFullDiskTellsTheOperator(t *testing.T) {
	dir := mountDisk(t, "64k")
	sink := &memSink{}
	reg := prometheus.NewRegistry()
	m := newMeter(t, meter.Config{Sink: sink, Registry: reg, SpoolDir: filepath.Join(dir, "spool"), NoSpoolReserve: true})
	if v := gauge(t, reg, "tollgate_meter_spool_reserved_bytes"); v != 0 {
		t.Fatalf("tollgate_meter_spool_reserved_bytes %v with the reservation off", v)
	}
	filler := fillDisk(t, dir)

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

// With its space reserved, a spool keeps every batch while the disk is full and the sink
// is down, as long as the batches fit in SpoolMaxBytes, and publishes them all when the
// sink returns; a segment deleted after replay gives its blocks back to the reservation.
func TestSpoolReservedAheadKeepsUsageOnAFullDisk(t *testing.T) {
	dir := mountDisk(t, "4m")
	const max = 1 << 20
	sink := &memSink{}
	reg := prometheus.NewRegistry()
	m := newMeter(t, meter.Config{Sink: sink, Registry: reg, SpoolDir: filepath.Join(dir, "spool"), SpoolMaxBytes: max, SpoolSegmentBytes: 64 << 10})
	if v := gauge(t, reg, "tollgate_meter_spool_reserved_bytes"); v != max {
		t.Fatalf("tollgate_meter_spool_reserved_bytes %v, want %d", v, max)
	}
	fillDisk(t, dir)

	sink.setDown(true)
	var served int64
	// Distinct routes make batches of a few KiB, so the spool moves through several
	// segments of its reservation.
	for i := range 40 {
		for j := range 50 {
			m.Route(tenantA, fmt.Sprintf("r%d-%d", i, j)).Record(nil, 200, true, 0, 0, time.Now())
			served++
		}
		if err := m.Flush(context.Background()); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	if v := metric(t, reg, "tollgate_meter_dropped_requests_total"); v != 0 {
		t.Fatalf("dropped %v requests on a full disk with the spool reserved", v)
	}
	if v := gauge(t, reg, "tollgate_meter_spool_failing"); v != 0 {
		t.Fatalf("tollgate_meter_spool_failing %v", v)
	}
	if m.Spooled() != 40 {
		t.Fatalf("%d batches spooled, want 40", m.Spooled())
	}

	sink.setDown(false)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sink.requests(); got != served {
		t.Fatalf("published %d requests of %d served", got, served)
	}
	if v := gauge(t, reg, "tollgate_meter_spool_reserved_bytes"); v != max {
		t.Fatalf("tollgate_meter_spool_reserved_bytes %v after the replay, want %d again", v, max)
	}
}

// An edge killed with SIGKILL while the disk is full and NATS is away, and started again
// on that still-full disk, loses nothing: the dead run spooled into space it held, its
// state file's counts are spooled by the next run into the same space, and everything is
// published once the sink takes it.
func TestCrashOnFullDiskLosesNothing(t *testing.T) {
	disk := mountDisk(t, "4m")
	dir := t.TempDir()
	spool, logPath, started := filepath.Join(disk, "spool"), filepath.Join(dir, "published.log"), filepath.Join(dir, "started")
	const max = 1 << 20
	cmd, progress := startChild(t, "count", spool, logPath, "dead", envDown+"=1", envSpoolMax+"="+strconv.Itoa(max), "TOLLGATE_METER_CRASH_STARTED="+started)
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			k, err := progress.Read(buf)
			n.Add(int64(k))
			if err != nil {
				return
			}
		}
	}()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(started + ".new"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not start")
		}
	}
	fillDisk(t, disk)
	// Many flushes (every 2 ms) on the full disk, then the kill.
	at := n.Load() + 50_000
	for deadline := time.Now().Add(2 * time.Minute); n.Load() < at && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	time.Sleep(200 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	<-done
	progress.Close()
	returned := n.Load()
	if spooled, _ := filepath.Glob(filepath.Join(spool, "*.seg")); len(spooled) == 0 {
		t.Fatal("the dead run spooled nothing: the test did not reach the full disk")
	}

	sink := &memSink{}
	reg := prometheus.NewRegistry()
	m, err := meter.New(meter.Config{EdgeID: crashEdge, Sink: sink, SpoolDir: spool, BootID: "next", FlushInterval: time.Hour,
		Logger: quiet, Registry: reg, SpoolMaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := metric(t, reg, "tollgate_meter_dropped_requests_total"); v != 0 {
		t.Fatalf("the next run dropped %v requests", v)
	}
	p := newPublished()
	p.readLog(t, logPath)
	p.readSink(t, sink)
	batches, totals := p.byBoot(t)
	var dropped int64
	for _, et := range p.totals {
		dropped += et.Dropped
	}
	most := returned + crashWorkers
	t.Logf("Records returned %d, at most %d started; published %d, the dead run's totals %d, dropped %d", returned, most, batches["dead"], totals["dead"], dropped)
	if got := batches["dead"]; got < returned || got > most || dropped != 0 {
		t.Fatalf("published %d requests of the dead run (%d dropped); want between %d (returned before the kill) and %d (started), none dropped", got, dropped, returned, most)
	}
	if batches["dead"] != totals["dead"] {
		t.Fatalf("the dead run's batches hold %d requests, its totals %d", batches["dead"], totals["dead"])
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
