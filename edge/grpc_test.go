package edge_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"tollgate/edge"
	"tollgate/tenants"
)

// grpcUpstream is a grpc-go server on loopback, h2c: the health service and a test
// service with one call of each kind.
type grpcUpstream struct {
	addr  string
	calls atomic.Int64 // calls the test service received
}

// echoService is the test service, registered by hand (no generated code): its messages
// are wrapperspb.StringValue.
var echoService = grpc.ServiceDesc{
	ServiceName: "tollgate.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Missing", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			srv.(*grpcUpstream).calls.Add(1)
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return nil, status.Errorf(codes.NotFound, "no order %q", in.Value)
		}},
		{MethodName: "Hang", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			srv.(*grpcUpstream).calls.Add(1)
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			time.Sleep(2 * time.Second) // deaf to its deadline: only the edge's ends the call
			return in, nil
		}},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Five", ServerStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			srv.(*grpcUpstream).calls.Add(1)
			in := new(wrapperspb.StringValue)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			for i := range 5 {
				if err := s.SendMsg(wrapperspb.String(fmt.Sprintf("%s-%d", in.Value, i))); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: "Join", ClientStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			srv.(*grpcUpstream).calls.Add(1)
			var parts []string
			for {
				in := new(wrapperspb.StringValue)
				err := s.RecvMsg(in)
				if err == io.EOF {
					return s.SendMsg(wrapperspb.String(strings.Join(parts, ",")))
				}
				if err != nil {
					return err
				}
				parts = append(parts, in.Value)
			}
		}},
		{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			srv.(*grpcUpstream).calls.Add(1)
			for {
				in := new(wrapperspb.StringValue)
				err := s.RecvMsg(in)
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if err := s.SendMsg(wrapperspb.String("re: " + in.Value)); err != nil {
					return err
				}
			}
		}},
		{StreamName: "Stall", ServerStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			srv.(*grpcUpstream).calls.Add(1)
			in := new(wrapperspb.StringValue)
			if err := s.RecvMsg(in); err != nil {
				return err
			}
			if err := s.SendMsg(wrapperspb.String("first")); err != nil {
				return err
			}
			time.Sleep(2 * time.Second) // deaf to its deadline: only the edge's ends the call
			return nil
		}},
	},
}

func newGRPCUpstream(t *testing.T) *grpcUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	u := &grpcUpstream{addr: ln.Addr().String()}
	s.RegisterService(&echoService, u)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return u
}

// grpcRoute files tenant acme's route /tollgate.test.Echo and /grpc.health.v1.Health
// to the targets over HTTP/2, and waits until the edge serves it.
func grpcRoute(t *testing.T, h *harness, edit func(*tenants.Route), targets ...string) {
	t.Helper()
	acme := h.tenant("acme")
	r := &tenants.Route{ID: "r-grpc", TenantID: acme, Name: "grpc", Paths: []string{"/tollgate.test.Echo", "/grpc.health.v1.Health"}}
	for _, u := range targets {
		r.Upstream.Targets = append(r.Upstream.Targets, tenants.Target{URL: u, Weight: 1})
	}
	r.Upstream.Protocol = tenants.ProtocolH2
	if edit != nil {
		edit(r)
	}
	h.put(r)
	h.e.Loaded()
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/grpc.health.v1.Health/Check"); r.status == 404 {
			return r.String()
		}
		return ""
	})
}

// grpcClient is a grpc-go client of the edge's plain listener, h2c, for tenant acme.
func grpcClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("acme."+domain))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// grpcCalls runs every kind of call through cc and checks what comes back.
func grpcCalls(t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	ctx := callCtx(t)
	hc := healthpb.NewHealthClient(cc)
	res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check: %v %v, want SERVING", res, err)
	}

	err = cc.Invoke(ctx, "/tollgate.test.Echo/Missing", wrapperspb.String("42"), new(wrapperspb.StringValue))
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != `no order "42"` {
		t.Errorf("Missing: %v, want NOT_FOUND with the upstream's message", err)
	}

	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/tollgate.test.Echo/Five")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wrapperspb.String("m")); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseSend()
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		if err := s.RecvMsg(m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("Five: %v after %v", err, got)
		}
		got = append(got, m.Value)
	}
	if strings.Join(got, " ") != "m-0 m-1 m-2 m-3 m-4" {
		t.Errorf("Five: %v", got)
	}

	s, err = cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/tollgate.test.Echo/Join")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if err := s.SendMsg(wrapperspb.String(p)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.CloseSend()
	joined := new(wrapperspb.StringValue)
	if err := s.RecvMsg(joined); err != nil || joined.Value != "a,b,c" {
		t.Errorf("Join: %q %v", joined.Value, err)
	}

	// Bidirectional: each answer is read before the next message is sent, which only
	// works if neither side's body is held back until it ends.
	s, err = cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/tollgate.test.Echo/Chat")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"one", "two", "three"} {
		if err := s.SendMsg(wrapperspb.String(p)); err != nil {
			t.Fatal(err)
		}
		m := new(wrapperspb.StringValue)
		if err := s.RecvMsg(m); err != nil || m.Value != "re: "+p {
			t.Fatalf("Chat %s: %q %v", p, m.Value, err)
		}
	}
	_ = s.CloseSend()
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Errorf("Chat end: %v, want EOF", err)
	}
}

