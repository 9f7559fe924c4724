package edge

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"tollgate/edge/conn"
	"tollgate/tenants"
)

// Traces (Config.Tracing).
//
// With tracing off the request path does one thing more: the nil check in finish. A
// caller's traceparent then goes upstream unchanged, like any other header.
//
// With tracing on, every request belongs to a trace: the caller's (a valid W3C
// traceparent) or a new one. The edge decides whether it records the trace before it
// makes any span, the way the SDK's parent-based ratio sampler would: a caller's trace
// by the caller's sampled flag, a new one by Tracing.Sample. A request it does not record
// costs the parse of the header, two random numbers and the traceparent it sends
// upstream, and allocates nothing; the upstream still learns the trace and the decision.
// A recorded request gets one server span, started at the request's arrival time once
// the edge forwards it (so the traceparent upstream names it) or when it answers itself,
// and ended in finish. The steps are its events: routed, authenticated, authorized and
// limited carry the time the request had passed them (when it was forwarded), "upstream
// answered" the time the upstream exchanges ended.

// Tracing turns on the edge's spans. An Edge keeps state in it: one per Edge.
type Tracing struct {
	// Tracer makes the spans. Its provider must record every root span it is asked for
	// (tracing.Config.RootsSampled): the edge has decided already. Required.
	Tracer trace.Tracer
	// Sample is the share of new traces (requests without a caller's traceparent) that
	// are recorded, 0–1.
	Sample float64

	// bound: a new trace is recorded when the top 63 bits of its id's last 8 bytes are
	// below it, the SDK's TraceIDRatioBased rule.
	bound uint64
	// applying holds the apply spans of each tenant's changes not yet compiled, by
	// tenant id; guarded by the edge's mu.
	applying map[string][]trace.Span
}

func (t *Tracing) setDefaults() {
	switch {
	case t.Sample >= 1:
		t.bound = 1 << 63
	case t.Sample > 0:
		t.bound = uint64(t.Sample * (1 << 63))
	}
	t.applying = map[string][]trace.Span{}
}

var (
	hdrTraceparent = []byte("Traceparent")
	hdrTracestate  = []byte("Tracestate")
)

// Trace decisions of an exchange.
const (
	traceUndecided = iota
	traceSkipped
	traceRecorded
)

// exchangeTrace is an exchange's part of its trace.
type exchangeTrace struct {
	state    uint8
	flags    byte // the caller's trace flags
	parent   bool // the caller sent a valid traceparent
	traceID  trace.TraceID
	spanID   trace.SpanID // the caller's span; then the edge's
	span     trace.Span   // recorded only
	admitted int64        // conn.MonoNow() when the request was forwarded; 0: never
	tp       [55]byte     // the traceparent sent upstream
}

// decideTrace parses the caller's traceparent and decides whether the trace is recorded;
// recorded, it starts the request's span.
func (e *Edge) decideTrace(x *exchange) {
	tr := &x.tr
	tr.parent = parseTraceparent(x.ctx.Request.Header.PeekBytes(hdrTraceparent), tr)
	var sampled bool
	if tr.parent {
		sampled = tr.flags&1 != 0
	} else {
		binary.BigEndian.PutUint64(tr.traceID[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tr.traceID[8:], rand.Uint64())
		sampled = binary.BigEndian.Uint64(tr.traceID[8:])>>1 < e.cfg.Tracing.bound
	}
	if !sampled {
		tr.state = traceSkipped
		for tr.spanID = (trace.SpanID{}); !tr.spanID.IsValid(); {
			binary.BigEndian.PutUint64(tr.spanID[:], rand.Uint64())
		}
		return
	}
	tr.state = traceRecorded
	ctx := context.Background()
	if tr.parent {
		ts, _ := trace.ParseTraceState(string(x.ctx.Request.Header.PeekBytes(hdrTracestate)))
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tr.traceID, SpanID: tr.spanID, TraceFlags: trace.TraceFlags(tr.flags), TraceState: ts, Remote: true,
		}))
	}
	_, tr.span = e.cfg.Tracing.Tracer.Start(ctx, "edge request",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(x.ctx.Time()))
	sc := tr.span.SpanContext()
	tr.traceID, tr.spanID = sc.TraceID(), sc.SpanID()
}

// traceUpstream names the edge's span as the upstream request's parent.
func (e *Edge) traceUpstream(x *exchange) {
	tr := &x.tr
	if tr.state == traceUndecided {
		e.decideTrace(x)
	}
	tr.admitted = conn.MonoNow()
	b := tr.tp[:0]
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tr.traceID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, tr.spanID[:])
	if tr.state == traceRecorded {
		b = append(b, "-01"...)
	} else {
		b = append(b, "-00"...)
	}
	x.ctx.Request.Header.SetCanonical(hdrTraceparent, b)
}

// traceFinish is finish's hook: small enough to inline, so with tracing off a request
// pays one predictable branch.
func (e *Edge) traceFinish(x *exchange, status int) {
	if e.cfg.Tracing != nil {
		e.endTrace(x, status)
	}
}

