package extauth_test

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"tollgate/edge/extauth"
)

// owned stands in for the edge's own headers.
func owned(k []byte) bool {
	switch strings.ToLower(string(k)) {
	case "x-consumer-id", "x-consumer-name", "x-forwarded-for", "host", "content-length", "transfer-encoding", "connection":
		return true
	}
	return false
}

// FuzzParseAnswer feeds arbitrary authorizer answers to the parser: it must never panic,
// and whatever it accepts must be safe to act on: a denial is a 4xx with a short UTF-8
// message; an allow's headers are plain names owned does not claim, with values that
// stay one header line when written out and read back.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		`{"allow": true}`,
		`{"allow": true, "consumer": "alice", "headers": {"X-User": "u1", "x-tenant-plan": "gold"}, "ttl_s": 30}`,
		`{"allow": false, "status": 401, "message": "token expired"}`,
		`{"allow": false}`,
		`{"allow": false, "status": 302}`,
		`{"allow": true, "headers": {"X-Consumer-Id": "admin"}}`,
		`{"allow": true, "headers": {"X-User": "a\r\nb"}}`,
		`{"allow": "true"}`,
		`{"allow": true, "ttl_s": -1}`,
		`{"allow": false, "message": "\u00e9\u2028<script>\"quote\""}`,
		`[]`, `null`, ``, `{"allow": true}{"allow": false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := extauth.ParseAnswer(b, owned)
		if err != nil {
			return
		}
		if a.TTL != nil && (*a.TTL < 0 || *a.TTL > 3600) {
			t.Fatalf("ttl %d accepted", *a.TTL)
		}
		if !a.Allow {
			if a.Status < 400 || a.Status > 499 || len(a.Message) > extauth.MaxMessage {
				t.Fatalf("deny status %d, message of %d bytes", a.Status, len(a.Message))
			}
			return
		}
		if len(a.Consumer) > extauth.MaxConsumer || len(a.Headers) > 32 {
			t.Fatalf("consumer or headers over bounds")
		}
		var req fasthttp.Request
		req.Header.SetHost("x")
		for _, h := range a.Headers {
			if owned([]byte(h[0])) || !extauth.PlainName(h[0]) {
				t.Fatalf("header %q accepted", h[0])
			}
			if strings.ContainsAny(h[1], "\r\n\x00") {
				t.Fatalf("header %q value %q accepted", h[0], h[1])
			}
			req.Header.SetCanonical([]byte(h[0]), []byte(h[1]))
		}
		var back fasthttp.RequestHeader
		if err := back.Read(bufio.NewReader(strings.NewReader(req.Header.String()))); err != nil {
			t.Fatalf("headers %q do not read back: %v", req.Header.String(), err)
		}
		for _, h := range a.Headers {
			if got := string(back.Peek(h[0])); got != strings.Trim(h[1], " \t") && got != h[1] {
				t.Fatalf("header %s: %q read back as %q", h[0], h[1], got)
			}
		}
	})
}
