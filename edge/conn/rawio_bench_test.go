package conn

import (
	"net"
	"syscall"
	"testing"
)

// BenchmarkRawTraps is one exchange over a loopback TCP connection: 170 bytes each way,
// as a proxied request and its answer, written and read through rawIO with each pair of
// system calls it can use, and through net.Conn. On loopback a write reaches the other
// end before it returns, so no read waits and the figure is the calls' own cost.
func BenchmarkRawTraps(b *testing.B) {
	if raceDetector {
		b.Skip("rawIO is off in race-detector builds")
	}
	for _, bc := range []struct {
		name  string
		traps [2]uintptr
		raw   bool
	}{
		{"recvfrom-sendto", [2]uintptr{syscall.SYS_RECVFROM, syscall.SYS_SENDTO}, true},
		{"read-write", [2]uintptr{syscall.SYS_READ, syscall.SYS_WRITE}, true},
		{"net.Conn", rawTraps, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			defer func(t [2]uintptr) { rawTraps = t }(rawTraps)
			rawTraps = bc.traps
			a, c := tcpPair(b)
			ra, rc := newRawIO(a), newRawIO(c)
			wa, wc := a.Write, c.Write
			rda, rdc := a.Read, c.Read
			if bc.raw {
				wa, wc, rda, rdc = ra.write, rc.write, ra.read, rc.read
			}
			msg := make([]byte, 170)
			buf := make([]byte, 4096)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := wa(msg); err != nil {
					b.Fatal(err)
				}
				readFull(b, rdc, buf[:len(msg)])
				if _, err := wc(msg); err != nil {
					b.Fatal(err)
				}
				readFull(b, rda, buf[:len(msg)])
			}
		})
	}
}

func readFull(b *testing.B, read func([]byte) (int, error), p []byte) {
	for len(p) > 0 {
		n, err := read(p)
		if err != nil {
			b.Fatal(err)
		}
		p = p[n:]
	}
}

// tcpPair is the two ends of a loopback TCP connection, closed when b ends.
func tcpPair(b testing.TB) (*net.TCPConn, *net.TCPConn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(); c.Close() })
	return a.(*net.TCPConn), c.(*net.TCPConn)
}
