package conn

import (
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// Checking an idle upstream connection before reuse.
//
// An HTTP/1.1 connection carries one answer per request, in order, with nothing between
// them. Bytes that arrive on a pooled connection while no request is outstanding (the
// rest of an answer longer than its Content-Length, a body after a 204, 304 or an answer
// to HEAD, a stray answer) would be read as the answer to the next request sent on it,
// another client's, and every later answer would stay one behind. A FIN or RST that
// arrived while it was idle means the upstream closed it (a restart, its own idle
// timeout), and a request written to it would be lost.
//
// Quiet asks the kernel once, without waiting: a peek of one byte (recvfrom with
// MSG_PEEK|MSG_DONTWAIT) that leaves what it finds in the socket. Go's own transport
// learns the same from a goroutine that keeps a read pending on every idle connection;
// that costs a goroutine switch and a read that fails with EAGAIN per request, more than
// the one system call here. The runtime poller knows whether the socket became readable,
// but no documented API reports it without a read.

// ErrUnsolicited is Quiet's answer for a connection on which bytes arrived that no
// request asked for.
var ErrUnsolicited = errors.New("conn: bytes arrived on an idle upstream connection")

// Quiet reports whether c may carry another request: nil when nothing arrived on it and
// its peer has not closed it; ErrUnsolicited when bytes are waiting; io.EOF when the peer
// closed it; the socket's error otherwise. It reads nothing.
func (c *Upstream) Quiet() error {
	if c.rc == nil {
		rc, err := c.TCPConn.SyscallConn()
		if err != nil {
			return err
		}
		c.rc = rc
		c.peekFn = c.peek
	}
	if err := c.rc.Read(c.peekFn); err != nil {
		return err
	}
	switch {
	case c.peekErr == syscall.EAGAIN:
		return nil
	case c.peekErr != 0:
		return os.NewSyscallError("recvfrom", c.peekErr)
	case c.peekN == 0:
		return io.EOF
	}
	return ErrUnsolicited
}

// peek is Quiet's call on the socket; it never asks the poller to wait (it returns true).
func (c *Upstream) peek(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.peekBuf[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		c.peekN, c.peekErr = int(n), e
		return true
	}
}
