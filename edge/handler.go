package edge

import (
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/limit"
	"tollgate/edge/routing"
)

// exchange is the state of one request on the edge. Exchanges are pooled and their
// buffers reused, so a request that is proxied allocates nothing in the edge's own code.
type exchange struct {
	ctx      *fasthttp.RequestCtx
	e        *Edge
	snap     *Snapshot
	route    *route
	consumer *Consumer
	target   *target
	rm       *routeMetrics
	reply    *reply // the edge's own answer, when it gave one
	hideKey  bool   // the route consumed X-API-Key: do not pass it upstream
	// canaryClaim: the verified token's claim selects the route's canary (canary.go).
	canaryClaim bool
	up          *upstream // the side of a route with a canary, once chosen (pickUpstream)

	host     []byte // the Host the tenant was found by
	path     []byte // normalized request path
	query    []byte // raw query, nil when the target had no "?"
	stripLen int

	reqID    []byte
	reqIDBuf [reqIDLen]byte
	hostBuf  [routing.MaxHostLen]byte
	uri      []byte
	xff      []byte
	scratch  []byte
	body     []byte
	hs       headerScan
	jwt      Consumer // the caller a bearer token named (auth.go); x.consumer points here

	checks  [limit.MaxChecks]limit.Check // the request's limits (flow.go)
	nchecks int
	ipKey   [16]byte

	in countingReader // the request body bytes read, when metered (metering.go)

	upstream time.Duration // spent in upstream exchanges, for the latency split (metrics.go)

	trailers trailerStrip // a chunked request body, read without its trailer (headers.go)
}

var exchangePool = sync.Pool{New: func() any {
	return &exchange{path: make([]byte, 0, 256), uri: make([]byte, 0, 256), xff: make([]byte, 0, 64)}
}}

func (x *exchange) reset() {
	x.ctx, x.snap, x.route, x.consumer, x.target, x.rm, x.reply = nil, nil, nil, nil, nil, nil, nil
	x.hideKey, x.canaryClaim, x.up = false, false, nil
	x.host, x.query, x.reqID = nil, nil, nil
	x.path, x.uri, x.xff = x.path[:0], x.uri[:0], x.xff[:0]
	if cap(x.body) > 1<<20 {
		x.body = nil // do not keep a large chunked body alive in the pool
	}
	x.stripLen = 0
	x.in = countingReader{}
	x.upstream = 0
	x.trailers = trailerStrip{}
	x.hs = headerScan{}
	clear(x.checks[:x.nchecks]) // do not keep old snapshots' policies alive in the pool
	x.nchecks = 0
}

// Request ids: a random per-process prefix and a counter, hex; 24 characters.
const reqIDLen = 24

var (
	reqIDPrefix  [12]byte
	reqIDCounter atomic.Uint64
)

func (x *exchange) newRequestID() {
	b := x.reqIDBuf[:]
	copy(b, reqIDPrefix[:])
	n := reqIDCounter.Add(1)
	for i := reqIDLen - 1; i >= 12; i-- {
		b[i] = lowerHex[n&0xf]
		n >>= 4
	}
	x.reqID = b
}

const lowerHex = "0123456789abcdef"

// validRequestID accepts a client's X-Request-Id when it is 1–128 characters of
// [A-Za-z0-9._:-], which can go into JSON and logs as is.
func validRequestID(b []byte) bool {
	if len(b) == 0 || len(b) > 128 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// serve is the public listener's handler.
func (e *Edge) serve(ctx *fasthttp.RequestCtx) {
	x := exchangePool.Get().(*exchange)
	x.ctx, x.e = ctx, e
	e.handle(x)
	e.finish(x)
	x.reset()
	exchangePool.Put(x)
}

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
		x.rm = e.labels.noTenant
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
		x.rm = e.labels.noTenant
		x.fail(replyMisdirected)
		return
	}
	var snap *Snapshot
	if slot != nil {
		snap = slot.snap.Load()
	}
	if snap == nil {
		x.rm = e.labels.noTenant
		if slot == pendingDomain {
			x.fail(replyUnverified)
			return
		}
		x.fail(replyTenantNotFound)
		return
	}
	x.snap, x.rm = snap, snap.labels.none

	var err error
	if x.path, err = routing.NormalizePath(x.path, rawPath); err != nil {
		x.fail(pathReplies[err.(routing.PathError)])
		return
	}
	x.query = query
	rt, n := snap.routes.Lookup(req.Header.Method(), x.path)
	if rt == nil {
		x.fail(replyRouteNotFound)
		return
	}
	x.route, x.rm, x.stripLen = rt, rt.metrics, n
	if rt.meter != nil {
		x.meterRequestBody()
	}
	rt.serve(x)
}