// TestGRPCThroughEdgeH2C: every kind of gRPC call through the edge's plain listener
// (h2c) to an h2c upstream: unary, an upstream's error status with its message, server,
// client and bidirectional streams.
func TestGRPCThroughEdgeH2C(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	grpcCalls(t, grpcClient(t, h.public))
}

// TestGRPCThroughEdgeTLS: the same calls over the edge's TLS listener (ALPN h2).
func TestGRPCThroughEdgeTLS(t *testing.T) {
	h := newTLSHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h.harness, nil, "http://"+up.addr)
	creds := credentials.NewTLS(&tls.Config{RootCAs: h.ca.Pool, ServerName: "acme." + domain})
	cc, err := grpc.NewClient("passthrough:///"+h.tls, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	grpcCalls(t, cc)
}

// TestGRPCDeadline: a call's grpc-timeout bounds it at the edge. A client's own
// deadline gives it DEADLINE_EXCEEDED; a deadline sent by a client that does not watch
// it (a raw HTTP/2 request) ends the stream with grpc-status 4 when the answer had
// begun, and is refused with grpc-status 4 (upstream_timeout) when it had not.
func TestGRPCDeadline(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	cc := grpcClient(t, h.public)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := cc.Invoke(ctx, "/tollgate.test.Echo/Hang", wrapperspb.String("x"), new(wrapperspb.StringValue))
	// The client's timer and the edge's run out together: the client's own
	// DEADLINE_EXCEEDED, or the edge's, for a deadline passed before the head.
	if st, _ := status.FromError(err); st.Code() != codes.DeadlineExceeded {
		t.Errorf("Hang: %v, want DEADLINE_EXCEEDED", err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Hang took %v", took)
	}

	c := h2cClient()
	frame := []byte{0, 0, 0, 0, 3, 0x0a, 1, 'x'} // StringValue{value: "x"}
	post := func(method string) *http.Request {
		req, _ := http.NewRequest("POST", "http://"+h.public+"/tollgate.test.Echo/"+method, strings.NewReader(string(frame)))
		req.Host = "acme." + domain
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Grpc-Timeout", "300m")
		return req
	}
	start = time.Now()
	resp, body := h2Do(t, c, post("Stall"))
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Stall took %v: the deadline did not end it", took)
	}
	if resp.StatusCode != 200 || resp.Trailer.Get("Grpc-Status") != "4" || !strings.Contains(body, "first") {
		t.Errorf("Stall: %d trailer %v body %q, want 200, the first message, then grpc-status 4", resp.StatusCode, resp.Trailer, body)
	}

	start = time.Now()
	resp, body = h2Do(t, c, post("Hang"))
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Hang took %v: the deadline did not end it", took)
	}
	// Passed before the head: the edge's refusal, as gRPC status DEADLINE_EXCEEDED.
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" || resp.Header.Get("X-Tollgate-Error") != tenants.EUpstreamTimeout {
		t.Errorf("Hang: %d %v %q, want a trailers-only grpc-status 4 for upstream_timeout", resp.StatusCode, resp.Header, body)
	}
}

// TestGRPCMeteredOncePerCall: a call is one request for metering whatever the number
// of messages each way.
func TestGRPCMeteredOncePerCall(t *testing.T) {
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
	before := up.calls.Load()
	grpcCalls(t, grpcClient(t, h.public)) // 5 calls: Check, Missing, Five, Join, Chat
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int64
	for k, c := range sink.sum() {
		if strings.Contains(k, " r-grpc ") {
			n += c.Requests
		}
	}
	if n != 5 || up.calls.Load()-before != 4 {
		t.Errorf("metered %d requests for 5 calls (%d reached the test service, want 4)", n, up.calls.Load()-before)
	}
}

