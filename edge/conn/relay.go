package conn

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Relaying without reading to EAGAIN.
//
// A relay loop through net.Conn reads until a read finds nothing: the read that fails
// with EAGAIN is what parks the goroutine until the poller reports the socket readable
// again. For a tunnel's trickle of small messages that is one wasted system call per
// message and direction, a third of the tunnel's calls (a read with data, a write to
// the other side, the read that finds nothing). nginx skips it: after a read that
// returned less than its buffer it takes the socket as drained, unless epoll reported
// the peer's FIN (EPOLLRDHUP), and waits for epoll's next report.
//
// Go's poller keeps no FIN for us, and a FIN that came in with the last data raises no
// report of its own: a relay that waited after reading that data would wait for ever.
// The kernel says it instead: with TCP_INQ set, each recvmsg returns how many bytes are
// still queued, and 1 when none are but the FIN is (Linux 4.18). So a read that leaves
// 0 means drained and open, and the relay waits; anything else, it reads again.
//
// RawConn.Read allows the wait, within one call: it clears the socket's readiness once,
// before it first calls its function, and each time the function returns false it waits
// for readiness and calls it again. A report that arrives while the function runs, or
// before the wait, is kept, so the wait returns at once. Relay therefore makes the whole
// tunnel one RawConn.Read, whose function returns false when the queue is empty: it
// waits without the empty read and misses nothing. (A RawConn.Read per message would
// clear the readiness each time, losing a report that came in between.) Data or a FIN
// that comes after the read raises a new report (the poller's epoll registration is
// edge-triggered); a report for data already read costs one read that finds nothing,
// as before.
//
// It is off by default because it did not pay where it was measured (README, the
// setting's row): the read it saves is cheap next to the thread's sleep and wake-up
// per message, which it leaves as they were (the same voluntary context switches per
// message as reading to EAGAIN, and as nginx), and in -compare's rounds on a virtual
// CPU reading to EAGAIN spent less CPU per message, idle and busy alike.
var shortReadWaitOn atomic.Bool

// SetShortReadWait chooses whether Relay waits for the poller once a read left the
// socket empty (above) or reads until EAGAIN, from the next Relay on. TOLLGATE_EDGE_SHORT_READ_WAIT
// sets it at start. Default: off. It applies only to connections with raw I/O
// (SetRawIO).
func SetShortReadWait(on bool) { shortReadWaitOn.Store(on) }

// ShortReadWait reports whether SetShortReadWait turned it on.
func ShortReadWait() bool { return shortReadWaitOn.Load() }

// Relay reads src into buf and hands each read to deliver, until src ends (io.EOF), a
// read fails, or deliver fails: that error. deliver may block (it writes to the other
// side of a tunnel); src is not read meanwhile. One goroutine relays from src at a
// time, as one goroutine reads a net.Conn.
func Relay(src net.Conn, buf []byte, deliver func([]byte) error) error {
	if len(buf) == 0 {
		panic("conn: Relay with an empty buffer")
	}
	if t, ok := src.(*tunnelConn); ok && ShortReadWait() {
		return t.raw.relay(buf, deliver)
	}
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if derr := deliver(buf[:n]); derr != nil {
				return derr
			}
		}
		if err != nil {
			return err
		}
	}
}

// relay is Relay as one RawConn.Read (see above); without TCP_INQ (a kernel before
// 4.18) it reads until EAGAIN.
func (r *rawIO) relay(buf []byte, deliver func([]byte) error) error {
	var failed error // deliver's error, or the read's
	inq := true
	if err := r.rc.Control(func(fd uintptr) {
		inq = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_INQ, 1) == nil
	}); err != nil {
		return r.opError("read", err)
	}
	var (
		iov  unix.Iovec
		ctl  [8]uint64 // room for the TCP_CM_INQ message, aligned as a Cmsghdr
		msg  unix.Msghdr
		cmsg = (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
	)
	iov.Base = &buf[0]
	iov.SetLen(len(buf))
	msg.Iov = &iov
	msg.Iovlen = 1
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			msg.Control = (*byte)(unsafe.Pointer(&ctl[0]))
			msg.SetControllen(int(unsafe.Sizeof(ctl)))
			n, _, e := syscall.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), 0)
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return false
			case e != 0:
				failed = r.opError("read", os.NewSyscallError("recvmsg", e))
				return true
			case n == 0:
				failed = io.EOF
				return true
			}
			if derr := deliver(buf[:n]); derr != nil {
				failed = derr
				return true
			}
			if inq && uint64(msg.Controllen) >= uint64(unix.CmsgSpace(4)) && cmsg.Level == unix.IPPROTO_TCP && cmsg.Type == unix.TCP_CM_INQ &&
				*(*int32)(unsafe.Add(unsafe.Pointer(&ctl[0]), unix.CmsgLen(0))) == 0 {
				return false // nothing queued, no FIN: wait for the next report
			}
		}
	})
	if err != nil {
		return r.opError("read", err)
	}
	return failed
}
