package meter_test

import (
	"context"
	"maps"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/meter"
	"tollgate/infra/usage"
)

// Times recorded on a route come out of the next flush as sketches per route and hour,
// with every time counted once, upstream times only for requests that called one, and
// percentiles within the sketch's accuracy; a flush with nothing new ships none.
func TestLatencySketchesFlushed(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	r := m.Route(tenantA, "r1")
	other := m.Route(tenantB, "r2")
	h0 := time.Date(2024, 1, 1, 5, 0, 0, 0, time.UTC)
	for i := 1; i <= 100; i++ {
		r.RecordLatency(h0.Add(time.Minute), time.Duration(i)*100*time.Microsecond, time.Duration(i)*time.Millisecond, true)
	}
	r.RecordLatency(h0.Add(time.Minute), 5*time.Millisecond, 0, false) // answered by the edge
	// Either side of the hour's turn, from many goroutines.
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				other.RecordLatency(h0.Add(59*time.Minute), time.Millisecond, 2*time.Millisecond, true)
				other.RecordLatency(h0.Add(61*time.Minute), time.Millisecond, 2*time.Millisecond, true)
			}
		}()
	}
	wg.Wait()
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]usage.Latency{}
	for _, b := range sink.batches {
		for _, l := range b.Latencies {
			got[l.RouteID+"@"+l.Hour.Format("15")] = l
		}
	}
	if len(got) != 3 {
		t.Fatalf("latency entries %v, want r1@05, r2@05, r2@06", keys(got))
	}
	gw, err := usage.DecodeSketch(got["r1@05"].Gateway)
	if err != nil {
		t.Fatal(err)
	}
	up, err := usage.DecodeSketch(got["r1@05"].Upstream)
	if err != nil {
		t.Fatal(err)
	}
	if gw.GetCount() != 101 || up.GetCount() != 100 {
		t.Fatalf("counts: gateway %v, upstream %v; want 101 and 100", gw.GetCount(), up.GetCount())
	}
	p := usage.SketchPercentiles(up)
	for _, c := range []struct{ got, want float64 }{{p.P50, 50}, {p.P95, 95}, {p.P99, 99}} {
		if c.got < c.want*0.98 || c.got > c.want*1.02 {
			t.Fatalf("upstream percentiles %+v, want about 50/95/99 ms", p)
		}
	}
	for _, k := range []string{"r2@05", "r2@06"} {
		s, err := usage.DecodeSketch(got[k].Upstream)
		if err != nil || s.GetCount() != 400 {
			t.Fatalf("%s: %v, count %v; want 400", k, err, s.GetCount())
		}
	}
	n := len(sink.batches)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.batches) != n {
		t.Fatalf("an idle flush shipped %d batches", len(sink.batches)-n)
	}
}

func keys(m map[string]usage.Latency) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A streamed response's times are recorded when its body closes: the gateway's part as
// measured when the handler returned, the rest the upstream's.
func TestUsageRecordAtCloseRecordsLatency(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	u := meter.Usage{Route: m.Route(tenantA, "s"), Status: 200, Upstream: true, At: time.Now().Add(-40 * time.Millisecond),
		Gateway: 2 * time.Millisecond, CalledUpstream: true}
	u.Record()
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var l *usage.Latency
	for _, b := range sink.batches {
		for i := range b.Latencies {
			l = &b.Latencies[i]
		}
	}
	if l == nil {
		t.Fatal("no latency shipped")
	}
	gw, _ := usage.DecodeSketch(l.Gateway)
	up, _ := usage.DecodeSketch(l.Upstream)
	if g := usage.SketchPercentiles(gw).P50; g < 1.9 || g > 2.1 {
		t.Fatalf("gateway p50 %v ms, want 2", g)
	}
	if p := usage.SketchPercentiles(up).P50; p < 37 {
		t.Fatalf("upstream p50 %v ms, want at least 38", p)
	}
}