// TestGRPCClientCancel: a client that cancels its call (RST_STREAM) cancels the
// upstream's: the upstream's stream context ends.
func TestGRPCClientCancel(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	s := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		_ = st.SendMsg(wrapperspb.String("started"))
		<-st.Context().Done()
		ended <- st.Context().Err()
		return st.Context().Err()
	}))
	go func() { _ = s.Serve(ln) }()
	defer s.Stop()
	grpcRoute(t, h, nil, "http://"+ln.Addr().String())
	cc := grpcClient(t, h.public)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/tollgate.test.Echo/Anything")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("upstream's context ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream call went on after the client cancelled")
	}
}

// TestH2UpstreamHealthCheck: an h2 upstream's active check (the gRPC health service's
// Check) takes a dead target out of rotation: every call then reaches the live one.
func TestH2UpstreamHealthCheck(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	deadAddr := closedPort(t)
	grpcRoute(t, h, func(r *tenants.Route) {
		r.Upstream.HealthCheck = &tenants.HealthCheck{Path: "/grpc.health.v1.Health/Check", IntervalMS: 100, TimeoutMS: 500, UnhealthyThreshold: 1, HealthyThreshold: 1}
	}, "http://"+up.addr, "http://"+deadAddr)
	hc := healthpb.NewHealthClient(grpcClient(t, h.public))
	waitFor(t, 5*time.Second, func() string {
		for i := range 10 {
			if _, err := hc.Check(callCtx(t), &healthpb.HealthCheckRequest{}); err != nil {
				return fmt.Sprintf("call %d: %v", i, err)
			}
		}
		return ""
	})
}

// TestH2UpstreamOverloaded: past the edge's bound of requests in flight to an h2 target
// (Config.MaxConnsPerTarget, the HTTP/1.1 pools' connection bound) and its wait
// (Config.MaxConnWait), a request is 503 overloaded.
func TestH2UpstreamOverloaded(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.MaxConnsPerTarget, c.MaxConnWait = 1, 50*time.Millisecond })
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	cc := grpcClient(t, h.public)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/tollgate.test.Echo/Chat")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("hold")); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	r := h.get("acme."+domain, "/grpc.health.v1.Health/Check")
	if r.status != 503 || r.errCode() != tenants.EOverloaded {
		t.Errorf("with the one slot taken: %s, want 503 overloaded", r)
	}
}

// TestH2UpstreamAddressRule: an h2 target is held to the operator's address rule at
// every connect, as an HTTP/1.1 one: a name resolving into a refused range is 502 and
// never reached.
func TestH2UpstreamAddressRule(t *testing.T) {
	up := newGRPCUpstream(t)
	_, port, _ := net.SplitHostPort(up.addr)
	resolver := startHostsDNS(t, map[string][]string{"metadata.test": {"169.254.169.254"}})
	h := newHarness(t)
	edge.SetResolver(h.e, resolver)
	grpcRoute(t, h, nil, "http://metadata.test:"+port)
	req, _ := http.NewRequest("POST", "http://"+h.public+"/tollgate.test.Echo/Missing", strings.NewReader("x"))
	req.Host = "acme." + domain
	resp, body := h2Do(t, h2cClient(), req)
	if resp.StatusCode != 502 || !strings.Contains(body, "refused by the operator's policy") {
		t.Errorf("want 502 refused by the address rule, got %d %s", resp.StatusCode, body)
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("the upstream was reached %d times", n)
	}
}

// TestGRPCBodyLimit: a streamed request body is bounded by the route's max_body_bytes as
// it goes: a client stream past it fails (RESOURCE_EXHAUSTED once the answer had begun,
// else the edge's 413), and the upstream never gets the whole of it.
func TestGRPCBodyLimit(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	grpcRoute(t, h, func(r *tenants.Route) { r.MaxBodyBytes = 300 }, "http://"+up.addr)
	cc := grpcClient(t, h.public)

	s, err := cc.NewStream(callCtx(t), &grpc.StreamDesc{ClientStreams: true}, "/tollgate.test.Echo/Join")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := s.SendMsg(wrapperspb.String(strings.Repeat("x", 100))); err != nil {
			break // the stream was reset: RecvMsg has the status
		}
	}
	_ = s.CloseSend()
	joined := new(wrapperspb.StringValue)
	if err := s.RecvMsg(joined); err == nil {
		t.Fatalf("Join of 1000 bytes through a 300-byte limit answered %d bytes", len(joined.Value))
	}

	// Bidirectional, the answer begun: the trailer says why.
	s, err = cc.NewStream(callCtx(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/tollgate.test.Echo/Chat")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wrapperspb.String("hi")); err != nil {
		t.Fatal(err)
	}
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 10 {
		if err := s.SendMsg(wrapperspb.String(strings.Repeat("y", 100))); err != nil {
			break
		}
		if last = s.RecvMsg(new(wrapperspb.StringValue)); last != nil {
			break
		}
	}
	if last == nil {
		last = s.RecvMsg(new(wrapperspb.StringValue))
	}
	if st, _ := status.FromError(last); st.Code() != codes.ResourceExhausted {
		t.Errorf("Chat past the limit: %v, want RESOURCE_EXHAUSTED", last)
	}
}

