package edge

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestGRPCContentType(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"application/grpc", "application/grpc"},
		{"application/grpc+proto", "application/grpc"},
		{"application/grpc+json", "application/grpc"},
		{"Application/GRPC; charset=utf-8", "application/grpc"},
		{"application/grpc-web", "application/grpc-web"},
		{"application/grpc-web+proto", "application/grpc-web+proto"},
		{"application/grpc-web+json", "application/grpc-web"},
		{"application/grpc-web-text", "application/grpc-web-text"},
		{"application/grpc-web-text+proto", "application/grpc-web-text+proto"},
		{"application/grpc-web-text+proto;x=1", "application/grpc-web-text+proto"},
		{"", ""},
		{"application/json", ""},
		{"application/grpcx", ""},
		{"application/grpc-webx", ""},
		{"application/grpc-web-textual", ""},
		{"application/grp", ""},
		{"text/grpc", ""},
		{"application/x-www-form-urlencoded", ""},
	} {
		if got := string(grpcContentType([]byte(c.in))); got != c.want {
			t.Errorf("grpcContentType(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestGRPCCode(t *testing.T) {
	for status, want := range map[int]int{400: 13, 401: 16, 403: 7, 404: 12, 405: 12, 413: 8, 429: 8,
		500: 14, 502: 14, 503: 14, 504: 14, 421: 2, 431: 2, 409: 2} {
		if got := grpcCode(status); got != want {
			t.Errorf("grpcCode(%d) = %d, want %d", status, got, want)
		}
	}
	for i, s := range grpcStatusText {
		if string(s) != strconv.Itoa(i) {
			t.Errorf("grpcStatusText[%d] = %q", i, s)
		}
	}
}

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
