package conn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// rawIOOn: the connections made from now on read and write through rawIO (SetRawIO).
var rawIOOn atomic.Bool

func init() { rawIOOn.Store(!raceDetector) }

// SetRawIO chooses how the edge's sockets, its clients' and its upstreams', are read and
// written from the next connection on: with raw system calls (rawIO, below) when on,
// through net.Conn otherwise. The choice is the process's, as the runtime bookkeeping it
// skips is (TOLLGATE_EDGE_RAW_IO sets it at start). Default: on. In race-detector
// builds it is always off: the detector does not see what a raw system call writes into
// a buffer, so it could not report a race on one.
func SetRawIO(on bool) { rawIOOn.Store(on && !raceDetector) }

// RawIO reports whether new connections use raw system calls (SetRawIO).
func RawIO() bool { return rawIOOn.Load() }

// Socket reads and writes without the scheduler's syscall bookkeeping.
//
// A read or write through net.Conn is a syscall.Syscall: the runtime marks the goroutine
// and its P as in a syscall around it, in case it blocks, and sysmon takes the P away
// from a syscall it finds still running 20µs later (handing it to another thread, which
// a futex wakes, while the first thread parks when its syscall returns). The edge's
// sockets are non-blocking, so their reads and writes never block: they only take a few
// microseconds in the kernel, longer when the machine is busy and the thread is
// preempted, which is when those hand-offs pile up. rawIO makes the same reads and
// writes through the poller (syscall.RawConn: the same fd locks, deadlines and waits
// for readiness as net.Conn) with syscall.RawSyscall, which skips the bookkeeping: the
// P stays with the goroutine, as it would in nginx's event loop.
//
// A read and a write may run at the same time (each has its own state), two reads or
// two writes may not (nor do they through net.Conn: the fd's locks serialize them).
type rawIO struct {
	rc   syscall.RawConn
	conn net.Conn // for the addresses in errors
	r, w rawOp
}

// rawOp is a read or write in progress: its buffer and result, and the function
// RawConn calls with the fd.
type rawOp struct {
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// rawTraps are the system calls rawIO reads and writes with; BenchmarkRawTraps sets
// them to read and write to measure what recvfrom and sendto save (see syscall, below).
var rawTraps = [2]uintptr{syscall.SYS_RECVFROM, syscall.SYS_SENDTO}

// maxRW is the largest read or write made at once (as internal/poll).
const maxRW = 1 << 30

// newRawIO returns tc's raw reads and writes, or nil when they are off (SetRawIO).
func newRawIO(tc *net.TCPConn) *rawIO {
	if !rawIOOn.Load() {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{rc: rc, conn: tc}
	r.r.fn = r.r.syscall(rawTraps[0])
	r.w.fn = r.w.syscall(rawTraps[1])
	return r
}

// syscall returns the function that receives or sends o.p: false (wait until the socket
// is ready, then call again) on EAGAIN. It calls recvfrom and sendto, with no flags and
// no address, rather than read and write: on a connected socket they do the same, and
// they go to the socket directly, where read and write first pass through the kernel's
// file layer (fdget_pos, vfs_read and vfs_write with their checks). Under S1 that layer
// was about 3.4% of the edge's CPU; recvfrom's and sendto's own entry about 1.7%.
func (o *rawOp) syscall(trap uintptr) func(fd uintptr) bool {
	return func(fd uintptr) bool {
		for {
			n, _, e := syscall.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&o.p[0])), uintptr(len(o.p)), 0, 0, 0)
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			case 0:
				o.n, o.errno = int(n), 0
			default:
				o.n, o.errno = 0, e
			}
			return true
		}
	}
}

// read is net.Conn.Read.
func (r *rawIO) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) > maxRW {
		b = b[:maxRW]
	}
	o := &r.r
	o.p = b
	err := r.rc.Read(o.fn)
	o.p = nil
	switch {
	case err != nil:
		return 0, r.opError("read", err)
	case o.errno != 0:
		return 0, r.opError("read", os.NewSyscallError("read", o.errno))
	case o.n == 0:
		return 0, io.EOF
	}
	return o.n, nil
}

// write is net.Conn.Write: all of b, or an error.
func (r *rawIO) write(b []byte) (int, error) {
	o := &r.w
	nn := 0
	for nn < len(b) {
		p := b[nn:]
		if len(p) > maxRW {
			p = p[:maxRW]
		}
		o.p = p
		err := r.rc.Write(o.fn)
		o.p = nil
		switch {
		case err != nil:
			return nn, r.opError("write", err)
		case o.errno != 0:
			return nn, r.opError("write", os.NewSyscallError("write", o.errno))
		case o.n == 0:
			return nn, r.opError("write", io.ErrUnexpectedEOF)
		case o.n > len(p):
			panic("conn: write returned more than it was given")
		}
		nn += o.n
	}
	return nn, nil
}

// opError is the error net.Conn would return: a *net.OpError naming the operation
// ("raw-read" and "raw-write" from RawConn become "read" and "write").
func (r *rawIO) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: err}
}