// TestH2UpstreamRetry: a call whose attempt could not connect is retried on another
// target, as on HTTP/1.1: its streamed body had not been read, so it can still go.
func TestH2UpstreamRetry(t *testing.T) {
	h := newHarness(t)
	up := newGRPCUpstream(t)
	deadAddr := closedPort(t)
	grpcRoute(t, h, func(r *tenants.Route) {
		r.Upstream.Retries = &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 100}
	}, "http://"+deadAddr, "http://"+up.addr)
	cc := grpcClient(t, h.public)
	for i := range 6 {
		err := cc.Invoke(callCtx(t), "/tollgate.test.Echo/Missing", wrapperspb.String("r"), new(wrapperspb.StringValue))
		if st, _ := status.FromError(err); st.Code() != codes.NotFound {
			t.Fatalf("call %d: %v, want the live target's NOT_FOUND", i, err)
		}
	}
}

// BenchmarkGRPCUnary: one unary call (the health service's Check) straight to the
// upstream and through the edge over h2c, on one connection each, as a client pays
// for it: go test -run '^$' -bench BenchmarkGRPCUnary -benchtime 3000x ./edge/
func BenchmarkGRPCUnary(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(ln) }()
	defer s.Stop()
	h := newHarness(b)
	acme := h.tenant("acme")
	h.put(&tenants.Route{ID: "r-grpc", TenantID: acme, Name: "grpc", Paths: []string{"/grpc.health.v1.Health"},
		Upstream: tenants.Upstream{Protocol: tenants.ProtocolH2, Targets: []tenants.Target{{URL: "http://" + ln.Addr().String(), Weight: 1}}}})
	h.e.Loaded()
	for _, c := range []struct{ name, addr, authority string }{{"direct", ln.Addr().String(), ""}, {"edge", h.public, "acme." + domain}} {
		b.Run(c.name, func(b *testing.B) {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if c.authority != "" {
				opts = append(opts, grpc.WithAuthority(c.authority))
			}
			cc, err := grpc.NewClient("passthrough:///"+c.addr, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			hc := healthpb.NewHealthClient(cc)
			ctx := context.Background()
			waitFor(b, 5*time.Second, func() string {
				if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					return err.Error()
				}
				return ""
			})
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestH2GoServer: with TOLLGATE_EDGE_HTTP2_OWN_SERVER off, Go's net/http server serves
// HTTP/2 through the same chain: a plain request over h2c and every kind of gRPC call.
func TestH2GoServer(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.HTTP2GoServer = true })
	h2Tenant(t, h)
	req, _ := http.NewRequest("GET", "http://"+h.public+"/echo", nil)
	req.Host = "acme." + domain
	if resp, body := h2Do(t, h2cClient(), req); resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.Contains(body, `"X-Forwarded-Proto":["http"]`) {
		t.Fatalf("h2c GET: %s %d %s", resp.Proto, resp.StatusCode, body)
	}
	up := newGRPCUpstream(t)
	grpcRoute(t, h, nil, "http://"+up.addr)
	grpcCalls(t, grpcClient(t, h.public))
}

// TestH2GoClient: with TOLLGATE_EDGE_H2_UPSTREAM_OWN_CLIENT off, Go's net/http transport
// speaks to the HTTP/2 upstream: every kind of gRPC call, and a retry past a dead target.
func TestH2GoClient(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.HTTP2GoClient = true })
	up := newGRPCUpstream(t)
	grpcRoute(t, h, func(r *tenants.Route) {
		r.Upstream.Retries = &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 100}
	}, "http://"+closedPort(t), "http://"+up.addr)
	cc := grpcClient(t, h.public)
	grpcCalls(t, cc)
	for i := range 4 {
		err := cc.Invoke(callCtx(t), "/tollgate.test.Echo/Missing", wrapperspb.String("r"), new(wrapperspb.StringValue))
		if st, _ := status.FromError(err); st.Code() != codes.NotFound {
			t.Fatalf("call %d: %v, want the live target's NOT_FOUND", i, err)
		}
	}
}
