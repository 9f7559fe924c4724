package meter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"tollgate/billing"
	billingnats "tollgate/billing/nats"
	"tollgate/edge/meter"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

const (
	tenantA = "0190a000-0000-7000-8000-00000000000a"
	tenantB = "0190a000-0000-7000-8000-00000000000b"
)

// memSink is a sink that can be taken down; it keeps what it was given.
type memSink struct {
	mu      sync.Mutex
	down    bool
	ids     []string
	batches []*usage.Batch
	data    [][]byte // as published, byte for byte
	totals  map[string]usage.EdgeTotal
}

var errDown = errors.New("sink down")

func (s *memSink) Publish(_ context.Context, id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errDown
	}
	b, err := usage.DecodeBatch(data)
	if err != nil {
		return err
	}
	if b.ID != id {
		return fmt.Errorf("msg id %q for batch %q", id, b.ID)
	}
	s.ids = append(s.ids, id)
	s.batches = append(s.batches, b)
	s.data = append(s.data, append([]byte(nil), data...))
	return nil
}

func (s *memSink) PutTotals(_ context.Context, ts []usage.EdgeTotal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errDown
	}
	if s.totals == nil {
		s.totals = map[string]usage.EdgeTotal{}
	}
	for _, t := range ts {
		s.totals[usage.TotalsKey(&t)] = t
	}
	return nil
}

func (s *memSink) setDown(d bool) {
	s.mu.Lock()
	s.down = d
	s.mu.Unlock()
}

func (s *memSink) requests() (n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.batches {
		n += b.Requests()
	}
	return n
}

