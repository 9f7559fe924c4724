package edge_test

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/edge"
	"tollgate/tenants"
)

// authzServer is a tenant's authorizer over real TLS on loopback: answer decides each
// answer from the request the edge sent.
type authzServer struct {
	*httptest.Server
	calls  atomic.Int64
	mu     sync.Mutex
	answer func(req authzRequest) (status int, body string)
	last   authzRequest
}

// authzRequest is what the edge sends an authorizer.
type authzRequest struct {
	Tenant    string            `json:"tenant"`
	Route     string            `json:"route"`
	Method    string            `json:"method"`
	Path      string            `json:"path"`
	Host      string            `json:"host"`
	Query     string            `json:"query"`
	SourceIP  string            `json:"source_ip"`
	RequestID string            `json:"request_id"`
	Headers   map[string]string `json:"headers"`
}

func newAuthzServer(t testing.TB, answer func(authzRequest) (int, string)) *authzServer {
	a := &authzServer{answer: answer}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.calls.Add(1)
		var req authzRequest
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &req) != nil {
			http.Error(w, "bad request from the edge: "+string(b), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.last = req
		f := a.answer
		a.mu.Unlock()
		status, body := f(req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *authzServer) setAnswer(f func(authzRequest) (int, string)) {
	a.mu.Lock()
	a.answer = f
	a.mu.Unlock()
}

func (a *authzServer) lastRequest() authzRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// trusting makes the edge trust the authorizers' test certificates.
func trusting(servers ...*httptest.Server) func(*edge.Config) {
	return func(c *edge.Config) {
		pool := x509.NewCertPool()
		for _, s := range servers {
			pool.AddCert(s.Certificate())
		}
		c.AuthorizerRootCAs = pool
	}
}

func intp(n int) *int { return &n }

// externalRoute files a route with auth external on /api.
func (h *harness) externalRoute(tenantID, id, authzURL, upstream string, ea tenants.ExternalAuth) {
	h.t.Helper()
	ea.URL = authzURL
	r := &tenants.Route{ID: id, TenantID: tenantID, Name: id, Paths: []string{"/api"}, Auth: tenants.AuthExternal,
		ExternalAuth: &ea, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upstream, Weight: 1}}}}
	h.put(r)
}

func allowAs(consumer string, headers map[string]string) func(authzRequest) (int, string) {
	return func(authzRequest) (int, string) {
		b, _ := json.Marshal(map[string]any{"allow": true, "consumer": consumer, "headers": headers})
		return 200, string(b)
	}
}

// byToken allows "Bearer good-*" tokens as consumer alice and denies the rest with 401.
func byToken(req authzRequest) (int, string) {
	if strings.HasPrefix(req.Headers["Authorization"], "Bearer good") {
		return 200, `{"allow": true, "consumer": "alice", "headers": {"X-User": "u-` + strings.TrimPrefix(req.Headers["Authorization"], "Bearer ") + `"}}`
	}
	return 200, `{"allow": false, "status": 401, "message": "token refused by acme's auth"}`
}