// fail answers the request with one of the edge's own errors.
func (x *exchange) fail(r *reply) {
	x.reply = r
	resp := &x.ctx.Response
	resp.Reset()
	resp.SetStatusCode(r.status)
	resp.Header.SetContentTypeBytes(contentTypeJSON)
	resp.AppendBody(r.prefix)
	resp.AppendBody(x.reqID)
	resp.AppendBody(replySuffix)
}

var contentTypeJSON = []byte("application/json")

// finish stamps the request id on the response, counts the request and hands it to the
// access log.
func (e *Edge) finish(x *exchange) {
	resp := &x.ctx.Response
	if x.reply != nil && x.ctx.Request.Header.ContentLength() != 0 {
		// The edge answered itself, maybe before reading the body: should fasthttp close
		// the connection with the body unread, it closes gracefully (conn.LingerClose).
		conn.LingerClose(x.ctx.Conn())
	}
	resp.Header.SetCanonical(hdrRequestID, x.reqID)
	status := resp.StatusCode()
	d := time.Since(x.ctx.Time())
	x.rm.observe(status, d)
	in, out := x.bodySizes(status)
	x.rm.observeNode(status, d, x.upstream, in, out)
	if x.snap != nil {
		e.meterRecord(x, status)
	}
	if e.access != nil {
		e.access.record(x, status, d)
	}
}

// keyAuthStep authenticates a request by its X-API-Key: the key's SHA-256 is looked up
// in the tenant's key table, a map keyed by the fixed-size hash, so the lookup's timing
// says nothing about how much of a key matched.
func keyAuthStep(rt *route, next func(*exchange)) func(*exchange) {
	keys := rt.snapshot
	return func(x *exchange) {
		k := x.hs.apiKey
		if len(k) == 0 {
			x.fail(replyNoKey)
			return
		}
		sum := sha256.Sum256(k)
		c := keys.consumerByKey(&sum)
		if c == nil {
			x.fail(replyBadKey)
			return
		}
		x.consumer = c
		x.hideKey = true
		next(x)
	}
}

// bodyLimitStep enforces the route's MaxBodyBytes. A declared Content-Length over the
// limit is refused before any of the body is read. A chunked body is read up to the
// limit and then sent upstream with a Content-Length; small bodies arrive already read
// (Server.MaxRequestBodySize is the in-memory threshold) and big ones stream through.
func bodyLimitStep(rt *route, next func(*exchange)) func(*exchange) {
	limit := rt.maxBody
	return func(x *exchange) {
		req := &x.ctx.Request
		cl := req.Header.ContentLength()
		if cl > limit {
			x.fail(replyBodyTooLarge)
			return
		}
		if cl == -1 {
			stream := x.ctx.RequestBodyStream()
			if stream == nil {
				next(x)
				return
			}
			b, ok := x.readBody(stream, limit)
			if !ok {
				return
			}
			req.SetBody(b)
			req.Header.SetContentLength(len(b))
		}
		next(x)
	}
}

// readBody reads the request's streamed body into x.body, at most limit bytes. A body
// over the limit, or one that fails to arrive, is answered here (false); the rest of it
// is still on the wire, so the connection closes.
func (x *exchange) readBody(stream io.Reader, limit int) ([]byte, bool) {
	b, err := readAtMost(x.body[:0], stream, limit)
	x.body = b
	if err != nil {
		x.ctx.SetConnectionClose()
		if err == errTooLarge {
			x.fail(replyBodyTooLarge)
		} else {
			x.fail(replyBodyRead)
		}
		return nil, false
	}
	return b, true
}

var errTooLarge = errors.New("body too large")

