package edge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/balancer"
	"tollgate/edge/conn"
	"tollgate/edge/grpcstatus"
	"tollgate/edge/h2door"
	"tollgate/edge/upstreamh2"
)

// proxyH2 is proxyStep for an upstream whose targets speak HTTP/2 (package upstreamh2),
// what makes gRPC work: the answer's head relayed as soon as it comes, its body as it
// comes, then its trailer fields; a request of the HTTP/2 door streams its body from the
// stream itself meanwhile (bidirectional calls), within max_body_bytes; a client's reset
// cancels the upstream's stream; a grpc-timeout bounds the whole call (504 before the
// head, grpc-status 4 after), else the route's timeout bounds the head of a gRPC call
// and the whole of any other exchange. One request for the chain: metered once.
func (e *Edge) proxyH2(x *exchange, rt *route, u *upstream) {
	ctx := x.ctx
	req := &ctx.Request
	sr := h2door.Request(ctx)
	parent := context.Background()
	if sr != nil {
		parent = sr.Context()
	}
	// A gRPC-Web call goes up as gRPC (upstreamh2.GRPCWebRequest) and its answer comes
	// back as gRPC-Web (ResponseBody.GRPCWeb): the upstream need not speak gRPC-Web.
	webCT := grpcstatus.ContentType(req.Header.ContentType())
	if !upstreamh2.IsGRPCWeb(webCT) {
		webCT = nil
	}
	grpc := upstreamh2.IsGRPC(req.Header.ContentType()) || webCT != nil

	// The body: the HTTP/2 stream's own, unread (bodyLimitStep left it so), or bytes.
	var src io.Reader
	var inMemory []byte
	cl := req.Header.ContentLength()
	if req.IsBodyStream() {
		if body := h2door.Body(ctx); body != nil {
			src = body
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
			e.noHealthy(x)
			return
		}
	}
	x.target = t
	x.setUpstreamURI(rt, t)
	e.forwardHeaders(x)
	timeout, hasTimeout := upstreamh2.GRPCTimeout(req.Header.Peek("Grpc-Timeout"))
	deadline := start + int64(rt.timeout)
	for {
		tr, _ := t.Client.(*upstreamh2.Transport)
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
		bodySrc := src
		if src == nil {
			bodySrc = bytes.NewReader(inMemory)
		}
		body := upstreamh2.NewRequestBody(bodySrc, int64(rt.maxBody))
		r, err := tr.NewRequest(call, &req.Header, x.uri, t.Host, body, int64(cl))
		if err != nil {
			cancel()
			x.fail(replyBadTarget)
			return
		}
		if webCT != nil {
			upstreamh2.GRPCWebRequest(r, body, webCT)
		}
		// The head must come within the route's timeout (or the call's deadline).
		var headLate atomic.Bool
		headTimer := time.AfterFunc(time.Duration(deadline-conn.MonoNow()), func() { headLate.Store(true); cancel() })
		if !u.plain {
			a.Sending()
		}
		sent := conn.MonoNow()
		res, err := tr.RoundTrip(r)
		headTimer.Stop()
		now := conn.MonoNow()
		x.upstream += time.Duration(now - sent)
		status := 0
		if err == nil {
			status = res.StatusCode
		} else if d, ok := call.Deadline(); errors.Is(call.Err(), context.DeadlineExceeded) || headLate.Load() || hasTimeout && ok && !time.Now().Before(d) {
			// Passed on, the grpc-timeout also has the upstream reset the stream.
			err = fasthttp.ErrTimeout
		}
		if u.plain || a.Done(err, status, now) {
			e.relayH2(x, res, err, body, call, cancel, grpc, webCT)
			return
		}
		// Only a body not yet streamed can go again: in memory, or not read at all.
		next := a.Retry(&req.Header, src == nil || body.Unread(), err, now, deadline)
		if next == nil {
			e.relayH2(x, res, err, body, call, cancel, grpc, webCT)
			return
		}
		body.Detach()
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
// A gRPC-Web call's answer (webCT its Content-Type) has its trailer fields as a frame.
func (e *Edge) relayH2(x *exchange, res *http.Response, err error, body *upstreamh2.RequestBody, call context.Context, cancel context.CancelFunc, grpc bool, webCT []byte) {
	if err != nil {
		cancel()
		if body.Over() {
			x.fail(replyBodyTooLarge)
			return
		}
		if body.Malformed() {
			x.fail(replyBodyText)
			return
		}
		e.upstreamFailed(x, err)
		return
	}
	resp := &x.ctx.Response
	upstreamh2.CopyHead(res, resp)
	x.cleanResponseHeaders()
	rb := upstreamh2.NewResponseBody(res, body, call, cancel, grpc, &resp.Header)
	size := int(res.ContentLength)
	if webCT != nil && res.StatusCode == 200 {
		resp.Header.SetContentTypeBytes(webCT)
		rb.GRPCWeb(webCT) // a trailers-only answer stays so: its status is in the head
		size = -1
	}
	if res.ContentLength == 0 {
		// No body (a gRPC trailers-only answer, a 204): its fields went out as the head,
		// and whatever trailer fields follow an empty body are read now.
		_, _ = io.Copy(io.Discard, res.Body)
		rb.Trailers()
		x.in.n = body.Len()
		_ = rb.Close()
		return
	}
	resp.SetBodyStream(rb, size)
}