func TestExternalAuthAllowAndDeny(t *testing.T) {
	az := newAuthzServer(t, byToken)
	up := newUpstream(t, "up")
	h := newHarness(t, trusting(az.Server))
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.externalRoute(acme, "orders", az.URL+"/check", up.URL, tenants.ExternalAuth{})
	h.e.Loaded()

	r := h.get("acme."+domain, "/api/orders?x=1", "Authorization: Bearer good-1", "Cookie: s=1", "X-User: forged", "X-Other: o")
	if r.status != 200 || r.echo == nil {
		t.Fatalf("allow: %v", r)
	}
	if got := r.echo.get("X-User"); got != "u-good-1" {
		t.Errorf("upstream X-User = %q, want the authorizer's (not the client's)", got)
	}
	if r.echo.get("X-Consumer-Id") != "c-alice" || r.echo.get("X-Consumer-Name") != "alice" {
		t.Errorf("upstream consumer headers: %v", r.echo.Header)
	}
	if r.echo.get("Authorization") != "Bearer good-1" {
		t.Errorf("Authorization not passed on: %v", r.echo.Header)
	}
	got := az.lastRequest()
	want := authzRequest{Tenant: "acme", Route: "orders", Method: "GET", Path: "/api/orders", Host: "acme." + domain, Query: "x=1",
		SourceIP: "127.0.0.1", Headers: map[string]string{"Authorization": "Bearer good-1", "Cookie": "s=1"}}
	got.RequestID = ""
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("authorizer got %+v\nwant %+v", got, want)
	}
	if r.header.Get("X-Request-Id") == "" || az.lastRequest().RequestID != r.header.Get("X-Request-Id") {
		t.Errorf("request id: authorizer %q, client %q", az.lastRequest().RequestID, r.header.Get("X-Request-Id"))
	}

	// Deny: the authorizer's status and message in the envelope.
	r = h.get("acme."+domain, "/api/orders", "Authorization: Bearer bad")
	if r.status != 401 || r.errCode() != tenants.EInvalidCredential || !strings.Contains(r.body, "token refused by acme's auth") || r.echo != nil {
		t.Fatalf("deny: %v", r)
	}
	r = h.get("acme."+domain, "/api/orders")
	if r.status != 401 || r.errCode() != tenants.EUnauthenticated {
		t.Fatalf("deny without a credential: %v", r)
	}
	for _, c := range []struct {
		answer, code string
		status       int
	}{
		{`{"allow": false}`, tenants.EForbidden, 403},
		{`{"allow": false, "status": 403, "message": "not your order"}`, tenants.EForbidden, 403},
		{`{"allow": false, "status": 402, "message": "pay first", "extra": [1]}`, tenants.EAuthorizerDenied, 402},
	} {
		az.setAnswer(func(authzRequest) (int, string) { return 200, c.answer })
		r = h.get("acme."+domain, "/api/orders", "Authorization: Bearer "+c.answer)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: got %v, want %d %s", c.answer, r, c.status, c.code)
		}
	}
	if n := h.metric("tollgate_edge_external_auth_total", map[string]string{"result": "allow"}); n != 1 {
		t.Errorf("allow count %v", n)
	}
}

func TestExternalAuthNoConsumer(t *testing.T) {
	az := newAuthzServer(t, allowAs("", nil))
	up := newUpstream(t, "up")
	h := newHarness(t, trusting(az.Server))
	acme := h.tenant("acme")
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{})
	h.e.Loaded()
	r := h.get("acme."+domain, "/api", "X-Consumer-Id: forged")
	if r.status != 200 || r.echo.has("X-Consumer-Id") || r.echo.has("X-Consumer-Name") {
		t.Fatalf("%v %v", r, r.echo)
	}
}

func TestExternalAuthCache(t *testing.T) {
	az := newAuthzServer(t, byToken)
	up := newUpstream(t, "up")
	h := newHarness(t, trusting(az.Server))
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{})
	h.e.Loaded()
	get := func(tok string) result { return h.get("acme."+domain, "/api", "Authorization: Bearer "+tok) }

	for i := 0; i < 2; i++ {
		if r := get("good-a"); r.status != 200 || r.echo.get("X-User") != "u-good-a" || r.echo.get("X-Consumer-Id") != "c-alice" {
			t.Fatalf("hit %d: %v", i, r)
		}
	}
	if n := az.calls.Load(); n != 1 {
		t.Fatalf("two requests with one credential: %d authorizer calls, want 1", n)
	}
	if r := get("good-b"); r.status != 200 || r.echo.get("X-User") != "u-good-b" {
		t.Fatalf("second credential: %v", r)
	}
	if n := az.calls.Load(); n != 2 {
		t.Fatalf("a second credential: %d calls, want 2", n)
	}
	// Denials are cached too.
	for i := 0; i < 2; i++ {
		if r := get("bad"); r.status != 401 || !strings.Contains(r.body, "acme's auth") {
			t.Fatalf("deny %d: %v", i, r)
		}
	}
	if n := az.calls.Load(); n != 3 {
		t.Fatalf("two denied requests: %d calls, want 3", n)
	}
	if n := h.metric("tollgate_edge_external_auth_total", map[string]string{"result": "cached_allow"}); n != 1 {
		t.Errorf("cached_allow = %v", n)
	}
	// A changed route forgets its answers.
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{TimeoutMS: 999})
	waitFor(t, 2*time.Second, func() string {
		if r := get("good-a"); r.status != 200 {
			return r.String()
		}
		if n := az.calls.Load(); n != 4 {
			return fmt.Sprintf("%d calls after the route changed, want 4", n)
		}
		return ""
	})
	// cache_ttl_s 0: every request asks.
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{CacheTTLS: intp(0)})
	waitFor(t, 2*time.Second, func() string {
		before := az.calls.Load()
		get("good-a")
		get("good-a")
		if n := az.calls.Load() - before; n != 2 {
			return fmt.Sprintf("no cache: %d calls for two requests", n)
		}
		return ""
	})
}

