package edge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge"
	"tollgate/tenants"
)

// TestDoorMethods: a route that takes every method is sent any method token, the ones
// Fiber routes and the ones it does not (WebDAV's, QUERY), and the edge's own answers to
// them are JSON.
func TestDoorMethods(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "any", []string{"/any"}, nil, "", up.URL)
	h.route(acme, "get", []string{"/get"}, []string{"GET"}, "", up.URL)
	h.e.Loaded()
	for _, m := range []string{"GET", "DELETE", "PATCH", "OPTIONS", "PROPFIND", "QUERY", "BREW"} {
		r := send(t, h.public, m, "acme."+domain, "/any/x", nil, "")
		if r.status != 200 || r.echo == nil || r.echo.Method != m || r.echo.RequestURI != "/any/x" {
			t.Errorf("%s /any/x: %s, want 200 from the upstream", m, r)
		}
	}
	for _, m := range []string{"POST", "PROPFIND"} {
		r := send(t, h.public, m, "acme."+domain, "/get", nil, "")
		if r.status != 405 || r.errCode() != tenants.EMethodNotAllowed || r.header.Get("Allow") != "GET" || r.header.Get("X-Request-Id") == "" {
			t.Errorf("%s /get: %s %v, want 405 %s with Allow: GET and a request id", m, r, r.header, tenants.EMethodNotAllowed)
		}
	}
	for _, m := range []string{"POST", "PROPFIND"} {
		r := send(t, h.public, m, "nobody."+domain, "/any", nil, "")
		if r.status != 404 || r.errCode() != tenants.ETenantNotFound {
			t.Errorf("%s to no tenant: %s, want 404 %s", m, r, tenants.ETenantNotFound)
		}
	}
}

// TestDoorRefusals: what Fiber's server refuses before the chain runs is answered with
// the edge's envelope, a request id, and the connection closed.
func TestDoorRefusals(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.ReadBufferSize = 4096 })
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "any", []string{"/"}, nil, "", up.URL)
	h.e.Loaded()
	for _, c := range []struct {
		name, raw string
		status    int
		message   string
	}{
		{"garbage", "\x16\x03\x01 nonsense\r\n\r\n", 400, "the request is not valid HTTP"},
		{"no version", "GET /\r\nHost: acme." + domain + "\r\n\r\n", 400, "the request is not valid HTTP"},
		{"long line", "GET /" + strings.Repeat("a", 8000) + " HTTP/1.1\r\nHost: acme." + domain + "\r\n\r\n", 400, "the request headers are too large"},
		{"long header", "GET / HTTP/1.1\r\nHost: acme." + domain + "\r\nX-Big: " + strings.Repeat("b", 8000) + "\r\n\r\n", 400, "the request headers are too large"},
		{"bad length", "POST / HTTP/1.1\r\nHost: acme." + domain + "\r\nContent-Length: x\r\n\r\n", 400, "the request is not valid HTTP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", h.public, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, c.raw); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var env struct {
				Error struct {
					Code      string `json:"code"`
					Message   string `json:"message"`
					RequestID string `json:"request_id"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &env); err != nil {
				t.Fatalf("%d %q: not the envelope: %v", resp.StatusCode, body, err)
			}
			if resp.StatusCode != c.status || env.Error.Code != tenants.EInvalidRequest || env.Error.Message != c.message {
				t.Errorf("%d %s, want %d %s %q", resp.StatusCode, body, c.status, tenants.EInvalidRequest, c.message)
			}
			if id := resp.Header.Get("X-Request-Id"); id == "" || id != env.Error.RequestID {
				t.Errorf("X-Request-Id %q, body's %q", id, env.Error.RequestID)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if s := resp.Header.Get("Server"); s != "" {
				t.Errorf("Server: %q, want none", s)
			}
			// Closed: EOF, or a reset when the edge closed with the rest of the request
			// unread.
			if b, err := br.ReadByte(); err == nil {
				t.Errorf("connection not closed after the refusal: read %q", b)
			}
		})
	}
}

// TestDoorServeAfterShutdown: a listener handed to the edge after Shutdown is closed, not
// served, and its Serve returns.
func TestDoorServeAfterShutdown(t *testing.T) {
	e, err := edge.New(edge.Config{Domain: domain, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.ServePublic(ln) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServePublic after Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		_ = ln.Close()
		t.Fatal("ServePublic after Shutdown still serving")
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts")
	}
}

// TestIdleConnectionGetsNoAnswer: a connection that sends nothing, or half a request, for
// longer than ReadTimeout is closed without a byte written: an unrequested answer would be
// read by a pooling client as the reply to the next request it sends.
func TestIdleConnectionGetsNoAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *edge.Config) { c.ReadTimeout = 300 * time.Millisecond })
	for name, sent := range map[string]string{"nothing": "", "half a request": "GET / HTTP/1.1\r\nHost: x\r\n"} {
		conn, err := net.Dial("tcp", h.public)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, sent); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(conn)
		conn.Close()
		if len(got) != 0 || err != nil {
			t.Errorf("%s sent: the edge wrote %q (err %v), want the connection closed silently", name, got, err)
		}
	}
}
