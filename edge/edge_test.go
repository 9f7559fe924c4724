package edge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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

func TestRouting(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r-hello-any", []string{"/hello"}, nil, "", up.URL)
	h.route(acme, "r-hello-get", []string{"/hello"}, []string{"GET"}, "", up.URL)
	h.route(acme, "r-hello-world", []string{"/hello/world"}, nil, "", up.URL)
	h.route(acme, "r-exact", []string{"=/exact"}, nil, "", up.URL)
	h.route(acme, "r-exact-beats-prefix", []string{"=/both"}, nil, "", up.URL)
	h.route(acme, "r-prefix-both", []string{"/both"}, nil, "", up.URL)
	h.route(acme, "r-dir", []string{"/dir/"}, nil, "", up.URL)
	h.route(acme, "r-api-post", []string{"/api"}, []string{"POST"}, "", up.URL)
	h.route(acme, "r-multi", []string{"/m1", "/m2/x"}, []string{"PUT", "DELETE"}, "", up.URL)
	other := h.tenant("other")
	h.route(other, "o-root", []string{"/"}, nil, "", up.URL)
	h.route(other, "o-api-post", []string{"/api"}, []string{"POST"}, "", up.URL)
	h.e.Loaded()

	host := "acme." + domain
	cases := []struct {
		method, host, target string
		status               int
		route                string // the route name the upstream saw via the metric; "" for errors
		upstreamURI          string
		code                 string
	}{
		{"GET", host, "/hello", 200, "r-hello-get", "/hello", ""},
		{"POST", host, "/hello", 200, "r-hello-any", "/hello", ""},
		{"GET", host, "/hello/x/y", 200, "r-hello-get", "/hello/x/y", ""},
		{"GET", host, "/hello/", 200, "r-hello-get", "/hello/", ""},
		{"GET", host, "/helloworld", 404, "", "", tenants.ERouteNotFound},
		{"GET", host, "/hello/world", 200, "r-hello-world", "/hello/world", ""},
		{"GET", host, "/hello/world/x", 200, "r-hello-world", "/hello/world/x", ""},
		{"GET", host, "/hello/worldwide", 200, "r-hello-get", "/hello/worldwide", ""},
		{"GET", host, "/exact", 200, "r-exact", "/exact", ""},
		{"GET", host, "/exact/x", 404, "", "", tenants.ERouteNotFound},
		{"GET", host, "/both", 200, "r-exact-beats-prefix", "/both", ""},
		{"GET", host, "/both/x", 200, "r-prefix-both", "/both/x", ""},
		{"GET", host, "/dir", 404, "", "", tenants.ERouteNotFound},
		{"GET", host, "/dir/", 200, "r-dir", "/dir/", ""},
		{"GET", host, "/dir/a/b", 200, "r-dir", "/dir/a/b", ""},
		{"POST", host, "/api/x", 200, "r-api-post", "/api/x", ""},
		{"GET", host, "/api/x", 405, "", "", tenants.EMethodNotAllowed},
		{"PUT", host, "/m2/x/1", 200, "r-multi", "/m2/x/1", ""},
		{"DELETE", host, "/m1", 200, "r-multi", "/m1", ""},
		{"GET", host, "/m1", 405, "", "", tenants.EMethodNotAllowed},
		{"GET", host, "/", 404, "", "", tenants.ERouteNotFound},
		// The root route takes what nothing longer takes; a longer route that does not
		// take the method falls back to it.
		{"GET", "other." + domain, "/anything/at/all", 200, "o-root", "/anything/at/all", ""},
		{"GET", "other." + domain, "/api", 200, "o-root", "/api", ""},
		{"POST", "other." + domain, "/api", 200, "o-api-post", "/api", ""},
		{"OPTIONS", "other." + domain, "/", 200, "o-root", "/", ""},
		// Host: case, port and a trailing dot are ignored; anything else is no tenant.
		{"GET", "ACME.Edge.Test:8000", "/hello", 200, "r-hello-get", "/hello", ""},
		{"GET", "acme.edge.test.", "/hello", 200, "r-hello-get", "/hello", ""},
		{"GET", "nobody." + domain, "/hello", 404, "", "", tenants.ETenantNotFound},
		{"GET", domain, "/hello", 404, "", "", tenants.ETenantNotFound},
		{"GET", "x.acme." + domain, "/hello", 404, "", "", tenants.ETenantNotFound},
		{"GET", "acme.example.com", "/hello", 404, "", "", tenants.ETenantNotFound},
		{"GET", "127.0.0.1", "/hello", 404, "", "", tenants.ETenantNotFound},
		// Absolute form: the authority names the tenant.
		{"GET", "nobody." + domain, "http://acme." + domain + "/hello?q=1", 200, "r-hello-get", "/hello?q=1", ""},
		// Normalization: the upstream gets exactly the path that was matched.
		{"GET", host, "//hello//x", 200, "r-hello-get", "/hello/x", ""},
		{"GET", host, "/x/../hello/./y", 200, "r-hello-get", "/hello/y", ""},
		{"GET", host, "/%68ello/%7Ex", 200, "r-hello-get", "/hello/~x", ""},
		{"GET", host, "/hello/%2e%2E/exact", 200, "r-exact", "/exact", ""},
		{"GET", host, "/hello/a%3fb?x=%2F&y", 200, "r-hello-get", "/hello/a%3Fb?x=%2F&y", ""},
		{"GET", host, "/hello/a%2Fb", 400, "", "", tenants.EInvalidRequest},
		{"GET", host, "/hello/a%5cb", 400, "", "", tenants.EInvalidRequest},
		{"GET", host, "/hello/%zz", 400, "", "", tenants.EInvalidRequest},
		{"GET", host, "/../hello", 400, "", "", tenants.EInvalidRequest},
		{"GET", host, "/%2e%2e/hello", 400, "", "", tenants.EInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.host+" "+c.target, func(t *testing.T) {
			r := send(t, h.public, c.method, c.host, c.target, nil, "")
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if c.code != "" {
				if r.errCode() != c.code {
					t.Fatalf("code %q, want %q: %s", r.errCode(), c.code, r.body)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("error Content-Type %q", ct)
				}
				if !strings.Contains(r.body, `"request_id":"`+r.header.Get("X-Request-Id")+`"`) || r.header.Get("X-Request-Id") == "" {
					t.Errorf("error body without the response's request id: %s", r.body)
				}
				return
			}
			if r.echo == nil {
				t.Fatalf("did not reach the upstream: %s", r)
			}
			if r.echo.RequestURI != c.upstreamURI {
				t.Errorf("upstream got %q, want %q", r.echo.RequestURI, c.upstreamURI)
			}
			if got := h.metric("http_requests_total", map[string]string{"route": c.route, "status": "2xx"}); got < 1 {
				t.Errorf("no 2xx counted for route %s", c.route)
			}
		})
	}
	t.Run("metric labels", func(t *testing.T) {
		if n := h.metric("http_requests_total", map[string]string{"gateway": "tollgate", "tenant": "acme", "route": "none", "status": "4xx"}); n < 1 {
			t.Errorf("route_not_found not counted under route none: %v", n)
		}
		if n := h.metric("http_requests_total", map[string]string{"tenant": "none", "route": "none", "status": "4xx"}); n < 1 {
			t.Errorf("tenant_not_found not counted under tenant none: %v", n)
		}
		if n := h.metric("http_request_duration_seconds", map[string]string{"tenant": "acme", "route": "r-hello-get", "status": "2xx"}); n < 1 {
			t.Errorf("no duration observed: %v", n)
		}
	})
}

