package e2e

import (
	"strings"
	"testing"
)

// TestSmuggledIdentityAndDodgedDeny: through a real edge, header names spelled like the
// edge's identity headers with other punctuation never reach the upstream, and paths
// some upstreams read as /admin (a trailing ".", "%20" or "%09", full-width letters) are
// refused with the 400 envelope on a route under access rules instead of dodging its
// deny rule.
func TestSmuggledIdentityAndDodgedDeny(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")

	api.createTenant("guard")
	cid := api.createConsumer("guard", "alice")
	_, key := api.createKey("guard", cid)
	api.createRoute("guard", routeSpec("all", "/", up.URL, "key", "policy", true))
	api.must(200, "PUT", "/v1/tenants/guard/policy", map[string]any{
		"rules": [][]string{{"*", "/*", "*"}, {"*", "/admin/*", "*", "deny"}},
	})
	auth := []string{"X-API-Key", key}
	eventually(t, applyDeadline, "the policy applies", served(edge, "guard", "/orders/1", "up", auth...))
	r, err := edge.do("GET", "guard", "/admin", auth...)
	if err != nil {
		t.Fatal(err)
	}
	wantEnvelope(t, r, 403, "policy_denied")

	hdrs := append([]string{}, auth...)
	for _, name := range []string{"X.Consumer.Id", "X~Consumer~Id", "X!Consumer!Name", "x.CONSUMER-id", "X.Forwarded.For", "X.Tollgate.Tenant"} {
		hdrs = append(hdrs, name, "forged")
	}
	got := decodeEcho(t, edge.get(t, "guard", "/orders/1", hdrs...))
	for name, vals := range got.Headers {
		if strings.Contains(strings.Join(vals, ","), "forged") {
			t.Errorf("upstream saw %s: %q", name, vals)
		}
	}
	if ids := got.Headers["X-Consumer-Id"]; len(ids) != 1 || ids[0] != cid {
		t.Errorf("upstream saw X-Consumer-Id %q, want [%s]", ids, cid)
	}

	for _, p := range []string{"/admin.", "/admin%20", "/admin%09", "/admin./x", "/ａｄｍｉｎ"} {
		r, err := edge.do("GET", "guard", p, auth...)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkEnvelope(r, 400, "invalid_request"); err != nil {
			t.Errorf("GET %s: %v", p, err)
		}
	}
}