func newMeter(t testing.TB, cfg meter.Config) *meter.Meter {
	t.Helper()
	if cfg.EdgeID == "" {
		cfg.EdgeID = "edge-1.test"
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = t.TempDir()
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Hour // tests flush explicitly
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	m, err := meter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

var quiet = slog.New(slog.DiscardHandler)

func TestBillableRule(t *testing.T) {
	for _, c := range []struct {
		status   int
		upstream bool
		want     bool
	}{
		{200, true, true}, {404, true, true}, {500, true, true}, {503, true, true}, {101, true, true},
		{401, false, false}, {403, false, false}, {404, false, false}, {413, false, false},
		{429, false, false}, {502, false, false}, {503, false, false}, {504, false, false}, {200, false, false},
		{0, true, false}, {999, true, false},
	} {
		o := usage.OriginEdge
		if c.upstream {
			o = usage.OriginUpstream
		}
		if got := usage.Billable(usage.StatusClass(c.status), o); got != c.want {
			t.Errorf("Billable(%d, upstream=%v) = %v, want %v", c.status, c.upstream, got, c.want)
		}
	}
}

// Records from many goroutines, flushed into real JetStream, sum to what was recorded,
// with billable decided by the rule and hours taken from the record time.
func TestFlushedBatchesSumToRecords(t *testing.T) {
	s := testenv.NATS(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := testenv.Name("tg")
	pub, err := usage.NewPublisher(nc, prefix, "edge-1.test")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := newMeter(t, meter.Config{Sink: pub, Registry: reg, FlushInterval: 20 * time.Millisecond, TotalsRetention: 100000 * time.Hour})
	ra, rb, none := m.Route(tenantA, "r1"), m.Route(tenantB, "r2"), m.Route(tenantA, "")
	c1, c2 := m.Consumer(tenantA, "c1"), m.Consumer(tenantA, "c2")
	if m.Route(tenantA, "r1") != ra {
		t.Fatal("Route is not interned")
	}
	hour := time.Date(2024, 3, 5, 10, 0, 0, 0, time.UTC)
	const workers, per = 4, 2500
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				at := hour.Add(time.Duration(i*3%7200) * time.Second) // two hours
				switch i % 4 {
				case 0:
					ra.Record(c1, 200, true, 10, 100, at)
				case 1:
					rb.Record(nil, 500, true, 0, 5, at)
				case 2:
					ra.Record(c2, 429, false, 1, 1, at)
				case 3:
					none.Record(nil, 404, false, 0, 0, at)
				}
			}
		}(w)
	}
	wg.Wait()
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	js, _ := jetstream.New(nc)
	str, err := js.Stream(context.Background(), usage.Stream(prefix))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := str.OrderedConsumer(context.Background(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := str.Info(context.Background())
	var total, billable int64
	hours := map[time.Time]int64{}
	for i := uint64(0); i < info.State.Msgs; i++ {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got := msg.Headers().Get(jetstream.MsgIDHeader); got == "" {
			t.Fatal("batch published without Nats-Msg-Id")
		}
		b, err := usage.DecodeBatch(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if msg.Headers().Get(jetstream.MsgIDHeader) != b.ID || b.ID != usage.BatchID("edge-1.test", m.BootID(), b.Seq) {
			t.Fatalf("msg id %q, batch id %q", msg.Headers().Get(jetstream.MsgIDHeader), b.ID)
		}
		for _, r := range b.Records {
			total += r.Requests
			billable += r.Billable
			hours[r.Hour] += r.Requests
		}
	}
	const n = workers * per
	if total != n || billable != n/2 {
		t.Fatalf("stream holds %d requests (%d billable), want %d (%d)", total, billable, n, n/2)
	}
	if len(hours) != 2 || hours[hour]+hours[hour.Add(time.Hour)] != n {
		t.Fatalf("hours: %v", hours)
	}
	var tot int64
	for _, et := range m.Totals() {
		tot += et.Requests
	}
	if tot != n {
		t.Fatalf("Totals sum to %d, want %d", tot, n)
	}
	if got := metric(t, reg, "tollgate_meter_requests_total"); got != n {
		t.Fatalf("tollgate_meter_requests_total = %v", got)
	}
	// The totals reached the bucket.
	got, err := billingnats.NewTotals(js, prefix).EdgeTotals(context.Background(), billing.PeriodOf(hour))
	if err != nil {
		t.Fatal(err)
	}
	tot = 0
	for _, et := range got {
		tot += et.Requests
	}
	if tot != n {
		t.Fatalf("bucket totals sum to %d, want %d", tot, n)
	}
}

// metric sums the values of a counter family.
func metric(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// While the sink is down batches are spooled; they are replayed in order, with their
// original ids, ahead of new ones once it is back.
func TestSpoolAndReplayInOrder(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	r := m.Route(tenantA, "r1")
	c := m.Consumer(tenantA, "c")
	now := time.Now()
	flush := func() {
		t.Helper()
		if err := m.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r.Record(c, 200, true, 0, 0, now)
	flush()
	sink.setDown(true)
	for i := 0; i < 3; i++ {
		r.Record(c, 200, true, 0, 0, now)
		r.Record(c, 200, true, 0, 0, now)
		flush()
	}
	if m.Spooled() != 3 {
		t.Fatalf("spooled %d batches, want 3", m.Spooled())
	}
	sink.setDown(false)
	r.Record(c, 200, true, 0, 0, now)
	flush()
	if m.Spooled() != 0 {
		t.Fatalf("%d batches still spooled", m.Spooled())
	}
	for i, id := range sink.ids {
		if want := usage.BatchID("edge-1.test", m.BootID(), uint64(i+1)); id != want {
			t.Fatalf("batch %d published as %s, want %s (in order)", i, id, want)
		}
	}
	if got := sink.requests(); got != 8 {
		t.Fatalf("sink got %d requests, want 8", got)
	}
}

// A spool left by a crashed run, with a torn last record, is replayed by the next run:
// every intact batch, under its original id.
func TestSpoolSurvivesRestartAndTornTail(t *testing.T) {
	dir := t.TempDir()
	down := &memSink{down: true}
	m1, err := meter.New(meter.Config{EdgeID: "e", Sink: down, SpoolDir: dir, FlushInterval: time.Hour, BootID: "boot1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r := m1.Route(tenantA, "r")
	for i := 0; i < 3; i++ {
		r.Record(nil, 200, true, 0, 0, time.Now())
		m1.Flush(context.Background())
	}
	if err := m1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	// A record cut short by a crash mid-write.
	f, _ := os.OpenFile(segs[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, '{'})
	f.Close()

	up := &memSink{}
	if _, err := os.Stat(filepath.Join(dir, "totals-boot1.json")); err != nil {
		t.Fatalf("the totals of a run that closed during an outage were not saved: %v", err)
	}
	m2, err := meter.New(meter.Config{EdgeID: "e", Sink: up, SpoolDir: dir, FlushInterval: time.Hour, BootID: "boot2", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(context.Background())
	if m2.Spooled() != 3 {
		t.Fatalf("reopened spool holds %d batches, want 3", m2.Spooled())
	}
	m2.Flush(context.Background())
	want := []string{"e.boot1.1", "e.boot1.2", "e.boot1.3"}
	if fmt.Sprint(up.ids) != fmt.Sprint(want) {
		t.Fatalf("replayed %v, want %v", up.ids, want)
	}
	// The first run's totals went out with them.
	var n int64
	for _, et := range up.totals {
		if et.BootID == "boot1" {
			n += et.Requests
		}
	}
	if n != 3 {
		t.Fatalf("boot1's totals published by the next run: %d requests, want 3", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "totals-boot1.json")); !os.IsNotExist(err) {
		t.Fatalf("saved totals kept after publishing: %v", err)
	}
	// A second meter on the same directory is refused.
	if _, err := meter.New(meter.Config{EdgeID: "e", Sink: up, SpoolDir: dir}); err == nil {
		t.Fatal("two meters share a spool directory")
	}
}

// When the spool is full the oldest batches go, and every request in them is counted as
// dropped, in the metric and in the totals: published + dropped = recorded.
func TestSpoolFullDropsOldestAndCountsThem(t *testing.T) {
	sink := &memSink{down: true}
	reg := prometheus.NewRegistry()
	m := newMeter(t, meter.Config{Sink: sink, Registry: reg, SpoolMaxBytes: 8 << 10, SpoolSegmentBytes: 2 << 10})
	now := time.Now()
	var recorded int64
	for i := 0; i < 60; i++ {
		// Distinct consumers make each batch a few hundred bytes.
		for j := 0; j < 3; j++ {
			m.Record(tenantA, "r", fmt.Sprintf("consumer-%d-%d", i, j), 200, true, 0, 0, now)
			recorded++
		}
		if err := m.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	dropped := metric(t, reg, "tollgate_meter_dropped_requests_total")
	if dropped == 0 {
		t.Fatal("nothing dropped from a full spool")
	}
	sink.setDown(false)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sink.requests() + int64(dropped); got != recorded {
		t.Fatalf("published %d + dropped %v != recorded %d", sink.requests(), dropped, recorded)
	}
	var tot, drop int64
	for _, et := range m.Totals() {
		tot += et.Requests
		drop += et.Dropped
	}
	if tot != recorded || drop != int64(dropped) {
		t.Fatalf("totals: %d requests, %d dropped; want %d, %v", tot, drop, recorded, dropped)
	}
	// The oldest went: the first batch published is not batch 1.
	if sink.ids[0] == usage.BatchID("edge-1.test", m.BootID(), 1) {
		t.Fatal("the oldest batch survived a full spool")
	}
}

// Close drains: counts not yet flushed go out, and later records are refused and counted.
func TestCloseDrains(t *testing.T) {
	sink := &memSink{}
	reg := prometheus.NewRegistry()
	m := newMeter(t, meter.Config{Sink: sink, Registry: reg})
	r := m.Route(tenantB, "r")
	for i := 0; i < 10; i++ {
		r.Record(nil, 201, true, 0, 0, time.Time{})
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sink.requests() != 10 {
		t.Fatalf("Close published %d requests, want 10", sink.requests())
	}
	r.Record(nil, 200, true, 0, 0, time.Now())
	if got := metric(t, reg, "tollgate_meter_dropped_requests_total"); got != 1 {
		t.Fatalf("a record after Close counted %v times as dropped", got)
	}
}

// Handles are not interned: two of one consumer (a recompiled snapshot, two cached JWTs)
// add up in one record of the batch.
func TestHandlesMergeAtFlush(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	at := time.Date(2024, 1, 1, 5, 0, 0, 0, time.UTC)
	m.Route(tenantA, "r").Record(meter.NewConsumer(tenantA, "iss|alice"), 200, true, 1, 1, at)
	m.Route(tenantA, "r").Record(meter.NewConsumer(tenantA, "iss|alice"), 200, true, 1, 1, at)
	m.Record(tenantA, "r", "iss|alice", 200, true, 1, 1, at)
	m.Record(tenantA, "r", "iss|alice", 200, false, 1, 1, at) // same row, not billable
	m.Flush(context.Background())
	if len(sink.batches) != 1 || len(sink.batches[0].Records) != 1 {
		t.Fatalf("batches: %+v", sink.batches)
	}
	r := sink.batches[0].Records[0]
	if r.ConsumerID != "iss|alice" || r.Requests != 4 || r.Billable != 3 || r.BytesIn != 4 || !r.Hour.Equal(at) || r.Class != 2 {
		t.Fatalf("record %+v", r)
	}
}

// A flush with many cells is cut into several batches, each small enough for one NATS
// message.
func TestLargeFlushIsSplit(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	r := m.Route(tenantA, "r")
	for i := 0; i < 5000; i++ {
		r.Record(meter.NewConsumer(tenantA, fmt.Sprintf("consumer-%05d", i)), 200, true, 0, 0, time.Time{})
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.batches) < 3 || sink.requests() != 5000 {
		t.Fatalf("%d batches, %d requests", len(sink.batches), sink.requests())
	}
}

func TestRecordAllocatesNothing(t *testing.T) {
	m := newMeter(t, meter.Config{Sink: &memSink{}})
	r := m.Route(tenantA, "r1")
	c := m.Consumer(tenantA, "consumer")
	at := time.Now()
	r.Record(c, 200, true, 1, 2, at)
	if n := testing.AllocsPerRun(1000, func() { r.Record(c, 200, true, 1, 2, at) }); n != 0 {
		t.Fatalf("Route.Record allocates %v times per call", n)
	}
	m.Record(tenantA, "r1", "consumer", 200, true, 1, 2, at)
	if n := testing.AllocsPerRun(1000, func() { m.Record(tenantA, "r1", "consumer", 200, true, 1, 2, at) }); n != 0 {
		t.Fatalf("Meter.Record allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(1000, func() { r.RecordFunction(c, 200, true, 1, 2, 3*time.Microsecond, at) }); n != 0 {
		t.Fatalf("Route.RecordFunction allocates %v times per call", n)
	}
}

func BenchmarkRouteRecord(b *testing.B) {
	m := newMeter(b, meter.Config{Sink: &memSink{}})
	r := m.Route(tenantA, "0190a000-0000-7000-8000-0000000000ff")
	consumer := m.Consumer(tenantA, "0190a000-0000-7000-8000-0000000000cc")
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Record(consumer, 200, true, 512, 2048, at)
	}
}

func BenchmarkRouteRecordParallel(b *testing.B) {
	m := newMeter(b, meter.Config{Sink: &memSink{}})
	r := m.Route(tenantA, "0190a000-0000-7000-8000-0000000000ff")
	consumer := m.Consumer(tenantA, "0190a000-0000-7000-8000-0000000000cc")
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Record(consumer, 200, true, 512, 2048, at)
		}
	})
}

func BenchmarkMeterRecord(b *testing.B) {
	m := newMeter(b, meter.Config{Sink: &memSink{}})
	route := "0190a000-0000-7000-8000-0000000000ff"
	consumer := "0190a000-0000-7000-8000-0000000000cc"
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Record(tenantA, route, consumer, 200, true, 512, 2048, at)
	}
}

// RecordBytes adds bytes in the hour they went through without counting a request, so a
// tunnel counted once at its upgrade carries its bytes into later hours; a cell holding
// only bytes is still flushed, and one holding nothing is not.
func TestRecordBytesCountsNoRequest(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	r := m.Route(tenantA, "ws")
	c := meter.NewConsumer(tenantA, "c")
	h0 := time.Date(2024, 1, 1, 5, 0, 0, 0, time.UTC)
	h1 := h0.Add(time.Hour)
	r.Record(c, 101, true, 0, 0, h0.Add(59*time.Minute))
	r.RecordBytes(c, 101, true, 10, 20, h0.Add(59*time.Minute+30*time.Second))
	r.RecordBytes(c, 101, true, 5, 7, h1.Add(time.Minute))
	r.RecordBytes(c, 101, true, 0, 0, h1.Add(2*time.Minute)) // nothing: no cell
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[time.Time]usage.Counts{}
	for _, b := range sink.batches {
		for _, rec := range b.Records {
			if rec.RouteID != "ws" || rec.ConsumerID != "c" || rec.Class != 1 {
				t.Fatalf("record %+v", rec)
			}
			cnt := got[rec.Hour]
			cnt.Add(rec.Counts)
			got[rec.Hour] = cnt
		}
	}
	want := map[time.Time]usage.Counts{
		h0: {Requests: 1, Billable: 1, BytesIn: 10, BytesOut: 20},
		h1: {BytesIn: 5, BytesOut: 7},
	}
	if len(got) != len(want) {
		t.Fatalf("hours %v, want %v", got, want)
	}
	for h, w := range want {
		if got[h] != w {
			t.Errorf("%s: %+v, want %+v", h, got[h], w)
		}
	}
	if n := sink.requests(); n != 1 {
		t.Errorf("%d requests published, want 1", n)
	}
	if n := testing.AllocsPerRun(1000, func() { r.RecordBytes(c, 101, true, 1, 1, h1) }); n != 0 {
		t.Fatalf("RecordBytes allocates %v times per call", n)
	}
}

// Function time goes into the request's own cell, in whole microseconds rounded up, and
// reaches the batches and the edge's totals as function_us, through the spool as through
// a direct publish, each microsecond once.
func TestFunctionTimeIsMetered(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {999 * time.Nanosecond, 1}, {time.Microsecond, 1}, {1001 * time.Nanosecond, 2}, {1500 * time.Microsecond, 1500}} {
		if got := meter.FunctionUS(c.in); got != c.want {
			t.Errorf("FunctionUS(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	hour := time.Now().UTC().Truncate(time.Hour)
	r := m.Route(tenantA, "r1")
	c := meter.NewConsumer(tenantA, "consumer-1")
	r.RecordFunction(c, 200, true, 1, 2, 1500*time.Nanosecond, hour) // 2 µs
	r.RecordFunction(c, 200, true, 0, 0, time.Millisecond, hour)     // 1000 µs
	r.RecordFunction(c, 500, false, 0, 0, 10*time.Microsecond, hour) // a function that failed still ran
	r.Record(c, 200, true, 0, 0, hour)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.setDown(true)
	u := meter.Usage{Route: r, Consumer: c, Status: 200, Upstream: true, At: hour, Function: 4 * time.Microsecond}
	u.Record() // a streamed body's record at close
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m.Spooled() != 2 { // the counts, and the stream's time in a batch of latencies
		t.Fatalf("%d batches spooled, want 2", m.Spooled())
	}
	sink.setDown(false)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	byClass := map[int]usage.Counts{}
	for _, b := range sink.batches {
		for _, rec := range b.Records {
			x := byClass[rec.Class]
			x.Add(rec.Counts)
			byClass[rec.Class] = x
		}
	}
	if got := byClass[2]; got.Requests != 4 || got.FunctionUS != 1006 {
		t.Errorf("2xx: %+v, want 4 requests and 1006 µs", got)
	}
	if got := byClass[5]; got.Requests != 1 || got.Billable != 0 || got.FunctionUS != 10 {
		t.Errorf("5xx of the edge: %+v, want 1 request, not billable, 10 µs", got)
	}
	var total usage.EdgeTotal
	for _, et := range m.Totals() {
		total.Requests += et.Requests
		total.FunctionUS += et.FunctionUS
	}
	if total.Requests != 5 || total.FunctionUS != 1016 {
		t.Errorf("totals: %d requests, %d µs; want 5 and 1016", total.Requests, total.FunctionUS)
	}
}
