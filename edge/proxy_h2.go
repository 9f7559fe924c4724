package edge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/balancer"
	"tollgate/edge/conn"
	"tollgate/edge/h2door"
	"tollgate/edge/meter"
)

// proxyH2 is proxyStep for an upstream whose targets speak HTTP/2 (upstream_h2.go), and
// what makes gRPC work through the edge:
//
//   - the answer's head is relayed as soon as the upstream sends it, and its body as it
//     comes, then its trailer fields (grpc-status, grpc-message);
//   - a request of the HTTP/2 door streams its body upstream from the stream itself, at
//     the same time as the answer streams back (bidirectional gRPC streams), within the
//     route's max_body_bytes; a request of the HTTP/1.1 door is read whole first;
//   - the client resetting its stream cancels the upstream's;
//   - a grpc-timeout is a deadline on the whole call. Passed before the answer's head:
//     504 upstream_timeout. Passed after: the stream ends with grpc-status 4
//     (DEADLINE_EXCEEDED). Without one, the route's timeout bounds the wait for the
//     head of a gRPC call (a stream may last) and the whole exchange of any other
//     request, as on HTTP/1.1.
//
// It is one request for the chain, whatever the number of messages: metered once.
func (e *Edge) proxyH2(x *exchange, rt *route, u *upstream) {
	ctx := x.ctx
	req := &ctx.Request
	sr := h2door.Request(ctx)
	parent := context.Background()
	if sr != nil {
		parent = sr.Context()
	}
	grpc := isGRPC(req.Header.ContentType())

	// The body: the HTTP/2 stream's own, unread (bodyLimitStep left it so), or bytes.
	var src io.Reader
	var inMemory []byte
	cl := req.Header.ContentLength()
	if req.IsBodyStream() {
		if sr != nil && sr.Body != nil {
			src = sr.Body
		} else {
			b, ok := x.readBody(ctx.RequestBodyStream(), rt.maxBody)
			if !ok {
				return
			}
			inMemory, cl = b, len(b)
		}
	} else {
		inMemory = req.Body()
		cl = len(inMemory)
	}
	if src != nil && u.Retries() && cl >= 0 && cl <= e.cfg.MaxInMemoryBody {
		// A retry needs the body again: a small one of declared length is read first.
		b, err := readAtMost(x.body[:0], src, cl)
		x.body = b
		if err != nil {
			x.fail(replyBodyRead)
			return
		}
		src, inMemory = nil, b
	}

	start := conn.MonoNow()
	var a balancer.Attempts
	var t *balancer.Target
	if u.plain {
		t = u.Pick()
	} else {
		key, hasKey := hashKey(x, u)
		a = u.Start(start, key, hasKey)
		if t = a.Target(); t == nil {
			e.upstreamErrs[upNoHealthy].Inc()
			x.fail(replyNoHealthy)
			return
		}
	}
	x.target = t
	x.setUpstreamURI(rt, t)
	e.forwardHeaders(x)
	target, err := url.ParseRequestURI(string(x.uri))
	if err != nil {
		x.fail(replyBadTarget)
		return
	}
	header := make(http.Header, req.Header.Len()+1)
	for k, v := range req.Header.All() {
		if !hopRequestH2(k) {
			key := http.CanonicalHeaderKey(string(k))
			header[key] = append(header[key], string(v))
		}
	}
	header["Te"] = []string{"trailers"} // gRPC servers refuse a call without it

	timeout, hasTimeout := grpcTimeout(req.Header.Peek("Grpc-Timeout"))
	deadline := start + int64(rt.timeout)
	for {
		tr, _ := t.Client.(*h2Transport)
		if tr == nil {
			x.fail(replyInternalError) // every target of an h2 upstream has one
			return
		}
		var call context.Context
		var cancel context.CancelFunc
		switch {
		case hasTimeout:
			call, cancel = context.WithTimeout(parent, timeout)
		case grpc:
			call, cancel = context.WithCancel(parent)
		default:
			call, cancel = context.WithTimeout(parent, time.Duration(deadline-conn.MonoNow()))
		}
		body := &h2RequestBody{src: src, limit: int64(rt.maxBody)}
		r := &http.Request{
			Method:     string(req.Header.Method()),
			URL:        &url.URL{Scheme: tr.scheme(), Host: tr.addr, Path: target.Path, RawPath: target.RawPath, RawQuery: target.RawQuery},
			Proto:      "HTTP/2.0",
			ProtoMajor: 2,
			Header:     header,
			Host:       string(t.Host),
		}
		switch {
		case src != nil:
			r.Body, r.ContentLength = body, int64(cl)
		case len(inMemory) > 0:
			body.src = bytes.NewReader(inMemory)
			r.Body, r.ContentLength = body, int64(len(inMemory))
		}
		r = r.WithContext(call)
		// The head must come within the route's timeout (or the call's deadline).
		var headLate atomic.Bool
		headTimer := time.AfterFunc(time.Duration(deadline-conn.MonoNow()), func() { headLate.Store(true); cancel() })
		if !u.plain {
			a.Sending()
		}
		sent := conn.MonoNow()
		res, err := tr.roundTrip(r)
		headTimer.Stop()
		now := conn.MonoNow()
		x.upstream += time.Duration(now - sent)
		status := 0
		if err == nil {
			status = res.StatusCode
		} else if call.Err() != nil || headLate.Load() {
			err = fasthttp.ErrTimeout
		}
		if u.plain || a.Done(err, status, now) {
			e.relayH2(x, res, err, body, call, cancel, grpc)
			return
		}
		// Only a body not yet streamed can go again: in memory, or not read at all.
		next := a.Retry(&req.Header, src == nil || body.n.Load() == 0 && !body.started.Load(), err, now, deadline)
		if next == nil {
			e.relayH2(x, res, err, body, call, cancel, grpc)
			return
		}
		body.detach()
		if res != nil {
			_ = res.Body.Close()
		}
		cancel()
		t = next
		x.target = t
		x.setUpstreamURI(rt, t)
	}
}

