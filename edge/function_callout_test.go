package edge_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"tollgate/edge"
	"tollgate/edge/function/functiontest"
	"tollgate/tenants"
)

// checkService is the tenant's authorization service a callout asks: GET /check<path>
// answers 200 with a token for the path, or 401 for a path with "deny" in it.
type checkService struct {
	*httptest.Server
	hits atomic.Int64
	mu   sync.Mutex
	seen []string // "METHOD URI host"
}

func newCheckService(t *testing.T, addr string) *checkService {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	s := &checkService{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		s.seen = append(s.seen, r.Method+" "+r.RequestURI+" "+r.Host)
		s.mu.Unlock()
		if strings.Contains(r.URL.Path, "deny") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("token-for-" + strings.TrimPrefix(r.URL.Path, "/check")))
	}))
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *checkService) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// A route's function asks the tenant's authorization service (a proxy_http_call callout
// to a real HTTP server) and uses its answer: the body goes upstream as a header, a 401
// turns the request away. A callout to an address the operator's rules refuse never
// leaves the edge: the function gets the failed callout's empty answer (no :status, no
// body), as docs/functions.md says, and this guest refuses the request on it.
func TestFunctionCallout(t *testing.T) {
	// 127.0.0.1 is allowed; 127.0.0.2, loopback too and listening, is not.
	rule := &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	env := newFnEnv(t)
	h := newHarness(t, env.config(nil), func(c *edge.Config) { c.AddressRule = rule })
	up := newUpstream(t, "up")
	allowed := newCheckService(t, "127.0.0.1:0")
	refused := newCheckService(t, "127.0.0.2:0")
	acme := h.tenant("acme")
	h.fnRoute(acme, "r-checked", "/checked", tenants.AuthNone,
		[]tenants.FunctionRef{env.ref(functiontest.Callout, "http://"+allowed.Listener.Addr().String())}, up.URL)
	h.fnRoute(acme, "r-refused", "/refused", tenants.AuthNone,
		[]tenants.FunctionRef{env.ref(functiontest.Callout, refused.Listener.Addr().String())}, up.URL)
	h.e.Loaded()
	host := "acme." + domain

	r := h.get(host, "/checked/orders")
	if r.status != 200 || r.echo == nil || r.echo.get("X-Auth") != "token-for-/checked/orders" {
		t.Fatalf("/checked/orders: %v; the upstream saw x-auth %q", r, r.echo.get("X-Auth"))
	}
	if got := allowed.requests(); len(got) != 1 || got[0] != "GET /check/checked/orders auth.internal" {
		t.Fatalf("the authorization service saw %q, want one GET /check/checked/orders with Host auth.internal", got)
	}

	hits := up.hits.Load()
	r = h.get(host, "/checked/deny")
	if r.status != 403 || r.body != "the authorization service said 401" {
		t.Fatalf("/checked/deny: %v, want the function's 403", r)
	}
	if up.hits.Load() != hits {
		t.Fatal("a request the function refused on the callout's answer reached the upstream")
	}

	r = h.get(host, "/refused/orders")
	if r.status != 403 || r.body != "the authorization service said " {
		t.Fatalf("/refused/orders: %v, want the function's 403 on an empty answer", r)
	}
	if n := refused.hits.Load(); n != 0 {
		t.Fatalf("a callout to a refused address reached it (%d requests)", n)
	}
	if up.hits.Load() != hits {
		t.Fatal("a request whose callout was refused reached the upstream")
	}
	// Refusing the callout is not the function failing: its answer is the client's.
	if n := h.metric("tollgate_function_calls_total", map[string]string{"tenant": "acme", "outcome": "failed"}); n != 0 {
		t.Errorf("tollgate_function_calls_total{outcome=failed} = %v, want 0", n)
	}
	if n := h.metric("tollgate_function_calls_total", map[string]string{"tenant": "acme", "outcome": "local_reply"}); n != 2 {
		t.Errorf("tollgate_function_calls_total{outcome=local_reply} = %v, want 2", n)
	}
}
