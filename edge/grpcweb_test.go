package edge_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"tollgate/edge"
	"tollgate/edge/grpcweb"
	"tollgate/tenants"
)

// webTypes are the gRPC-Web Content-Types the edge translates.
var webTypes = []string{"application/grpc-web", "application/grpc-web+proto", "application/grpc-web-text", "application/grpc-web-text+proto"}

// webClients are the two ways a gRPC-Web call reaches the edge: HTTP/1.1 (net/http's
// client, which speaks HTTP/2 only over TLS) and HTTP/2 with prior knowledge.
func webClients() map[string]*http.Client {
	return map[string]*http.Client{"http1": {Timeout: 10 * time.Second}, "h2c": h2cClient()}
}

// webAnswer is what a gRPC-Web call got: the head, and the body split into frames.
type webAnswer struct {
	res    *http.Response
	raw    []byte // the body as it came
	frames []grpcweb.Frame
}

// trailer is the answer's trailer frame, and whether it has one (last, as it must be).
func (a webAnswer) trailer() (grpcweb.Trailer, bool) {
	if n := len(a.frames); n > 0 && a.frames[n-1].Trailer() {
		return grpcweb.ParseTrailer(a.frames[n-1].Data), true
	}
	return grpcweb.Trailer{}, false
}

func (a webAnswer) String() string {
	return fmt.Sprintf("%d %v %q", a.res.StatusCode, a.res.Header, a.raw)
}

// webCall makes one gRPC-Web call of method to tenant acme at addr, its request body the
// frames of msgs (base64 for a -text ct), and reads the whole answer.
func webCall(t *testing.T, c *http.Client, addr, method, ct string, body []byte, msgs ...proto.Message) webAnswer {
	t.Helper()
	text := strings.Contains(ct, "-text")
	if body == nil {
		for _, m := range msgs {
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			body = grpcweb.AppendMessage(body, 0, b)
		}
		if text {
			body = grpcweb.AppendEncodeText(nil, body)
		}
	}
	req, err := http.NewRequest("POST", "http://"+addr+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "acme." + domain
	req.Header.Set("Content-Type", ct)
	req.Header.Set("X-Grpc-Web", "1")
	req.Header.Set("X-User-Agent", "grpc-web-javascript/0.1")
	req.Header.Set("Grpc-Timeout", "5S")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := webAnswer{res: res, raw: raw}
	bin := raw
	if text {
		if bin, err = grpcweb.AppendDecodeText(nil, raw); err != nil {
			t.Fatalf("%s: the -text answer is not base64: %v: %s", ct, err, a)
		}
	}
	for rest := bin; len(rest) > 0; {
		f, r, err := grpcweb.Cut(rest, 0)
		if err != nil {
			t.Fatalf("%s: %v: %s", ct, err, a)
		}
		a.frames = append(a.frames, grpcweb.Frame{Flags: f.Flags, Data: append([]byte(nil), f.Data...)})
		rest = r
	}
	return a
}

// wantWeb checks the head of a gRPC-Web answer: 200 and the request's type echoed.
func wantWeb(t *testing.T, what, ct string, a webAnswer) {
	t.Helper()
	if a.res.StatusCode != 200 || a.res.Header.Get("Content-Type") != ct {
		t.Fatalf("%s: %s", what, a)
	}
}

// TestGRPCWebUnary: a gRPC-Web health Check, each Content-Type over HTTP/1.1 and h2c,
// reaches a grpc-go server that speaks only gRPC and comes back as one data frame (the
// SERVING answer), then the trailer frame with grpc-status 0; -text both ways in base64.
func TestGRPCWebUnary(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	for name, c := range webClients() {
		for _, ct := range webTypes {
			what := name + " " + ct
			a := webCall(t, c, h.public, "/grpc.health.v1.Health/Check", ct, nil, &healthpb.HealthCheckRequest{})
			wantWeb(t, what, ct, a)
			tr, ok := a.trailer()
			if len(a.frames) != 2 || !ok || tr.Status != 0 {
				t.Fatalf("%s: want a data frame and a trailer with status 0: %s", what, a)
			}
			var got healthpb.HealthCheckResponse
			if err := proto.Unmarshal(a.frames[0].Data, &got); err != nil || got.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("%s: answer %v %v", what, &got, err)
			}
			if strings.Contains(ct, "-text") && bytes.ContainsAny(a.raw, "\x00\x80") {
				t.Errorf("%s: the -text answer has binary bytes: %q", what, a.raw)
			}
		}
	}
}

