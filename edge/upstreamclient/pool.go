// Package upstreamclient is the edge's HTTP/1.1 client to upstream servers: a keep-alive
// pool per target (Client), the exchange over it (Client.DoTimeout) with its streamed
// bodies, and the dialer that holds every connect to the operator's address rule
// (Dialer). It stands on net and crypto/tls; it knows nothing of tenants' routes,
// balancing or retries, which are the edge's.
package upstreamclient

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
)

// The edge's connection pool to one upstream server.
//
// It stands on net and crypto/tls only: the edge dials (Dialer.Dial), pools and frames
// its upstream connections itself, and uses fasthttp for what fasthttp documents for
// any reader or writer (Request.Write, ResponseHeader.Read, Response.ReadBody,
// ResponseHeader.ReadTrailer). A fasthttp release may change how its own client pools
// connections without touching the proxy.
//
// The pool keeps what fasthttp's HostClient did for the edge: at most maxConns
// connections (open or being dialed); the most recently used idle connection first
// (LIFO, so a quiet period lets the others age out); idle ones closed after maxIdle; a
// request that finds every connection busy waits up to maxWait (or its own remaining
// time, when shorter) for one to come back or for a slot to dial in, first come first
// served, and then fails with fasthttp.ErrNoFreeConns (fasthttp.ErrTimeout when its own
// time ran out first). Read and write buffers are pooled, not held by idle connections.
//
// A connection that served before is checked when it is taken for another request
// (conn.Upstream.Quiet): one on which bytes arrived since its answer ended, or that the
// upstream closed, is closed and the next one taken (or one dialed). SetReuseCheck turns
// the check off.

// Client is a target's keep-alive pool; DoTimeout (roundtrip.go) is the exchange over it.
type Client struct {
	Addr      string                                                     // host:port
	dial      func(addr string, timeout time.Duration) (net.Conn, error) // dialer.dial
	tlsConfig *tls.Config                                                // nil: plain HTTP
	maxConns  int
	maxIdle   time.Duration
	maxWait   time.Duration
	// stream: bodies over maxBufferedBody or of unknown length stream to the client
	// (upstreamBody); otherwise every body is read whole (Config.Stream).
	stream bool

	readBufferSize   int
	readers, writers sync.Pool

	mu       sync.Mutex
	idle     []*poolConn   // idle[len-1] most recently used, idle[0] longest idle
	open     int           // connections open or being dialed
	waiters  []*connWaiter // requests waiting for a connection, oldest first
	cleaning bool          // the idle cleaner runs
}

// Config configures a Client. Addr and Dial are required.
type Config struct {
	Addr string                                                     // host:port
	Dial func(addr string, timeout time.Duration) (net.Conn, error) // Dialer.Dial
	// TLS speaks TLS to the upstream, checking its certificate for Addr's host.
	TLS bool
	// RootCAs are the authorities TLS certificates are checked against. Default: the
	// system's (SSL_CERT_FILE, SSL_CERT_DIR).
	RootCAs  *x509.CertPool
	MaxConns int           // connections open or being dialed. Default: fasthttp.DefaultMaxConnsPerHost
	MaxIdle  time.Duration // an idle connection is closed after this. Default: 10s
	MaxWait  time.Duration // a request waits this long for a connection when all are busy; 0: not at all
	// ReadBufferSize is each connection's read buffer. Default: 4 KiB.
	ReadBufferSize int
	// Stream: bodies over maxBufferedBody or of unknown length stream to the client;
	// otherwise every body is read whole.
	Stream bool
}

// New returns an empty pool: connections are dialed as requests need them.
func New(cfg Config) *Client {
	c := &Client{
		Addr:           cfg.Addr,
		dial:           cfg.Dial,
		maxConns:       cfg.MaxConns,
		maxIdle:        cfg.MaxIdle,
		maxWait:        cfg.MaxWait,
		readBufferSize: cfg.ReadBufferSize,
		stream:         cfg.Stream,
	}
	if c.maxConns <= 0 {
		c.maxConns = fasthttp.DefaultMaxConnsPerHost
	}
	if c.readBufferSize <= 0 {
		c.readBufferSize = 4 << 10
	}
	if cfg.TLS {
		host, _, _ := net.SplitHostPort(cfg.Addr)
		c.tlsConfig = &tls.Config{ServerName: host, RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(64)}
	}
	return c
}

// poolConn is one connection of the pool.
type poolConn struct {
	net.Conn
	uc      *conn.Upstream // the dialer's connection under Conn (also under TLS); nil for others
	lastUse int64          // when it went idle, on conn.MonoNow's clock
	reused  bool           // it went back to the pool once: it served before
	// Bytes read and written in the current exchange: whether a failed request may be
	// sent again depends on what got through (roundTrip).
	nr, nw int
}

