package edge

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"tollgate/edge/h2door"
)

// discardWriter is an http.ResponseWriter that keeps nothing, so the benchmarks weigh
// the adapter and not a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

func benchEdge(b testing.TB) *Edge {
	e, err := New(Config{Domain: "edge.test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry(), EdgeID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

const benchHead = "GET /v1/items?page=2 HTTP/1.1\r\nHost: acme.edge.test\r\nUser-Agent: bench/1.0\r\nAccept: application/json\r\nX-Api-Key: tg_0123456789abcdef\r\n\r\n"

// BenchmarkH2Adapter is one HTTP/2 stream through the adapter around the gateway chain
// (an edge with no config answers 503 not_ready: the chain's shortest path, so what is
// left is mostly the adapter). BenchmarkH2AdapterBaseline is the same request read from
// an HTTP/1.1 head, as fasthttp hands it to the chain: the difference is the adapter's
// cost per request.
func BenchmarkH2Adapter(b *testing.B) {
	e := benchEdge(b)
	h := h2door.NewHandler(e.h2Config(), h2Chain{e})
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(benchHead)))
	if err != nil {
		b.Fatal(err)
	}
	r.Body = http.NoBody
	r = r.WithContext(h2door.WithConn(context.Background(), s))
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

func BenchmarkH2AdapterBaseline(b *testing.B) {
	e := benchEdge(b)
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	var ctx fasthttp.RequestCtx
	rd := strings.NewReader(benchHead)
	br := bufio.NewReader(rd)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Init2(s, fasthttpLogger{e.log}, false)
		rd.Reset(benchHead)
		br.Reset(rd)
		if err := ctx.Request.Header.Read(br); err != nil {
			b.Fatal(err)
		}
		e.serve(&ctx)
		ctx.Request.Reset()
		ctx.Response.Reset()
	}
}