// TestExternalAuthTTL: an answer's ttl_s overrides the route's.
func TestExternalAuthTTL(t *testing.T) {
	az := newAuthzServer(t, func(authzRequest) (int, string) { return 200, `{"allow": true, "ttl_s": 0}` })
	up := newUpstream(t, "up")
	h := newHarness(t, trusting(az.Server))
	acme := h.tenant("acme")
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{})
	h.e.Loaded()
	h.get("acme."+domain, "/api")
	h.get("acme."+domain, "/api")
	if n := az.calls.Load(); n != 2 {
		t.Fatalf("ttl_s 0: %d calls, want 2", n)
	}
}

func TestExternalAuthFailsClosed(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var answer atomic.Value
	answer.Store("")
	az := newAuthzServer(t, func(req authzRequest) (int, string) {
		switch a := answer.Load().(string); a {
		case "slow":
			select {
			case <-release:
			case <-time.After(2 * time.Second):
			}
			return 200, `{"allow": true}`
		case "500":
			return 500, `{"allow": true}`
		case "huge":
			return 200, `{"allow": true, "pad": "` + strings.Repeat("x", 70<<10) + `"}`
		default:
			return 200, a
		}
	})
	up := newUpstream(t, "up")
	h := newHarness(t, trusting(az.Server))
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{TimeoutMS: 200})
	h.e.Loaded()

	for _, c := range []struct{ answer, reason string }{
		{"slow", "timeout"},
		{"500", "status"},
		{"huge", "too_large"},
		{"not json", "bad_answer"},
		{`{"consumer": "alice"}`, "bad_answer"},
		{`{"allow": "yes"}`, "bad_answer"},
		{`{"allow": false, "status": 302}`, "bad_answer"},
		{`{"allow": false, "status": 500}`, "bad_answer"},
		{`{"allow": true, "headers": {"X-Consumer-Id": "admin"}}`, "bad_answer"},
		{`{"allow": true, "headers": {"X-Forwarded-For": "1.2.3.4"}}`, "bad_answer"},
		{`{"allow": true, "headers": {"Transfer-Encoding": "chunked"}}`, "bad_answer"},
		{`{"allow": true, "headers": {"X_User": "a"}}`, "bad_answer"},
		{`{"allow": true, "headers": {"X-User": "a\r\nX-Evil: 1"}}`, "bad_answer"},
		{`{"allow": true, "ttl_s": 99999}`, "bad_answer"},
		{`{"allow": true, "consumer": "mallory"}`, "unknown_consumer"},
	} {
		answer.Store(c.answer)
		before := az.calls.Load()
		for i := 0; i < 2; i++ { // never cached: each request asks again
			start := time.Now()
			r := h.get("acme."+domain, "/api", "Authorization: Bearer x")
			if r.status != 503 || r.errCode() != tenants.EAuthorizerFailed || r.echo != nil || up.hits.Load() != 0 {
				t.Fatalf("%s: %v", c.answer, r)
			}
			if c.reason == "timeout" && time.Since(start) > time.Second {
				t.Errorf("timeout took %v with timeout_ms 200", time.Since(start))
			}
			if strings.Contains(r.body, "mallory") || strings.Contains(r.body, "admin") {
				t.Errorf("the authorizer's detail reached the client: %s", r.body)
			}
		}
		if n := az.calls.Load() - before; n != 2 {
			t.Errorf("%s: %d authorizer calls for two requests, want 2 (failures are not cached)", c.answer, n)
		}
		if n := h.metric("tollgate_edge_external_auth_failures_total", map[string]string{"reason": c.reason}); n < 2 {
			t.Errorf("%s: failures{reason=%s} = %v", c.answer, c.reason, n)
		}
	}
}

