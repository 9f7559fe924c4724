package edge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"tollgate/edge/edgemetrics"
	"tollgate/edge/reqlog"
	wire "tollgate/infra/reqlog"
)

// captureLogs keeps the request log batches it is given.
type captureLogs struct{ batches chan *wire.Batch }

func (s *captureLogs) Publish(_ context.Context, _ string, data []byte) error {
	b, err := wire.DecodeBatch(data)
	if err != nil {
		return err
	}
	s.batches <- b
	return nil
}

// A finished request the sample leaves out costs the request log no allocation; a
// failed one is logged with its path (no query), route, reason and latency split.
func TestRequestLogFinish(t *testing.T) {
	sink := &captureLogs{batches: make(chan *wire.Batch, 16)}
	logs := reqlog.New(reqlog.Config{EdgeID: "e", Sink: sink, Interval: 20 * time.Millisecond})
	t.Cleanup(func() { logs.Close(context.Background()) })
	e := &Edge{cfg: Config{Logs: logs}}
	h := logs.Tenant("0190a000-0000-7000-8000-0000000000f1")
	h.SetSamplePercent(0)
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	req.SetRequestURI("/down?token=secret")
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	ctx.Response.SetBody([]byte(`{}`))
	m, err := edgemetrics.New(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	l := edgemetrics.NewLabeler(m, 10, 10, 10)
	rm := l.Route(l.Tenant("t", "acme"), "r1", "down")
	x := &exchange{ctx: ctx, rm: rm, snap: &Snapshot{tenantConfig: &tenantConfig{logs: h}}, route: &route{id: "r1", name: "down"},
		path: []byte("/down"), reqID: []byte("req-1")}
	if n := testing.AllocsPerRun(100, func() { e.finish(x) }); n != 0 {
		t.Errorf("finishing an unsampled 200 allocates %v times", n)
	}
	x.upstream = 3 * time.Millisecond
	x.fail(newReply("upstream_failed", "the upstream http://127.0.0.1:9 refused the connection"))
	e.finish(x)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case b := <-sink.batches:
			if len(b.Entries) == 0 {
				continue
			}
			got := b.Entries[0]
			if got.Path != "/down" || got.RouteName != "down" || got.RouteID != "r1" || got.Status != 502 || got.RequestID != "req-1" ||
				got.Reason != "the upstream http://127.0.0.1:9 refused the connection" || got.UpstreamUS != 3000 || got.Code != "upstream_failed" {
				t.Errorf("entry %+v", got)
			}
			return
		case <-deadline:
			t.Fatal("the 502 was not logged")
		}
	}
}