func TestKeyAuth(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.URL)
	h.route(acme, "either", []string{"/either"}, nil, tenants.AuthKeyOrJWT, up.URL)
	h.route(acme, "jwt", []string{"/jwt"}, nil, tenants.AuthJWT, up.URL)
	h.route(acme, "open", []string{"/open"}, nil, tenants.AuthNone, up.URL)
	h.put(&tenants.Consumer{ID: "c1", TenantID: acme, Name: "Alice's app"})
	k1 := h.key(acme, "c1", "k1")
	k1b := h.key(acme, "c1", "k1b")
	h.put(&tenants.Consumer{ID: "c2", TenantID: acme, Name: "bob"})
	k2 := h.key(acme, "c2", "k2")
	globex := h.tenant("globex")
	h.route(globex, "g", []string{"/keyed"}, nil, tenants.AuthKey, up.URL)
	h.put(&tenants.Consumer{ID: "gc", TenantID: globex, Name: "g"})
	kg := h.key(globex, "gc", "kg")
	h.e.Loaded()
	host := "acme." + domain

	check := func(t *testing.T, r result, status int, code string) {
		t.Helper()
		if r.status != status || (code != "" && r.errCode() != code) {
			t.Fatalf("got %s, want %d %s", r, status, code)
		}
	}
	t.Run("no key", func(t *testing.T) { check(t, h.get(host, "/keyed"), 401, tenants.EUnauthenticated) })
	t.Run("empty key", func(t *testing.T) { check(t, h.get(host, "/keyed", "X-API-Key: "), 401, tenants.EUnauthenticated) })
	t.Run("wrong key", func(t *testing.T) {
		check(t, h.get(host, "/keyed", "X-API-Key: tg_nope"), 401, tenants.EInvalidCredential)
	})
	t.Run("another tenant's key", func(t *testing.T) {
		check(t, h.get(host, "/keyed", "X-API-Key: "+kg), 401, tenants.EInvalidCredential)
		check(t, h.get("globex."+domain, "/keyed", "X-API-Key: "+kg), 200, "")
	})
	t.Run("right key", func(t *testing.T) {
		r := h.get(host, "/keyed", "x-api-key: "+k1, "X-Consumer-Id: spoofed", "X-Consumer-Name: spoofed")
		check(t, r, 200, "")
		if got := r.echo.get("X-Consumer-Id"); got != "c1" {
			t.Errorf("X-Consumer-Id %q, want c1", got)
		}
		if got := r.echo.get("X-Consumer-Name"); got != "Alice's app" {
			t.Errorf("X-Consumer-Name %q", got)
		}
		if r.echo.has("X-Api-Key") {
			t.Errorf("the key went upstream")
		}
		r = h.get(host, "/keyed", "X-API-Key: "+k2)
		check(t, r, 200, "")
		if got := r.echo.get("X-Consumer-Id"); got != "c2" {
			t.Errorf("X-Consumer-Id %q, want c2", got)
		}
	})
	t.Run("key_or_jwt takes a key", func(t *testing.T) {
		check(t, h.get(host, "/either"), 401, tenants.EUnauthenticated)
		check(t, h.get(host, "/either", "X-API-Key: "+k1), 200, "")
	})
	t.Run("jwt without issuers refuses every token, and ignores keys", func(t *testing.T) {
		check(t, h.get(host, "/jwt", "X-API-Key: "+k1, "Authorization: Bearer x.y.z"), 401, tenants.EInvalidCredential)
		check(t, h.get(host, "/jwt", "X-API-Key: "+k1), 401, tenants.EUnauthenticated)
	})
	t.Run("open route passes headers but not identity", func(t *testing.T) {
		r := h.get(host, "/open", "X-API-Key: whatever", "X-Consumer-Id: spoofed")
		check(t, r, 200, "")
		if r.echo.has("X-Consumer-Id") {
			t.Errorf("spoofed X-Consumer-Id went upstream")
		}
		if r.echo.get("X-Api-Key") != "whatever" {
			t.Errorf("an open route should pass X-API-Key through")
		}
	})
	t.Run("deleted key", func(t *testing.T) {
		h.del(tenants.ObjectKey(acme, tenants.KindKey, "k1"))
		waitFor(t, 2*time.Second, func() string {
			if r := h.get(host, "/keyed", "X-API-Key: "+k1); r.status != 401 || r.errCode() != tenants.EInvalidCredential {
				return "deleted key still accepted: " + r.String()
			}
			return ""
		})
		check(t, h.get(host, "/keyed", "X-API-Key: "+k1b), 200, "")
	})
	t.Run("deleted consumer", func(t *testing.T) {
		h.del(tenants.ObjectKey(acme, tenants.KindConsumer, "c2"))
		waitFor(t, 2*time.Second, func() string {
			if r := h.get(host, "/keyed", "X-API-Key: "+k2); r.status != 401 {
				return "key of a deleted consumer still accepted: " + r.String()
			}
			return ""
		})
	})
}

