package edge

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/balancer"
	"tollgate/edge/edgemetrics"
	"tollgate/edge/fnchain"
	"tollgate/edge/limit"
	"tollgate/edge/routing"
	"tollgate/edge/upstreamclient"
)

// exchange is the state of one request on the edge. Exchanges are pooled and their
// buffers reused, so a request that is proxied allocates nothing in the edge's own code.
type exchange struct {
	ctx      *fasthttp.RequestCtx
	e        *Edge
	snap     *Snapshot
	route    *route
	consumer *Consumer
	target   *balancer.Target
	rm       *edgemetrics.RouteMetrics
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
	jwt      Consumer // the caller a bearer token named (authenticate_jwt.go); x.consumer points here

	checks  [limit.MaxChecks]limit.Check // the request's limits (limit.go)
	nchecks int
	why     string // for the request log: which limit refused the call, which function failed
	ipKey   [16]byte

	in countingReader // the request body bytes read, when metered (meter.go)

	upstream time.Duration // spent in upstream exchanges, for the latency split (edgemetrics)

	fn *fnchain.Run // the route's functions' run, once started (function.go)
	// functionTime is the guest run time of the route's functions for this request (the
	// wall time of their callbacks, the host's waits excluded): metered as function_us.
	functionTime time.Duration

	trailers trailerStrip // a chunked request body, read without its trailer (headers.go)

	tr exchangeTrace // with Config.Tracing only (trace.go)
}

var exchangePool = sync.Pool{New: func() any {
	return &exchange{path: make([]byte, 0, 256), uri: make([]byte, 0, 256), xff: make([]byte, 0, 64)}
}}

func (x *exchange) reset() {
	x.ctx, x.snap, x.route, x.consumer, x.target, x.rm, x.reply = nil, nil, nil, nil, nil, nil, nil
	x.hideKey, x.canaryClaim, x.up, x.why = false, false, nil, ""
	x.host, x.query, x.reqID = nil, nil, nil
	x.path, x.uri, x.xff = x.path[:0], x.uri[:0], x.xff[:0]
	if cap(x.body) > 1<<20 {
		x.body = nil // do not keep a large chunked body alive in the pool
	}
	x.stripLen = 0
	x.in = countingReader{}
	x.upstream, x.functionTime = 0, 0
	x.trailers = trailerStrip{}
	x.hs = headerScan{}
	clear(x.checks[:x.nchecks]) // do not keep old snapshots' policies alive in the pool
	x.nchecks = 0
	if x.tr.state != traceUndecided {
		x.tr = exchangeTrace{}
	}
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

// status is the request's status as the edge counts it (metrics, metering, access log,
// trace): the refusal's own when the edge refused, which a gRPC caller receives as 200
// with a Grpc-Status (reply_grpc.go), else the answer's.
func (x *exchange) status() int {
	if x.reply != nil {
		return x.reply.status
	}
	return x.ctx.Response.StatusCode()
}

// bodySizes are the body bytes of x for the bytes counters: what the metered reader
// counted on a metered route, else the declared Content-Length; the response body's
// length, or its declared length when it is streamed (the exact count of a streamed body
// is the meter's, at close).
func (x *exchange) bodySizes(status int) (in, out int64) {
	in = x.in.n
	if in == 0 {
		in = int64(max(x.ctx.Request.Header.ContentLength(), 0))
	}
	resp := &x.ctx.Response
	switch {
	case x.ctx.IsHead() || resp.SkipBody || upstreamclient.NoBody(status):
	case resp.IsBodyStream():
		out = int64(max(resp.Header.ContentLength(), 0))
	default:
		out = int64(len(resp.Body()))
	}
	return in, out
}
