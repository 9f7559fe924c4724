package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/meter"
	"tollgate/edge/routing"
)

// WebSocket. A route with "websocket": true passes an upgrade request
// (GET with Connection: upgrade and Upgrade: websocket) through the same chain as any
// other request — authentication, access rules, limits and the body limit run before this step, so they
// apply at the upgrade — and then, instead of the pooled proxy, dials the target on a
// connection of its own, forwards the upgrade and, when the target answers 101, hijacks
// the client connection and copies bytes both ways until either side closes.
//
// The edge does not parse frames: it relays bytes. A tunnel closes when it has carried no
// byte either way for WebSocketIdleTimeout, when it has lived WebSocketMaxLifetime, and
// on Shutdown; the edge then sends the client a close frame (1001 going away) and closes
// both connections. (The close frame is sent between two relayed writes; should the
// upstream be in the middle of a frame at that moment the client sees a protocol error
// rather than 1001, which ends the connection just the same.)
//
// A request for a websocket route that is not an upgrade is proxied as usual. Limits
// count the upgrade as one request; the concurrency cap does not hold for the tunnel's
// lifetime. The meter counts the upgrade as one request too, and the bytes the tunnel
// relays as they go (meter.go).

var (
	hdrUpgrade       = []byte("Upgrade")
	tokWebSocket     = []byte("websocket")
	tokUpgrade       = []byte("upgrade")
	wsUpgradeHeaders = []byte("Connection: Upgrade\r\nUpgrade: websocket\r\n")
	ws101            = []byte("HTTP/1.1 101 Switching Protocols\r\n")
	// wsGoingAway is a server close frame (unmasked) with code 1001.
	wsGoingAway = []byte{0x88, 0x02, 0x03, 0xe9}
)

// isWebSocketUpgrade looks for Upgrade: websocket and a Connection naming upgrade in the
// raw header block (the parsed header has lost both: they are hop-by-hop).
func isWebSocketUpgrade(raw []byte) bool {
	var up, conn bool
	for len(raw) > 0 {
		var k, v []byte
		k, v, raw = routing.NextHeader(raw)
		switch {
		case k == nil:
		case bytes.EqualFold(k, hdrUpgrade):
			up = up || hasToken(v, tokWebSocket)
		case bytes.EqualFold(k, hdrConnection):
			conn = conn || hasToken(v, tokUpgrade)
		}
	}
	return up && conn
}

