// Package h2door is the edge's second door: HTTP/2.
//
// fasthttp speaks HTTP/1.1 only, so HTTP/2 connections are served by Go's own HTTP/2
// server (net/http's, the code of golang.org/x/net/http2 that net/http carries), and each
// stream is handed to the same gateway chain as an HTTP/1.1 request (server.go). Which
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
// It must not know the gateway: the edge hands it a Chain, and a Split is given the
// edge's listeners.
package h2door

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

const (
	// Preface is what every HTTP/2 connection starts with (RFC 9113 3.4).
	Preface     = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	prefaceLine = "PRI * HTTP/2.0"
)

// Split sorts the connections of one listener between the HTTP/1.1 door
// (Accept) and the HTTP/2 one (h2). Each connection is sorted in a goroutine of its
// own, so Accept never waits for a slow client.
type Split struct {
	inner net.Listener
	sort  func(net.Conn) (c net.Conn, h2 bool, ok bool) // ok false: c was closed
	h1    chan net.Conn
	h2ch  chan net.Conn
	h2    h2Side
	done  chan struct{}
	once  sync.Once

	mu      sync.Mutex
	sorting map[net.Conn]struct{} // woken by Close
	closed  bool
}

func NewSplit(inner net.Listener, sort func(net.Conn) (net.Conn, bool, bool)) *Split {
	l := &Split{inner: inner, sort: sort, h1: make(chan net.Conn), h2ch: make(chan net.Conn), done: make(chan struct{}), sorting: map[net.Conn]struct{}{}}
	l.h2 = h2Side{l}
	go l.acceptLoop()
	return l
}

func (l *Split) acceptLoop() {
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

func (l *Split) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.sorting[c] = struct{}{}
	return true
}

func (l *Split) route(c net.Conn) {
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
func (l *Split) Accept() (net.Conn, error) {
	select {
	case c := <-l.h1:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener and every connection still being sorted; both doors'
// Accept return net.ErrClosed.
func (l *Split) Close() error {
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

func (l *Split) Addr() net.Addr { return l.inner.Addr() }

// H2 is the listener of the HTTP/2 connections, for the HTTP/2 server.
func (l *Split) H2() net.Listener { return l.h2 }

// h2Side is the HTTP/2 side of a Split, which the HTTP/2 server serves.
// Closing it closes nothing: the HTTP/1.1 door's Shutdown closes the listener.
type h2Side struct{ l *Split }

func (h h2Side) Accept() (net.Conn, error) {
	select {
	case c := <-h.l.h2ch:
		return c, nil
	case <-h.l.done:
		return nil, net.ErrClosed
	}
}

func (h h2Side) Close() error   { return nil }
func (h h2Side) Addr() net.Addr { return h.l.inner.Addr() }

// sortPlain tells h2c with prior knowledge from HTTP/1.1 on a plain connection, by
// peeking at its first bytes. A connection that sends nothing within wait is closed, as
// fasthttp closes one that sends no request within ReadTimeout.
func SortPlain(wait time.Duration) func(net.Conn) (net.Conn, bool, bool) {
	return func(c net.Conn) (net.Conn, bool, bool) {
		h2, err := PeekPreface(c, wait)
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
func PeekPreface(c net.Conn, wait time.Duration) (bool, error) {
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
	var buf [len(Preface)]byte
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
		case n < len(buf) && string(buf[:n]) == Preface[:n]:
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
	if bytes.Equal(buf[:n], []byte(Preface)) {
		return true, nil
	}
	// "PRI * HTTP/2.0" then something else is no HTTP/1.1 request and a broken HTTP/2
	// preface, which RFC 9113 3.4 answers by closing the connection.
	if n >= len(prefaceLine) && string(buf[:len(prefaceLine)]) == prefaceLine {
		return false, errors.New("invalid HTTP/2 connection preface")
	}
	return false, nil
}

// sortTLS completes the handshake of a TLS connection and sends it to the door its ALPN
// protocol names. A handshake that fails or takes longer than wait closes the connection.
func SortTLS(wait time.Duration) func(net.Conn) (net.Conn, bool, bool) {
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
