package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"tollgate/api"
	"tollgate/tenants"
)

// TestAuditSameForAPIAndConsole: the same change made in the console and through the
// management API (with the same person's session) leaves the same audit entry: actor,
// action and object.
func TestAuditSameForAPIAndConsole(t *testing.T) {
	e := newConsole(t)
	owner := e.signUp("acme", true)
	tenantID := mustTenant(t, e, "acme")
	srv := api.New(api.Config{Tenants: e.db, Routes: e.db, Consumers: e.db, Plans: e.db, Tokens: e.db,
		JWTIssuers: e.db, AccessRules: e.db, People: e.db, Audit: e.db, AdminToken: "tg_admin_for_the_audit_test"})
	apiCall := func(method, path string, body any) map[string]any {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		}
		req := httptest.NewRequest(method, path, rd)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Cookie", owner.cookie)
		req.Header.Set("X-CSRF-Token", owner.csrf)
		res, err := srv.App().Test(req, 30_000)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
		}
		out := map[string]any{}
		_ = json.Unmarshal(b, &out)
		return out
	}
	console := func(path string, form url.Values) page {
		t.Helper()
		pg := e.post(owner, path, form)
		if pg.status != http.StatusSeeOther && pg.status != http.StatusOK {
			t.Fatalf("POST %s: %d\n%s", path, pg.status, pg.body)
		}
		return pg
	}
	onlyKey := func(consumerID string) string {
		t.Helper()
		keys, _, err := e.db.ListKeys(context.Background(), tenantID, consumerID, tenants.Page{})
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys of %s: %v, %v", consumerID, keys, err)
		}
		return keys[0].ID
	}
	const base = "/console/t/acme"
	var want []string
	did := func(action, object string) { want = append(want, owner.email+" "+action+" "+object) }

	// The console's way.
	pg := console(base+"/consumers", url.Values{"name": {"web"}})
	c1 := strings.TrimPrefix(strings.SplitN(pg.location, "?", 2)[0], base+"/consumers/")
	did("consumers.create", c1)
	console(base+"/consumers/"+c1+"/keys", url.Values{})
	k1 := onlyKey(c1)
	did("keys.create", k1)
	console(base+"/consumers/"+c1+"/keys/"+k1+"/delete", url.Values{})
	did("keys.delete", k1)
	console(base+"/consumers/"+c1+"/delete", url.Values{})
	did("consumers.delete", c1)
	console(base+"/invites", url.Values{"email": {"Web@Example.com"}, "role": {tenants.RoleViewer}})
	did("invites.create", "web@example.com")
	console(base+"/invites/delete", url.Values{"email": {"web@example.com"}})
	did("invites.delete", "web@example.com")

	// The API's way.
	const v1 = "/v1/tenants/acme"
	c2 := apiCall("POST", v1+"/consumers", map[string]any{"name": "api"})["id"].(string)
	did("consumers.create", c2)
	k2 := apiCall("POST", v1+"/consumers/"+c2+"/keys", map[string]any{})["id"].(string)
	did("keys.create", k2)
	apiCall("DELETE", v1+"/consumers/"+c2+"/keys/"+k2, nil)
	did("keys.delete", k2)
	apiCall("DELETE", v1+"/consumers/"+c2, nil)
	did("consumers.delete", c2)
	apiCall("POST", v1+"/invites", map[string]any{"email": "Api@Example.com", "role": tenants.RoleViewer})
	did("invites.create", "api@example.com")
	apiCall("DELETE", v1+"/invites/api@example.com", nil)
	did("invites.delete", "api@example.com")

	items, _, err := e.db.ListAudit(context.Background(), tenantID, tenants.AuditQuery{Page: tenants.Page{Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range slices.Backward(items) {
		got = append(got, a.Actor+" "+a.Action+" "+a.Object)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("audit log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAuditPageRange: the audit page takes an optional date range, says which bound is
// wrong, and keeps the range in its next page's link.
func TestAuditPageRange(t *testing.T) {
	e := newConsole(t)
	owner := e.signUp("acme", true)
	if pg := e.post(owner, "/console/t/acme/consumers", url.Values{"name": {"bob"}}); pg.status != http.StatusSeeOther {
		t.Fatalf("create consumer: %d", pg.status)
	}
	for _, c := range []struct{ query, want string }{
		{"", "consumers.create"},
		{"?from=2000-01-01", "consumers.create"},
		{"?from=2999-01-01", "No change in this range"},
		{"?from=someday", "Give a day as YYYY-MM-DD"},
		{"?from=2026-11-02&to=2026-11-01", "The last day must not be before the first"},
	} {
		pg := e.get(owner, "/console/t/acme/audit"+c.query)
		if pg.status != http.StatusOK || !strings.Contains(pg.body, c.want) {
			t.Errorf("audit%s: %d, want %q in\n%s", c.query, pg.status, c.want, pg.body)
		}
	}
}
