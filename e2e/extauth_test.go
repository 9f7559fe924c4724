package e2e

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestExternalAuth runs a route with "auth": "external" through real api and edge
// processes, against a tenant's authorizer over HTTPS on loopback (the edge trusts its
// test certificate through SSL_CERT_FILE, as it would a private CA): allow with a
// consumer and a header, deny, the cache, a timeout failing closed, and an authorizer
// address the operator's rule refuses (at save time in the api; at connect time in an
// edge whose rule is narrower, which then never connects).
func TestExternalAuth(t *testing.T) {
	t.Parallel()
	var calls, slowCalls atomic.Int64
	release := make(chan struct{})
	authz := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Tenant, Route, Path string
			Headers             map[string]string
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/slow" {
			slowCalls.Add(1)
			select {
			case <-release:
			case <-time.After(3 * time.Second):
			}
			io.WriteString(w, `{"allow": true}`)
			return
		}
		calls.Add(1)
		tok := strings.TrimPrefix(req.Headers["Authorization"], "Bearer ")
		switch {
		case strings.HasPrefix(tok, "good") && req.Tenant == "xauth" && req.Route == "orders":
			json.NewEncoder(w).Encode(map[string]any{"allow": true, "consumer": "alice", "headers": map[string]string{"X-User": "u-" + tok}})
		case tok == "":
			io.WriteString(w, `{"allow": false, "status": 401, "message": "sign in at acme first"}`)
		default:
			io.WriteString(w, `{"allow": false, "status": 403, "message": "not yours"}`)
		}
	}))
	t.Cleanup(authz.Close)
	t.Cleanup(func() { close(release) })
	caFile := filepath.Join(t.TempDir(), "authz-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: authz.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	// The refused authorizer: on 127.0.0.2, which the edge's rule below leaves out.
	refused, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			c, err := refused.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { refused.Close() })

	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge("SSL_CERT_FILE="+caFile, "TOLLGATE_UPSTREAM_ALLOW_CIDRS=127.0.0.1/32")
	t.Cleanup(edge.close)
	up := echoUpstream(t, "xauth-up")
	api.createTenant("xauth")
	aliceID := api.createConsumer("xauth", "alice")
	api.createRoute("xauth", routeSpec("orders", "/orders", up.URL, "external",
		"external_auth", map[string]any{"url": authz.URL + "/check", "headers": []string{"Authorization"}}))
	api.createRoute("xauth", routeSpec("slow", "/slow", up.URL, "external",
		"external_auth", map[string]any{"url": authz.URL + "/slow", "timeout_ms": 300}))
	api.createRoute("xauth", routeSpec("refused", "/refused", up.URL, "external",
		"external_auth", map[string]any{"url": "https://" + refused.Addr().String()}))

	// Save time: plain http, and an address outside the operator's rule, are refused.
	for _, u := range []string{"http://" + strings.TrimPrefix(authz.URL, "https://"), "https://10.1.2.3/check"} {
		r := api.call("POST", "/v1/tenants/xauth/routes", routeSpec("bad", "/bad", up.URL, "external", "external_auth", map[string]any{"url": u}))
		if r.Status != 400 || !strings.Contains(string(r.Raw), "external_auth.url") {
			t.Fatalf("external_auth.url %s: %s", u, r)
		}
	}

	good := []string{"Authorization", "Bearer good-1"}
	eventually(t, 30*time.Second, "the external route is served", served(edge, "xauth", "/orders", "xauth-up", good...))
	e := decodeEcho(t, edge.get(t, "xauth", "/orders/7", good...))
	if got := http.Header(e.Headers).Get("X-User"); got != "u-good-1" {
		t.Errorf("upstream X-User = %q", got)
	}
	if http.Header(e.Headers).Get("X-Consumer-Id") != aliceID || http.Header(e.Headers).Get("X-Consumer-Name") != "alice" {
		t.Errorf("upstream consumer: %v", e.Headers)
	}

	// Cache: the first request above asked; the others with the same token did not.
	before := calls.Load()
	for i := 0; i < 3; i++ {
		decodeEcho(t, edge.get(t, "xauth", "/orders", good...))
	}
	if n := calls.Load() - before; n != 0 {
		t.Errorf("three requests with a cached credential asked the authorizer %d times", n)
	}
	other := []string{"Authorization", "Bearer good-2"}
	if got := http.Header(decodeEcho(t, edge.get(t, "xauth", "/orders", other...)).Headers).Get("X-User"); got != "u-good-2" {
		t.Errorf("a second credential: X-User %q", got)
	}
	if n := calls.Load() - before; n != 1 {
		t.Errorf("a second credential asked %d times, want 1", n)
	}

	// Deny.
	wantEnvelope(t, edge.get(t, "xauth", "/orders", "Authorization", "Bearer mallory"), 403, "forbidden")
	r := edge.get(t, "xauth", "/orders")
	wantEnvelope(t, r, 401, "unauthenticated")
	if !strings.Contains(string(r.Body), "sign in at acme first") {
		t.Errorf("the authorizer's message is not in the envelope: %s", r)
	}

	// Timeout: fail closed within about timeout_ms, and ask again next time.
	for i := 0; i < 2; i++ {
		start := time.Now()
		wantEnvelope(t, edge.get(t, "xauth", "/slow", good...), 503, "authorizer_failed")
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a 300 ms authorizer timeout took %v", d)
		}
	}
	if n := slowCalls.Load(); n != 2 {
		t.Errorf("the slow authorizer was asked %d times for two requests (a failure must not be cached)", n)
	}

	// An address the edge's rule refuses: 503, and no connection.
	r = edge.get(t, "xauth", "/refused", good...)
	wantEnvelope(t, r, 503, "authorizer_failed")
	if !strings.Contains(string(r.Body), "policy") {
		t.Errorf("refused address: %s", r)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the edge connected %d times to an address its rule refuses", n)
	}
}
