package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// The second door: HTTP/2.
//
// fasthttp speaks HTTP/1.1 only, so HTTP/2 connections are served by Go's own HTTP/2
// server (net/http's, the code of golang.org/x/net/http2 that net/http carries), and each
// stream is handed to the same gateway chain as an HTTP/1.1 request (h2adapt.go). Which
// door a connection takes is decided once, when it arrives:
//
//   - on the TLS listener, by ALPN: the edge offers "h2" and "http/1.1"; the handshake
//     runs in a goroutine of the connection's own, so a slow handshake holds no other
//     connection, and the connection then goes to one server or the other;
//   - on the plain listener, by the HTTP/2 client preface ("PRI * HTTP/2.0…", RFC 9113
//     3.4: h2c with prior knowledge). The first bytes are looked at with MSG_PEEK, which
//     leaves them in the socket, so an HTTP/1.1 connection reaches fasthttp exactly as it
//     came, wrapped by conn.ClientListener as before (raw I/O, coalesced deadlines,
//     lingering close).
//
// What HTTP/1.1 pays: on each new connection a goroutine, one recvfrom (plain) and a
// channel handoff to fasthttp's accept loop; TLS handshakes move from fasthttp's worker to
// that goroutine. A keep-alive connection's later requests pay nothing: the connection
// fasthttp serves is the very one it served before HTTP/2 was added.
//
// TOLLGATE_EDGE_HTTP2=off (Config.DisableHTTP2) takes both back out: ALPN offers
// http/1.1 only and nothing is peeked.

// h2Preface is what every HTTP/2 connection starts with (RFC 9113 3.4).
const (
	h2Preface     = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	h2PrefaceLine = "PRI * HTTP/2.0"
)

// h2ConnKey is the http.Request context key of the connection a stream came on.
type h2ConnKey struct{}

// newH2Server is the server of every HTTP/2 connection, from both listeners. Its limits
// are those of the HTTP/1.1 door where one exists (header bytes, timeouts); the rest are
// HTTP/2's own (docs/http2.md).
func (e *Edge) newH2Server() *http.Server {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:   &h2Handler{e: e, log: fasthttpLogger{e.log}},
		Protocols: &p,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: int(e.cfg.HTTP2MaxStreams),
			MaxReadFrameSize:     h2MaxReadFrameSize,
			// The windows bound what one connection can make the edge buffer of request
			// bodies its streams have not read yet.
			MaxReceiveBufferPerConnection: h2ConnWindow,
			MaxReceiveBufferPerStream:     h2StreamWindow,
			WriteByteTimeout:              e.cfg.WriteTimeout,
			CountError:                    e.countH2Error,
		},
		// The header list bound of HTTP/1.1's ReadBufferSize.
		MaxHeaderBytes: e.cfg.ReadBufferSize,
		ReadTimeout:    e.cfg.ReadTimeout,
		WriteTimeout:   e.cfg.WriteTimeout,
		IdleTimeout:    e.cfg.IdleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, h2ConnKey{}, c)
		},
		ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
	}
}

// HTTP/2 limits that have no HTTP/1.1 counterpart.
const (
	h2MaxReadFrameSize = 16 << 10 // the protocol's default: no frame is larger
	h2StreamWindow     = 256 << 10
	h2ConnWindow       = 1 << 20
)

// countH2Error logs, at debug level, each protocol error the HTTP/2 server met (a
// client's misbehaviour: a flood it cut off, a bad frame).
func (e *Edge) countH2Error(errType string) {
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("edge: http2: connection or stream error", "type", errType)
	}
}

// splitListener sorts the connections of one listener between the HTTP/1.1 door
// (Accept) and the HTTP/2 one (h2). Each connection is sorted in a goroutine of its
// own, so Accept never waits for a slow client.
type splitListener struct {
	inner net.Listener
	sort  func(net.Conn) (c net.Conn, h2 bool, ok bool) // ok false: c was closed
	h1    chan net.Conn
	h2ch  chan net.Conn
	h2    h2Listener
	done  chan struct{}
	once  sync.Once

	mu      sync.Mutex
	sorting map[net.Conn]struct{} // woken by Close
	closed  bool
}

func newSplitListener(inner net.Listener, sort func(net.Conn) (net.Conn, bool, bool)) *splitListener {
	l := &splitListener{inner: inner, sort: sort, h1: make(chan net.Conn), h2ch: make(chan net.Conn), done: make(chan struct{}), sorting: map[net.Conn]struct{}{}}
	l.h2 = h2Listener{l}
	go l.acceptLoop()
	return l
}

func (l *splitListener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				_ = l.Close()
				return
			}
			// Out of descriptors or a connection aborted before accept: back off as
			// net/http and fasthttp do, and keep accepting.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-l.done:
				return
			}
			continue
		}
		delay = 0
		if !l.track(c) {
			_ = c.Close()
			return
		}
		go l.route(c)
	}
}