// TestExternalAuthRefusedAddress: an authorizer at an address the operator's rule
// refuses is never connected to; the request fails closed.
func TestExternalAuthRefusedAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	up := newUpstream(t, "up")
	h := newHarness(t, func(c *edge.Config) {
		c.AddressRule = &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	})
	acme := h.tenant("acme")
	h.externalRoute(acme, "r", "https://"+ln.Addr().String(), up.URL, tenants.ExternalAuth{})
	h.e.Loaded()
	r := h.get("acme."+domain, "/api", "Authorization: Bearer x")
	if r.status != 503 || r.errCode() != tenants.EAuthorizerFailed || !strings.Contains(r.body, "policy") {
		t.Fatalf("%v", r)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the edge connected %d times to a refused address", n)
	}
	if n := h.metric("tollgate_edge_external_auth_failures_total", map[string]string{"reason": "refused_address"}); n != 1 {
		t.Fatalf("refused_address = %v", n)
	}
}

// TestExternalAuthUntrustedCertificate: TLS is verified.
func TestExternalAuthUntrustedCertificate(t *testing.T) {
	az := newAuthzServer(t, allowAs("", nil))
	up := newUpstream(t, "up")
	h := newHarness(t) // the test certificate is not trusted
	acme := h.tenant("acme")
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{})
	h.e.Loaded()
	if r := h.get("acme."+domain, "/api"); r.status != 503 || r.errCode() != tenants.EAuthorizerFailed {
		t.Fatalf("%v", r)
	}
}

func TestExternalAuthConcurrent(t *testing.T) {
	az := newAuthzServer(t, byToken)
	up := newUpstream(t, "up")
	h := newHarness(t, trusting(az.Server))
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{})
	h.e.Loaded()
	var wg sync.WaitGroup
	errs := make(chan string, 200)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				tok := fmt.Sprintf("good-%d", i%5)
				want := 200
				if i%4 == 3 {
					tok, want = fmt.Sprintf("bad-%d", i), 401
				}
				r := send(t, h.public, "GET", "acme."+domain, "/api", []string{"Authorization: Bearer " + tok}, "")
				if r.status != want || want == 200 && r.echo.get("X-User") != "u-"+tok {
					errs <- fmt.Sprintf("%s: %v", tok, r)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestExternalAuthCoalesces: concurrent first requests with one credential ask the
// authorizer once; other credentials are not held up by it.
func TestExternalAuthCoalesces(t *testing.T) {
	az := newAuthzServer(t, func(req authzRequest) (int, string) {
		if req.Headers["Authorization"] == "Bearer slow" {
			time.Sleep(time.Second)
		}
		return 200, `{"allow": true, "consumer": "alice"}`
	})
	up := newUpstream(t, "up")
	h := newHarness(t, trusting(az.Server))
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.externalRoute(acme, "r", az.URL, up.URL, tenants.ExternalAuth{})
	h.e.Loaded()
	var wg sync.WaitGroup
	errs := make(chan string, 10)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := send(t, h.public, "GET", "acme."+domain, "/api", []string{"Authorization: Bearer slow"}, ""); r.status != 200 || r.echo.get("X-Consumer-Id") != "c-alice" {
				errs <- r.String()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if r := h.get("acme."+domain, "/api", "Authorization: Bearer quick"); r.status != 200 || time.Since(start) > 900*time.Millisecond {
		t.Errorf("another credential waited %v: %v", time.Since(start), r)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := az.calls.Load(); n != 2 {
		t.Errorf("six concurrent requests with one credential and one with another: %d authorizer calls, want 2", n)
	}
}
