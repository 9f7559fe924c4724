package edge

import (
	"bufio"
	"strings"
	"testing"

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

// BenchmarkClockRead is one reading of the edge's monotonic clock, what proxyStep and
// the upstream client share instead of reading it each (upstreamclient: DoAt, releaseAt): on the
// virtual machines the edge runs on it costs tens to hundreds of ns, not the ~20 ns of
// bare metal, so every read taken off the request path shows in CPU per request.
func BenchmarkClockRead(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += conn.MonoNow()
	}
	_ = sink
}
