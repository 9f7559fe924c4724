package upstreamclient

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// FuzzUpstreamResponse feeds arbitrary bytes, as an upstream's answer to a GET, to the
// edge's exchange over a real loopback connection, twice: once through a pool that
// streams large and unsized bodies (upstreamBody, readChunkSize: the edge's framing)
// and once through one that reads every body whole (fasthttp's Response.ReadBody). It
// checks that nothing panics or hangs, that an answer taken as whole is as long as its
// Content-Length says, that a connection goes back to the pool only after a clean
// exchange and no slot of the pool is lost, and that where both readings succeed they
// agree on the status and the body. Seeds: testdata/fuzz/FuzzUpstreamResponse.
func FuzzUpstreamResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\n\r\nuntil the upstream closes",
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ntoo short",
		"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("x", 70000),
		"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("x", 1000),
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3 ;x\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\na",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\n\r\n",
		"",
		"garbage\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	up := newFuzzUpstream(f)
	f.Fuzz(func(t *testing.T, answer []byte) {
		streamed := up.exchange(t, answer, true)
		whole := up.exchange(t, answer, false)
		if streamed.err == nil && whole.err == nil {
			if streamed.status != whole.status || !bytes.Equal(streamed.body, whole.body) {
				t.Fatalf("%q: streamed %d %q, read whole %d %q", answer, streamed.status, streamed.body, whole.status, whole.body)
			}
		}
	})
}

// fuzzUpstream answers each connection made to it with the bytes queued for it, then
// closes it.
type fuzzUpstream struct {
	ln      net.Listener
	answers chan []byte
}

func newFuzzUpstream(tb testing.TB) *fuzzUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &fuzzUpstream{ln: ln, answers: make(chan []byte, 1)}
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			answer := <-u.answers
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for { // the request head, up to its blank line
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						break
					}
				}
				_, _ = c.Write(answer)
				_ = c.(*net.TCPConn).CloseWrite()
				_, _ = io.Copy(io.Discard, br) // until the edge closes its side
			}()
		}
	}()
	return u
}

type fuzzOutcome struct {
	err    error // of the exchange, or of reading its streamed body
	status int
	body   []byte
}

// exchange sends one GET through a fresh pool (stream: as the edge runs it, else as
// with BufferResponses) and reads the answer to its end.
func (u *fuzzUpstream) exchange(t *testing.T, answer []byte, stream bool) fuzzOutcome {
	var d net.Dialer
	c := &Client{Addr: u.ln.Addr().String(), maxConns: 1, maxWait: time.Second, readBufferSize: 4096, stream: stream,
		dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			u.answers <- answer
			return d.Dial("tcp", addr)
		}}
	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI("/f")
	req.Header.SetHost("up.test")
	var o fuzzOutcome
	o.err = c.DoTimeout(&req, &resp, 5*time.Second)
	if o.err == nil {
		o.status = resp.StatusCode()
		if s := resp.StatusCode(); s >= 100 && s < 200 && s != fasthttp.StatusSwitchingProtocols {
			t.Fatalf("%q: the interim %d taken as the answer", answer, s)
		}
		cl := resp.Header.ContentLength()
		if resp.IsBodyStream() {
			var buf bytes.Buffer
			_, o.err = io.Copy(&buf, io.LimitReader(resp.BodyStream(), 1<<20))
			o.body = buf.Bytes()
			if o.err == nil && cl >= 0 && len(o.body) != cl {
				t.Fatalf("%q: streamed %d bytes of a Content-Length of %d", answer, len(o.body), cl)
			}
			if err := resp.CloseBodyStream(); err != nil {
				t.Fatalf("%q: closing the body: %v", answer, err)
			}
		} else {
			o.body = append([]byte(nil), resp.Body()...)
			if cl >= 0 && len(o.body) != cl && !NoBody(o.status) {
				t.Fatalf("%q: read %d bytes whole of a Content-Length of %d", answer, len(o.body), cl)
			}
			if NoBody(o.status) && len(o.body) != 0 {
				t.Fatalf("%q: a %d answer with a body of %d bytes", answer, o.status, len(o.body))
			}
		}
	}
	c.mu.Lock()
	open, idle, waiters := c.open, len(c.idle), len(c.waiters)
	c.mu.Unlock()
	if open != idle || idle > 1 || waiters != 0 {
		t.Fatalf("%q: pool left with %d open, %d idle, %d waiting", answer, open, idle, waiters)
	}
	if idle == 1 && o.err != nil {
		t.Fatalf("%q: the connection was pooled after %v", answer, o.err)
	}
	if o.err != nil && errors.Is(o.err, fasthttp.ErrNoFreeConns) {
		t.Fatalf("%q: %v", answer, o.err)
	}
	c.CloseIdleConnections()
	return o
}
