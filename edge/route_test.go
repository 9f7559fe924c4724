package edge_test

import (
	"net/http"
	"testing"

	"tollgate/tenants"
)

// Path parameters and the 405: the upstream gets the request's path as sent (parameters
// rewrite nothing), strip_prefix removes the segments a parameter matched too, and a path
// some route takes with other methods answers 405 with an Allow naming them.
func TestRouteParamsAnd405(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "user", []string{"=/users/{id}"}, []string{"GET", "HEAD"}, "", up.URL)
	h.route(acme, "me", []string{"=/users/me"}, []string{"PUT"}, "", up.URL)
	h.route(acme, "user-del", []string{"/users/{id}"}, []string{"DELETE"}, "", up.URL)
	strip := h.route(acme, "orders", []string{"/shops/{shop}/orders"}, []string{"GET"}, "", up.URL)
	strip.StripPrefix = true
	h.put(strip)
	h.e.Loaded()
	host := "acme." + domain

	for _, c := range []struct {
		method, target string
		status         int
		upstreamURI    string // for 200
		allow          string // for 405
	}{
		{"GET", "/users/7?x=1", 200, "/users/7?x=1", ""},
		{"GET", "/users/me", 200, "/users/me", ""}, // me does not take GET: the parameter does
		{"PUT", "/users/me", 200, "/users/me", ""},
		{"DELETE", "/users/7/x", 200, "/users/7/x", ""},
		{"GET", "/shops/s1/orders/9", 200, "/9", ""},
		{"POST", "/users/7", 405, "", "GET, HEAD, DELETE"},
		{"POST", "/users/me", 405, "", "GET, HEAD, PUT, DELETE"},
		{"GET", "/users/7/x", 405, "", "DELETE"},
		{"OPTIONS", "/users/7", 405, "", "GET, HEAD, DELETE"}, // OPTIONS is a method like any other
		{"BREW", "/users/7", 405, "", "GET, HEAD, DELETE"},
		{"HEAD", "/shops/s1/orders", 405, "", "GET"}, // a GET route does not take HEAD
		{"GET", "/users", 404, "", ""},
		{"GET", "/nope", 404, "", ""},
	} {
		r := send(t, h.public, c.method, host, c.target, nil, "")
		if r.status != c.status {
			t.Errorf("%s %s: %s, want %d", c.method, c.target, r, c.status)
			continue
		}
		switch c.status {
		case http.StatusOK:
			if r.echo == nil || r.echo.RequestURI != c.upstreamURI {
				t.Errorf("%s %s: upstream got %+v, want %s", c.method, c.target, r.echo, c.upstreamURI)
			}
		case http.StatusMethodNotAllowed:
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("%s %s: Allow %q, want %q", c.method, c.target, got, c.allow)
			}
			if c.method != "HEAD" && (r.errCode() != tenants.EMethodNotAllowed || r.header.Get("Content-Type") != "application/json") {
				t.Errorf("%s %s: %s, want a %s envelope", c.method, c.target, r, tenants.EMethodNotAllowed)
			}
		case http.StatusNotFound:
			if r.errCode() != tenants.ERouteNotFound || r.header.Get("Allow") != "" {
				t.Errorf("%s %s: %s (Allow %q), want route_not_found", c.method, c.target, r, r.header.Get("Allow"))
			}
		}
	}
	// The 405 counts as the edge's other answers do: under the tenant, route none.
	if n := h.metric("http_requests_total", map[string]string{"tenant": "acme", "route": "none", "status": "4xx"}); n != 8 {
		t.Errorf("405s and 404s counted under route none: %v, want 8", n)
	}
}
