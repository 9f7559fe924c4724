package edge

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/upstreamclient"
	"tollgate/edge/upstreamerr"
	"tollgate/edge/upstreamh2"
	"tollgate/tenants"
)

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
func (e *Edge) proxyStep(rt *route) handler {
	return func(x *exchange) {
		u := rt.pickUpstream(x)
		if u.h2 {
			e.proxyH2(x, rt, u) // proxy_h2.go
			return
		}
		if !u.plain {
			e.proxyResilient(x, rt, u)
			return
		}
		ctx := x.ctx
		req := &ctx.Request
		t := u.Pick()
		x.target = t
		x.setUpstreamURI(rt, t)
		if !req.Header.IsHTTP11() {
			req.Header.SetProtocolBytes(strHTTP11) // keep the upstream connection alive
		}
		e.forwardHeaders(x) // before Host changes: x.host may point into it
		req.Header.SetHostBytes(t.Host)

		start := conn.MonoNow()
		err := t.Client.DoAt(req, &ctx.Response, rt.timeout, start)
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
	if e.cfg.Tracing != nil {
		e.traceUpstream(x) // trace.go
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
// The answer's message names the target as the tenant configured it and what failed
// (package upstreamerr).
func (e *Edge) upstreamFailed(x *exchange, err error) {
	var code string
	var kind int
	var de *upstreamclient.DialError
	switch {
	case errors.As(err, &de):
		switch {
		case de.AddressRule:
			code, kind = tenants.EUpstreamFailed, upAddressRule
		case de.TimedOut:
			code, kind = tenants.EUpstreamTimeout, upConnectTimeout
		default:
			code, kind = tenants.EUpstreamFailed, upConnect
		}
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		code, kind = tenants.EOverloaded, upOverloaded
	case isTimeout(err):
		code, kind = tenants.EUpstreamTimeout, upTimeout
	default:
		code, kind = tenants.EUpstreamFailed, upBadResponse
	}
	e.upstreamErrs[kind].Inc()
	// The tenant reads what failed in the answer; the operator reads it, and err, here.
	rt, target := x.route, ""
	if x.target != nil {
		target = upstreamerr.Target(x.target.TLS, x.target.Addr)
	}
	timeout := rt.timeout
	if d, ok := upstreamh2.GRPCTimeout(x.ctx.Request.Header.PeekBytes(hdrGRPCTimeout)); ok && d < timeout {
		timeout = d // a gRPC call's own deadline, shorter, is the one that passed
	}
	why := upstreamerr.Reason(err, target, rt.connectTimeout, timeout)
	if ok, held := rt.failLog.Allow(conn.MonoNow()); ok {
		e.log.Warn("edge: upstream failed", "request_id", string(x.reqID), "tenant", rt.snapshot.Slug,
			"route", rt.name, "target", target, "reason", why, "err", err, "held_back", held)
	}
	// Built at failure time: the message names this target and this failure.
	x.fail(newReply(code, why))
}

// noHealthy answers a request none of whose route's targets is in rotation.
func (e *Edge) noHealthy(x *exchange) {
	e.upstreamErrs[upNoHealthy].Inc()
	if ok, held := x.route.failLog.Allow(conn.MonoNow()); ok {
		e.log.Warn("edge: upstream failed", "request_id", string(x.reqID), "tenant", x.route.snapshot.Slug,
			"route", x.route.name, "reason", upstreamerr.NoHealthy, "held_back", held)
	}
	x.fail(replyNoHealthy)
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrTLSHandshakeTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Upstream error kinds, the label values of tollgate_edge_upstream_errors_total
// (upAddressRule counts as "policy", the README's name for it).
const (
	upAddressRule = iota
	upConnect
	upConnectTimeout
	upTimeout
	upOverloaded
	upBadResponse
	upNoHealthy // no target in rotation: the request was not sent
	numUpstreamErrKinds
)

var upstreamErrKinds = [numUpstreamErrKinds]string{"policy", "connect", "connect_timeout", "timeout", "overloaded", "bad_response", "no_healthy_upstream"}