// Read and Write count what the exchange moved; the pool's buffered reader and writer sit
// on them.
func (pc *poolConn) Read(b []byte) (int, error) {
	n, err := pc.Conn.Read(b)
	pc.nr += n
	return n, err
}

func (pc *poolConn) Write(b []byte) (int, error) {
	n, err := pc.Conn.Write(b)
	pc.nw += n
	return n, err
}

// reuseCheck: a pooled connection is checked before it carries another request
// (SetReuseCheck).
var reuseCheck atomic.Bool

func init() { reuseCheck.Store(true) }

// SetReuseCheck chooses whether a connection that served before is checked, with one
// system call, before it carries another request (conn.Upstream.Quiet): closed when bytes
// arrived on it since its answer ended or its upstream closed it. Off, such bytes are
// read as the next request's answer, and a request sent on a connection the upstream
// closed fails (and is sent again on a new connection when that is safe: roundTrip).
// TOLLGATE_EDGE_REUSE_CHECK sets it at start. Default: on.
func SetReuseCheck(on bool) { reuseCheck.Store(on) }

// connWaiter is a request waiting for a connection: it receives an idle one, or nil
// for a slot of the pool to dial in.
type connWaiter struct{ ch chan *poolConn }

// writeBufferSize is the request write buffer (fasthttp's default).
const writeBufferSize = 4 << 10

// defaultMaxIdle applies when the pool is given no idle timeout.
const defaultMaxIdle = 10 * time.Second

// acquire returns a connection fit to carry a request: an idle one, a new one, or, with
// every slot taken, one that frees up within maxWait (and timeout, the request's
// remaining time). A connection that served before and is not quiet (reuseCheck) is
// closed and another taken. fresh asks for a new connection: an idle one is closed to
// free its slot when every slot is taken.
func (c *Client) acquire(timeout time.Duration, fresh bool) (*poolConn, error) {
	check := reuseCheck.Load()
	for {
		pc, err := c.take(timeout, fresh)
		if err != nil || !pc.reused || !check || pc.uc == nil || pc.uc.Quiet() == nil {
			return pc, err
		}
		c.closeConn(pc)
	}
}

// take is acquire without the check.
func (c *Client) take(timeout time.Duration, fresh bool) (*poolConn, error) {
	if fresh {
		return c.takeFresh(timeout)
	}
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		pc := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return pc, nil
	}
	if c.open < c.maxConns {
		c.open++
		c.mu.Unlock()
		return c.dialConn(timeout)
	}
	if c.maxWait <= 0 {
		c.mu.Unlock()
		return nil, fasthttp.ErrNoFreeConns
	}
	w := &connWaiter{ch: make(chan *poolConn, 1)}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()

	wait, own := c.maxWait, false
	if timeout < wait {
		wait, own = timeout, true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case pc := <-w.ch:
		if pc == nil {
			return c.dialConn(timeout)
		}
		return pc, nil
	case <-t.C:
	}
	c.mu.Lock()
	removed := c.removeWaiter(w)
	c.mu.Unlock()
	if !removed {
		// Handed a connection or a slot as the timer fired: pass it on.
		if pc := <-w.ch; pc != nil {
			c.release(pc)
		} else {
			c.dropSlot()
		}
	}
	if own {
		return nil, fasthttp.ErrTimeout
	}
	return nil, fasthttp.ErrNoFreeConns
}

// takeFresh dials a new connection: in a free slot, else in the slot of the longest idle
// connection (closed), else in the first slot or connection handed back within the wait.
func (c *Client) takeFresh(timeout time.Duration) (*poolConn, error) {
	c.mu.Lock()
	var old *poolConn
	switch {
	case c.open < c.maxConns:
		c.open++
	case len(c.idle) > 0:
		old = c.idle[0]
		n := copy(c.idle, c.idle[1:])
		c.idle[n] = nil
		c.idle = c.idle[:n]
	default:
		c.mu.Unlock()
		pc, err := c.take(timeout, false)
		if err != nil {
			return nil, err
		}
		if !pc.reused {
			return pc, nil // dialed in a slot handed over
		}
		_ = pc.Conn.Close() // its slot stays taken, for the new connection
		return c.dialConn(timeout)
	}
	c.mu.Unlock()
	if old != nil {
		_ = old.Conn.Close()
	}
	return c.dialConn(timeout)
}

