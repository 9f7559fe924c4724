package edge_test

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"tollgate/edge"
	"tollgate/tenants"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// tracedHarness is an edge whose spans go to an in-memory exporter; like the binary's,
// its provider records every root span it is asked for (the edge decides).
func tracedHarness(t *testing.T, sample float64) (*harness, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	h := newHarness(t, func(c *edge.Config) {
		c.Tracing = &edge.Tracing{Tracer: tp.Tracer("tollgate/edge"), Sample: sample}
	})
	return h, exp
}

func spansNamed(exp *tracetest.InMemoryExporter, prefix string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func TestTraceOffForwardsTraceparent(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "hello", []string{"/hello"}, nil, "", up.URL)
	h.e.Loaded()
	tp := "00-" + callerTrace + "-" + callerSpan + "-01"
	r := h.get("acme."+domain, "/hello", "traceparent: "+tp, "tracestate: k=v")
	if r.status != 200 || r.echo.get("traceparent") != tp || r.echo.get("tracestate") != "k=v" {
		t.Fatalf("with tracing off the caller's trace context goes upstream as is: %s %v", r, r.echo.Header)
	}
}

func TestTraceContinuesCallersTrace(t *testing.T) {
	h, exp := tracedHarness(t, 0)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "hello", []string{"/hello"}, nil, tenants.AuthKey, up.URL)
	h.put(&tenants.Consumer{ID: "c1", TenantID: acme, Name: "alice"})
	key := h.key(acme, "c1", "k1")
	h.e.Loaded()

	r := h.get("acme."+domain, "/hello", "traceparent: 00-"+callerTrace+"-"+callerSpan+"-01", "tracestate: k=v", "X-API-Key: "+key)
	if r.status != 200 {
		t.Fatalf("traced request: %s", r)
	}
	got := r.echo.get("traceparent")
	parts := strings.Split(got, "-")
	if len(parts) != 4 || parts[1] != callerTrace || parts[2] == callerSpan || parts[3] != "01" {
		t.Fatalf("upstream traceparent %q: want the caller's trace with the edge's span as parent", got)
	}
	if r.echo.get("tracestate") != "k=v" {
		t.Fatalf("tracestate %q: want the caller's", r.echo.get("tracestate"))
	}
	spans := spansNamed(exp, "GET")
	if len(spans) != 1 {
		t.Fatalf("spans %v: want one edge span", exp.GetSpans())
	}
	s := spans[0]
	if s.SpanContext.TraceID().String() != callerTrace || s.SpanContext.SpanID().String() != parts[2] || s.Parent.SpanID().String() != callerSpan {
		t.Fatalf("span %s/%s parent %s: want trace %s, the span id sent upstream, the caller's span as parent",
			s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), callerTrace)
	}
	for k, want := range map[string]string{
		"tollgate.tenant": "acme", "http.route": "hello", "http.response.status_code": "200",
		"tollgate.consumer_id": "c1", "tollgate.upstream": up.URL,
	} {
		if got := attr(s, k); got != want {
			t.Errorf("attribute %s = %q, want %q", k, got, want)
		}
	}
	var events []string
	for _, ev := range s.Events {
		events = append(events, ev.Name)
	}
	if strings.Join(events, ",") != "routed,authenticated,limited,upstream answered" {
		t.Errorf("events %v", events)
	}
	if !s.StartTime.Before(s.EndTime) {
		t.Errorf("span from %v to %v", s.StartTime, s.EndTime)
	}
}

func TestTraceNotSampled(t *testing.T) {
	h, exp := tracedHarness(t, 0)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "hello", []string{"/hello"}, nil, "", up.URL)
	h.e.Loaded()

	// The caller's decision stands: the upstream learns the trace, nothing is recorded.
	r := h.get("acme."+domain, "/hello", "traceparent: 00-"+callerTrace+"-"+callerSpan+"-00")
	parts := strings.Split(r.echo.get("traceparent"), "-")
	if len(parts) != 4 || parts[1] != callerTrace || parts[2] == callerSpan || parts[3] != "00" {
		t.Fatalf("upstream traceparent %q", r.echo.get("traceparent"))
	}
	// A new trace at sample 0, and a malformed traceparent (a new trace too).
	for _, hdr := range []string{"X-Nothing: 1", "traceparent: 00-" + strings.ToUpper(callerTrace) + "-" + callerSpan + "-01"} {
		r = h.get("acme."+domain, "/hello", hdr)
		parts = strings.Split(r.echo.get("traceparent"), "-")
		if len(parts) != 4 || parts[1] == callerTrace || len(parts[1]) != 32 || parts[3] != "00" {
			t.Fatalf("%s: upstream traceparent %q: want a new unsampled trace", hdr, r.echo.get("traceparent"))
		}
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans recorded, want none", n)
	}
}

