package edge

import (
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/hdrclass"
	"tollgate/edge/meter"
	"tollgate/edge/websocket"
)

// WebSocket. A route with "websocket": true passes an upgrade request
// (GET with Connection: upgrade and Upgrade: websocket) through the same chain as any
// other request — authentication, access rules, limits and the body limit run before this step, so they
// apply at the upgrade — and then, instead of the pooled proxy, dials the target on a
// connection of its own, forwards the upgrade and, when the target answers 101, hijacks
// the client connection and hands it to a tunnel (package websocket) that copies bytes
// both ways until either side closes, WebSocketIdleTimeout passes without a byte,
// WebSocketMaxLifetime is reached, or the edge shuts down.
//
// A request for a websocket route that is not an upgrade is proxied as usual. Limits
// count the upgrade as one request; the concurrency cap does not hold for the tunnel's
// lifetime. The meter counts the upgrade as one request too, and the bytes the tunnel
// relays as they go (meter.go).

// wsStep handles the upgrades of a websocket route; everything else goes to next.
func (e *Edge) wsStep(rt *route, next handler) handler {
	connectTimeout := rt.connectTimeout
	return func(x *exchange) {
		ctx := x.ctx
		req := &ctx.Request
		if !req.Header.IsGet() || !websocket.IsUpgrade(req.Header.RawHeaders()) {
			next(x)
			return
		}
		if e.draining.Load() {
			x.fail(replyDraining)
			return
		}
		u := rt.pickUpstream(x)
		t := u.PickFor(hashKey(x, u))
		if t == nil {
			e.noHealthy(x)
			return
		}
		x.target = t
		x.setUpstreamTarget(rt, t)
		req.Header.SetProtocolBytes(strHTTP11)
		e.forwardHeaders(x)
		req.Header.SetHostBytes(t.Host)
		req.Header.ResetConnectionClose()

		deadline := time.Now().Add(connectTimeout + rt.timeout)
		resp := &ctx.Response
		up, br, err := websocket.Dial(e.dialer.Dial(connectTimeout), t.Addr, connectTimeout, t.TLS,
			req.Header.Header(), resp, deadline)
		if err != nil {
			e.upstreamFailed(x, err)
			return
		}
		if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
			// Refused (or not understood): the client gets the upstream's answer.
			_ = up.Close()
			x.cleanResponseHeaders()
			return
		}
		// The 101 goes to the client as the upstream sent it, minus its hop-by-hop
		// headers, plus the request id.
		ack, early := websocket.Ack(resp, keepWSHeader, hdrRequestID, x.reqID, br)
		var use meter.Usage
		if mr := rt.meter; mr != nil {
			use = meter.Usage{Route: mr, Consumer: e.meterHandleFor(x.snap, x.consumer), Status: fasthttp.StatusSwitchingProtocols, Upstream: true}
		}
		// Reads go through fasthttp's hijacked wrapper, which first returns what fasthttp
		// had buffered; the rest goes to the connection itself.
		tn := websocket.New(up, conn.Tunnel(ctx.Conn()), ack, early, e.cfg.WebSocketIdleTimeout, e.cfg.WebSocketMaxLifetime, use)
		if !e.ws.Add(tn) {
			_ = up.Close()
			x.fail(replyDraining)
			return
		}
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(tn.Run)
	}
}

// keepWSHeader: the 101's headers the client gets, all but the hop-by-hop ones.
func keepWSHeader(k []byte) bool { return hdrclass.ClassifyResponse(k) == hdrclass.Other }

// WebSockets is the number of open WebSocket tunnels.
func (e *Edge) WebSockets() int { return e.ws.Open() }
