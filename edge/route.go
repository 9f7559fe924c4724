package edge

import (
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/cors"
	"tollgate/edge/routing"
)

// The way in: a request's tenant is found by its Host (a {slug}.{domain} name or a
// custom domain, tls.go), its route by method and normalized path in the tenant's route
// table (package routing), and then the route's chain (chain.go) serves it.

// serve is the public listener's handler.
func (e *Edge) serve(ctx *fasthttp.RequestCtx) {
	x := exchangePool.Get().(*exchange)
	x.ctx, x.e = ctx, e
	e.handle(x)
	e.finish(x)
	x.reset()
	exchangePool.Put(x)
}

// handle dispatches a request: host → tenant snapshot → route → the route's chain, or
// one of the edge's own answers when any of them is missing.
func (e *Edge) handle(x *exchange) {
	req := &x.ctx.Request
	x.scanRequestHeaders(req.Header.RawHeaders())
	x.stripTrailers()
	if x.hs.reqID != nil && validRequestID(x.hs.reqID) {
		x.reqID = x.hs.reqID
		x.hs.clientReqID = true
	} else {
		x.newRequestID()
	}
	if !e.ready.Load() {
		x.rm = e.labels.NoTenant
		if e.draining.Load() {
			x.fail(replyDraining)
		} else {
			x.fail(replyLoading)
		}
		return
	}

	rawPath, query, authority := routing.SplitTarget(req.Header.RequestURI())
	x.host = authority
	if x.host == nil {
		x.host = req.Header.Host()
	}
	slot := e.hostSlot(&x.hostBuf, x.host) // {slug}.{domain} or a custom domain (tls.go)
	if !x.sniAgrees(slot) {
		x.rm = e.labels.NoTenant
		x.fail(replyMisdirected)
		return
	}
	var snap *Snapshot
	if slot != nil {
		snap = e.snapshotOf(slot)
	}
	if snap == nil {
		x.rm = e.labels.NoTenant
		if slot == pendingDomain {
			x.fail(replyUnverified)
			return
		}
		if slot != nil && e.lazy != nil && e.lazy.Unfetched(slot) {
			x.fail(replyTenantNotFetched)
			x.ctx.Response.Header.Set("Retry-After", "1")
			return
		}
		e.failUnknownTenant(x)
		return
	}
	x.snap, x.rm = snap, snap.labels.None

	var err error
	if x.path, err = routing.NormalizePath(x.path, rawPath); err != nil {
		x.fail(pathReplies[err.(routing.PathError)])
		return
	}
	x.query = query
	rt, n := snap.routes.Lookup(req.Header.Method(), x.path)
	if m, ok := cors.IsPreflight(&req.Header); ok && x.preflight(m) {
		return
	}
	if rt == nil {
		// Only now is the table walked for the methods of the path: a request that
		// finds its route never pays for the 405.
		if allowed := snap.routes.Allowed(x.path); allowed != 0 {
			x.failMethod(allowed)
			return
		}
		x.fail(replyRouteNotFound)
		return
	}
	x.route, x.rm, x.stripLen = rt, rt.metrics, n
	if rt.meter != nil {
		x.meterRequestBody()
	}
	rt.serve(x)
}

// finish stamps the request id on the response, counts the request and hands it to the
// access log.
func (e *Edge) finish(x *exchange) {
	x.endFunctions()
	resp := &x.ctx.Response
	if x.reply != nil && x.ctx.Request.Header.ContentLength() != 0 {
		// The edge answered itself, maybe before reading the body: should fasthttp close
		// the connection with the body unread, it closes gracefully (conn.LingerClose).
		conn.LingerClose(x.ctx.Conn())
	}
	resp.Header.SetCanonical(hdrRequestID, x.reqID)
	if x.route != nil && x.route.cors != nil && x.reply != replyPreflight {
		x.route.cors.Apply(x.ctx.Request.Header.Peek("Origin"), &resp.Header)
	}
	status := x.status()
	d := time.Since(x.ctx.Time())
	x.rm.Observe(status, d)
	in, out := x.bodySizes(status)
	x.rm.ObserveNode(status, d, x.upstream, in, out)
	if x.snap != nil {
		e.meterRecord(x, status, d)
	}
	if e.access != nil {
		e.accessRecord(x, status, d)
	}
	if x.snap != nil && x.snap.logs != nil && x.snap.logs.Keep(status) {
		e.logRecord(x, status, d, in, out) // reqlog.go
	}
	e.traceFinish(x, status) // trace.go
}

// replyPreflight marks a preflight the edge answered (preflight): the edge's own answer,
// so it is counted and never billed.
var replyPreflight = &reply{status: fasthttp.StatusNoContent, code: "cors_preflight", codeHdr: []byte("cors_preflight")}

// preflight answers a CORS preflight asking for method, when the route that method
// would take has CORS settings; otherwise the request goes its way (a route that takes
// OPTIONS, or 405).
func (x *exchange) preflight(method []byte) bool {
	rt, _ := x.snap.routes.Lookup(method, x.path)
	if rt == nil || rt.cors == nil {
		return false
	}
	x.route, x.rm, x.reply = rt, rt.metrics, replyPreflight
	rt.cors.Preflight(&x.ctx.Request.Header, &x.ctx.Response, method)
	return true
}
