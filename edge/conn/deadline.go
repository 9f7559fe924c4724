// Package conn holds the edge's connection plumbing: the wrappers its listeners hand out
// and its upstream dialer makes, which coalesce deadline moves, close gracefully and read
// and write with raw system calls (SetRawIO), and the monotonic clock those deadlines use.
// It knows nothing of HTTP, tenants or routes; package edge decides when to use what.
package conn

import (
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// Reading after writing: yield first.
//
// Go reads a socket optimistically: the read syscall comes first and only when it fails
// with EAGAIN does the goroutine park until the poller reports the socket readable, when
// the read is made again. Right after the edge has written a response to a keep-alive
// client, or a request to an upstream, the answer cannot be there yet, so that first
// read is a wasted syscall: two per proxied request, a third of the edge's syscalls
// under load. Yielding first (runtime.Gosched) lets the other runnable goroutines, the
// other connections' work, go first: under load the answer has usually arrived by the
// time the goroutine runs again and the read succeeds at once. nginx gets the same by
// trusting epoll: it reads only a socket reported readable. Measured on one core under
// wrk: 4.0 reads per request become 2.1–2.8, and a request costs about a quarter less
// CPU (with the other changes of this file, rawio.go and the edge's upstream round trip).
//
// With a single P a yield with nothing else to run costs a trip through the scheduler
// (a fraction of a microsecond). With more Ps it also wakes an idle P's thread to run
// the yielded goroutine, which costs more than the read it saves unless every P is busy,
// which the edge cannot see: with GOMAXPROCS=2 and a load the edge keeps up with,
// yielding cost 4–25% more CPU per request. So the edge yields only when GOMAXPROCS is 1,
// as read when the connection was made, and SetYieldReads(false) turns it off.
//
// A yield puts the goroutine behind every other runnable one (on the global run queue),
// so under a queue of work a request's answer can wait for the others' turns: a cost in
// latency, not CPU, which the bench's tail scenario measures with the setting on and off.
func yieldReads() bool { return !yieldOff.Load() && runtime.GOMAXPROCS(0) == 1 }

var yieldOff atomic.Bool

// SetYieldReads chooses whether connections made from now on yield before reading after
// a write (yieldReads). TOLLGATE_EDGE_YIELD_READS sets it at start. Default: on, which
// yields only when GOMAXPROCS is 1.
func SetYieldReads(on bool) { yieldOff.Store(!on) }

// YieldReads reports whether SetYieldReads left yielding on.
func YieldReads() bool { return !yieldOff.Load() }

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

// ClientListener returns a listener for the edge's plain-text clients: its connections
// coalesce deadline moves, yield before reading after a write (yieldReads), use raw I/O
// (SetRawIO) and can close gracefully (LingerClose). Only plain TCP connections are
// wrapped: a TLS connection keeps its type, which fasthttp inspects.
func ClientListener(ln net.Listener) net.Listener { return coalescingListener{ln} }

type coalescingListener struct{ net.Listener }

func (l coalescingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &coalescingConn{TCPConn: tc, raw: newRawIO(tc), yield: yieldReads(), lf: lfHead{active: true}}, nil
	}
	return c, nil
}

// coalescingConn is used by one goroutine at a time (fasthttp's connection loop; a
// hijacked WebSocket connection reads through it and writes to the TCPConn itself).
type coalescingConn struct {
	*net.TCPConn
	raw    *rawIO // rawio.go; nil: the TCPConn's own Read and Write
	rd, wd time.Time
	yield  bool   // yieldReads when the connection was accepted
	wrote  bool   // a Write since the last Read
	linger bool   // close gracefully: the client may still be sending (lingerClose)
	lf     lfHead // the first head's bare LFs (barelf.go)
}

// Lingering close.
//
// When the edge answers before reading the whole request body (413 body_too_large, or an
// error while a body streams in) it must close the connection, and closing a socket with
// unread data makes the kernel send RST: a client still writing its body then fails with
// "connection reset" and never reads the answer. Like nginx's lingering_close, the edge
// instead shuts its side for writing (the answer and a FIN go out), reads and discards
// what the client still sends for up to lingerTime or lingerBytes, and closes then.
const (
	lingerTime  = 5 * time.Second
	lingerBytes = 64 << 20
)

