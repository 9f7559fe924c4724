package edge

import (
	"crypto/sha256"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/hdrclass"
	"tollgate/edge/routing"
	"tollgate/tenants"
)

// Internals the external tests (edge_test) exercise directly: the parsers that take
// untrusted input and the route table.

// ScanHeaders runs the request header classification on one header name.
func ClassifyHeader(k []byte) int { return hdrclass.Classify(k) }

// Header classes for tests.
const (
	ClsOther = hdrclass.Other
	ClsHop   = hdrclass.Hop
)

// ConnectionTokens lists the header names a Connection value makes the edge delete.
func ConnectionTokens(v []byte) []string {
	var out []string
	delConnectionTokens(v, func(b []byte) { out = append(out, string(b)) })
	return out
}

// KeyLookup looks a plaintext key up in a tenant's snapshot; it returns the consumer id.
func (s *Snapshot) KeyLookup(sum *[32]byte) string {
	if c := s.consumerByKey(sum); c != nil {
		return c.ID
	}
	return ""
}

// PrepareHeaders runs the request-header steps of a proxied request (scan, identity,
// forwarding) on ctx's request, as for a route that matched the consumer (none when
// consumerID is empty) and consumed the key when hideKey.
func (e *Edge) PrepareHeaders(ctx *fasthttp.RequestCtx, consumerID, consumerName string, hideKey bool) {
	x := exchangePool.Get().(*exchange)
	x.ctx, x.e = ctx, e
	x.scanRequestHeaders(ctx.Request.Header.RawHeaders())
	if x.hs.reqID != nil && validRequestID(x.hs.reqID) {
		x.reqID = x.hs.reqID
		x.hs.clientReqID = true
	} else {
		x.newRequestID()
	}
	x.host = ctx.Request.Header.Host()
	if consumerID != "" {
		x.consumer = &Consumer{ID: consumerID, Name: consumerName, id: []byte(consumerID), name: []byte(consumerName)}
	}
	x.hideKey = hideKey
	e.forwardHeaders(x)
	x.reset()
	exchangePool.Put(x)
}

// ServePreProxy runs everything a request goes through before the upstream exchange —
// header scan, request id, host → tenant, path normalization, route lookup, key auth,
// upstream pick and the upstream request's URI and headers — and returns the status the
// edge would answer with (200 when it would proxy). It mirrors handle and the route
// chain without the network, for benchmarks.
func (e *Edge) ServePreProxy(ctx *fasthttp.RequestCtx) int {
	x := exchangePool.Get().(*exchange)
	defer func() { x.reset(); exchangePool.Put(x) }()
	x.ctx, x.e = ctx, e
	req := &ctx.Request
	x.scanRequestHeaders(req.Header.RawHeaders())
	if x.hs.reqID != nil && validRequestID(x.hs.reqID) {
		x.reqID = x.hs.reqID
		x.hs.clientReqID = true
	} else {
		x.newRequestID()
	}
	rawPath, query, authority := routing.SplitTarget(req.Header.RequestURI())
	x.host = authority
	if x.host == nil {
		x.host = req.Header.Host()
	}
	var slot *tenantSlot
	if slug := routing.TenantSlug(&x.hostBuf, x.host, e.domain); slug != nil {
		slot = (*e.hosts.Load())[string(slug)]
	}
	if slot == nil {
		return 404
	}
	snap := slot.Snap.Load()
	var err error
	if x.path, err = routing.NormalizePath(x.path, rawPath); err != nil {
		return 400
	}
	x.query = query
	rt, n := snap.routes.Lookup(req.Header.Method(), x.path)
	if rt == nil {
		return 404
	}
	x.route, x.rm, x.stripLen = rt, rt.metrics, n
	if rt.auth == tenants.AuthKey {
		if len(x.hs.apiKey) == 0 {
			return 401
		}
		sum := sha256.Sum256(x.hs.apiKey)
		c := snap.consumerByKey(&sum)
		if c == nil {
			return 401
		}
		x.consumer, x.hideKey = c, true
	}
	t := rt.upstream.Pick()
	uri := append(x.uri[:0], t.Base...)
	uri = append(uri, x.path...)
	if x.query != nil {
		uri = append(uri, '?')
		uri = append(uri, x.query...)
	}
	x.uri = uri
	e.forwardHeaders(x)
	return 200
}

// RecompileForTest compiles a whole tenant now, as the compiler goroutine would after a
// change of its tenant entry.
func (e *Edge) RecompileForTest(tenantID string) {
	e.mu.Lock()
	if ts := e.state[tenantID]; ts != nil {
		ts.pending.all = true
	}
	e.dirty[tenantID] = time.Now()
	e.mu.Unlock()
	e.compileDirty()
}

// Bearer is bearer: the token of an Authorization header value, or nil.
func Bearer(h []byte) []byte { return bearer(h) }

// HealthCheckers is the number of active health-check goroutines running (for the
// external tests' leak checks).
func (e *Edge) HealthCheckers() int64 { return e.checkers.Live() }