func TestRecordLatencyAllocatesNothing(t *testing.T) {
	m := newMeter(t, meter.Config{Sink: &memSink{}})
	r := m.Route(tenantA, "r1")
	at := time.Now()
	r.RecordLatency(at, time.Millisecond, 3*time.Millisecond, true)
	if n := testing.AllocsPerRun(1000, func() { r.RecordLatency(at, 70*time.Microsecond, 3*time.Millisecond, true) }); n != 0 {
		t.Fatalf("Route.RecordLatency allocates %v times per call", n)
	}
}

// What a request costs the meter with its times, one core and all cores on one route.
func BenchmarkRouteRecordWithLatency(b *testing.B) {
	m := newMeter(b, meter.Config{Sink: &memSink{}})
	r := m.Route(tenantA, "0190a000-0000-7000-8000-0000000000ff")
	consumer := m.Consumer(tenantA, "0190a000-0000-7000-8000-0000000000cc")
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Record(consumer, 200, true, 512, 2048, at)
		r.RecordLatency(at, time.Duration(40+i&63)*time.Microsecond, time.Duration(900+i&255)*time.Microsecond, true)
	}
}

func BenchmarkRouteRecordWithLatencyParallel(b *testing.B) {
	m := newMeter(b, meter.Config{Sink: &memSink{}})
	r := m.Route(tenantA, "0190a000-0000-7000-8000-0000000000ff")
	consumer := m.Consumer(tenantA, "0190a000-0000-7000-8000-0000000000cc")
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Record(consumer, 200, true, 512, 2048, at)
			r.RecordLatency(at, time.Duration(40+i&63)*time.Microsecond, time.Duration(900+i&255)*time.Microsecond, true)
			i++
		}
	})
}

func BenchmarkRecordLatency(b *testing.B) { benchmarkRecordLatency(b, false) }

// With every bin made at the first record (TOLLGATE_METER_SPARSE_LATENCY=off).
func BenchmarkRecordLatencyDense(b *testing.B) { benchmarkRecordLatency(b, true) }

func benchmarkRecordLatency(b *testing.B, dense bool) {
	m := newMeter(b, meter.Config{Sink: &memSink{}, DenseLatency: dense})
	r := m.Route(tenantA, "0190a000-0000-7000-8000-0000000000ff")
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.RecordLatency(at, time.Duration(40+i&63)*time.Microsecond, time.Duration(900+i&255)*time.Microsecond, true)
	}
}

func BenchmarkRecordLatencyParallel(b *testing.B) {
	m := newMeter(b, meter.Config{Sink: &memSink{}})
	r := m.Route(tenantA, "0190a000-0000-7000-8000-0000000000ff")
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.RecordLatency(at, time.Duration(40+i&63)*time.Microsecond, time.Duration(900+i&255)*time.Microsecond, true)
			i++
		}
	})
}

// Latencies the sink cannot take wait in the spool with the counts and are published
// from it, under their ids, once it can.
func TestLatencyThroughTheSpool(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink})
	r := m.Route(tenantA, "r1")
	at := time.Now()
	sink.setDown(true)
	r.Record(nil, 200, true, 0, 0, at)
	r.RecordLatency(at, time.Millisecond, 20*time.Millisecond, true)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m.Spooled() != 2 {
		t.Fatalf("%d batches spooled, want the counts and the latencies", m.Spooled())
	}
	sink.setDown(false)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	for _, b := range sink.batches {
		for _, l := range b.Latencies {
			s, err := usage.DecodeSketch(l.Upstream)
			if err != nil {
				t.Fatal(err)
			}
			n += int(s.GetCount())
		}
	}
	if n != 1 || m.Spooled() != 0 {
		t.Fatalf("%d upstream times published, %d batches still spooled; want 1 and 0", n, m.Spooled())
	}
}