func TestProxyHeaders(t *testing.T) {
	up := newUpstream(t, "up")
	up.hook = func(w http.ResponseWriter) {
		w.Header().Set("Connection", "X-Hop-Named")
		w.Header().Set("X-Hop-Named", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.Header().Set("X-Kept", "yes")
	}
	spoof := []string{
		"Connection: keep-alive, X-Secret, x-other",
		"X-Secret: 1",
		"X-Other: 2",
		"Keep-Alive: timeout=5",
		"TE: trailers",
		"Upgrade: websocket",
		"Proxy-Authorization: Basic Zm9vOmJhcg==",
		"X-Forwarded-For: 6.6.6.6",
		"X-Forwarded-For: 7.7.7.7",
		"X-Forwarded-Proto: https",
		"X-Forwarded-Host: evil.example",
		"Forwarded: for=6.6.6.6",
		"X-Consumer-Id: spoofed",
		"X-Consumer-Name: spoofed",
		"X-Tollgate-Plan: gold",
		"x-tollgate-anything: 1",
		"X-Custom: kept",
		"X-Request-Id: req-123.abc",
	}
	stripped := []string{"X-Secret", "X-Other", "Keep-Alive", "Te", "Upgrade", "Proxy-Authorization",
		"Forwarded", "X-Consumer-Id", "X-Consumer-Name", "X-Tollgate-Plan", "X-Tollgate-Anything"}

	t.Run("untrusted peer", func(t *testing.T) {
		h := newHarness(t)
		acme := h.tenant("acme")
		h.route(acme, "r", []string{"/"}, nil, "", up.URL)
		h.e.Loaded()
		r := h.get("acme."+domain+":8000", "/x", spoof...)
		if r.echo == nil {
			t.Fatalf("no upstream: %s", r)
		}
		for _, k := range stripped {
			if r.echo.has(k) {
				t.Errorf("%s went upstream: %q", k, r.echo.get(k))
			}
		}
		if r.echo.get("X-Custom") != "kept" {
			t.Errorf("X-Custom lost")
		}
		if r.echo.get("Connection") != "" && !strings.EqualFold(r.echo.get("Connection"), "keep-alive") {
			t.Errorf("Connection upstream: %q", r.echo.get("Connection"))
		}
		want := map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "acme." + domain + ":8000",
			"X-Request-Id": "req-123.abc",
		}
		for k, v := range want {
			if got := r.echo.get(k); got != v {
				t.Errorf("%s upstream %q, want %q", k, got, v)
			}
		}
		if r.echo.Host != strings.TrimPrefix(up.URL, "http://") {
			t.Errorf("upstream Host %q, want the target's", r.echo.Host)
		}
		if got := r.header.Get("X-Request-Id"); got != "req-123.abc" {
			t.Errorf("response X-Request-Id %q", got)
		}
		for _, k := range []string{"X-Hop-Named", "Keep-Alive", "Proxy-Authenticate"} {
			if v := r.header.Get(k); v != "" {
				t.Errorf("response hop-by-hop %s reached the client: %q", k, v)
			}
		}
		if r.header.Get("X-Kept") != "yes" {
			t.Errorf("response header X-Kept lost")
		}
		// A request without an id gets one, the same on both sides.
		r = h.get("acme."+domain, "/x")
		id := r.header.Get("X-Request-Id")
		if len(id) < 16 || r.echo.get("X-Request-Id") != id {
			t.Errorf("generated request id %q, upstream saw %q", id, r.echo.get("X-Request-Id"))
		}
		// An unusable client id is replaced.
		r = h.get("acme."+domain, "/x", "X-Request-Id: has space\"quote")
		if id := r.header.Get("X-Request-Id"); strings.Contains(id, " ") || r.echo.get("X-Request-Id") != id {
			t.Errorf("bad client request id kept: %q", id)
		}
	})
	t.Run("trusted peer", func(t *testing.T) {
		h := newHarness(t, func(c *edge.Config) {
			c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		})
		acme := h.tenant("acme")
		h.route(acme, "r", []string{"/"}, nil, "", up.URL)
		h.e.Loaded()
		r := h.get("acme."+domain, "/x", spoof...)
		want := map[string]string{
			"X-Forwarded-For": "6.6.6.6, 7.7.7.7, 127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example",
		}
		for k, v := range want {
			if got := r.echo.get(k); got != v {
				t.Errorf("%s upstream %q, want %q", k, got, v)
			}
		}
		if r.echo.has("X-Consumer-Id") || r.echo.has("X-Tollgate-Plan") {
			t.Errorf("identity headers pass even from trusted proxies")
		}
	})
}