// readAtMost appends r's content to dst, failing with errTooLarge past limit bytes.
func readAtMost(dst []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, errTooLarge
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

var (
	strHTTP   = []byte("http")
	strHTTPS  = []byte("https")
	strHTTP11 = []byte("HTTP/1.1")
	slashOnly = []byte("/")
)

// proxyStep sends the request to one of the route's targets over a pooled keep-alive
// connection and relays the answer. A plain upstream (round-robin, no health tracking,
// no retries) is served here without a lock or an allocation; any other by
// proxyResilient (retry.go).
func (e *Edge) proxyStep(rt *route) func(*exchange) {
	return func(x *exchange) {
		u := rt.pickUpstream(x)
		if !u.plain {
			e.proxyResilient(x, rt, u)
			return
		}
		ctx := x.ctx
		req := &ctx.Request
		t := u.pick()
		x.target = t
		x.setUpstreamURI(rt, t)
		if !req.Header.IsHTTP11() {
			req.Header.SetProtocolBytes(strHTTP11) // keep the upstream connection alive
		}
		e.forwardHeaders(x) // before Host changes: x.host may point into it
		req.Header.SetHostBytes(t.host)

		start := conn.MonoNow()
		err := t.client.DoTimeout(req, &ctx.Response, rt.timeout)
		x.upstream += time.Duration(conn.MonoNow() - start)
		if err != nil {
			e.upstreamFailed(x, err)
			return
		}
		x.cleanResponseHeaders()
	}
}

// forwardHeaders sets what the edge tells the upstream: the consumer, the forwarding
// chain and the request id. Hop-by-hop and spoofable identity headers were removed by
// scanRequestHeaders.
func (e *Edge) forwardHeaders(x *exchange) {
	h := &x.ctx.Request.Header
	hs := &x.hs
	if x.hideKey && hs.has&hXAPIKey != 0 {
		h.DelBytes(hdrXAPIKey)
	}
	if c := x.consumer; c != nil {
		h.SetCanonical(hdrConsumerID, c.id)
		h.SetCanonical(hdrConsumerName, c.name)
	}

	peer, _ := netip.AddrFromSlice(peerIP(x.ctx))
	peer = peer.Unmap()
	trusted := e.trusted(peer)
	if trusted && hs.has&hXFF != 0 {
		x.xff = append(x.xff, ", "...)
	} else {
		x.xff = x.xff[:0]
	}
	x.xff = peer.AppendTo(x.xff)
	if hs.has&hXFF != 0 {
		h.DelBytes(hdrXFF)
	}
	h.SetCanonical(hdrXFF, x.xff)
	if !trusted || hs.has&hXFP == 0 {
		if hs.has&hXFP != 0 {
			h.DelBytes(hdrXFP)
		}
		if x.ctx.IsTLS() {
			h.SetCanonical(hdrXFP, strHTTPS)
		} else {
			h.SetCanonical(hdrXFP, strHTTP)
		}
	}
	if !trusted || hs.has&hXFH == 0 {
		if hs.has&hXFH != 0 {
			h.DelBytes(hdrXFH)
		}
		h.SetCanonical(hdrXFH, x.host)
	}
	if !trusted {
		if hs.has&hForwarded != 0 {
			h.DelBytes(hdrForwarded)
		}
		if hs.has&hXRealIP != 0 {
			h.DelBytes(hdrXRealIP)
		}
	}
	if !hs.clientReqID {
		if hs.has&hXRequestID != 0 {
			h.DelBytes(hdrRequestID)
		}
		h.SetCanonical(hdrRequestID, x.reqID)
	}
}

func peerIP(ctx *fasthttp.RequestCtx) net.IP {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}

func (e *Edge) trusted(a netip.Addr) bool {
	for _, p := range e.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// upstreamFailed answers a failed upstream exchange: 504 when the upstream (or its
// connect) ran out of time, 503 when every pooled connection is busy, 502 otherwise.
func (e *Edge) upstreamFailed(x *exchange, err error) {
	var r *reply
	var kind int
	var de *dialError
	switch {
	case errors.As(err, &de):
		switch {
		case de.policy:
			r, kind = replyUpstreamPol, upPolicy
		case de.timeout:
			r, kind = replyConnTimeout, upConnectTimeout
		default:
			r, kind = replyUpstreamConn, upConnect
		}
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		r, kind = replyOverloaded, upOverloaded
	case isTimeout(err):
		r, kind = replyUpstreamSlow, upTimeout
	default:
		r, kind = replyUpstreamBad, upBadResponse
	}
	e.upstreamErrs[kind].Inc()
	if e.debug {
		e.log.Debug("edge: upstream failed", "tenant", x.route.snapshot.Slug, "route", x.route.name,
			"upstream", x.target.url, "request_id", string(x.reqID), "err", err)
	}
	x.fail(r)
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrTLSHandshakeTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Upstream error kinds, the label values of tollgate_edge_upstream_errors_total.
const (
	upPolicy = iota
	upConnect
	upConnectTimeout
	upTimeout
	upOverloaded
	upBadResponse
	upNoHealthy // no target in rotation: the request was not sent
	numUpstreamErrKinds
)

var upstreamErrKinds = [numUpstreamErrKinds]string{"policy", "connect", "connect_timeout", "timeout", "overloaded", "bad_response", "no_healthy_upstream"}
