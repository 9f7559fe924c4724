package edge

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

	"tollgate/edge/conn"
)

// Benchmarks of the header steps on typical messages:
// go test -run '^$' -bench 'Headers' -benchmem ./edge/

func parsedResponse(tb testing.TB, raw string) *fasthttp.RequestCtx {
	tb.Helper()
	ctx := &fasthttp.RequestCtx{}
	ctx.Response.Header.DisableNormalizing()
	if err := ctx.Response.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		tb.Fatal(err)
	}
	return ctx
}

const (
	nginxResponse = "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Mon, 30 Nov 2026 10:20:50 GMT\r\n" +
		"Content-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"
	nodeResponse = "HTTP/1.1 200 OK\r\nX-Powered-By: Express\r\nContent-Type: application/json; charset=utf-8\r\n" +
		"Content-Length: 17\r\nETag: W/\"11-abc\"\r\nDate: Mon, 30 Nov 2026 10:20:50 GMT\r\n" +
		"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n"
	hopResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, X-Hop, x-other\r\n" +
		"X-Hop: 1\r\nx-hop: 2\r\nX-Other: 3\r\nX-Kept: 4\r\nUpgrade: h2c\r\nProxy-Authenticate: Basic\r\n\r\n"
)

func BenchmarkCleanResponseHeaders(b *testing.B) {
	for _, c := range []struct{ name, raw string }{{"nginx", nginxResponse}, {"node", nodeResponse}, {"hop", hopResponse}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := parsedResponse(b, c.raw)
			var saved fasthttp.ResponseHeader
			ctx.Response.Header.CopyTo(&saved)
			x := &exchange{ctx: ctx}
			b.ReportAllocs()
			for b.Loop() {
				saved.CopyTo(&ctx.Response.Header)
				x.cleanResponseHeaders()
			}
		})
	}
	b.Run("copy-only", func(b *testing.B) { // the loop's own cost
		ctx := parsedResponse(b, nginxResponse)
		var saved fasthttp.ResponseHeader
		ctx.Response.Header.CopyTo(&saved)
		for b.Loop() {
			saved.CopyTo(&ctx.Response.Header)
		}
	})
}

func TestCleanResponseHeaders(t *testing.T) {
	for _, c := range []struct {
		raw        string
		gone, kept []string
	}{
		{nginxResponse, []string{"Connection"}, []string{"Server", "Date", "Content-Type"}},
		{nodeResponse, []string{"Connection", "Keep-Alive"}, []string{"X-Powered-By", "ETag", "Content-Type", "Date"}},
		{hopResponse, []string{"Connection", "X-Hop", "x-hop", "X-Other", "Upgrade", "Proxy-Authenticate"}, []string{"X-Kept"}},
	} {
		ctx := parsedResponse(t, c.raw)
		x := &exchange{ctx: ctx}
		x.cleanResponseHeaders()
		seen := map[string]bool{}
		for k := range ctx.Response.Header.All() {
			seen[string(k)] = true
		}
		for _, k := range c.gone {
			if seen[k] {
				t.Errorf("%q kept: %s", k, ctx.Response.Header.Header())
			}
		}
		for _, k := range c.kept {
			if !seen[k] {
				t.Errorf("%q removed: %s", k, ctx.Response.Header.Header())
			}
		}
		if ctx.Response.Header.ContentLength() < 0 {
			t.Errorf("Content-Length lost")
		}
	}
}

func BenchmarkScanRequestHeaders(b *testing.B) {
	raw := "GET /open HTTP/1.1\r\nHost: bench.localhost\r\nX-API-Key: tg_benchkey\r\n\r\n"
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	ctx := &fasthttp.RequestCtx{}
	x := &exchange{ctx: ctx}
	b.ReportAllocs()
	for b.Loop() {
		req.CopyTo(&ctx.Request)
		x.hs = headerScan{}
		x.scanRequestHeaders(ctx.Request.Header.RawHeaders())
	}
}

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
	c := &upstreamClient{Addr: addr, tlsConfig: &tls.Config{InsecureSkipVerify: true}, maxConns: 1, readBufferSize: 4096,
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

// BenchmarkClockRead is one reading of the edge's monotonic clock, what proxyStep and
// the upstream client share instead of reading it each (doAt, releaseAt): on the
// virtual machines the edge runs on it costs tens to hundreds of ns, not the ~20 ns of
// bare metal, so every read taken off the request path shows in CPU per request.
func BenchmarkClockRead(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += conn.MonoNow()
	}
	_ = sink
}
