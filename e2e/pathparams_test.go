package e2e

import (
	"strings"
	"testing"
)

// TestPathParams: a {name} segment matches any one segment; the upstream receives the
// request's path unchanged, minus what strip_prefix removes (the parameter's segment
// included); a second route whose path differs only in parameter names is refused.
func TestPathParams(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	users, shops := echoUpstream(t, "users"), echoUpstream(t, "shops")

	api.createTenant("params")
	api.createRoute("params", routeSpec("user", "=/users/{id}", users.URL, "none", "methods", []string{"GET"}))
	api.createRoute("params", routeSpec("orders", "/shops/{shop}/orders", shops.URL, "none", "strip_prefix", true))
	eventually(t, applyDeadline, "GET /users/7 is served", served(edge, "params", "/users/7", "users"))
	eventually(t, applyDeadline, "GET /shops/s1/orders is served", served(edge, "params", "/shops/s1/orders", "shops"))

	if got := decodeEcho(t, edge.get(t, "params", "/users/7?full=1")); got.Path != "/users/7" || got.Query != "full=1" {
		t.Errorf("upstream got %s?%s, want /users/7?full=1", got.Path, got.Query)
	}
	if got := decodeEcho(t, edge.get(t, "params", "/shops/s1/orders/9")); got.Upstream != "shops" || got.Path != "/9" {
		t.Errorf("strip_prefix: upstream %s got %s, want shops and /9", got.Upstream, got.Path)
	}
	wantEnvelope(t, edge.get(t, "params", "/users/7/x"), 404, "route_not_found") // exact
	wantEnvelope(t, edge.get(t, "params", "/users"), 404, "route_not_found")     // a parameter needs a segment

	r := api.call("POST", "/v1/tenants/params/routes", routeSpec("twin", "=/users/{uid}", users.URL, "none", "methods", []string{"GET"}))
	if r.Status != 409 || !strings.Contains(string(r.Raw), `path =/users/{uid} (GET) is already served by route \"user\"`) {
		t.Errorf("a path differing only in parameter names: %s, want 409 naming route user", r)
	}
	r = api.call("POST", "/v1/tenants/params/routes", routeSpec("glued", "/users/x{id}", users.URL, "none"))
	if r.Status != 400 || !strings.Contains(string(r.Raw), "a parameter is a whole segment") {
		t.Errorf("a parameter inside a segment: %s, want 400", r)
	}
}