func TestBodyLimit(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	r := &tenants.Route{ID: "small", TenantID: acme, Name: "small", Paths: []string{"/small"}, MaxBodyBytes: 100,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL}}}}
	h.put(r)
	h.route(acme, "big", []string{"/big"}, nil, "", up.URL) // default limit, 10 MiB
	h.e.Loaded()
	host := "acme." + domain
	post := func(target string, headers []string, body string) result {
		return send(t, h.public, "POST", host, target, headers, body)
	}
	if r := post("/small", nil, strings.Repeat("a", 100)); r.status != 200 || r.echo.Body != strings.Repeat("a", 100) {
		t.Fatalf("100 bytes: %s", r)
	}
	if r := post("/small", nil, strings.Repeat("a", 101)); r.status != 413 || r.errCode() != tenants.EBodyTooLarge {
		t.Fatalf("101 bytes: %s", r)
	}
	chunked := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(s), s) }
	if r := post("/small", []string{"Transfer-Encoding: chunked"}, chunked(strings.Repeat("b", 60))); r.status != 200 || r.echo.Body != strings.Repeat("b", 60) {
		t.Fatalf("chunked 60 bytes: %s", r)
	} else if r.echo.get("Content-Length") != "60" || r.echo.has("Transfer-Encoding") {
		t.Errorf("a chunked body goes upstream with its length: %v", r.echo.Header)
	}
	if r := post("/small", []string{"Transfer-Encoding: chunked"}, chunked(strings.Repeat("b", 150))); r.status != 413 {
		t.Fatalf("chunked 150 bytes: %s", r)
	}
	big := strings.Repeat("0123456789", 50_000) // 500 kB: over the in-memory threshold, streamed
	if r := post("/big", nil, big); r.status != 200 || len(r.echo.Body) != len(big) || r.echo.Body != big {
		t.Fatalf("500 kB body: status %d, upstream got %d bytes", r.status, len(r.echo.Body))
	}
}