// TestGRPCWebServerStream: the five messages of a server stream arrive as five data
// frames, in order, then the trailer frame.
func TestGRPCWebServerStream(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	for name, c := range webClients() {
		for _, ct := range []string{"application/grpc-web+proto", "application/grpc-web-text"} {
			what := name + " " + ct
			a := webCall(t, c, h.public, "/tollgate.test.Echo/Five", ct, nil, wrapperspb.String("n"))
			wantWeb(t, what, ct, a)
			tr, ok := a.trailer()
			if len(a.frames) != 6 || !ok || tr.Status != 0 {
				t.Fatalf("%s: want 5 data frames and a trailer with status 0: %s", what, a)
			}
			for i, f := range a.frames[:5] {
				var m wrapperspb.StringValue
				if err := proto.Unmarshal(f.Data, &m); err != nil || f.Flags != 0 || m.Value != fmt.Sprintf("n-%d", i) {
					t.Errorf("%s: frame %d: %x %q %v", what, i, f.Flags, m.Value, err)
				}
			}
		}
	}
}

// TestGRPCWebStatus: an upstream's error status reaches the gRPC-Web client: grpc-go
// answers a call that fails before any message trailers-only, which stays so (the
// status in the head, no body); an error after the upstream's head would come in the
// trailer frame (TestGRPCWebDeadline).
func TestGRPCWebStatus(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	for name, c := range webClients() {
		for _, ct := range webTypes {
			what := name + " " + ct
			a := webCall(t, c, h.public, "/tollgate.test.Echo/Missing", ct, nil, wrapperspb.String("42 é"))
			wantWeb(t, what, ct, a)
			st, msg := a.res.Header.Get("Grpc-Status"), a.res.Header.Get("Grpc-Message")
			if tr, ok := a.trailer(); ok {
				st, msg = fmt.Sprint(tr.Status), ""
				for _, f := range tr.Metadata {
					if f.Name == "grpc-message" {
						msg = f.Value
					}
				}
			}
			if st != "5" || msg != `no order "42 %C3%A9"` {
				t.Errorf("%s: status %q message %q: %s", what, st, msg, a)
			}
		}
	}
}

// TestGRPCWebDeadline: a call whose grpc-timeout passes after the upstream's head gets
// DEADLINE_EXCEEDED in the trailer frame, after the message that came.
func TestGRPCWebDeadline(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	b, _ := proto.Marshal(wrapperspb.String("s"))
	req, _ := http.NewRequest("POST", "http://"+h.public+"/tollgate.test.Echo/Stall", bytes.NewReader(grpcweb.AppendMessage(nil, 0, b)))
	req.Host = "acme." + domain
	req.Header.Set("Content-Type", "application/grpc-web")
	req.Header.Set("Grpc-Timeout", "300m")
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var frames []grpcweb.Frame
	for rest := raw; len(rest) > 0; {
		f, r, err := grpcweb.Cut(rest, 0)
		if err != nil {
			t.Fatalf("%v: %q", err, raw)
		}
		frames, rest = append(frames, f), r
	}
	if len(frames) != 2 || !frames[1].Trailer() || grpcweb.ParseTrailer(frames[1].Data).Status != 4 {
		t.Fatalf("want the message, then DEADLINE_EXCEEDED in the trailer: %d %v %q", res.StatusCode, res.Header, raw)
	}
}

// TestGRPCWebBadText: a -text body that is not base64 is the client's fault: the edge's
// refusal 400, as gRPC-Web (INTERNAL), not an upstream failure.
func TestGRPCWebBadText(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	for name, c := range webClients() {
		a := webCall(t, c, h.public, "/grpc.health.v1.Health/Check", "application/grpc-web-text", []byte("AAAA!AAA"))
		wantWeb(t, name, "application/grpc-web-text", a)
		if a.res.Header.Get("Grpc-Status") != "13" || a.res.Header.Get("X-Tollgate-Error") != tenants.EInvalidRequest {
			t.Errorf("%s: %s", name, a)
		}
	}
}

