package edge_test

import (
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// TestAccessRulesAmbiguousPaths: through the edge, a path some upstreams read as /admin
// — a segment ending in "." or whitespace, full-width letters — is refused with 400 on a
// route under access rules and never reaches the upstream, whatever the allow rules say;
// the same paths still pass on a route without access rules, and ordinary paths are
// decided as before.
func TestAccessRulesAmbiguousPaths(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := newUpstream(t, "api")
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	alice := "X-API-Key: " + h.key(acme, "c-alice", "ka")
	h.put(&tenants.AccessRules{TenantID: acme, Rules: [][]string{
		{"*", "/*", "*"},
		{"*", "/admin/*", "*", "deny"},
	}})
	h.put(&tenants.Route{ID: "r-all", TenantID: acme, Name: "all", Paths: []string{"/"}, Auth: tenants.AuthKey, CheckAccess: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}})
	h.put(&tenants.Route{ID: "r-open", TenantID: acme, Name: "open", Paths: []string{"/wiki"}, Auth: tenants.AuthKey,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}})
	h.e.Loaded()
	host := "acme." + domain
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/orders/1", alice); r.status != 200 {
			return r.String()
		}
		return ""
	})

	for _, c := range []struct {
		target, msg string
	}{
		{"/admin.", "ends in '.'"},
		{"/admin%2e", "ends in '.'"},
		{"/admin./x", "ends in '.'"},
		{"/admin%20", "whitespace"},
		{"/admin%20/x", "whitespace"},
		{"/admin%09", "whitespace"},
		{"/admin%E3%80%80", "whitespace"},
		{"/ａｄｍｉｎ", "full-width"},
		{"/%EF%BD%81%EF%BD%84%EF%BD%8D%EF%BD%89%EF%BD%8E/x", "full-width"},
		{"/x/../admin.", "ends in '.'"},
	} {
		r := h.get(host, c.target, alice)
		if r.status != 400 || r.errCode() != tenants.EInvalidRequest || !strings.Contains(r.body, c.msg) || r.echo != nil {
			t.Errorf("GET %s: %s, want 400 invalid_request saying %q", c.target, r, c.msg)
		}
	}
	for _, c := range []struct {
		target string
		status int
	}{
		{"/admin", 403},
		{"/ADMIN/x", 403},
		{"/admin%2Ex", 200}, // a dot inside a segment is just a dot
		{"/a%20b", 200},
		{"/caf%C3%A9", 200},
	} {
		if r := h.get(host, c.target, alice); r.status != c.status {
			t.Errorf("GET %s: %s, want %d", c.target, r, c.status)
		}
	}
	// Without access rules the path goes upstream as the normal form leaves it.
	for _, target := range []string{"/wiki/U.S.", "/wiki/a%20", "/wiki/ａ"} {
		r := h.get(host, target, alice)
		if r.status != 200 || r.echo == nil {
			t.Errorf("GET %s on a route without access rules: %s", target, r)
		}
	}
}