func TestTraceEdgeAnswers(t *testing.T) {
	h, exp := tracedHarness(t, 1)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "hello", []string{"/hello"}, nil, tenants.AuthKey, up.URL)
	h.e.Loaded()

	if r := h.get("acme."+domain, "/nowhere"); r.status != 404 {
		t.Fatalf("unrouted: %s", r)
	}
	if r := h.get("acme."+domain, "/hello"); r.status != 401 {
		t.Fatalf("no key: %s", r)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("spans %v: want one per request", spans)
	}
	for i, want := range []struct{ name, status, code string }{
		{"GET", "404", tenants.ERouteNotFound}, {"GET hello", "401", tenants.EUnauthenticated},
	} {
		s := spans[i]
		if s.Name != want.name || attr(s, "http.response.status_code") != want.status || s.Status.Code != codes.Error || s.Status.Description != want.code {
			t.Errorf("span %d: %s %s %v, want %s %s error %s", i, s.Name, attr(s, "http.response.status_code"), s.Status, want.name, want.status, want.code)
		}
		if s.Parent.IsValid() {
			t.Errorf("span %d has a parent: a new trace", i)
		}
	}
}

func TestTraceApply(t *testing.T) {
	h, exp := tracedHarness(t, 0)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.e.Loaded()
	waitFor(t, 2*time.Second, func() string {
		if r := h.get("acme."+domain, "/x"); r.status != 404 {
			return r.String()
		}
		return ""
	})

	ent := tenants.Entry{Rev: h.rev.Add(1), Route: &tenants.Route{ID: "r1", TenantID: acme, Name: "r1", Paths: []string{"/hello"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}},
		Trace: "00-" + callerTrace + "-" + callerSpan + "-01"}
	key, _ := ent.EntryKey()
	b, _ := json.Marshal(&ent)
	h.e.Apply(key, b, h.kvRev.Add(1))
	waitFor(t, 2*time.Second, func() string {
		if len(spansNamed(exp, "apply")) == 0 {
			return "no apply span"
		}
		return ""
	})
	s := spansNamed(exp, "apply")[0]
	if s.SpanContext.TraceID().String() != callerTrace || s.Parent.SpanID().String() != callerSpan {
		t.Fatalf("apply span in trace %s with parent %s: want the change's", s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	if len(s.Events) != 1 || s.Events[0].Name != "published" {
		t.Fatalf("apply span events %v", s.Events)
	}
	// Once the apply span has ended, the route serves.
	if r := h.get("acme."+domain, "/hello"); r.status != 200 {
		t.Fatalf("after apply: %s", r)
	}
	// An entry read back from the edge's store (kvRevision 0, a load in disk mode) is not
	// a change in flight: it starts no span, though it carries the trace it was made in.
	ent2 := ent
	ent2.Rev = h.rev.Add(1)
	ent2.Route = &tenants.Route{ID: "r2", TenantID: acme, Name: "r2", Paths: []string{"/again"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}
	key, _ = ent2.EntryKey()
	b, _ = json.Marshal(&ent2)
	h.e.Apply(key, b, 0)
	waitFor(t, 2*time.Second, func() string {
		if r := h.get("acme."+domain, "/again"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	if n := len(spansNamed(exp, "apply")); n != 1 {
		t.Errorf("%d apply spans after a stored entry's load, want still 1", n)
	}
}

// BenchmarkTrace is one proxied request over the in-memory listener with tracing off, on
// but not recorded (sample 0, no caller's traceparent), and recorded (sample 1, spans
// dropped by a no-op exporter). allocs/op counts the client and the upstream too: 0 with
// tracing off, and still 0 when the request is not recorded.
func BenchmarkTrace(b *testing.B) {
	upURL := benchUpstream(b)
	for _, c := range []struct {
		name    string
		tracing func() *edge.Tracing
	}{
		{"tracing=off", func() *edge.Tracing { return nil }},
		{"tracing=unsampled", func() *edge.Tracing {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
			b.Cleanup(func() { _ = tp.Shutdown(b.Context()) })
			return &edge.Tracing{Tracer: tp.Tracer("bench"), Sample: 0}
		}},
		{"tracing=sampled", func() *edge.Tracing {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
			b.Cleanup(func() { _ = tp.Shutdown(b.Context()) })
			return &edge.Tracing{Tracer: tp.Tracer("bench"), Sample: 1}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := newHarness(b, func(cfg *edge.Config) { cfg.Tracing = c.tracing() })
			acme := h.tenant("acme")
			h.route(acme, "r", []string{"/r"}, nil, "", upURL)
			h.e.Loaded()
			mem := fasthttputil.NewInmemoryListener()
			go func() { _ = h.e.Serve(mem, nil) }()
			conn, err := mem.Dial()
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			bw, br := bufio.NewWriter(conn), bufio.NewReader(conn)
			var req fasthttp.Request
			var resp fasthttp.Response
			req.SetRequestURI("/r")
			req.Header.SetHost("acme." + domain)
			b.ReportAllocs()
			for b.Loop() {
				if err := req.Write(bw); err != nil {
					b.Fatal(err)
				}
				if err := bw.Flush(); err != nil {
					b.Fatal(err)
				}
				if err := resp.Read(br); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}