// LingerClose asks for a graceful close of the client connection c (see above); it does
// nothing for connections it does not know.
func LingerClose(c net.Conn) {
	switch c := c.(type) {
	case *coalescingConn:
		c.linger = true
	case *tls.Conn:
		if lc, ok := c.NetConn().(*lingerConn); ok {
			lc.linger = true
		}
	}
}

func (c *coalescingConn) Close() error {
	if !c.linger {
		return c.TCPConn.Close()
	}
	c.linger = false
	return closeLingering(c.TCPConn)
}

// closeLingering sends FIN after what was written, then discards what the peer still
// sends for a while before closing.
func closeLingering(tc *net.TCPConn) error {
	if err := tc.CloseWrite(); err != nil {
		return tc.Close()
	}
	go func() {
		_ = tc.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.CopyN(io.Discard, tc, lingerBytes)
		_ = tc.Close()
	}()
	return nil
}

// LingerListener returns the listener to put under a TLS listener: its connections only
// add the lingering close (LingerClose; tls.Conn's Close sends close_notify, then closes
// this).
func LingerListener(ln net.Listener) net.Listener { return lingerListener{ln} }

type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, nil
}

type lingerConn struct {
	*net.TCPConn
	linger bool
	batch  *batch // set by BatchWrites: the connection is HTTP/2's
}

func (c *lingerConn) Write(p []byte) (int, error) {
	if c.batch != nil {
		return c.batch.write(p)
	}
	return c.TCPConn.Write(p)
}

// SetWriteDeadline is ignored while batching: see BatchWrites.
func (c *lingerConn) SetWriteDeadline(t time.Time) error {
	if c.batch != nil {
		return nil
	}
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *lingerConn) SetDeadline(t time.Time) error {
	if c.batch != nil {
		return c.TCPConn.SetReadDeadline(t)
	}
	return c.TCPConn.SetDeadline(t)
}

func (c *lingerConn) Close() error {
	if c.batch != nil {
		c.batch.close()
	}
	if !c.linger {
		return c.TCPConn.Close()
	}
	c.linger = false
	return closeLingering(c.TCPConn)
}

// TCP returns the TCP connection under a connection of ClientListener or Dialed, or c
// itself: for a hijacked connection that more than one goroutine uses (a WebSocket
// tunnel), which the wrappers, meant for one goroutine at a time, must not be.
func TCP(c net.Conn) net.Conn {
	switch w := c.(type) {
	case *coalescingConn:
		return w.TCPConn
	case *Upstream:
		return w.TCPConn
	}
	return c
}

// Read reads the client's next request; right after a response it yields first
// (yieldReads).
func (c *coalescingConn) Read(b []byte) (int, error) {
	if c.wrote {
		c.wrote = false
		if c.yield {
			runtime.Gosched()
		}
	}
	if c.lf.active || c.lf.pending != nil {
		return c.readHead(b)
	}
	if c.raw == nil {
		return c.TCPConn.Read(b)
	}
	return c.raw.read(b)
}

// readHead is Read while the connection's first head is read (lfHead).
func (c *coalescingConn) readHead(b []byte) (int, error) {
	if p := c.lf.pending; p != nil {
		n := copy(b, p)
		if c.lf.pending = p[n:]; len(c.lf.pending) == 0 {
			c.lf.pending = nil
		}
		return n, nil
	}
	var n int
	var err error
	if c.raw == nil {
		n, err = c.TCPConn.Read(b)
	} else {
		n, err = c.raw.read(b)
	}
	if n > 0 {
		n = c.lf.rewrite(b, n)
	}
	return n, err
}

