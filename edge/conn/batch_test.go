package conn

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"tollgate/infra/testcert"
)

// What the writer wrote arrives whole and in order, from writers taking turns as the
// HTTP/2 server's do, and what was written before Close arrives before the end.
func TestBatchWritesOrderAndClose(t *testing.T) {
	a, peer := tcpPair(t)
	c := BatchWrites(a, time.Minute)
	if _, ok := c.(*batchConn); !ok {
		t.Fatalf("BatchWrites(%T) = %T", a, c)
	}
	var want bytes.Buffer
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				p := bytes.Repeat([]byte{byte('a' + g)}, 1+(i*37)%5000)
				mu.Lock()
				want.Write(p)
				_, err := c.Write(p)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("peer read %d bytes, want %d (equal: %v)", len(b), want.Len(), bytes.Equal(b, want.Bytes()))
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("a write after Close succeeded")
	}
}

// A peer that reads nothing holds at most the batch's bound of the edge's memory: the
// writer then waits, and once a send has made no progress for the timeout every write
// fails and the connection is closed.
func TestBatchWritesStalledPeer(t *testing.T) {
	a, peer := tcpPair(t)
	_ = a.SetWriteBuffer(4 << 10)
	_ = peer.SetReadBuffer(4 << 10)
	c := BatchWrites(a, 200*time.Millisecond)
	b := c.(*batchConn).b
	chunk := make([]byte, 16<<10)
	var err error
	start := time.Now()
	for err == nil && time.Since(start) < time.Minute {
		_, err = c.Write(chunk)
		b.mu.Lock()
		held := len(b.buf)
		b.mu.Unlock()
		if held > maxBatch+len(chunk) {
			t.Fatalf("the batch holds %d bytes", held)
		}
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write: %v, want the send's timeout", err)
	}
	if _, err := c.Write(chunk); err == nil {
		t.Fatal("a write after the failed send succeeded")
	}
	// The connection is closed, so the server's reads fail too.
	if _, err := a.Read(make([]byte, 1)); err == nil {
		t.Fatal("a read after the failed send succeeded")
	}
	_ = c.Close()
}

// Over TLS the batch is under the TLS layer: the connection keeps its type (net/http
// tells TLS connections by it), records arrive whole, and close_notify is sent before
// the close, so the peer sees a clean end.
func TestBatchWritesTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ca := testcert.NewCA(t)
	leaf := ca.Issue(t, []string{"edge.test"}, time.Time{}, time.Time{})
	tln := tls.NewListener(LingerListener(ln), &tls.Config{Certificates: []tls.Certificate{leaf.TLS}})
	served := make(chan error, 1)
	go func() {
		c, err := tln.Accept()
		if err != nil {
			served <- err
			return
		}
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			served <- err
			return
		}
		if got := BatchWrites(tc, time.Minute); got != net.Conn(tc) {
			served <- errors.New("BatchWrites did not return the TLS connection itself")
			return
		}
		if tc.NetConn().(*lingerConn).batch == nil {
			served <- errors.New("the connection under TLS is not batched")
			return
		}
		for i := range 100 {
			if _, err := tc.Write(bytes.Repeat([]byte{byte(i)}, 1000)); err != nil {
				served <- err
				return
			}
		}
		served <- tc.Close()
	}()
	cc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "edge.test", RootCAs: ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	b, err := io.ReadAll(cc) // io.EOF only after close_notify: a bare close is an error
	if err != nil {
		t.Fatalf("read after %d bytes: %v", len(b), err)
	}
	if len(b) != 100*1000 || b[99*1000] != 99 {
		t.Fatalf("read %d bytes", len(b))
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

func TestSetBatchWrites(t *testing.T) {
	a, _ := tcpPair(t)
	SetBatchWrites(false)
	defer SetBatchWrites(true)
	if c := BatchWrites(a, 0); c != net.Conn(a) {
		t.Fatalf("off: BatchWrites returned %T", c)
	}
}

// An upstream's connection (Dialed, with raw I/O) batched as an HTTP/2 transport's:
// reads go on beside the sends, and Close sends what was written.
func TestBatchWritesUpstream(t *testing.T) {
	a, peer := tcpPair(t)
	c := BatchWrites(Dialed(a), time.Minute)
	go func() {
		_, _ = peer.Write([]byte("answer"))
	}()
	for i := range 100 {
		if _, err := c.Write(bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "answer" {
		t.Fatalf("read %q, %v", buf, err)
	}
	got := make(chan int)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- len(b)
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 100*100 {
		t.Fatalf("peer read %d bytes, want %d", n, 100*100)
	}
}
