package edge

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkFail is the edge answering one of its refusals: the JSON envelope (what every
// non-gRPC request pays, the Content-Type check included) and the gRPC status.
func BenchmarkFail(b *testing.B) {
	for _, c := range []struct{ name, ct string }{
		{"none", ""},
		{"json", "application/json"},
		{"grpc", "application/grpc"},
		{"grpc-web-text", "application/grpc-web-text+proto"},
	} {
		raw := "POST /svc.Svc/Call HTTP/1.1\r\nHost: acme.localhost\r\nUser-Agent: bench\r\n"
		if c.ct != "" {
			raw += "Content-Type: " + c.ct + "\r\n"
		}
		raw += "\r\n"
		ctx := &fasthttp.RequestCtx{}
		if err := ctx.Request.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			b.Fatal(err)
		}
		x := &exchange{ctx: ctx}
		x.newRequestID()
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x.fail(replyNoKey)
			}
			grpc := ctx.Response.Header.Peek("Grpc-Status")
			if (c.ct != "" && c.ct != "application/json") != bytes.Equal(grpc, []byte("16")) {
				b.Fatalf("%s: Grpc-Status %q", c.ct, grpc)
			}
		})
	}
}
