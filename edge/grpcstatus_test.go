package edge_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"tollgate/edge"
	"tollgate/tenants"
)

// The edge's refusals of gRPC calls are gRPC statuses that real gRPC clients read, and
// are still counted under their HTTP status.

const msgNoKey = "this API needs a key in the X-API-Key header"

// grpcTenant files tenant acme with the routes the gRPC tests call: the health service
// behind a key, a service limited to one call a minute, and one whose upstream refuses
// connections.
func grpcTenant(t *testing.T, h *harness) {
	t.Helper()
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r-health", []string{"/grpc.health.v1.Health"}, nil, tenants.AuthKey, up.URL)
	h.limitedRoute(acme, "r-limited", "/limited.Svc", tenants.AuthNone, &tenants.RateLimit{RPM: 1, Burst: 1}, up.URL)
	h.route(acme, "r-dead", []string{"/dead.Svc"}, nil, "", "http://127.0.0.1:1")
	h.e.Loaded()
	waitFor(t, 2*time.Second, func() string {
		if s := h.e.Snapshot("acme"); s == nil || s.Routes() != 3 {
			return "routes not compiled yet"
		}
		return ""
	})
}

// grpcConn is a gRPC client of tenant acme at addr, over h2c, or TLS when cfg is set.
func grpcConn(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds), grpc.WithAuthority("acme."+domain))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// grpcCall invokes method with an empty health request and returns the metadata the
// edge answered with (a trailers-only answer's fields are its trailer) and the call's
// error.
func grpcCall(t *testing.T, cc *grpc.ClientConn, method string, md ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var trailer metadata.MD
	err := cc.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, grpc.Trailer(&trailer))
	return trailer, err
}

func wantGRPCStatus(t *testing.T, what string, err error, md metadata.MD, code codes.Code, message, envelopeCode string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code || (message != "" && st.Message() != message) {
		t.Errorf("%s: got %v %q, want %v %q", what, st.Code(), st.Message(), code, message)
	}
	if got := md.Get("x-tollgate-error"); len(got) != 1 || got[0] != envelopeCode {
		t.Errorf("%s: X-Tollgate-Error %q, want %q (metadata %v)", what, got, envelopeCode, md)
	}
}

func TestGRPCStatusH2C(t *testing.T) {
	h := newHarness(t)
	grpcTenant(t, h)
	cc := grpcConn(t, h.public, nil)

	// The generated client, as an application calls it.
	_, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != msgNoKey {
		t.Errorf("Check without a key: %v", err)
	}
	md, err := grpcCall(t, cc, "/grpc.health.v1.Health/Check")
	wantGRPCStatus(t, "no key", err, md, codes.Unauthenticated, msgNoKey, tenants.EUnauthenticated)
	md, err = grpcCall(t, cc, "/grpc.health.v1.Health/Check", "x-api-key", "tg_not_a_key")
	wantGRPCStatus(t, "bad key", err, md, codes.Unauthenticated, "the API key is not valid for this API", tenants.EInvalidCredential)

	md, err = grpcCall(t, cc, "/nope.Svc/Call")
	wantGRPCStatus(t, "no route", err, md, codes.Unimplemented, "no route of this API matches the path", tenants.ERouteNotFound)

	// The first call of the minute reaches the upstream (an HTTP/1.1 echo, which no gRPC
	// client understands); the second is refused.
	_, _ = grpcCall(t, cc, "/limited.Svc/Call")
	md, err = grpcCall(t, cc, "/limited.Svc/Call")
	wantGRPCStatus(t, "rate limited", err, md, codes.ResourceExhausted, "", tenants.ERateLimited)
	if ra := md.Get("retry-after"); len(ra) != 1 || ra[0] == "" {
		t.Errorf("rate limited: no Retry-After in %v", md)
	}

	md, err = grpcCall(t, cc, "/dead.Svc/Call")
	wantGRPCStatus(t, "unreachable upstream", err, md, codes.Unavailable, "the upstream http://127.0.0.1:1 refused the connection", tenants.EUpstreamFailed)

	// Another tenant's host: refused before any route, as a gRPC status too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other, err := grpc.NewClient("passthrough:///"+h.public, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("nobody."+domain))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = healthpb.NewHealthClient(other).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown tenant: %v", err)
	}

	// A request that is not gRPC keeps the JSON envelope, on the same route.
	c := h2cClient()
	for _, ct := range []string{"", "application/json", "application/grpcx"} {
		req, _ := http.NewRequest("POST", "http://"+h.public+"/grpc.health.v1.Health/Check", strings.NewReader("{}"))
		req.Host = "acme." + domain
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, body := h2Do(t, c, req)
		if resp.StatusCode != 401 || resp.Header.Get("Grpc-Status") != "" || resp.Header.Get("Content-Type") != "application/json" ||
			!strings.Contains(body, `"code":"unauthenticated"`) {
			t.Errorf("Content-Type %q: %d %v %s", ct, resp.StatusCode, resp.Header, body)
		}
	}
}