// relayH2 answers the client with the upstream's answer res (or err).
func (e *Edge) relayH2(x *exchange, res *http.Response, err error, body *h2RequestBody, call context.Context, cancel context.CancelFunc, grpc bool) {
	if err != nil {
		cancel()
		if body.over.Load() {
			x.fail(replyBodyTooLarge)
			return
		}
		e.upstreamFailed(x, err)
		return
	}
	resp := &x.ctx.Response
	resp.SetStatusCode(res.StatusCode)
	for k, vs := range res.Header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
	x.cleanResponseHeaders()
	rb := &h2ResponseBody{res: res, req: body, call: call, cancel: cancel, grpc: grpc, h: &resp.Header}
	if res.ContentLength == 0 {
		// No body (a gRPC trailers-only answer, a 204): its fields went out as the head,
		// and whatever trailer fields follow an empty body are read now.
		_, _ = io.Copy(io.Discard, res.Body)
		rb.trailers()
		x.in.n = body.n.Load()
		_ = rb.Close()
		return
	}
	resp.SetBodyStream(rb, int(res.ContentLength))
}

// isGRPC: application/grpc and its +proto, +json… forms.
func isGRPC(ct []byte) bool {
	return bytes.HasPrefix(ct, []byte("application/grpc")) && (len(ct) == len("application/grpc") || ct[len("application/grpc")] == '+' || ct[len("application/grpc")] == ';')
}

// grpcTimeout parses a grpc-timeout value: at most 8 digits and a unit (H, M, S, m, u,
// n), as gRPC's HTTP/2 protocol defines it.
func grpcTimeout(v []byte) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v[:len(v)-1]), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// h2RequestBody is the request body as the HTTP/2 transport reads it, from its own
// goroutine and possibly after the chain returned: the stream's body bounded by the
// route's max_body_bytes (past it the read fails and the upstream stream is reset), or
// the body in memory. detach cuts it off from its source, for a retry that sends the
// same unread stream on a new attempt.
type h2RequestBody struct {
	mu      sync.Mutex
	src     io.Reader
	limit   int64
	n       atomic.Int64
	started atomic.Bool
	over    atomic.Bool
}

func (b *h2RequestBody) Read(p []byte) (int, error) {
	b.started.Store(true)
	b.mu.Lock()
	src := b.src
	b.mu.Unlock()
	if src == nil {
		return 0, io.ErrClosedPipe
	}
	n, err := src.Read(p)
	if total := b.n.Add(int64(n)); total > b.limit {
		b.over.Store(true)
		return 0, errTooLarge
	}
	return n, err
}

// Close leaves the stream's body to its server, which closes it when the stream ends.
func (b *h2RequestBody) Close() error { return nil }

func (b *h2RequestBody) detach() {
	b.mu.Lock()
	b.src = nil
	b.mu.Unlock()
}

// h2ResponseBody relays the upstream's body and, at its end, its trailer fields.
type h2ResponseBody struct {
	res      *http.Response
	req      *h2RequestBody
	call     context.Context
	cancel   context.CancelFunc
	grpc     bool
	h        *fasthttp.ResponseHeader
	out      int64
	ended    bool
	closed   bool
	use      meter.Usage
	metered  bool
	deadline bool // the call's deadline ended it
}

func (b *h2ResponseBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	n, err := b.res.Body.Read(p)
	b.out += int64(n)
	switch {
	case err == io.EOF:
		b.ended = true
		b.trailers()
	case err != nil && b.grpc && b.req.over.Load():
		b.ended = true
		b.setTrailer("Grpc-Status", "8") // RESOURCE_EXHAUSTED
		b.setTrailer("Grpc-Message", "the request body is over this API's size limit")
		return n, io.EOF
	case err != nil && b.grpc && errors.Is(b.call.Err(), context.DeadlineExceeded):
		// The head went out: the client learns of the deadline from the trailer, as
		// from a server that gave up itself.
		b.ended, b.deadline = true, true
		b.setTrailer("Grpc-Status", "4")
		b.setTrailer("Grpc-Message", "deadline exceeded at the gateway")
		return n, io.EOF
	}
	return n, err
}

// trailers copies the upstream's trailer fields into the answer.
func (b *h2ResponseBody) trailers() {
	for k, vs := range b.res.Trailer {
		for _, v := range vs {
			b.setTrailer(k, v)
		}
	}
}

func (b *h2ResponseBody) setTrailer(k, v string) {
	if err := b.h.AddTrailer(k); err != nil {
		return // a field HTTP forbids as a trailer is dropped, as fasthttp would
	}
	b.h.Set(k, v)
}

// RecordAtClose has the body record u when it is closed, with the bytes relayed each
// way: one call, whatever the number of messages.
func (b *h2ResponseBody) RecordAtClose(u meter.Usage) { b.use, b.metered = u, true }

func (b *h2ResponseBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.res.Body.Close()
	b.cancel()
	if b.metered {
		b.use.In, b.use.Out = b.req.n.Load(), b.out
		b.use.Record()
	}
	return err
}

var (
	_ meteredBody   = (*h2ResponseBody)(nil)
	_ io.ReadCloser = (*h2RequestBody)(nil)
)