// endTrace ends a recorded request's span with what became of the request.
func (e *Edge) endTrace(x *exchange, status int) {
	tr := &x.tr
	if tr.state == traceUndecided {
		e.decideTrace(x)
	}
	if tr.state != traceRecorded {
		return
	}
	sp := tr.span
	method := string(x.ctx.Request.Header.Method())
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		attribute.String("http.request.method", method),
		attribute.Int("http.response.status_code", status),
		attribute.String("tollgate.request_id", string(x.reqID)),
	)
	if x.snap != nil {
		attrs = append(attrs, attribute.String("tollgate.tenant", x.snap.Slug))
	}
	if rt := x.route; rt != nil {
		sp.SetName(method + " " + rt.name)
		attrs = append(attrs, attribute.String("http.route", rt.name), attribute.String("tollgate.route_id", rt.id))
	} else {
		sp.SetName(method)
	}
	if c := x.consumer; c != nil {
		attrs = append(attrs, attribute.String("tollgate.consumer_id", c.ID))
	}
	if t := x.target; t != nil {
		attrs = append(attrs, attribute.String("tollgate.upstream", t.URL))
	}
	sp.SetAttributes(attrs...)
	if tr.admitted != 0 {
		now, mono := time.Now(), conn.MonoNow()
		at := func(m int64) trace.EventOption { return trace.WithTimestamp(now.Add(-time.Duration(mono - m))) }
		sp.AddEvent("routed", at(tr.admitted))
		if x.consumer != nil {
			sp.AddEvent("authenticated", at(tr.admitted))
		}
		if x.route.checkAccess {
			sp.AddEvent("authorized", at(tr.admitted))
		}
		sp.AddEvent("limited", at(tr.admitted))
		if x.upstream > 0 {
			sp.AddEvent("upstream answered", at(tr.admitted+int64(x.upstream)))
		}
	} else if x.route != nil {
		sp.AddEvent("routed")
	}
	switch {
	case x.reply != nil && x.reply.status >= 400:
		sp.SetStatus(codes.Error, x.reply.code)
	case status >= 500:
		sp.SetStatus(codes.Error, "upstream answered "+strconv.Itoa(status))
	}
	sp.End()
}

// parseTraceparent reads a W3C traceparent (version 00, or a later one's first four
// fields) into tr's trace id, caller span id and flags; false when it is not valid.
func parseTraceparent(b []byte, tr *exchangeTrace) bool {
	if len(b) < 55 || (len(b) > 55 && b[55] != '-') || b[2] != '-' || b[35] != '-' || b[52] != '-' {
		return false
	}
	var ver [1]byte
	if _, err := hex.Decode(ver[:], b[0:2]); err != nil || ver[0] == 0xff || (ver[0] == 0 && len(b) != 55) {
		return false
	}
	var flags [1]byte
	if _, err := hex.Decode(tr.traceID[:], b[3:35]); err != nil {
		return false
	}
	if _, err := hex.Decode(tr.spanID[:], b[36:52]); err != nil {
		return false
	}
	if _, err := hex.Decode(flags[:], b[53:55]); err != nil {
		return false
	}
	if !tr.traceID.IsValid() || !tr.spanID.IsValid() || !lowerHexOnly(b[:55]) {
		return false
	}
	tr.flags = flags[0]
	return true
}

func lowerHexOnly(b []byte) bool {
	for _, c := range b {
		if c >= 'A' && c <= 'F' {
			return false
		}
	}
	return true
}

// remoteParent reads a W3C traceparent into a remote span context; invalid when it is
// not one.
func remoteParent(s string) trace.SpanContext {
	var tr exchangeTrace
	if !parseTraceparent([]byte(s), &tr) {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tr.traceID, SpanID: tr.spanID, TraceFlags: trace.TraceFlags(tr.flags), Remote: true,
	})
}

// startApply starts the apply span of an accepted entry that carries the trace of the
// change that made it; the compile that publishes the tenant's new snapshot ends it.
// The caller holds e.mu.
func (e *Edge) startApplyLocked(pk tenants.ParsedKey, key string, ent *tenants.Entry) {
	tr := e.cfg.Tracing
	parent := remoteParent(ent.Trace)
	if !parent.IsValid() {
		return
	}
	_, sp := tr.Tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "apply",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("tollgate.config_key", key),
			attribute.String("tollgate.tenant_id", pk.TenantID),
			attribute.Int64("tollgate.rev", ent.Rev),
			attribute.String("tollgate.edge_id", e.cfg.EdgeID),
		))
	if !sp.IsRecording() {
		return
	}
	tr.applying[pk.TenantID] = append(tr.applying[pk.TenantID], sp)
}

// takeApplyingLocked returns the apply spans of a tenant about to compile; the caller
// holds e.mu.
func (e *Edge) takeApplyingLocked(tenantID string) []trace.Span {
	tr := e.cfg.Tracing
	if tr == nil {
		return nil
	}
	spans := tr.applying[tenantID]
	if spans != nil {
		delete(tr.applying, tenantID)
	}
	return spans
}

// endApplying ends apply spans once their tenant's snapshot is published (or, with
// published false, when the tenant was deleted or cannot compile yet).
func endApplying(spans []trace.Span, snapRev int64, published bool) {
	for _, sp := range spans {
		if published {
			sp.AddEvent("published", trace.WithAttributes(attribute.Int64("tollgate.snapshot_rev", snapRev)))
		} else {
			sp.AddEvent("not published")
		}
		sp.End()
	}
}