// TestGRPCWebMeteredOncePerCall: a gRPC-Web call is one request for the meter, whatever
// the number of messages, as a gRPC one.
func TestGRPCWebMeteredOncePerCall(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, sink)
	h := newHarness(t, func(c *edge.Config) { c.Meter = m })
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	sink.batches = nil // the route's warm-up requests
	sink.mu.Unlock()
	for name, c := range webClients() {
		a := webCall(t, c, h.public, "/tollgate.test.Echo/Five", "application/grpc-web-text", nil, wrapperspb.String("n"))
		wantWeb(t, name, "application/grpc-web-text", a)
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int64
	for k, c := range sink.sum() {
		if strings.Contains(k, " r-grpc ") {
			n += c.Requests
		}
	}
	if n != 2 {
		t.Errorf("metered %d requests for 2 calls", n)
	}
}

// TestGRPCWebStreamsAsItComes: each message of the answer reaches the client as the
// upstream sends it, over either door: the first of the Stall call's arrives while its
// server is still sleeping before it ends the call.
func TestGRPCWebStreamsAsItComes(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	b, _ := proto.Marshal(wrapperspb.String("s"))
	for name, c := range webClients() {
		for _, ct := range []string{"application/grpc-web", "application/grpc-web-text"} {
			body := grpcweb.AppendMessage(nil, 0, b)
			if strings.Contains(ct, "-text") {
				body = grpcweb.AppendEncodeText(nil, body)
			}
			req, _ := http.NewRequest("POST", "http://"+h.public+"/tollgate.test.Echo/Stall", bytes.NewReader(body))
			req.Host = "acme." + domain
			req.Header.Set("Content-Type", ct)
			start := time.Now()
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			d := grpcweb.NewDecoder(res.Body, strings.Contains(ct, "-text"), 0)
			f, err := d.Next()
			var m wrapperspb.StringValue
			if err != nil || proto.Unmarshal(f.Data, &m) != nil || m.Value != "first" {
				t.Errorf("%s %s: first frame %+v %v", name, ct, f, err)
			}
			if took := time.Since(start); took > 1500*time.Millisecond {
				t.Errorf("%s %s: the first message took %v: held back until the call's end", name, ct, took)
			}
			if f, err = d.Next(); err != nil || !f.Trailer() || grpcweb.ParseTrailer(f.Data).Status != 0 {
				t.Errorf("%s %s: then %+v %v", name, ct, f, err)
			}
			_ = res.Body.Close()
		}
	}
}

// TestGRPCWebBodyLimit: the route's max_body_bytes counts the body the client sent: a
// message whose binary body fits passes, the same message in base64 (a third longer)
// does not, even streamed without a declared length over HTTP/2; the refusal is
// RESOURCE_EXHAUSTED.
func TestGRPCWebBodyLimit(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, func(r *tenants.Route) { r.MaxBodyBytes = 300 }, "http://"+up.addr)
	b, _ := proto.Marshal(wrapperspb.String(strings.Repeat("x", 250)))
	bin := grpcweb.AppendMessage(nil, 0, b)
	for name, c := range webClients() {
		for ct, body := range map[string][]byte{"application/grpc-web": bin, "application/grpc-web-text": grpcweb.AppendEncodeText(nil, bin)} {
			// io.MultiReader hides the length: the body streams, chunked over HTTP/1.1.
			req, _ := http.NewRequest("POST", "http://"+h.public+"/tollgate.test.Echo/Missing", io.MultiReader(bytes.NewReader(body)))
			req.Host = "acme." + domain
			req.Header.Set("Content-Type", ct)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			want := "5" // NOT_FOUND: the upstream's answer
			if len(body) > 300 {
				want = "8"
			}
			if res.StatusCode != 200 || res.Header.Get("Grpc-Status") != want {
				t.Errorf("%s %s (%d bytes): %d %v, want grpc-status %s", name, ct, len(body), res.StatusCode, res.Header, want)
			}
		}
	}
}
