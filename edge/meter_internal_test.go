package edge

import (
	"context"
	"testing"

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
		e.meterRecord(x, 200)
	}
}