func (c *coalescingConn) Write(b []byte) (int, error) {
	c.wrote = true
	if c.raw == nil {
		return c.TCPConn.Write(b)
	}
	return c.raw.write(b)
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

// Upstream connection deadlines.
//
// The route's timeout bounds each exchange with an upstream: fasthttp would move a pooled
// connection's write and read deadlines to now+timeout on every request. Upstream
// remembers the deadlines it has and Bound moves them only when they fall outside
// [deadline, deadline+slack], setting them to deadline+slack, where slack is 1/16 of the
// route's timeout and at most deadlineSlack: a connection that serves a stream of
// requests moves its deadlines about once per slack instead of twice per request, and
// an upstream exchange times out at most 1/16 (≤1s) after the route's timeout, never
// before it.
const deadlineSlackDivisor = 16

// UpstreamSlack is the slack of a route's timeout: how much later than asked an upstream
// exchange's deadline may fire, so that Upstream.Bound seldom moves it.
func UpstreamSlack(timeout time.Duration) int64 {
	return min(int64(timeout)/deadlineSlackDivisor, int64(deadlineSlack))
}

// Upstream is a connection the edge's dialer made to an upstream. It is used by one
// request at a time (the pool hands it out), as fasthttp does with any connection.
type Upstream struct {
	*net.TCPConn
	raw    *rawIO // rawio.go; nil: the TCPConn's own Read and Write
	rd, wd int64  // the deadlines set, on MonoNow's clock; noDeadline when none
	yield  bool   // yield before reading the answer (yieldReads)

	// Quiet's state (quiet.go), made on its first call.
	rc      syscall.RawConn
	peekFn  func(fd uintptr) bool
	peekBuf [1]byte
	peekN   int
	peekErr syscall.Errno
}

// Dialed wraps a connection just dialed to an upstream.
func Dialed(tc *net.TCPConn) *Upstream {
	return &Upstream{TCPConn: tc, raw: newRawIO(tc), yield: yieldReads()}
}

// YieldsReads reports whether the caller should yield (runtime.Gosched) between writing a
// request and reading its answer (yieldReads).
func (c *Upstream) YieldsReads() bool { return c.yield }

func (c *Upstream) Read(b []byte) (int, error) {
	if c.raw == nil {
		return c.TCPConn.Read(b)
	}
	return c.raw.read(b)
}

func (c *Upstream) Write(b []byte) (int, error) {
	if c.raw == nil {
		return c.TCPConn.Write(b)
	}
	return c.raw.write(b)
}

const noDeadline = int64(^uint64(0) >> 1)

// Bound makes the connection's deadlines fall in [deadline, deadline+slack], on MonoNow's
// clock, moving them only when they are outside.
func (c *Upstream) Bound(deadline, slack int64) error {
	if c.wd < deadline || c.wd > deadline+slack {
		if err := c.SetWriteDeadline(MonoTime(deadline + slack)); err != nil {
			return err
		}
	}
	if c.rd < deadline || c.rd > deadline+slack {
		return c.SetReadDeadline(MonoTime(deadline + slack))
	}
	return nil
}

func (c *Upstream) SetReadDeadline(t time.Time) error {
	c.rd = monoOf(t)
	return c.TCPConn.SetReadDeadline(t)
}

func (c *Upstream) SetWriteDeadline(t time.Time) error {
	c.wd = monoOf(t)
	return c.TCPConn.SetWriteDeadline(t)
}

func (c *Upstream) SetDeadline(t time.Time) error {
	c.rd = monoOf(t)
	c.wd = c.rd
	return c.TCPConn.SetDeadline(t)
}

// The edge's monotonic clock: nanoseconds since monoBase. Reading it is one clock read,
// where time.Now is two.
var monoBase = time.Now()

// MonoNow is the edge's monotonic clock, in nanoseconds since the process started.
func MonoNow() int64 { return int64(time.Since(monoBase)) }

// MonoTime is the time.Time of a MonoNow reading.
func MonoTime(ns int64) time.Time { return monoBase.Add(time.Duration(ns)) }

func monoOf(t time.Time) int64 {
	if t.IsZero() {
		return noDeadline
	}
	return int64(t.Sub(monoBase))
}
