package edge_test

import (
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tollgate/edge"
	"tollgate/infra/testcert"
	"tollgate/tenants"
)

// An upstream's failure is answered with its target as the route names it and what went
// wrong, and logged with the request id.

// reasonHarness is a harness whose log lines (JSON) the test reads back.
func reasonHarness(t *testing.T) (*harness, *syncBuffer) {
	var buf syncBuffer
	h := newHarness(t, func(c *edge.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("edge log:\n" + buf.String())
		}
	})
	return h, &buf
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// rawListener accepts connections and hands each to serve.
func rawListener(t *testing.T, serve func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

func message(t *testing.T, r result) string {
	t.Helper()
	var b struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatalf("not an envelope: %v", r)
	}
	return b.Error.Message
}

func wantReason(t *testing.T, r result, status int, code, msg string) {
	t.Helper()
	if r.status != status || r.errCode() != code || message(t, r) != msg {
		t.Errorf("got %v, want %d %s %q", r, status, code, msg)
	}
}

func TestUpstreamReasonRefused(t *testing.T) {
	h, logs := reasonHarness(t)
	addr := closedPort(t)
	acme := h.tenant("acme")
	h.route(acme, "down", []string{"/down"}, nil, "", "http://"+addr)
	h.e.Loaded()
	r := h.get("acme."+domain, "/down", "X-Request-Id: reason-refused")
	wantReason(t, r, 502, tenants.EUpstreamFailed, "the upstream http://"+addr+" refused the connection")

	var line map[string]any
	waitFor(t, 2*time.Second, func() string {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "reason-refused") {
				line = nil
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					return err.Error()
				}
				return ""
			}
		}
		return "no log line with the request id"
	})
	for k, v := range map[string]any{"level": "WARN", "request_id": "reason-refused", "tenant": "acme", "route": "down",
		"target": "http://" + addr, "reason": "the upstream http://" + addr + " refused the connection"} {
		if line[k] != v {
			t.Errorf("log line %s = %v, want %v (%v)", k, line[k], v, line)
		}
	}
}

func TestUpstreamReasonSilent(t *testing.T) {
	h, _ := reasonHarness(t)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	addr := rawListener(t, func(c net.Conn) { <-done; _ = c.Close() })
	acme := h.tenant("acme")
	h.put(&tenants.Route{ID: "silent", TenantID: acme, Name: "silent", Paths: []string{"/silent"}, TimeoutMS: 300,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://" + addr}}}})
	h.e.Loaded()
	r := h.get("acme."+domain, "/silent")
	wantReason(t, r, 504, tenants.EUpstreamTimeout, "the upstream http://"+addr+" did not answer within 300 ms")
}

func TestUpstreamReasonHangUp(t *testing.T) {
	h, _ := reasonHarness(t)
	addr := rawListener(t, func(c net.Conn) { _ = c.Close() })
	acme := h.tenant("acme")
	h.route(acme, "hangup", []string{"/hangup"}, nil, "", "http://"+addr)
	h.e.Loaded()
	r := h.get("acme."+domain, "/hangup")
	wantReason(t, r, 502, tenants.EUpstreamFailed, "the upstream http://"+addr+" closed the connection before answering")
}

func TestUpstreamReasonNotHTTP(t *testing.T) {
	h, _ := reasonHarness(t)
	addr := rawListener(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n\r\n"))
		_ = c.Close()
	})
	acme := h.tenant("acme")
	h.route(acme, "ssh", []string{"/ssh"}, nil, "", "http://"+addr)
	h.e.Loaded()
	r := h.get("acme."+domain, "/ssh")
	wantReason(t, r, 502, tenants.EUpstreamFailed, "the upstream http://"+addr+" sent an answer that is not valid HTTP")
}

// A certificate for another name is refused before its authority is looked at.
func TestUpstreamReasonTLSName(t *testing.T) {
	h, _ := reasonHarness(t)
	leaf := testcert.NewCA(t).Issue(t, []string{"other.example"}, time.Time{}, time.Time{})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf.TLS}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()
	addr := ln.Addr().String()
	acme := h.tenant("acme")
	h.route(acme, "tls", []string{"/tls"}, nil, "", "https://"+addr)
	h2 := &tenants.Route{ID: "tls-h2", TenantID: acme, Name: "tls-h2", Paths: []string{"/tls-h2"},
		Upstream: tenants.Upstream{Protocol: tenants.ProtocolH2, Targets: []tenants.Target{{URL: "https://" + addr}}}}
	h.put(h2)
	h.e.Loaded()
	want := "the upstream https://" + addr + "'s TLS handshake failed: certificate is not valid for 127.0.0.1"
	wantReason(t, h.get("acme."+domain, "/tls"), 502, tenants.EUpstreamFailed, want)
	wantReason(t, h.get("acme."+domain, "/tls-h2"), 502, tenants.EUpstreamFailed, want)
}

func TestH2UpstreamReasonRefused(t *testing.T) {
	h, _ := reasonHarness(t)
	addr := closedPort(t)
	acme := h.tenant("acme")
	h.put(&tenants.Route{ID: "h2", TenantID: acme, Name: "h2", Paths: []string{"/h2"},
		Upstream: tenants.Upstream{Protocol: tenants.ProtocolH2, Targets: []tenants.Target{{URL: "http://" + addr}}}})
	h.e.Loaded()
	r := h.get("acme."+domain, "/h2")
	wantReason(t, r, 502, tenants.EUpstreamFailed, "the upstream http://"+addr+" refused the connection")
}

// A gRPC call is told the same reason in Grpc-Message; one whose own deadline passed
// first is told that deadline, not the route's.
func TestGRPCUpstreamReason(t *testing.T) {
	h, _ := reasonHarness(t)
	closed := closedPort(t)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	silent := rawListener(t, func(c net.Conn) { <-done; _ = c.Close() })
	acme := h.tenant("acme")
	for id, addr := range map[string]string{"Closed": closed, "Silent": silent} {
		h.put(&tenants.Route{ID: id, TenantID: acme, Name: id, Paths: []string{"/tollgate.test." + id}, TimeoutMS: 30000,
			Upstream: tenants.Upstream{Protocol: tenants.ProtocolH2, Targets: []tenants.Target{{URL: "http://" + addr}}}})
	}
	h.e.Loaded()
	waitFor(t, 2*time.Second, func() string {
		if s := h.e.Snapshot("acme"); s == nil || s.Routes() != 2 {
			return "routes not compiled yet"
		}
		return ""
	})

	md, err := grpcCall(t, grpcClient(t, h.public), "/tollgate.test.Closed/Call")
	wantGRPCStatus(t, "closed port", err, md, codes.Unavailable,
		"the upstream http://"+closed+" refused the connection", tenants.EUpstreamFailed)

	// Sent by hand, so that the edge's answer, not the client's own deadline, ends it.
	req, err := http.NewRequest("POST", "http://"+h.public+"/tollgate.test.Silent/Call", strings.NewReader("\x00\x00\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "acme." + domain
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", "300m")
	resp, _ := h2Do(t, h2cClient(), req)
	msg, _ := url.PathUnescape(resp.Header.Get("Grpc-Message"))
	want := "the upstream http://" + silent + " did not answer within 300 ms"
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" || msg != want {
		t.Errorf("silent upstream: %d grpc-status %q message %q, want 200 4 %q (%v)",
			resp.StatusCode, resp.Header.Get("Grpc-Status"), msg, want, resp.Header)
	}
}