// hasToken reports whether a comma-separated header value holds tok (case-insensitive).
func hasToken(v, tok []byte) bool {
	for len(v) > 0 {
		var t []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			t, v = v, nil
		}
		if bytes.EqualFold(bytes.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}

// wsStep handles the upgrades of a websocket route; everything else goes to next.
func (e *Edge) wsStep(rt *route, next handler) handler {
	connectTimeout := rt.connectTimeout
	return func(x *exchange) {
		ctx := x.ctx
		req := &ctx.Request
		if !req.Header.IsGet() || !isWebSocketUpgrade(req.Header.RawHeaders()) {
			next(x)
			return
		}
		if e.draining.Load() {
			x.fail(replyDraining)
			return
		}
		t := rt.pickUpstream(x).pickFor(x)
		if t == nil {
			e.upstreamErrs[upNoHealthy].Inc()
			x.fail(replyNoHealthy)
			return
		}
		x.target = t
		x.setUpstreamTarget(rt, t)
		req.Header.SetProtocolBytes(strHTTP11)
		e.forwardHeaders(x)
		req.Header.SetHostBytes(t.host)
		req.Header.ResetConnectionClose()

		deadline := time.Now().Add(connectTimeout + rt.timeout)
		up, err := e.dialer.Dial(connectTimeout)(t.client.Addr, connectTimeout)
		if err != nil {
			e.upstreamFailed(x, err)
			return
		}
		up = conn.Tunnel(up) // the tunnel reads and writes it from two goroutines
		if t.tls {
			host, _, _ := net.SplitHostPort(t.client.Addr)
			tc := tls.Client(up, &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
			_ = tc.SetDeadline(deadline)
			if err := tc.Handshake(); err != nil {
				_ = up.Close()
				e.upstreamFailed(x, err)
				return
			}
			up = tc
		}
		_ = up.SetDeadline(deadline)
		head := req.Header.Header() // ends with the blank line
		out := make([]byte, 0, len(head)+len(wsUpgradeHeaders))
		out = append(out, head[:len(head)-2]...)
		out = append(out, wsUpgradeHeaders...)
		out = append(out, "\r\n"...)
		if _, err := up.Write(out); err != nil {
			_ = up.Close()
			e.upstreamFailed(x, err)
			return
		}
		br := bufio.NewReaderSize(up, 4<<10)
		resp := &ctx.Response
		if err := resp.ReadLimitBody(br, 1<<20); err != nil {
			_ = up.Close()
			e.upstreamFailed(x, err)
			return
		}
		if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
			// Refused (or not understood): the client gets the upstream's answer.
			_ = up.Close()
			x.cleanResponseHeaders()
			return
		}
		_ = up.SetDeadline(time.Time{})
		// The 101 goes to the client as the upstream sent it, minus its hop-by-hop
		// headers (Connection and Upgrade are set again), plus the request id.
		ack := append([]byte(nil), ws101...)
		for k, v := range resp.Header.All() {
			if classifyResponse(k) == clsOther {
				ack = append(ack, k...)
				ack = append(ack, ": "...)
				ack = append(ack, v...)
				ack = append(ack, "\r\n"...)
			}
		}
		ack = append(ack, wsUpgradeHeaders...)
		ack = append(ack, hdrRequestID...)
		ack = append(ack, ": "...)
		ack = append(ack, x.reqID...)
		ack = append(ack, "\r\n\r\n"...)
		early := br.Buffered() // tunnel bytes the upstream sent right behind its 101
		if early > 0 {
			b, _ := br.Peek(early)
			ack = append(ack, b...)
		}
		// Writes, deadlines and close go to the connection itself, not through fasthttp's
		// hijacked wrapper (whose Close does nothing until the handler returns) nor the
		// deadline-coalescing wrapper (meant for one goroutine); reads go through the
		// hijacked wrapper, which first returns what fasthttp had buffered.
		direct := conn.Tunnel(ctx.Conn())
		ws := &wsConn{e: e, up: up, ack: ack, early: early, direct: direct}
		if mr := rt.meter; mr != nil {
			ws.use = meter.Usage{Route: mr, Consumer: e.meterHandleFor(x.snap, x.consumer), Status: fasthttp.StatusSwitchingProtocols, Upstream: true}
		}
		if !e.ws.add(ws) {
			_ = up.Close()
			x.fail(replyDraining)
			return
		}
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(ws.run)
	}
}

// wsConn is one relayed WebSocket connection.
type wsConn struct {
	e      *Edge
	up     net.Conn
	direct net.Conn // the client connection, for writes, deadlines and close
	ack    []byte   // the 101 head and any bytes the upstream sent after it
	early  int      // how many of ack's bytes are the upstream's, after the head

	last      atomic.Int64 // unix nanos of the last byte relayed either way
	wmu       sync.Mutex   // client writes
	closed    bool         // under wmu
	closeOnce sync.Once

	// Metering (meter.go): the bytes relayed each way, and how many of them were
	// recorded; use.Route is nil when the route is not metered.
	use           meter.Usage
	in, out       atomic.Int64
	mmu           sync.Mutex
	recIn, recOut int64 // under mmu
}

var wsBufPool = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

// run is the hijack handler: it owns the client connection until the tunnel ends.
func (w *wsConn) run(client net.Conn) {
	defer w.e.ws.done(w)
	defer w.meterBytes() // before done: Shutdown waits for the tunnel's last record
	w.wmu.Lock()
	closed := w.closed
	if !closed {
		_, err := w.direct.Write(w.ack)
		closed = err != nil
		if !closed {
			w.out.Add(int64(w.early))
		}
	}
	w.ack = nil
	w.wmu.Unlock()
	if closed {
		w.close(false)
		return
	}
	w.last.Store(time.Now().UnixNano())
	idle, life := w.e.cfg.WebSocketIdleTimeout, w.e.cfg.WebSocketMaxLifetime
	var idleTimer *time.Timer
	idleTimer = time.AfterFunc(idle, func() {
		since := time.Since(time.Unix(0, w.last.Load()))
		if since >= idle {
			w.close(true)
			return
		}
		idleTimer.Reset(idle - since)
	})
	lifeTimer := time.AfterFunc(life, func() { w.close(true) })
	defer idleTimer.Stop()
	defer lifeTimer.Stop()

	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		w.relay(nil, w.up, &w.out, func(b []byte) error {
			w.wmu.Lock()
			defer w.wmu.Unlock()
			if w.closed {
				return net.ErrClosed
			}
			_, err := w.direct.Write(b)
			return err
		})
		w.close(false)
	}()
	w.relay(client, w.direct, &w.in, func(b []byte) error {
		_, err := w.up.Write(b)
		return err
	})
	w.close(false)
	<-upDone
}