func (c *Client) removeWaiter(w *connWaiter) bool {
	for i, x := range c.waiters {
		if x == w {
			copy(c.waiters[i:], c.waiters[i+1:])
			c.waiters[len(c.waiters)-1] = nil
			c.waiters = c.waiters[:len(c.waiters)-1]
			return true
		}
	}
	return false
}

// popWaiter takes the oldest waiter; c.mu is held.
func (c *Client) popWaiter() *connWaiter {
	if len(c.waiters) == 0 {
		return nil
	}
	w := c.waiters[0]
	copy(c.waiters, c.waiters[1:])
	c.waiters[len(c.waiters)-1] = nil
	c.waiters = c.waiters[:len(c.waiters)-1]
	return w
}

// dialConn connects in a slot already counted in c.open, giving the slot up on failure.
// A TLS connection shakes hands on its first write, within the request's deadlines.
func (c *Client) dialConn(timeout time.Duration) (*poolConn, error) {
	conn, err := c.dial(c.Addr, timeout)
	if err != nil {
		c.dropSlot()
		return nil, err
	}
	pc := &poolConn{Conn: conn, uc: upstreamConnOf(conn)}
	if c.tlsConfig != nil {
		pc.Conn = tls.Client(conn, c.tlsConfig)
	}
	return pc, nil
}

// release puts a connection whose exchange ended cleanly back: to the oldest waiter,
// else into the idle list.
func (c *Client) release(pc *poolConn) { c.releaseAt(pc, conn.MonoNow()) }

// releaseAt is release for a connection last used at lastUse (conn.MonoNow's clock, no
// later than now).
func (c *Client) releaseAt(pc *poolConn, lastUse int64) {
	pc.lastUse = lastUse
	pc.reused = true
	c.mu.Lock()
	if w := c.popWaiter(); w != nil {
		c.mu.Unlock()
		w.ch <- pc
		return
	}
	c.idle = append(c.idle, pc)
	start := !c.cleaning
	c.cleaning = true
	c.mu.Unlock()
	if start {
		go c.cleanIdle()
	}
}

// closeConn closes a connection that may not be reused and frees its slot.
func (c *Client) closeConn(pc *poolConn) {
	_ = pc.Conn.Close()
	c.dropSlot()
}

// dropSlot frees a slot: the oldest waiter dials in it, else the pool shrinks.
func (c *Client) dropSlot() {
	c.mu.Lock()
	if w := c.popWaiter(); w != nil {
		c.mu.Unlock()
		w.ch <- nil
		return
	}
	c.open--
	c.mu.Unlock()
}

// cleanIdle closes connections idle for maxIdle, and stops when none is idle (release
// starts it again).
func (c *Client) cleanIdle() {
	maxIdle := c.maxIdle
	if maxIdle <= 0 {
		maxIdle = defaultMaxIdle
	}
	var expired []*poolConn
	for {
		now := conn.MonoNow()
		c.mu.Lock()
		i := 0
		for i < len(c.idle) && now-c.idle[i].lastUse >= int64(maxIdle) {
			i++
		}
		expired = append(expired[:0], c.idle[:i]...)
		n := copy(c.idle, c.idle[i:])
		clear(c.idle[n:])
		c.idle = c.idle[:n]
		stop := n == 0
		var sleep time.Duration
		if stop {
			c.cleaning = false
		} else {
			sleep = time.Duration(c.idle[0].lastUse+int64(maxIdle)-now) + time.Millisecond
		}
		c.mu.Unlock()
		for i, pc := range expired {
			c.closeConn(pc)
			expired[i] = nil
		}
		if stop {
			return
		}
		time.Sleep(sleep)
	}
}

// CloseIdleConnections closes the idle connections; those in use close or come back as
// usual.
func (c *Client) CloseIdleConnections() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, pc := range idle {
		c.closeConn(pc)
	}
}

func (c *Client) acquireReader(conn net.Conn) *bufio.Reader {
	if br, _ := c.readers.Get().(*bufio.Reader); br != nil {
		br.Reset(conn)
		return br
	}
	return bufio.NewReaderSize(conn, c.readBufferSize)
}

func (c *Client) releaseReader(br *bufio.Reader) {
	br.Reset(nil)
	c.readers.Put(br)
}

func (c *Client) acquireWriter(conn net.Conn) *bufio.Writer {
	if bw, _ := c.writers.Get().(*bufio.Writer); bw != nil {
		bw.Reset(conn)
		return bw
	}
	return bufio.NewWriterSize(conn, writeBufferSize)
}

func (c *Client) releaseWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	c.writers.Put(bw)
}
