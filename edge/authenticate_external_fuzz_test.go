package edge

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzAuthAnswer feeds arbitrary authorizer answers to the parser: it must never panic,
// and whatever it accepts must be safe to act on: a deny is a 4xx whose envelope is
// JSON carrying the message; an allow's headers are plain names the edge does not own,
// with values that stay one header line.
func FuzzAuthAnswer(f *testing.F) {
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
		a, err := parseAuthAnswer(b)
		if err != nil {
			return
		}
		if a.TTL != nil && (*a.TTL < 0 || *a.TTL > 3600) {
			t.Fatalf("ttl %d accepted", *a.TTL)
		}
		if !a.Allow {
			if a.Status < 400 || a.Status > 499 {
				t.Fatalf("deny status %d", a.Status)
			}
			r := denyReply(a.Status, a.Message, true)
			body := append(append(append([]byte(nil), r.prefix...), "rid"...), replySuffix...)
			var env struct {
				Error struct {
					Message   string `json:"message"`
					RequestID string `json:"request_id"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &env); err != nil || env.Error.RequestID != "rid" || a.Message != "" && env.Error.Message != a.Message {
				t.Fatalf("envelope %s: %v", body, err)
			}
			return
		}
		if len(a.Consumer) > maxAuthConsumer || len(a.Headers) > maxAuthHeaders {
			t.Fatalf("consumer or headers over bounds")
		}
		var req fasthttp.Request
		req.Header.SetHost("x")
		for _, h := range a.Headers {
			k := []byte(h[0])
			if classify(k) != clsOther || spoofsEdgeHeader(k) || edgeHeaderFolds[strings.ToLower(h[0])] || !plainHeaderName(h[0]) {
				t.Fatalf("header %q accepted", h[0])
			}
			if strings.ContainsAny(h[1], "\r\n\x00") {
				t.Fatalf("header %q value %q accepted", h[0], h[1])
			}
			req.Header.SetCanonical(k, []byte(h[1]))
		}
		// Written out and read back, the request has the same headers: none broke a line.
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