// relay copies from src through write until either fails, adding what it wrote to
// relayed. first, when not nil, is read before src until a read returns less than the
// buffer: the client's hijacked connection, which returns first what fasthttp buffered
// behind the upgrade request, and whose read that comes up short has nothing buffered
// left; src is the same socket, which conn.Relay then reads directly.
func (w *wsConn) relay(first io.Reader, src net.Conn, relayed *atomic.Int64, write func([]byte) error) {
	bp := wsBufPool.Get().(*[]byte)
	defer wsBufPool.Put(bp)
	buf := *bp
	deliver := func(b []byte) error {
		w.last.Store(time.Now().UnixNano())
		if err := write(b); err != nil {
			return err
		}
		relayed.Add(int64(len(b)))
		return nil
	}
	for first != nil {
		n, err := first.Read(buf)
		if n > 0 && deliver(buf[:n]) != nil || err != nil {
			return
		}
		if n < len(buf) {
			first = nil
		}
	}
	_ = conn.Relay(src, buf, deliver)
}

// wsMeterInterval is how often an open tunnel's bytes are recorded: a tunnel may live a
// day (WebSocketMaxLifetime), and its bytes are billed in the hours they went through,
// not all at its end.
const wsMeterInterval = time.Minute

// meterBytes records the bytes relayed since the last record.
func (w *wsConn) meterBytes() {
	if w.use.Route == nil {
		return
	}
	w.mmu.Lock()
	in, out := w.in.Load(), w.out.Load()
	din, dout := in-w.recIn, out-w.recOut
	w.recIn, w.recOut = in, out
	w.mmu.Unlock()
	u := &w.use
	u.Route.RecordBytes(u.Consumer, u.Status, u.Upstream, din, dout, time.Now())
}

// close ends the tunnel once: with goingAway, the client first gets a 1001 close frame.
func (w *wsConn) close(goingAway bool) {
	w.closeOnce.Do(func() {
		w.wmu.Lock()
		w.closed = true
		if goingAway {
			_ = w.direct.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = w.direct.Write(wsGoingAway)
		}
		_ = w.direct.Close()
		w.wmu.Unlock()
		_ = w.up.Close()
	})
}

// wsSet is the edge's open WebSocket tunnels, for Shutdown.
type wsSet struct {
	mu       sync.Mutex
	conns    map[*wsConn]struct{}
	draining bool
	wg       sync.WaitGroup
	open     atomic.Int64

	// The meter's sweep over open tunnels, started with the first metered one.
	meterEvery time.Duration // wsMeterInterval unless set (tests)
	sweeping   bool
	stopSweep  chan struct{}
}

func (s *wsSet) add(w *wsConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	if s.conns == nil {
		s.conns = map[*wsConn]struct{}{}
	}
	if w.use.Route != nil && !s.sweeping {
		s.sweeping = true
		s.stopSweep = make(chan struct{})
		every := s.meterEvery
		if every <= 0 {
			every = wsMeterInterval
		}
		go s.sweep(every, s.stopSweep)
	}
	s.conns[w] = struct{}{}
	s.wg.Add(1)
	s.open.Add(1)
	return true
}

// sweep records every open tunnel's bytes each period, until stop.
func (s *wsSet) sweep(every time.Duration, stop chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.mu.Lock()
			for w := range s.conns {
				w.meterBytes()
			}
			s.mu.Unlock()
		}
	}
}

func (s *wsSet) done(w *wsConn) {
	s.mu.Lock()
	delete(s.conns, w)
	s.mu.Unlock()
	s.open.Add(-1)
	s.wg.Done()
}

// shutdown sends every tunnel's client a close frame, closes both ends and waits for the
// relays to finish, or for ctx.
func (s *wsSet) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	if s.sweeping {
		// Each tunnel records its rest as it closes.
		close(s.stopSweep)
		s.sweeping = false
	}
	conns := make([]*wsConn, 0, len(s.conns))
	for w := range s.conns {
		conns = append(conns, w)
	}
	s.mu.Unlock()
	for _, w := range conns {
		w.close(true)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WebSockets is the number of open WebSocket tunnels.
func (e *Edge) WebSockets() int { return int(e.ws.open.Load()) }
