package edge

import (
	"context"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/meter"
	usagewire "tollgate/infra/usage" // the edge has its own type usage
)

type discardSink struct{}

func (discardSink) Publish(context.Context, string, []byte) error          { return nil }
func (discardSink) PutTotals(context.Context, []usagewire.EdgeTotal) error { return nil }

// BenchmarkMeterRecordPlain is the meter's share of a plain proxied request, a GET
// answered with an in-memory body: counting its request body and recording it.
func BenchmarkMeterRecordPlain(b *testing.B) {
	m, err := meter.New(meter.Config{EdgeID: "bench", Sink: discardSink{}, SpoolDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close(context.Background()) })
	e := &Edge{cfg: Config{Meter: m}}
	r := m.Route("t", "r")
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil) // sets the request's time, as the server does
	ctx.Response.SetBody([]byte(`{"hello":"world"}`))
	x := &exchange{ctx: ctx, snap: &Snapshot{meter: r}, route: &route{meter: r}}
	b.ReportAllocs()
	for b.Loop() {
		x.meterRequestBody()
		e.meterRecord(x, 200, time.Millisecond)
	}
}

// captureBatches keeps the batches it is given.
type captureBatches struct{ batches []*usagewire.Batch }

func (s *captureBatches) Publish(_ context.Context, _ string, data []byte) error {
	b, err := usagewire.DecodeBatch(data)
	if err != nil {
		return err
	}
	s.batches = append(s.batches, b)
	return nil
}
func (s *captureBatches) PutTotals(context.Context, []usagewire.EdgeTotal) error { return nil }

// The function step's time (x.functionTime) is recorded with the request, in whole
// microseconds, without an allocation, and a pooled exchange forgets it.
func TestMeterRecordCarriesFunctionTime(t *testing.T) {
	sink := &captureBatches{}
	m, err := meter.New(meter.Config{EdgeID: "fn", Sink: sink, SpoolDir: t.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	e := &Edge{cfg: Config{Meter: m}}
	tenant := "0190a000-0000-7000-8000-0000000000f1"
	r := m.Route(tenant, "r")
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	ctx.Response.SetBody([]byte(`{}`))
	x := &exchange{ctx: ctx, snap: &Snapshot{meter: r}, route: &route{meter: r}}
	x.functionTime = 2500 * time.Nanosecond // 3 µs
	e.meterRecord(x, 200, time.Millisecond)
	x.functionTime = time.Millisecond
	if n := testing.AllocsPerRun(100, func() { e.meterRecord(x, 200, time.Millisecond) }); n != 0 {
		t.Fatalf("meterRecord with function time allocates %v times", n)
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got usagewire.Counts
	for _, b := range sink.batches {
		for _, rec := range b.Records {
			got.Add(rec.Counts)
		}
	}
	// AllocsPerRun runs the function once more than it measures.
	if got.Requests != 102 || got.FunctionUS != 3+101*1000 {
		t.Fatalf("recorded %+v, want 102 requests and %d µs", got, 3+101*1000)
	}
	x.reset()
	if x.functionTime != 0 {
		t.Fatalf("a reset exchange keeps function time %v", x.functionTime)
	}
}