func TestUpstreamFailures(t *testing.T) {
	h := newHarness(t)
	slow := newUpstream(t, "slow")
	slow.setDelay(3 * time.Second)
	down := newUpstream(t, "down")
	downURL := down.URL
	down.Close()
	acme := h.tenant("acme")
	h.route(acme, "down", []string{"/down"}, nil, "", downURL)
	h.put(&tenants.Route{ID: "slow", TenantID: acme, Name: "slow", Paths: []string{"/slow"}, TimeoutMS: 200,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: slow.URL}}}})
	// Refused by the operator's policy at dial time (link-local metadata address), and a
	// name that resolves to a refused address.
	h.route(acme, "meta", []string{"/meta"}, nil, "", "http://169.254.169.254")
	h.route(acme, "private", []string{"/private"}, nil, "", "http://10.1.2.3:8080")
	h.e.Loaded()
	host := "acme." + domain

	for _, c := range []struct {
		path   string
		status int
		code   string
		within time.Duration
	}{
		{"/down", 502, tenants.EUpstreamFailed, 2 * time.Second},
		{"/meta", 502, tenants.EUpstreamFailed, time.Second},
		{"/private", 502, tenants.EUpstreamFailed, time.Second},
		{"/slow", 504, tenants.EUpstreamTimeout, 2 * time.Second},
	} {
		start := time.Now()
		r := h.get(host, c.path)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: %s, want %d %s", c.path, r, c.status, c.code)
		}
		if d := time.Since(start); d > c.within {
			t.Errorf("%s took %v", c.path, d)
		}
	}
	if n := h.metric("tollgate_edge_upstream_errors_total", map[string]string{"kind": "policy"}); n != 2 {
		t.Errorf("policy refusals counted %v, want 2", n)
	}
	if n := h.metric("tollgate_edge_upstream_errors_total", map[string]string{"kind": "timeout"}); n != 1 {
		t.Errorf("timeouts counted %v, want 1", n)
	}
}

func TestStripPrefix(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	for _, r := range []*tenants.Route{
		{ID: "svc", Paths: []string{"/svc"}, StripPrefix: true, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL}}}},
		{ID: "slash", Paths: []string{"/slash/"}, StripPrefix: true, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL}}}},
		{ID: "based", Paths: []string{"/based"}, StripPrefix: true, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL + "/v2/"}}}},
		{ID: "exact", Paths: []string{"=/e/x"}, StripPrefix: true, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL}}}},
		{ID: "nostrip", Paths: []string{"/keep"}, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL + "/base"}}}},
	} {
		r.TenantID, r.Name = acme, r.ID
		h.put(r)
	}
	h.e.Loaded()
	for target, want := range map[string]string{
		"/svc/a/b?x=1": "/a/b?x=1",
		"/svc":         "/",
		"/svc/":        "/",
		"/svc?q":       "/?q",
		"/slash/a":     "/a",
		"/slash/":      "/",
		"/based/a":     "/v2/a",
		"/e/x":         "/",
		"/keep/a":      "/base/keep/a",
	} {
		r := h.get("acme."+domain, target)
		if r.echo == nil || r.echo.RequestURI != want {
			t.Errorf("%s: upstream got %v, want %q (%s)", target, r.echo, want, r)
		}
	}
}

