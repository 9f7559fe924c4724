package edge

import (
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/balancer"
	"tollgate/edge/conn"
	"tollgate/edge/upstreamerr"
	"tollgate/tenants"
)

var replyNoHealthy = newReply(tenants.ENoHealthyUpstream, upstreamerr.NoHealthy+" (failing health checks, ejected or circuit open); retry shortly")

// proxyResilient is proxyStep for an upstream that balances by load or hash, tracks
// its targets' health or retries: it picks a target in rotation, reports each
// exchange's outcome to the target's health and breaker, and retries as the route's
// Retries allow, all within the route's timeout (package balancer decides).
func (e *Edge) proxyResilient(x *exchange, rt *route, u *upstream) {
	ctx := x.ctx
	req := &ctx.Request
	resp := &ctx.Response
	start := conn.MonoNow()
	deadline := start + int64(rt.timeout)
	// A retry needs the body in memory to send it again. fasthttp hands every body over
	// as a stream (only its first 8 KiB read); one within the edge's in-memory size
	// (MaxInMemoryBody) is read whole here, a larger one streams and is never retried.
	streamed := req.IsBodyStream()
	if streamed && u.Retries() {
		if cl := req.Header.ContentLength(); cl >= 0 && cl <= e.cfg.MaxInMemoryBody {
			b, ok := x.readBody(x.ctx.RequestBodyStream(), cl)
			if !ok {
				return
			}
			req.SetBody(b)
			req.Header.SetContentLength(len(b))
			streamed = false
		}
	}
	key, hasKey := hashKey(x, u) // before forwardHeaders rewrites X-Forwarded-For
	a := u.Start(start, key, hasKey)
	t := a.Target()
	if t == nil {
		e.noHealthy(x)
		return
	}
	x.target = t
	x.setUpstreamURI(rt, t)
	if !req.Header.IsHTTP11() {
		req.Header.SetProtocolBytes(strHTTP11) // keep the upstream connection alive
	}
	e.forwardHeaders(x) // before Host changes: x.host may point into it

	for {
		req.Header.SetHostBytes(t.Host)
		remaining := time.Duration(deadline - conn.MonoNow())
		if remaining <= 0 {
			a.Abandon(conn.MonoNow())
			e.upstreamFailed(x, fasthttp.ErrTimeout)
			return
		}
		a.Sending()
		sent := conn.MonoNow()
		err := t.Client.DoTimeout(req, resp, remaining)
		now := conn.MonoNow()
		x.upstream += time.Duration(now - sent)
		if a.Done(err, resp.StatusCode(), now) {
			x.cleanResponseHeaders()
			return
		}

		next := a.Retry(&req.Header, !streamed, err, now, deadline)
		if next == nil {
			if err != nil {
				e.upstreamFailed(x, err)
			} else {
				x.cleanResponseHeaders() // the upstream's own 502/503/504 goes to the client
			}
			return
		}
		if e.debug {
			e.log.Debug("edge: retrying upstream request", "tenant", rt.snapshot.Slug, "route", rt.name,
				"upstream", t.URL, "next", next.URL, "request_id", string(x.reqID), "err", err, "status", resp.StatusCode())
		}
		// The failed attempt's answer goes nowhere: release its streamed body (closing
		// its connection, whose rest is unread) before the next attempt reuses resp.
		_ = resp.CloseBodyStream()
		resp.Reset()
		t = next
		x.target = t
		x.setUpstreamURI(rt, t)
	}
}

// setUpstreamURI points the request at t: its base path, the route's path, the query,
// and t's scheme.
func (x *exchange) setUpstreamURI(rt *route, t *balancer.Target) {
	req := &x.ctx.Request
	x.setUpstreamTarget(rt, t)
	if t.TLS != x.ctx.IsTLS() {
		if t.TLS {
			req.URI().SetSchemeBytes(strHTTPS)
		} else {
			req.URI().SetSchemeBytes(strHTTP)
		}
	}
}

// setUpstreamTarget sets the request target sent to t: its base path, the route's path
// and the query.
func (x *exchange) setUpstreamTarget(rt *route, t *balancer.Target) {
	p := x.upstreamPath(rt)
	uri := append(x.uri[:0], t.Base...)
	uri = append(uri, p...)
	if x.query != nil {
		uri = append(uri, '?')
		uri = append(uri, x.query...)
	}
	x.uri = uri
	x.ctx.Request.SetRequestURIBytes(uri)
}