// A released route (its tenant evicted or deleted) has the times it holds shipped by the
// next flush, and then its counters are gone; a record after that makes them again.
func TestReleasedRouteLatencyShippedAndLetGo(t *testing.T) {
	sink := &memSink{}
	reg := prometheus.NewRegistry()
	m := newMeter(t, meter.Config{Sink: sink, Registry: reg})
	r, kept := m.Route(tenantA, "r1"), m.Route(tenantB, "r2")
	at := time.Now()
	for i := 1; i <= 10; i++ {
		r.RecordLatency(at, time.Duration(i)*time.Millisecond, 0, false)
	}
	kept.RecordLatency(at, time.Millisecond, 0, false)
	if got := gauge(t, reg, "tollgate_meter_latency_routes"); got != 2 {
		t.Fatalf("latency routes %v, want 2", got)
	}
	r.Release()
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, b := range sink.batches {
		for _, l := range b.Latencies {
			if l.RouteID == "r1" {
				s, err := usage.DecodeSketch(l.Gateway)
				if err != nil {
					t.Fatal(err)
				}
				n += uint64(s.GetCount())
			}
		}
	}
	if n != 10 {
		t.Fatalf("released route shipped %d times, want 10", n)
	}
	if got := gauge(t, reg, "tollgate_meter_latency_routes"); got != 1 {
		t.Fatalf("latency routes after the release %v, want 1 (the route not released)", got)
	}
	r.RecordLatency(at, time.Millisecond, 0, false)
	if got := gauge(t, reg, "tollgate_meter_latency_routes"); got != 2 {
		t.Fatalf("latency routes after a new record %v, want 2", got)
	}
	// The released handle is forgotten; its counts and the new handle's add up.
	again := m.Route(tenantA, "r1")
	if again == r {
		t.Fatal("Meter.Route gave the released handle again")
	}
	if m.Route(tenantB, "r2") != kept {
		t.Fatal("Meter.Route gave a new handle of a route not released")
	}
	r.Record(nil, 200, true, 0, 0, at)
	again.Record(nil, 200, true, 0, 0, at)
	sink.batches = nil
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var reqs int64
	for _, b := range sink.batches {
		for _, rec := range b.Records {
			if rec.RouteID == "r1" {
				reqs += rec.Requests
			}
		}
	}
	if reqs != 2 {
		t.Fatalf("r1's requests over its two handles: %d, want 2", reqs)
	}
}

// The chunked bins and the dense ones ship the same sketches for the same times (bin by
// bin: the encoding's order of bins is a map's).
func TestSparseLatencyShipsWhatDenseDoes(t *testing.T) {
	bins := func(data []byte) map[int]float64 {
		if data == nil {
			return nil
		}
		s, err := usage.DecodeSketch(data)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]float64{}
		s.GetPositiveValueStore().ForEach(func(i int, n float64) bool { out[i] = n; return false })
		return out
	}
	shipped := func(dense bool) map[string]map[int]float64 {
		sink := &memSink{}
		m := newMeter(t, meter.Config{Sink: sink, DenseLatency: dense})
		r := m.Route(tenantA, "r1")
		at := time.Date(2024, 1, 1, 5, 0, 0, 0, time.UTC)
		for i := range 3000 {
			// From below a microsecond to past an hour: every chunk, both ends included.
			d := time.Duration(float64(time.Nanosecond) * math.Pow(1.0125, float64(i)))
			r.RecordLatency(at, d, d/3, i%2 == 0)
			r.RecordLatency(at.Add(time.Hour), d/7, 0, false)
		}
		if err := m.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		out := map[string]map[int]float64{}
		for _, b := range sink.batches {
			for _, l := range b.Latencies {
				h := l.Hour.Format("15")
				out[h+" gateway"], out[h+" upstream"] = bins(l.Gateway), bins(l.Upstream)
			}
		}
		return out
	}
	sparse, dense := shipped(false), shipped(true)
	if len(sparse) != 4 || len(sparse["05 gateway"]) < 1000 || len(sparse["06 upstream"]) != 0 {
		t.Fatalf("sparse bins shipped %d series, %d gateway bins in the first hour; want 4 and over 1000", len(sparse), len(sparse["05 gateway"]))
	}
	for k, s := range sparse {
		if !maps.Equal(s, dense[k]) {
			t.Fatalf("%s: sparse and dense bins shipped different sketches (%d and %d bins)", k, len(s), len(dense[k]))
		}
	}
}
