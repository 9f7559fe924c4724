package edge

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"tollgate/edge/edgemetrics"
	"tollgate/edge/limit"
	"tollgate/edge/reqlog"
	wire "tollgate/infra/reqlog"
)

// captureLogs keeps the request log batches it is given.
type captureLogs struct {
	batches chan *wire.Batch
	err     atomic.Value // the last batch it could not decode
}

func (s *captureLogs) Publish(ctx context.Context, _ string, data []byte) error {
	b, err := wire.DecodeBatch(data)
	if err != nil {
		s.err.Store(err.Error())
		return err
	}
	select {
	case s.batches <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A finished request the sample leaves out costs the request log no allocation; a
// failed one is logged with its path (no query), route, reason and latency split.
func TestRequestLogFinish(t *testing.T) {
	sink := &captureLogs{batches: make(chan *wire.Batch, 16)}
	logs := reqlog.New(reqlog.Config{EdgeID: "e", Sink: sink, Interval: 20 * time.Millisecond})
	t.Cleanup(func() {
		// Bounded: after a failure nothing reads the sink, and Close would wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		logs.Close(ctx)
	})
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
	// A refused token says why in the log, and the client the same answer as before.
	x.upstream = 0
	x.failBearer(replyBadJWTFor[rejExpired])
	if !bytes.Equal(x.ctx.Response.Body(), append(append(append([]byte(nil), replyBadJWT.prefix...), x.reqID...), replySuffix...)) {
		t.Errorf("an expired token's answer %s differs from other refused tokens'", x.ctx.Response.Body())
	}
	e.finish(x)
	// A limit says which and its window.
	rule, err := limit.NewRate(limit.Scope{Tenant: "t", Name: "tenant"}, limit.Rate{Limit: 10, Per: time.Second, Burst: 20})
	if err != nil {
		t.Fatal(err)
	}
	x.fail(replyRateLimited)
	x.why = rule.Reason()
	e.finish(x)
	want := []string{"the upstream http://127.0.0.1:9 refused the connection", "the JWT was refused: it has expired or is not valid yet",
		"the platform plan's rate limit of 10 per second (burst 20) was reached"}
	var got []wire.Entry
	deadline := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case b := <-sink.batches:
			got = append(got, b.Entries...)
		case <-deadline:
			t.Fatalf("%d entries logged, want %d (%d batches wait for the sink; it refused one: %v)", len(got), len(want), logs.Pending(), sink.err.Load())
		}
	}
	first := got[0]
	if first.Path != "/down" || first.RouteName != "down" || first.RouteID != "r1" || first.Status != 502 || first.RequestID != "req-1" ||
		first.UpstreamUS != 3000 || first.Code != "upstream_failed" {
		t.Errorf("entry %+v", first)
	}
	for i, w := range want {
		if got[i].Reason != w {
			t.Errorf("entry %d: reason %q, want %q", i, got[i].Reason, w)
		}
	}
}
