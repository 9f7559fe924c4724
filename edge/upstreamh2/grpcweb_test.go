package upstreamh2_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/valyala/fasthttp"

	"tollgate/edge/grpcweb"
	"tollgate/edge/upstreamh2"
)

// webBody is what a gRPC-Web client reads of an upstream's gRPC answer whose body is
// body and whose trailer fields are trailer, as the body reads it a byte at a time.
func webBody(t *testing.T, ct string, body []byte, trailer http.Header) []byte {
	t.Helper()
	res := &http.Response{StatusCode: 200, Body: io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))), Trailer: trailer, ContentLength: -1}
	ctx, cancel := context.WithCancel(context.Background())
	var h fasthttp.ResponseHeader
	rb := upstreamh2.NewResponseBody(res, upstreamh2.NewRequestBody(bytes.NewReader(nil), 1<<20), ctx, cancel, true, &h)
	rb.GRPCWeb([]byte(ct))
	got, err := io.ReadAll(iotest.HalfReader(rb))
	if err != nil {
		t.Fatal(err)
	}
	_ = rb.Close()
	if len(h.PeekTrailerKeys()) != 0 {
		t.Errorf("HTTP trailers set for a gRPC-Web answer: %q", h.PeekTrailerKeys())
	}
	return got
}

func TestResponseBodyGRPCWeb(t *testing.T) {
	body := grpcweb.AppendMessage(nil, 0, []byte("one"))
	body = grpcweb.AppendMessage(body, 0, []byte("second message"))
	trailer := http.Header{"Grpc-Status": {"5"}, "Grpc-Message": {"no order %22x%22"}}
	want := grpcweb.AppendTrailer(bytes.Clone(body), grpcweb.Trailer{Status: 5,
		Metadata: []grpcweb.Field{{Name: "grpc-message", Value: "no order %22x%22"}}})

	if got := webBody(t, "application/grpc-web+proto", body, trailer); !bytes.Equal(got, want) {
		t.Errorf("binary: %q\nwant %q", got, want)
	}
	// -text: a padded chunk per frame, the trailer frame last.
	var text []byte
	for rest := want; len(rest) > 0; {
		_, r, err := grpcweb.Cut(rest, 0)
		if err != nil {
			t.Fatal(err)
		}
		text = grpcweb.AppendEncodeText(text, rest[:len(rest)-len(r)])
		rest = r
	}
	if got := webBody(t, "application/grpc-web-text", body, trailer); !bytes.Equal(got, text) {
		t.Errorf("text: %q\nwant %q", got, text)
	}
	// No grpc-status from the upstream: UNKNOWN, as a gRPC client would take it.
	got := webBody(t, "application/grpc-web", nil, nil)
	if f, _, err := grpcweb.Cut(got, 0); err != nil || !f.Trailer() || grpcweb.ParseTrailer(f.Data).Status != 2 {
		t.Errorf("no status: %q", got)
	}
}

func TestGRPCWebRequest(t *testing.T) {
	for _, tc := range []struct{ ct, want string }{
		{"application/grpc-web", "application/grpc"},
		{"application/grpc-web+proto", "application/grpc+proto"},
		{"application/grpc-web-text", "application/grpc"},
		{"application/grpc-web-text+proto", "application/grpc+proto"},
	} {
		text := grpcweb.AppendEncodeText(nil, grpcweb.AppendMessage(nil, 0, []byte("hi")))
		src := grpcweb.AppendMessage(nil, 0, []byte("hi"))
		if strings.Contains(tc.ct, "-text") {
			src = text
		}
		body := upstreamh2.NewRequestBody(bytes.NewReader(src), 1<<20)
		r, _ := http.NewRequest("POST", "http://upstream/svc/M", nil)
		r.Header = http.Header{"Content-Type": {tc.ct}, "X-Grpc-Web": {"1"}, "X-User-Agent": {"grpc-web-javascript/0.1"}, "Grpc-Timeout": {"1S"}}
		r.Body, r.ContentLength = body, int64(len(src))
		upstreamh2.GRPCWebRequest(r, body, []byte(tc.ct))
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, grpcweb.AppendMessage(nil, 0, []byte("hi"))) {
			t.Errorf("%s: body %q %v", tc.ct, got, err)
		}
		if r.Header.Get("Content-Type") != tc.want || r.Header.Get("X-Grpc-Web") != "" || r.Header.Get("X-User-Agent") != "" || r.Header.Get("Grpc-Timeout") != "1S" {
			t.Errorf("%s: %v", tc.ct, r.Header)
		}
		if wantLen := int64(len(src)); strings.Contains(tc.ct, "-text") && r.ContentLength != -1 || !strings.Contains(tc.ct, "-text") && r.ContentLength != wantLen {
			t.Errorf("%s: ContentLength %d", tc.ct, r.ContentLength)
		}
		if body.Len() != int64(len(src)) {
			t.Errorf("%s: the limit counted %d bytes, the client sent %d", tc.ct, body.Len(), len(src))
		}
	}
	// Malformed base64 is the client's fault.
	body := upstreamh2.NewRequestBody(strings.NewReader("AA!A"), 1<<20)
	r, _ := http.NewRequest("POST", "http://upstream/svc/M", body)
	upstreamh2.GRPCWebRequest(r, body, []byte("application/grpc-web-text"))
	if _, err := io.ReadAll(r.Body); err == nil || !body.Malformed() {
		t.Errorf("malformed body: %v, Malformed %v", err, body.Malformed())
	}
}