func TestGRPCStatusTLS(t *testing.T) {
	h := newTLSHarness(t)
	grpcTenant(t, h.harness)
	cc := grpcConn(t, h.tls, &tls.Config{RootCAs: h.ca.Pool, ServerName: "acme." + domain})
	md, err := grpcCall(t, cc, "/grpc.health.v1.Health/Check")
	wantGRPCStatus(t, "no key over TLS", err, md, codes.Unauthenticated, msgNoKey, tenants.EUnauthenticated)
}

// TestGRPCStatusTrailersOnly reads the refusal frame by frame: one HEADERS frame that
// ends the stream, no DATA.
func TestGRPCStatusTrailersOnly(t *testing.T) {
	h := newHarness(t)
	grpcTenant(t, h)
	fc := dialH2(t, h.public)
	fc.writeHeaders(1, true, ":method", "POST", ":scheme", "http", ":authority", "acme."+domain,
		":path", "/grpc.health.v1.Health/Check", "content-type", "application/grpc+proto", "te", "trailers")
	fields := map[string]string{}
	for {
		f, err := fc.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fc.fr.WriteSettingsAck()
			}
			continue
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				fields[hf.Name] = hf.Value
			}
			if !f.StreamEnded() {
				t.Fatalf("the HEADERS frame does not end the stream: %v", fields)
			}
		case *http2.DataFrame:
			t.Fatalf("DATA frame %q in a trailers-only answer", f.Data())
		default:
			continue
		}
		break
	}
	for k, v := range map[string]string{":status": "200", "content-type": "application/grpc", "grpc-status": "16",
		"grpc-message": msgNoKey, "x-tollgate-error": "unauthenticated"} {
		if fields[k] != v {
			t.Errorf("%s = %q, want %q (%v)", k, fields[k], v, fields)
		}
	}
	if fields["x-request-id"] == "" {
		t.Errorf("no X-Request-Id: %v", fields)
	}
}

// gRPC-Web comes over HTTP/1.1 too, and keeps its own Content-Type.
func TestGRPCStatusWebHTTP1(t *testing.T) {
	h := newHarness(t)
	grpcTenant(t, h)
	for _, ct := range []string{"application/grpc-web", "application/grpc-web+proto", "application/grpc-web-text", "application/grpc-web-text+proto"} {
		r := send(t, h.public, "POST", "acme."+domain, "/grpc.health.v1.Health/Check",
			[]string{"Content-Type: " + ct, "X-Grpc-Web: 1"}, "AAAAAAA=")
		if r.status != 200 || r.header.Get("Content-Type") != ct || r.header.Get("Grpc-Status") != "16" ||
			r.header.Get("Grpc-Message") != msgNoKey || r.header.Get("X-Tollgate-Error") != "unauthenticated" || r.body != "" {
			t.Errorf("%s: %d %v %q", ct, r.status, r.header, r.body)
		}
	}
	r := send(t, h.public, "POST", "acme."+domain, "/nope.Svc/Call", []string{"Content-Type: application/grpc-web+json"}, "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/grpc-web" || r.header.Get("Grpc-Status") != "12" {
		t.Errorf("grpc-web+json to no route: %d %v %q", r.status, r.header, r.body)
	}
}

// TestGRPCStatusCounted: a refused gRPC call is a 401 for the metrics, the meter and the
// access log, though the client got 200 (as TestMetering counts a refused HTTP call).
func TestGRPCStatusCounted(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, sink)
	var buf syncBuffer
	h := newHarness(t, func(c *edge.Config) {
		c.Meter = m
		c.AccessLog = true
		c.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	})
	grpcTenant(t, h)
	cc := grpcConn(t, h.public, nil)
	_, err := grpcCall(t, cc, "/grpc.health.v1.Health/Check", "x-request-id", "grpc-refused-1")
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}

	if n := h.metric("http_requests_total", map[string]string{"tenant": "acme", "route": "r-health", "status": "4xx"}); n != 1 {
		t.Errorf("http_requests_total 4xx for r-health: %v, want 1", n)
	}
	if n := h.metric("http_requests_total", map[string]string{"tenant": "acme", "route": "r-health", "status": "2xx"}); n != 0 {
		t.Errorf("http_requests_total 2xx for r-health: %v, want 0", n)
	}

	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := sink.sum()
	if c := got["t-acme r-health  4"]; c.Requests != 1 || c.Billable != 0 {
		t.Errorf("metered 4xx for r-health: %+v, want 1 request, not billable (all: %v)", c, got)
	}
	if c, ok := got["t-acme r-health  2"]; ok {
		t.Errorf("metered as 2xx: %+v", c)
	}

	var line map[string]any
	waitFor(t, 2*time.Second, func() string {
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, `"request_id":"grpc-refused-1"`) {
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					return err.Error()
				}
				return ""
			}
		}
		return "no access line yet"
	})
	if line["status"] != 401.0 || line["code"] != tenants.EUnauthenticated || line["route"] != "r-health" {
		t.Errorf("access line %v, want status 401, code unauthenticated", line)
	}
}
