package edge

import (
	"io"
	"time"

	"tollgate/edge/meter"
	"tollgate/edge/upstreamclient"
)

// Metering. Every request of a known tenant is counted once by Config.Meter: by tenant,
// route (none for a request that matched no route), consumer, UTC hour of arrival and
// status class, with the body bytes that went through. A request whose Host names no
// tenant, and one answered before the config was loaded or while draining, is not
// metered. Whether a request is billable is billing's rule (usage.Billable), applied
// to what the edge reports here: the status, and whether the upstream produced the
// response (x.reply == nil) or the edge answered itself (401, 403, 404 route_not_found,
// 429, 502/504 of a failed upstream, ...).
//
// The handles are made when a snapshot is compiled (Snapshot.meter, route.meter,
// Consumer.meter), so recording costs no lookup by string and allocates nothing.
//
// JWT callers: the exchange's x.jwt Consumer has no handle of its own, so the record
// falls back to the meter's interned handle of "<iss>|<claim>" (a lock-free lookup, but
// an entry per caller for the life of the process). The hook for the JWT wiring is
// meterHandleFor: give the cached verified identity a meter.NewConsumer(tenant, id.ID)
// and set Consumer.meter in setJWTCaller, and the fallback is never taken.
//
// # What the bytes are
//
// Body bytes only, never the request line, headers, chunk framing or trailers, and the
// same rule on every path:
//
//   - bytes_in is the request body the edge read from the client to serve the request
//     (to forward it, check its size or rewrite it). A body the edge refused or never
//     needed (401 before it was read, 413 on a declared length) counts what was read
//     of it, usually nothing; what fasthttp discards after the answer does not count.
//     The request's body stream is wrapped in a counter (x.in) when the route is
//     metered, so a streamed or chunked body counts the bytes that actually arrived.
//   - bytes_out is the response body handed to the client's connection. A body the edge
//     holds whole (an upstream answer of at most maxBufferedBody, the edge's own JSON
//     error, a cache hit: only such answers are cached) is counted when the handler
//     returns: fasthttp writes it in one piece right after. A streamed body (larger, or
//     of unknown length) is counted by its stream (package upstreamclient) as fasthttp relays it,
//     and the request is recorded when the stream is closed: at its end, or where it
//     was cut short (client gone, upstream reset), with what went through. A HEAD
//     answer, 1xx, 204 and 304 count 0. (With Config.BufferResponses, a benchmarking
//     switch, every upstream body is held whole and counted so.)
//   - a WebSocket tunnel counts, after the 101, every byte it relays: client→upstream
//     as bytes_in, upstream→client as bytes_out (frames with their headers: the edge
//     does not parse frames). The upgrade is recorded as one request when it happens;
//     the tunnel's bytes are recorded without a request (meter.Route.RecordBytes) every
//     wsMeterInterval while it is open and when it closes, in the hour they went
//     through.
//
// "Handed to the connection" is as close as a user-space proxy gets to the wire: a
// client that disappears mid-body leaves what the kernel had accepted into its socket
// buffers counted (and, for a streamed body, at most one copy buffer more: see
// upstreamclient's body).
//
// # Function time
//
// The guest run time of a route's functions (x.functionTime, set by the function step)
// goes into the same record as the request, in whole microseconds rounded up
// (meter.FunctionUS): usage's function_us, priced as its own unit. It is counted
// whatever the status and whoever answered, since the tenant's code ran either way;
// a request that ran no function adds 0.
//
// A record made after the handler returned (a streamed body, a tunnel) never touches
// the RequestCtx, which fasthttp recycles: everything it needs is copied into a usage
// when the handler returns.

// meteredBody is a response body stream that records the request's usage when it is
// closed, with the body bytes it relayed as bytes_out.
type meteredBody interface {
	RecordAtClose(u meter.Usage)
}

// meterRoute is the handle of a tenant's route ("" for requests that matched no route);
// nil when metering is off.
func (e *Edge) meterRoute(tenantID, routeID string) *meter.Route {
	if e.cfg.Meter == nil {
		return nil
	}
	return e.cfg.Meter.Route(tenantID, routeID)
}

// meterConsumer is a new handle of a compiled consumer; nil when metering is off.
func (e *Edge) meterConsumer(tenantID, consumerID string) *meter.Consumer {
	if e.cfg.Meter == nil {
		return nil
	}
	return meter.NewConsumer(tenantID, consumerID)
}

// meterHandleFor is the meter handle of a request's consumer (nil for none).
func (e *Edge) meterHandleFor(s *Snapshot, c *Consumer) *meter.Consumer {
	if c == nil {
		return nil
	}
	if c.meter != nil {
		return c.meter
	}
	if c.ID == "" {
		return nil
	}
	return e.cfg.Meter.Consumer(s.TenantID, c.ID) // a JWT caller: see above
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// meterRequestBody makes the request's body bytes countable before a metered route
// reads them: a streamed body (fasthttp hands most bodies over as a stream, a prefetched
// part and the rest on the wire) is read through x.in from now on; a body already in
// memory was read whole. x.in lives in the exchange, so this allocates nothing; every
// reader of the stream (the body limit, the request rewrite, the retry buffer and the
// upstream exchange) runs before the handler returns.
func (x *exchange) meterRequestBody() {
	req := &x.ctx.Request
	cl := req.Header.ContentLength()
	if cl == 0 {
		return
	}
	if s := x.ctx.RequestBodyStream(); s != nil {
		x.in = countingReader{r: s}
		req.SetBodyStream(&x.in, cl)
		return
	}
	x.in.n = int64(len(req.Body()))
}

// meterRecord counts a finished request of a known tenant, now or, for a body that is
// still to stream, when its stream closes, with its times (d is arrival to now; the
// gateway's is d less the upstream's, see meter.Route.RecordLatency).
func (e *Edge) meterRecord(x *exchange, status int, d time.Duration) {
	s := x.snap
	mr := s.meter
	if x.route != nil {
		mr = x.route.meter
	}
	if mr == nil {
		return
	}
	resp := &x.ctx.Response
	var out int
	switch {
	case x.ctx.IsHead() || resp.SkipBody || upstreamclient.NoBody(status):
	case resp.IsBodyStream():
		if mb, ok := resp.BodyStream().(meteredBody); ok {
			mb.RecordAtClose(meter.Usage{Route: mr, Consumer: e.meterHandleFor(s, x.consumer), Status: status,
				Upstream: x.reply == nil, At: x.ctx.Time(), In: x.in.n, Function: x.functionTime,
				Gateway: d - x.upstream, CalledUpstream: x.upstream > 0})
			return
		}
		// Every stream the edge sets is a meteredBody; a new kind that is not would be
		// counted by its declared length here.
		out = max(resp.Header.ContentLength(), 0)
	default:
		out = len(resp.Body())
	}
	mr.RecordFunction(e.meterHandleFor(s, x.consumer), status, x.reply == nil, x.in.n, int64(out), x.functionTime, x.ctx.Time())
	mr.RecordLatency(x.ctx.Time(), d-x.upstream, x.upstream, x.upstream > 0)
}
