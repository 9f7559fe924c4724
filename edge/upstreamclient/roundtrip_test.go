package upstreamclient

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestReadChunkSize(t *testing.T) {
	for _, c := range []struct {
		line string
		size int
		ok   bool
	}{
		{"0\r\n", 0, true},
		{"1a\r\n", 26, true},
		{"FF\r\n", 255, true},
		{"5;name=value\r\n", 5, true},
		{"5 \r\n", 5, true},
		{"5\t\r\n", 5, true},
		{"5;a\"b\r\n", 5, true},
		{"\r\n", 0, false},
		{"g\r\n", 0, false},
		{"5\n", 0, false},
		{"5;ext\n\r\n", 0, false},
		{"5 ;ext\r\n", 0, false},
		{"5 6\r\n", 0, false},
		{"5\rx", 0, false},
		{"5", 0, false},
		{"1000000000000000\r\n", 0, false}, // 16 hex digits
		{"fffffffffffffff\r\n", 0xfffffffffffffff, true},
	} {
		n, err := readChunkSize(bufio.NewReader(strings.NewReader(c.line)))
		if ok := err == nil; ok != c.ok || ok && n != c.size {
			t.Errorf("%q: %d, %v; want %d, ok=%v", c.line, n, err, c.size, c.ok)
		}
	}
}

// TestTLSTargetHost: a target whose scheme is not the listener's gets its own Host and
// the path as the edge built it (fasthttp's client sent the client's Host there).
func TestTLSTargetHost(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Host + " " + r.RequestURI)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	var d net.Dialer
	c := &Client{Addr: addr, tlsConfig: &tls.Config{InsecureSkipVerify: true}, maxConns: 1, readBufferSize: 4096,
		dial: func(addr string, timeout time.Duration) (net.Conn, error) { return d.Dial("tcp", addr) }}
	var req fasthttp.Request
	var resp fasthttp.Response
	req.Header.SetHost("acme.edge.test") // the client's
	req.SetRequestURI("/a%20b/../c?x=%2F")
	req.URI().SetScheme("https") // what proxyStep does for a TLS target behind a plain listener
	req.Header.SetHost(addr)
	if err := c.DoTimeout(&req, &resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if want := addr + " /a%20b/../c?x=%2F"; got.Load() != want {
		t.Errorf("upstream saw %q, want %q", got.Load(), want)
	}
}
