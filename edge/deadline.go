package edge

import (
	"net"
	"time"
)

// Client connection deadlines.
//
// fasthttp moves a keep-alive connection's read deadline twice per request (idle wait,
// then request read) and its write deadline once, each now+timeout. On this kind of
// machine one move costs about 0.4µs (clock reads and a runtime timer update), a few
// percent of a proxied request. With IdleTimeout == ReadTimeout those deadlines only ever
// move later, so the connection below forwards a move only when it is earlier than the
// deadline set, or later by deadlineSlack or more: a busy connection updates its timers
// about once a second instead of three times a request, and a deadline fires at most
// deadlineSlack earlier than fasthttp asked.
const deadlineSlack = time.Second

// coalescingListener hands out connections that coalesce deadline moves. Only plain TCP
// connections are wrapped: a TLS connection keeps its type, which fasthttp inspects.
type coalescingListener struct{ net.Listener }

func (l coalescingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &coalescingConn{TCPConn: tc}, nil
	}
	return c, nil
}

// coalescingConn is used by one goroutine at a time (fasthttp's connection loop).
type coalescingConn struct {
	*net.TCPConn
	rd, wd time.Time
}

func coalesce(cur, t time.Time) bool {
	return !t.IsZero() && !cur.IsZero() && !t.Before(cur) && t.Sub(cur) < deadlineSlack
}

func (c *coalescingConn) SetReadDeadline(t time.Time) error {
	if coalesce(c.rd, t) {
		return nil
	}
	c.rd = t
	return c.TCPConn.SetReadDeadline(t)
}

func (c *coalescingConn) SetWriteDeadline(t time.Time) error {
	if coalesce(c.wd, t) {
		return nil
	}
	c.wd = t
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *coalescingConn) SetDeadline(t time.Time) error {
	c.rd, c.wd = t, t
	return c.TCPConn.SetDeadline(t)
}