func (l *splitListener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.sorting[c] = struct{}{}
	return true
}

func (l *splitListener) route(c net.Conn) {
	sc, h2, ok := l.sort(c)
	l.mu.Lock()
	delete(l.sorting, c)
	l.mu.Unlock()
	if !ok {
		return
	}
	ch := l.h1
	if h2 {
		ch = l.h2ch
	}
	select {
	case ch <- sc:
	case <-l.done:
		_ = sc.Close()
	}
}

// Accept returns the next HTTP/1.1 connection.
func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.h1:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener and every connection still being sorted; both doors'
// Accept return net.ErrClosed.
func (l *splitListener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.inner.Close()
		l.mu.Lock()
		l.closed = true
		for c := range l.sorting {
			_ = c.SetDeadline(time.Unix(1, 0)) // its sort fails and closes it
		}
		l.mu.Unlock()
		close(l.done)
	})
	return err
}

func (l *splitListener) Addr() net.Addr { return l.inner.Addr() }

// h2Listener is the HTTP/2 side of a splitListener, which the HTTP/2 server serves.
// Closing it closes nothing: the HTTP/1.1 door's Shutdown closes the listener.
type h2Listener struct{ l *splitListener }

func (h h2Listener) Accept() (net.Conn, error) {
	select {
	case c := <-h.l.h2ch:
		return c, nil
	case <-h.l.done:
		return nil, net.ErrClosed
	}
}

func (h h2Listener) Close() error   { return nil }
func (h h2Listener) Addr() net.Addr { return h.l.inner.Addr() }

// sortPlain tells h2c with prior knowledge from HTTP/1.1 on a plain connection, by
// peeking at its first bytes. A connection that sends nothing within wait is closed, as
// fasthttp closes one that sends no request within ReadTimeout.
func sortPlain(wait time.Duration) func(net.Conn) (net.Conn, bool, bool) {
	return func(c net.Conn) (net.Conn, bool, bool) {
		h2, err := peekPreface(c, wait)
		if err != nil {
			_ = c.Close()
			return nil, false, false
		}
		return c, h2, true
	}
}

// peekPreface reports whether c starts with the HTTP/2 preface, reading nothing from it:
// it waits until the bytes arrived tell (a byte that differs from the preface, or all of
// it), the peer closes, or wait passes. A connection that is not a *net.TCPConn (tests'
// pipes) is HTTP/1.1.
func peekPreface(c net.Conn, wait time.Duration) (bool, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false, err
	}
	if wait > 0 {
		_ = tc.SetReadDeadline(time.Now().Add(wait))
	}
	var buf [len(h2Preface)]byte
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EINTR:
			return false
		case rerr != nil:
			return true
		case n == 0:
			rerr = errors.New("closed before its first byte")
			return true
		case n < len(buf) && string(buf[:n]) == h2Preface[:n]:
			return false // a prefix of the preface: wait for the rest
		}
		return true
	})
	if wait > 0 {
		_ = tc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		return false, err
	}
	if rerr != nil {
		return false, rerr
	}
	if bytes.Equal(buf[:n], []byte(h2Preface)) {
		return true, nil
	}
	// "PRI * HTTP/2.0" then something else is no HTTP/1.1 request and a broken HTTP/2
	// preface, which RFC 9113 3.4 answers by closing the connection.
	if n >= len(h2PrefaceLine) && string(buf[:len(h2PrefaceLine)]) == h2PrefaceLine {
		return false, errors.New("invalid HTTP/2 connection preface")
	}
	return false, nil
}

// sortTLS completes the handshake of a TLS connection and sends it to the door its ALPN
// protocol names. A handshake that fails or takes longer than wait closes the connection.
func sortTLS(wait time.Duration) func(net.Conn) (net.Conn, bool, bool) {
	return func(c net.Conn) (net.Conn, bool, bool) {
		tc, ok := c.(*tls.Conn)
		if !ok {
			return c, false, true
		}
		if wait > 0 {
			_ = tc.SetDeadline(time.Now().Add(wait))
		}
		if err := tc.HandshakeContext(context.Background()); err != nil {
			_ = tc.Close()
			return nil, false, false
		}
		if wait > 0 {
			_ = tc.SetDeadline(time.Time{})
		}
		return tc, tc.ConnectionState().NegotiatedProtocol == "h2", true
	}
}

// serveH2 serves the HTTP/2 side of l until the door shuts down.
func (d *door) serveH2(l *splitListener) {
	go func() {
		err := d.h2.Serve(l.h2)
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			d.log.Error("edge: http2 listener stopped", "err", err)
		}
	}()
}