func TestWeightedSplit(t *testing.T) {
	h := newHarness(t)
	a, b, c := newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "c")
	acme := h.tenant("acme")
	h.put(&tenants.Route{ID: "canary", TenantID: acme, Name: "canary", Paths: []string{"/"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: a.URL, Weight: 95}, {URL: b.URL, Weight: 5}, {URL: c.URL, Weight: 0}}}})
	h.e.Loaded()
	const n = 400
	for i := 0; i < n; i++ {
		if r := h.get("acme."+domain, "/"); r.status != 200 {
			t.Fatal(r)
		}
	}
	// One cycle of the smooth schedule is 20 picks, so 400 requests split exactly.
	if a.hits.Load() != 380 || b.hits.Load() != 20 || c.hits.Load() != 0 {
		t.Errorf("split a=%d b=%d c=%d, want 380/20/0", a.hits.Load(), b.hits.Load(), c.hits.Load())
	}
}

func TestConfigRevisions(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	r := &tenants.Route{ID: "r", TenantID: acme, Name: "r", Paths: []string{"/v1"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL}}}}
	h.putRev(r, 100)
	h.e.Loaded()
	host := "acme." + domain
	if r := h.get(host, "/v1"); r.status != 200 {
		t.Fatal(r)
	}
	ignoredBefore := h.metric("tollgate_edge_config_ignored_total", nil)

	// An older rev (a late publish) and a replay of the same rev change nothing.
	old := *r
	old.Paths = []string{"/v0"}
	h.putRev(&old, 99)
	h.putRev(&old, 100)
	// A newer one does.
	newer := *r
	newer.Paths = []string{"/v2"}
	h.putRev(&newer, 101)
	waitFor(t, 2*time.Second, func() string {
		if r := h.get(host, "/v2"); r.status != 200 {
			return "newer rev not applied: " + r.String()
		}
		return ""
	})
	if r := h.get(host, "/v0"); r.status != 404 {
		t.Errorf("older rev applied: %s", r)
	}
	if got := h.metric("tollgate_edge_config_ignored_total", nil) - ignoredBefore; got != 2 {
		t.Errorf("ignored %v entries, want 2", got)
	}

	// After a delete, a late put of the deleted entry does not bring it back.
	h.del(tenants.ObjectKey(acme, tenants.KindRoute, "r"))
	h.putRev(&newer, 101)
	waitFor(t, 2*time.Second, func() string {
		if r := h.get(host, "/v2"); r.status != 404 {
			return "deleted route still served: " + r.String()
		}
		return ""
	})

	// Deleting the tenant entry removes the tenant; an older tenant entry does not revive it.
	h.del(tenants.TenantKey(acme))
	waitFor(t, 2*time.Second, func() string {
		if r := h.get(host, "/v2"); r.status != 404 || r.errCode() != tenants.ETenantNotFound {
			return "deleted tenant still served: " + r.String()
		}
		return ""
	})
	h.putRev(&tenants.Tenant{ID: acme, Slug: "acme", Name: "acme"}, 1)
	time.Sleep(20 * time.Millisecond)
	if h.e.Snapshot("acme") != nil {
		t.Errorf("an old tenant entry revived a deleted tenant")
	}
}

func TestBadEntryKeepsSnapshot(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/ok"}, nil, "", up.URL)
	h.e.Loaded()
	host := "acme." + domain
	if r := h.get(host, "/ok"); r.status != 200 {
		t.Fatal(r)
	}
	snap := h.e.Snapshot("acme")
	routeKey := tenants.ObjectKey(acme, tenants.KindRoute, "r")
	bad := []struct {
		key, value string
	}{
		{routeKey, `{"rev":50,"route":`}, // not JSON
		{routeKey, `{"rev":51,"route":{"id":"other","tenant_id":"t-acme","name":"x","paths":["/x"]}}`}, // misfiled
		{routeKey, `{"rev":52,"route":{"id":"r","tenant_id":"t-acme","name":"r","paths":["no-slash"],"upstream":{"targets":[{"url":"http://127.0.0.1:1"}]}}}`},
		{routeKey, `{"rev":53,"route":{"id":"r","tenant_id":"t-acme","name":"r","paths":["/ok"],"upstream":{"targets":[{"url":"ftp://x"}]}}}`},
		{routeKey, `{"rev":54}`}, // no object
		{tenants.ObjectKey(acme, tenants.KindKey, "k"), `{"rev":55,"key":{"id":"k","tenant_id":"t-acme","consumer_id":"c","hash":"zz"}}`},
		{tenants.TenantKey(acme), `{"rev":56,"tenant":{"id":"t-acme","slug":"Not A Slug"}}`},
		{"garbage", `{}`},
	}
	for _, b := range bad {
		h.e.Apply(b.key, []byte(b.value), 0)
	}
	if got := h.metric("tollgate_edge_config_rejected_total", nil); got != float64(len(bad)) {
		t.Errorf("rejected %v, want %d", got, len(bad))
	}
	time.Sleep(20 * time.Millisecond)
	if h.e.Snapshot("acme") != snap {
		t.Errorf("a rejected entry recompiled the tenant")
	}
	if r := h.get(host, "/ok"); r.status != 200 {
		t.Errorf("tenant lost its last good config: %s", r)
	}
}

