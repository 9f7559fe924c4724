package conn

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Batched writes, for HTTP/2 connections.
//
// Go's HTTP/2 server writes each answer on its own: it flushes its buffer whenever its
// queue of frames runs empty, and under a client with many streams in flight that is
// after nearly every stream's HEADERS and DATA, one write system call each (and over
// TLS one record each). nginx writes the frames of every stream that is ready in one
// pass of its event loop, one write for many answers. A connection of BatchWrites takes
// the server's writes into a buffer and returns at once; a goroutine of the connection's
// own sends the buffer, after yielding once (runtime.Gosched) so that the streams whose
// answers are ready by then add theirs first. What the server wrote in one pass of the
// scheduler goes out in one system call. Go's HTTP/2 transport does the same to an
// upstream, one write per request; its connections are batched alike.
//
// The server sees a write succeed before it is sent, so the connection keeps the
// server's promises itself:
//   - a send that makes no progress for the byte timeout fails, and closes the
//     connection (the server's WriteByteTimeout, which this replaces: its moves of the
//     write deadline are ignored while batching);
//   - a failed send fails every later write, and the server's reads, so the server tears
//     the connection down as it would have on its own write's failure;
//   - what was written before Close is sent before the connection closes (a GOAWAY, a
//     TLS close_notify), for at most closeWait;
//   - at most maxBatch bytes wait: a writer beyond it waits for the send, so a client
//     that does not read holds the edge's memory to that much per connection.
//
// A TLS connection is batched under its TLS layer (its records are what is gathered),
// which is why the switch is on the connection LingerListener makes: the TLS listener
// wraps every connection before ALPN tells which door it goes to.

const (
	maxBatch  = 64 << 10
	keepBuf   = 16 << 10 // the most buffer an idle connection keeps
	closeWait = 5 * time.Second
)

var batchOff atomic.Bool

// SetBatchWrites chooses whether BatchWrites batches connections from now on.
// TOLLGATE_EDGE_HTTP2_BATCH_WRITES sets it at start. Default: on.
func SetBatchWrites(on bool) { batchOff.Store(!on) }

// BatchWrites turns batching on for a connection HTTP/2 is about to be spoken on. A
// *tls.Conn over a LingerListener connection (the TLS door's, after its handshake) is
// returned as it is, batched beneath; any other connection is returned wrapped, so a
// TLS client's must be batched before its TLS layer is put on (an HTTP/2 upstream's).
// While SetBatchWrites is off, c is returned unchanged. timeout bounds a send that makes
// no progress; 0: none.
func BatchWrites(c net.Conn, timeout time.Duration) net.Conn {
	if batchOff.Load() {
		return c
	}
	if tc, ok := c.(*tls.Conn); ok {
		if lc, ok := tc.NetConn().(*lingerConn); ok && lc.batch == nil {
			lc.batch = newBatch(lc.TCPConn, timeout)
		}
		return c
	}
	return &batchConn{Conn: c, b: newBatch(c, timeout)}
}

// batchConn is a connection with batched writes.
type batchConn struct {
	net.Conn
	b *batch
}

func (c *batchConn) Write(p []byte) (int, error)      { return c.b.write(p) }
func (c *batchConn) SetWriteDeadline(time.Time) error { return nil }
func (c *batchConn) SetDeadline(t time.Time) error    { return c.Conn.SetReadDeadline(t) }
func (c *batchConn) Close() error {
	c.b.close()
	return c.Conn.Close()
}

// batch is the buffer and sender of one connection's writes.
type batch struct {
	c       net.Conn
	dl      net.Conn // whose write deadline the sender and close move: c's TCP connection
	timeout time.Duration

	mu      sync.Mutex
	room    sync.Cond // broadcast when a send ends
	buf     []byte    // written, not sent yet
	spare   []byte
	kicked  bool  // the sender was woken for buf
	err     error // set once: the sends' failure
	closing bool
	closeBy time.Time

	kick chan struct{}
	done chan struct{} // closed when the sender has returned
}

func newBatch(c net.Conn, timeout time.Duration) *batch {
	// An Upstream keeps its deadlines in fields of its own, for one goroutine; close moves
	// the write deadline while the sender may, so both move the TCP connection's, which
	// is safe for that.
	b := &batch{c: c, dl: TCP(c), timeout: timeout, kick: make(chan struct{}, 1), done: make(chan struct{})}
	b.room.L = &b.mu
	go b.send()
	return b
}

func (b *batch) write(p []byte) (int, error) {
	b.mu.Lock()
	for len(b.buf) >= maxBatch && b.err == nil && !b.closing {
		b.room.Wait()
	}
	if b.err != nil || b.closing {
		err := b.err
		b.mu.Unlock()
		if err == nil {
			err = net.ErrClosed
		}
		return 0, err
	}
	b.buf = append(b.buf, p...)
	wake := !b.kicked
	b.kicked = true
	b.mu.Unlock()
	if wake {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// send is the connection's sender goroutine; it returns once the connection is closed
// and what was written before is sent, or a send fails.
func (b *batch) send() {
	defer close(b.done)
	for range b.kick {
		// Let the goroutines that are ready now (other streams' answers, the server's
		// loop writing their frames) run first, so that their writes join this send.
		runtime.Gosched()
		b.mu.Lock()
		out := b.buf
		b.buf, b.kicked = b.spare[:0], false
		b.mu.Unlock()

		var err error
		if len(out) > 0 {
			err = b.sendAll(out)
		}

		b.mu.Lock()
		// An idle connection keeps a small buffer, not the largest it ever sent.
		b.spare = nil
		if cap(out) <= keepBuf {
			b.spare = out[:0]
		}
		if err != nil && b.err == nil {
			b.err = err
		}
		b.room.Broadcast()
		stop := b.err != nil || (b.closing && len(b.buf) == 0)
		b.mu.Unlock()
		if stop {
			if err != nil {
				// The server may be only reading now: make that fail too, as its own
				// failed write would have.
				_ = b.c.Close()
			}
			return
		}
	}
}

// sendAll writes out in full, failing when a write makes no progress for the byte
// timeout (or, once closing, past the close's bound), as Go's HTTP/2 server's own
// writes do.
func (b *batch) sendAll(out []byte) error {
	for {
		// Under mu, so that close's deadline, set under mu too, is never overwritten by
		// a send that had not seen it.
		b.mu.Lock()
		closing := b.closing
		var d time.Time
		if b.timeout > 0 {
			d = time.Now().Add(b.timeout)
		}
		if closing && (d.IsZero() || b.closeBy.Before(d)) {
			d = b.closeBy
		}
		_ = b.dl.SetWriteDeadline(d)
		b.mu.Unlock()
		n, err := b.c.Write(out)
		out = out[n:]
		if len(out) == 0 || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) || closing {
			return err
		}
	}
}

// close sends what was written, within closeWait, then stops the sender. Later writes
// fail.
func (b *batch) close() {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		<-b.done
		return
	}
	b.closing = true
	b.closeBy = time.Now().Add(closeWait)
	// A send under way keeps its byte timeout's deadline: bring it in to the close's.
	_ = b.dl.SetWriteDeadline(b.closeBy)
	b.room.Broadcast()
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	<-b.done
}
