package conn_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"tollgate/edge/conn"
)

// quietPair is an upstream connection (conn.Dialed) and the server's end of it.
func quietPair(tb testing.TB) (*conn.Upstream, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	u := conn.Dialed(c.(*net.TCPConn))
	tb.Cleanup(func() { u.Close(); s.Close() })
	return u, s
}

// TestQuiet: an idle connection is quiet until bytes arrive (which it leaves to be read)
// or its peer closes it.
func TestQuiet(t *testing.T) {
	u, s := quietPair(t)
	if err := u.Quiet(); err != nil {
		t.Fatalf("an idle connection: %v, want quiet", err)
	}
	s.Write([]byte("x"))
	waitQuiet(t, u, conn.ErrUnsolicited)
	b := make([]byte, 4)
	if n, err := u.Read(b); n != 1 || err != nil || b[0] != 'x' {
		t.Fatalf("the byte Quiet saw: %d %q %v, want it still there to read", n, b[:n], err)
	}
	if err := u.Quiet(); err != nil {
		t.Fatalf("once read: %v, want quiet", err)
	}
	s.Close()
	waitQuiet(t, u, io.EOF)
}

func waitQuiet(t *testing.T, u *conn.Upstream, want error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := u.Quiet()
		if errors.Is(err, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Quiet: %v, want %v", err, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkQuiet is the check before each reuse of a pooled upstream connection.
func BenchmarkQuiet(b *testing.B) {
	u, _ := quietPair(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := u.Quiet(); err != nil {
			b.Fatal(err)
		}
	}
}