func TestReadiness(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.URL)
	readyz := func() int {
		resp, err := http.Get("http://" + h.admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := readyz(); s != 503 {
		t.Errorf("readyz before Loaded: %d", s)
	}
	if r := h.get("acme."+domain, "/"); r.status != 503 || r.errCode() != tenants.ENotReady {
		t.Errorf("request before Loaded: %s", r)
	}
	h.e.Loaded()
	if s := readyz(); s != 200 {
		t.Errorf("readyz after Loaded: %d", s)
	}
	if r := h.get("acme."+domain, "/"); r.status != 200 {
		t.Errorf("request after Loaded: %s", r)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get("http://" + h.admin + p)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	if resp, err := http.Get("http://" + h.admin + "/debug/pprof/"); err == nil {
		if resp.StatusCode == 200 {
			t.Errorf("pprof served without Pprof")
		}
		resp.Body.Close()
	}
}

func TestGracefulShutdown(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.Pprof = true })
	up := newUpstream(t, "up")
	up.setDelay(300 * time.Millisecond)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.URL)
	h.e.Loaded()

	resp, err := http.Get("http://" + h.admin + "/debug/pprof/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pprof: %v %v", resp, err)
	}
	resp.Body.Close()

	inflight := make(chan result, 1)
	go func() { inflight <- send(t, h.public, "GET", "acme."+domain, "/slow", nil, "") }()
	waitFor(t, 2*time.Second, func() string {
		if up.hits.Load() == 0 {
			return "request not at the upstream yet"
		}
		return ""
	})
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- h.e.Shutdown(ctx)
	}()
	waitFor(t, time.Second, func() string {
		if h.e.Ready() {
			return "still ready during shutdown"
		}
		return ""
	})
	if r := <-inflight; r.status != 200 {
		t.Errorf("in-flight request: %s", r)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestCompileCoalescing(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r0", []string{"/r0"}, nil, "", up.URL)
	h.e.Loaded()
	before := h.metric("tollgate_edge_compiles_total", nil)
	start := time.Now()
	const n = 5000
	for i := 1; i <= n; i++ {
		h.route(acme, fmt.Sprintf("r%d", i), []string{fmt.Sprintf("/r%d", i)}, nil, "", up.URL)
	}
	waitFor(t, 10*time.Second, func() string {
		if s := h.e.Snapshot("acme"); s == nil || s.Routes() != n+1 {
			return "not all routes compiled yet"
		}
		return ""
	})
	compiles := h.metric("tollgate_edge_compiles_total", nil) - before
	took := time.Since(start)
	t.Logf("%d route creations took %v compiles in %v", n, compiles, took)
	// A tenant compiles at most once per CompileDelay (1ms here). How many entries each
	// compile takes depends on the machine's speed: an incremental compile costs what
	// its changes do, so a fast one leaves fewer entries to the next.
	if compiles > float64(took/time.Millisecond)+1 || compiles >= n {
		t.Errorf("%v compiles for %d creations in %v: bursts are not coalesced", compiles, n, took)
	}
	if r := h.get("acme."+domain, fmt.Sprintf("/r%d", n)); r.status != 200 {
		t.Errorf("last route: %s", r)
	}
}

func TestInitialLoadCompilesOnce(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	for i := 0; i < 20; i++ {
		id := h.tenant(fmt.Sprintf("t%d", i))
		for j := 0; j < 50; j++ {
			h.route(id, fmt.Sprintf("r%d", j), []string{fmt.Sprintf("/r%d", j)}, nil, "", up.URL)
		}
	}
	if n := h.metric("tollgate_edge_compiles_total", nil); n != 0 {
		t.Fatalf("%v compiles before Loaded", n)
	}
	h.e.Loaded()
	if n := h.metric("tollgate_edge_compiles_total", nil); n != 20 {
		t.Errorf("%v compiles for 20 tenants at Loaded", n)
	}
	if r := h.get("t7."+domain, "/r49"); r.status != 200 {
		t.Errorf("%s", r)
	}
}

func TestMetricLabelBounds(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.MaxTenantLabels = 1; c.MaxRouteLabels = 1 })
	up := newUpstream(t, "up")
	a := h.tenant("a")
	h.route(a, "a1", []string{"/1"}, nil, "", up.URL)
	h.route(a, "a2", []string{"/2"}, nil, "", up.URL)
	b := h.tenant("b")
	h.route(b, "b1", []string{"/1"}, nil, "", up.URL)
	h.e.Loaded()
	for _, c := range [][2]string{{"a", "/1"}, {"a", "/2"}, {"b", "/1"}} {
		if r := h.get(c[0]+"."+domain, c[1]); r.status != 200 {
			t.Fatal(r)
		}
	}
	for _, c := range []struct {
		tenant, route string
		want          float64
	}{{"a", "a1", 1}, {"a", "other", 1}, {"other", "other", 1}, {"b", "b1", 0}} {
		if got := h.metric("http_requests_total", map[string]string{"tenant": c.tenant, "route": c.route}); got != c.want {
			t.Errorf("tenant=%s route=%s: %v, want %v", c.tenant, c.route, got, c.want)
		}
	}
}

