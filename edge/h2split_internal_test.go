package edge

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/conn"
	"tollgate/edge/h2door"
)

// splitFor is the plain listener's door for a test: HTTP/1.1 connections from Accept,
// HTTP/2 ones from the returned splitListener's h2 side.
func splitFor(t *testing.T) (net.Listener, *h2door.Split) {
	t.Helper()
	e := benchEdge(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl := e.plainListener(ln)
	t.Cleanup(func() { _ = pl.Close() })
	return pl, splitOf(pl)
}

// accept returns the next connection of l, or fails after a second.
func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		got <- c
	}()
	select {
	case c := <-got:
		if c == nil {
			t.Fatal("accept failed")
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(time.Second):
		t.Fatal("no connection within a second")
	}
	return nil
}

// readN reads n bytes of c.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// An HTTP/1.1 connection reaches fasthttp under the same wrapper as without HTTP/2
// (raw I/O, coalesced deadlines) and with its first bytes unread.
func TestSplitHTTP1KeepsItsConnection(t *testing.T) {
	pl, _ := splitFor(t)
	c, err := net.Dial("tcp", pl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const req = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	_, _ = io.WriteString(c, req)
	sc := accept(t, pl)
	if conn.TCP(sc) == sc {
		t.Errorf("HTTP/1.1 connection is a %T, not the door's wrapper", sc)
	}
	if got := readN(t, sc, len(req)); string(got) != req {
		t.Errorf("fasthttp reads %q", got)
	}
}

// The preface, even in pieces, sends the connection to HTTP/2, unread.
func TestSplitH2CPreface(t *testing.T) {
	_, sl := splitFor(t)
	c, err := net.Dial("tcp", sl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, h2door.Preface[:9])
	time.Sleep(50 * time.Millisecond)
	_, _ = io.WriteString(c, h2door.Preface[9:])
	sc := accept(t, sl.H2())
	if got := readN(t, sc, len(h2door.Preface)); string(got) != h2door.Preface {
		t.Errorf("the HTTP/2 server reads %q", got)
	}
}

// A broken preface is neither HTTP/1.1 nor HTTP/2: closed. A slow HTTP/1.1 client does
// not hold up another.
func TestSplitBadPrefaceAndSlowClient(t *testing.T) {
	pl, _ := splitFor(t)
	slow, err := net.Dial("tcp", pl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = io.WriteString(slow, "PRI * HT") // and nothing more for now

	bad, err := net.Dial("tcp", pl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, _ = io.WriteString(bad, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
	_ = bad.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := bad.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Errorf("broken preface: read %d, %v; want the connection closed", n, err)
	}

	fast, err := net.Dial("tcp", pl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	_, _ = io.WriteString(fast, "GET / HTTP/1.1\r\n\r\n")
	sc := accept(t, pl)
	if b := readN(t, sc, 3); !bytes.Equal(b, []byte("GET")) {
		t.Errorf("got %q", b)
	}
}

// ALPN offers h2 only while HTTP/2 is on.
func TestTLSConfigALPN(t *testing.T) {
	on := benchEdge(t)
	if got := on.tlsConfig().NextProtos; len(got) != 2 || got[0] != "h2" || got[1] != "http/1.1" {
		t.Errorf("HTTP/2 on: ALPN %v", got)
	}
	off, err := New(Config{Domain: "edge.test", DisableHTTP2: true, Logger: on.log, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if got := off.tlsConfig().NextProtos; len(got) != 1 || got[0] != "http/1.1" {
		t.Errorf("HTTP/2 off: ALPN %v", got)
	}
}
