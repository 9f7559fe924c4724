package edge

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkScanBrowserHeaders is scanRequestHeaders on the header block a browser sends
// (ordinary names only): what every request pays for the spoofed-name checks.
func BenchmarkScanBrowserHeaders(b *testing.B) {
	raw := "GET /open HTTP/1.1\r\nHost: bench.localhost\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0\r\n" +
		"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n" +
		"Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n" +
		"Referer: https://bench.localhost/\r\nCookie: session=abc\r\nUpgrade-Insecure-Requests: 1\r\n" +
		"Sec-Fetch-Dest: document\r\nSec-Fetch-Mode: navigate\r\nSec-Fetch-Site: same-origin\r\n" +
		"Priority: u=0, i\r\nX-API-Key: tg_benchkey\r\n\r\n"
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