func TestLargeResponsesStreamAndReuseConnections(t *testing.T) {
	h := newHarness(t)
	big := strings.Repeat("x", 2<<20)
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			for i := 0; i < 4; i++ {
				_, _ = w.Write([]byte(big[:len(big)/4]))
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		_, _ = w.Write([]byte(big))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.URL)
	h.e.Loaded()
	c := &http.Client{Transport: &http.Transport{}}
	for i := 0; i < 6; i++ {
		path := "/fixed"
		if i%2 == 1 {
			path = "/chunked"
		}
		req, _ := http.NewRequest("GET", "http://"+h.public+path, nil)
		req.Host = "acme." + domain
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(b) != len(big) {
			t.Fatalf("%s: %d, %d bytes, %v", path, resp.StatusCode, len(b), err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the edge opened %d upstream connections for 6 sequential requests, want 1", n)
	}
}

func TestAccessLog(t *testing.T) {
	var buf syncBuffer
	h := newHarness(t, func(c *edge.Config) {
		c.AccessLog = true
		c.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	})
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.URL)
	h.e.Loaded()
	r := h.get("acme."+domain, "/logged?q=1", "X-Request-Id: find-me")
	if r.status != 200 {
		t.Fatal(r)
	}
	h.get("acme."+domain, "/%2F")
	waitFor(t, 2*time.Second, func() string {
		if !strings.Contains(buf.String(), `"request_id":"find-me"`) {
			return "no access line yet: " + buf.String()
		}
		return ""
	})
	var line map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "find-me") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, v := range map[string]any{"msg": "access", "path": "/logged", "status": 200.0, "tenant": "acme", "route": "r", "method": "GET"} {
		if line[k] != v {
			t.Errorf("access line %s = %v, want %v (%v)", k, line[k], v, line)
		}
	}
	waitFor(t, 2*time.Second, func() string {
		if !strings.Contains(buf.String(), `"code":"invalid_request"`) {
			return "no access line for the refused request"
		}
		return ""
	})
}

// syncBuffer is a bytes.Buffer safe for the access log writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRouteUpdateSwitchesUpstream(t *testing.T) {
	h := newHarness(t)
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	acme := h.tenant("acme")
	r := h.route(acme, "r", []string{"/"}, nil, "", a.URL)
	h.route(acme, "other", []string{"/other"}, nil, "", a.URL)
	h.e.Loaded()
	if e := h.get("acme."+domain, "/").echo; e == nil || e.Name != "a" {
		t.Fatalf("before: %v", e)
	}
	r2 := *r
	r2.Upstream.Targets = []tenants.Target{{URL: b.URL}}
	h.put(&r2)
	waitFor(t, 2*time.Second, func() string {
		if e := h.get("acme."+domain, "/").echo; e == nil || e.Name != "b" {
			return "still on the old upstream"
		}
		return ""
	})
	if e := h.get("acme."+domain, "/other").echo; e == nil || e.Name != "a" {
		t.Errorf("unchanged route moved: %v", e)
	}
}
