package edge_test

import (
	"net/http"
	"testing"

	"tollgate/tenants"
)

// A route with CORS settings: the edge answers its preflights before authentication,
// grants an allowed origin on every answer, its own refusals included (so a page can
// read why), and grants nothing to another origin, whatever the upstream says.
func TestCORS(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	c := &tenants.CORS{AllowOrigins: []string{"https://App.example.com"}, ExposeHeaders: []string{"X-Page"}}
	r := &tenants.Route{ID: "r", TenantID: acme, Name: "r", Paths: []string{"/api"}, Methods: []string{"GET", "POST"},
		Auth: tenants.AuthKey, CORS: c, Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}
	if err := r.Validate(loopbackPolicy()); err != nil {
		t.Fatal(err)
	}
	h.put(r)
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	key := h.key(acme, "c-alice", "k1")
	h.e.Loaded()
	host := "acme." + domain
	const origin = "Origin: https://app.example.com"
	up.setHook(func(w http.ResponseWriter) { w.Header().Set("Access-Control-Allow-Origin", "*") })

	pre := send(t, h.public, "OPTIONS", host, "/api/orders", []string{origin,
		"Access-Control-Request-Method: POST", "Access-Control-Request-Headers: x-api-key, content-type"}, "")
	if pre.status != 204 || pre.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		pre.header.Get("Access-Control-Allow-Methods") != "GET, POST" ||
		pre.header.Get("Access-Control-Allow-Headers") != "x-api-key, content-type" ||
		pre.header.Get("Access-Control-Max-Age") != "600" {
		t.Errorf("preflight: %s %v", pre, pre.header)
	}
	if up.hits.Load() != 0 {
		t.Errorf("the preflight reached the upstream")
	}
	// An origin the route does not allow: 204 without a grant. A method no route of the
	// path takes: the path's 405, without a grant either.
	for _, c := range []struct {
		hdr    []string
		status int
	}{
		{[]string{"Origin: https://evil.example", "Access-Control-Request-Method: GET"}, 204},
		{[]string{origin, "Access-Control-Request-Method: DELETE"}, 405},
	} {
		if r := send(t, h.public, "OPTIONS", host, "/api/orders", c.hdr, ""); r.status != c.status || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%v: %s %v, want %d without a grant", c.hdr, r, r.header, c.status)
		}
	}

	ok := h.get(host, "/api/orders", origin, "X-API-Key: "+key)
	if ok.status != 200 || ok.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		ok.header.Get("Access-Control-Expose-Headers") != "Grpc-Status, Grpc-Message, X-Request-Id, X-Tollgate-Error, X-Page" ||
		ok.header.Get("Vary") == "" {
		t.Errorf("allowed origin: %s %v", ok, ok.header)
	}
	refused := h.get(host, "/api/orders", origin)
	if refused.status != 401 || refused.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("a refusal: %s %v, want 401 readable by the page", refused, refused.header)
	}
	other := h.get(host, "/api/orders", "Origin: https://evil.example", "X-API-Key: "+key)
	if other.status != 200 || other.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin: %s, Access-Control-Allow-Origin %q (the upstream's must not pass)", other, other.header.Get("Access-Control-Allow-Origin"))
	}
	// Without settings, an OPTIONS to a route that does not take it is still 405.
	h.route(acme, "plain", []string{"/plain"}, []string{"GET"}, "", up.URL)
	waitFor(t, 2e9, func() string {
		if r := send(t, h.public, "OPTIONS", host, "/plain", []string{origin, "Access-Control-Request-Method: GET"}, ""); r.status != 405 {
			return r.String()
		}
		return ""
	})
}
