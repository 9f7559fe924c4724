package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"tollgate/api"
	"tollgate/billing"
	"tollgate/tenants"
)

// caller is one way of calling the API: a bearer token, or a session cookie (with the
// session's CSRF token, which API writes with a cookie need).
type caller struct {
	name  string
	token string
	hdr   []string
}

// session signs a user up (with a tenant of its own), gives it role in tenantID (unless
// role is "") and platform role platform, and returns a caller with a live session.
func (e *env) session(name, tenantID, role, platform string) caller {
	e.t.Helper()
	ctx := context.Background()
	hash, err := tenants.HashPassword("correct horse battery")
	if err != nil {
		e.t.Fatal(err)
	}
	u := &tenants.User{Email: name + "@example.com", PasswordHash: hash}
	if err := e.db.SignUp(ctx, u, &tenants.Tenant{Slug: "home-" + name}); err != nil {
		e.t.Fatalf("sign up %s: %v", name, err)
	}
	e.verify(u.Email)
	if role != "" {
		e.join(u, tenantID, role)
	}
	if platform != "" {
		if _, err := e.db.SetPlatformRole(ctx, u.Email, platform); err != nil {
			e.t.Fatal(err)
		}
	}
	raw := "session-" + name + "-0123456789abcdef"
	s := &tenants.Session{Hash: tenants.HashSecret(raw), UserID: u.ID, CSRF: "csrf-" + name, ExpiresAt: time.Now().Add(time.Hour)}
	if err := e.db.CreateSession(ctx, s); err != nil {
		e.t.Fatal(err)
	}
	return caller{name: "session " + name, hdr: []string{"Cookie", tenants.SessionCookie + "=" + raw, "X-CSRF-Token", s.CSRF}}
}

// verify marks an address as proven, as following its verification link does.
func (e *env) verify(email string) {
	e.t.Helper()
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE users SET email_verified_at = now() WHERE email = $1`, email); err != nil {
		e.t.Fatal(err)
	}
}

// join puts u in tenantID with role the only way there is: an invitation u accepts.
func (e *env) join(u *tenants.User, tenantID, role string) {
	e.t.Helper()
	ctx := context.Background()
	tok, err := e.db.Invite(ctx, &tenants.Invite{TenantID: tenantID, Email: u.Email, Role: role, InvitedBy: "admin"})
	if err != nil {
		e.t.Fatalf("invite %s: %v", u.Email, err)
	}
	if _, err := e.db.AcceptInvite(ctx, tok, u.ID); err != nil {
		e.t.Fatalf("%s accepts: %v", u.Email, err)
	}
}

func (e *env) roleToken(slug, role string) caller {
	e.t.Helper()
	tok := e.do("POST", "/v1/tenants/"+slug+"/tokens", adminToken, map[string]any{"name": "ci-" + role, "role": role}).want(201).str("token")
	return caller{name: "token " + role, token: tok}
}

// nullUsage is a billing.UsageService with no usage, for the export's authorization.
type nullUsage struct{}

func (nullUsage) Usage(context.Context, billing.UsageQuery) (*billing.UsageReport, error) {
	return &billing.UsageReport{}, nil
}
func (nullUsage) Export(context.Context, billing.Period) ([]billing.ExportRow, error) {
	return nil, nil
}

// TestRoleClassMatrix calls one endpoint of every class (read, write, keys, tenant admin,
// billing export) as every role, by session and by token, and checks the policy's answer.
func TestRoleClassMatrix(t *testing.T) {
	e := newEnv(t, func(c *api.Config) {
		c.People = c.Tenants.(tenants.PeopleService)
		c.Audit = c.Tenants.(tenants.AuditService)
		c.Usage = nullUsage{}
	})
	srv := e.srv

	acme := e.tenant("acme")
	consumer := e.consumer("acme", "app")
	callers := map[string]caller{
		"admin-token": {name: "admin token", token: adminToken},
		"owner":       e.session("owner", acme, tenants.RoleOwner, ""),
		"admin":       e.session("admin", acme, tenants.RoleAdmin, ""),
		"developer":   e.session("developer", acme, tenants.RoleDeveloper, ""),
		"viewer":      e.session("viewer", acme, tenants.RoleViewer, ""),
		"operator":    e.session("operator", "", "", tenants.PlatformOperator),
		"finance":     e.session("finance", "", "", tenants.PlatformFinance),
		"outsider":    e.session("outsider", "", "", ""),
		"tok-admin":   e.roleToken("acme", tenants.RoleAdmin),
		"tok-dev":     e.roleToken("acme", tenants.RoleDeveloper),
		"tok-viewer":  e.roleToken("acme", tenants.RoleViewer),
	}
	// Expected status per class: read, write, keys, tenant_admin, billing_export.
	want := map[string][5]int{
		"admin-token": {200, 201, 201, 201, 200},
		"owner":       {200, 201, 201, 201, 403},
		"admin":       {200, 201, 201, 201, 403},
		"developer":   {200, 201, 403, 403, 403},
		"viewer":      {200, 403, 403, 403, 403},
		"operator":    {200, 201, 201, 201, 403},
		"finance":     {200, 403, 403, 403, 200},
		"outsider":    {404, 404, 404, 404, 403},
		"tok-admin":   {200, 201, 201, 201, 403},
		"tok-dev":     {200, 201, 403, 403, 403},
		"tok-viewer":  {200, 403, 403, 403, 403},
	}
	for key, c := range callers {
		w := want[key]
		t.Run(key, func(t *testing.T) {
			base := "/v1/tenants/acme"
			got := [5]int{
				e.do("GET", base+"/routes", c.token, nil, c.hdr...).status,
				e.do("POST", base+"/routes", c.token, routeBody("r-"+key, "/"+key), c.hdr...).status,
				e.do("POST", base+"/consumers/"+consumer+"/keys", c.token, nil, c.hdr...).status,
				e.do("POST", base+"/tokens", c.token, map[string]any{"name": "t-" + key, "role": "viewer"}, c.hdr...).status,
				rawStatus(t, srv, "GET", "/v1/billing/export?period=2025-01&format=json", c),
			}
			if got != w {
				t.Errorf("%s: read, write, keys, tenant_admin, billing_export = %v, want %v", c.name, got, w)
			}
		})
	}

	// Writes are audited with who made them.
	items := e.do("GET", "/v1/tenants/acme/audit?limit=500", adminToken, nil).want(200).items()
	actors := map[string]bool{}
	for _, it := range items {
		m := it.(map[string]any)
		actors[fmt.Sprint(m["actor"], " ", m["action"])] = true
	}
	for _, a := range []string{"owner@example.com routes.create", "token:ci-developer routes.create", "admin keys.create", "operator@example.com tokens.create", "admin consumers.create"} {
		if !actors[a] {
			t.Errorf("audit log has no %q; it has %v", a, actors)
		}
	}
	// A viewer may read the audit log; an outsider may not even see the tenant.
	e.do("GET", "/v1/tenants/acme/audit", callers["tok-viewer"].token, nil).want(200)
	e.do("GET", "/v1/tenants/acme/audit", "", nil, callers["outsider"].hdr...).wantErr(404, "not_found", "")
}

func rawStatus(t *testing.T, srv *api.Server, method, path string, c caller) int {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(c.hdr); i += 2 {
		req.Header.Set(c.hdr[i], c.hdr[i+1])
	}
	res, err := srv.App().Test(req, 30_000)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 400 {
		t.Logf("%s %s as %s: %d %s", method, path, c.name, res.StatusCode, b)
	}
	return res.StatusCode
}

// TestSessionCSRF: a write with the session cookie and no CSRF token is refused, and an
// expired or unknown session is not a credential.
func TestSessionCSRF(t *testing.T) {
	e := newEnv(t, func(c *api.Config) {
		c.People = c.Tenants.(tenants.PeopleService)
		c.Audit = c.Tenants.(tenants.AuditService)
	})
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	cookie := owner.hdr[:2:2]
	e.do("GET", "/v1/tenants/acme/routes", "", nil, cookie...).want(200)
	e.do("POST", "/v1/tenants/acme/routes", "", routeBody("r", "/r"), cookie...).wantErr(403, "forbidden", "")
	e.do("POST", "/v1/tenants/acme/routes", "", routeBody("r", "/r"), append(cookie, "X-CSRF-Token", "wrong")...).wantErr(403, "forbidden", "")
	e.do("POST", "/v1/tenants/acme/routes", "", routeBody("r", "/r"), owner.hdr...).want(201)
	e.do("GET", "/v1/tenants/acme/routes", "", nil, "Cookie", tenants.SessionCookie+"=nope").wantErr(401, "invalid_credential", "")
	// Platform roles are the admin token's to set.
	e.do("PUT", "/v1/platform/roles", "", map[string]any{"email": "owner@example.com", "role": "finance"}, owner.hdr...).wantErr(403, "forbidden", "")
	r := e.do("PUT", "/v1/platform/roles", adminToken, map[string]any{"email": "owner@example.com", "role": "finance"}).want(200)
	if r.str("role") != "finance" || r.str("email") != "owner@example.com" {
		t.Errorf("platform role not set: %s", r.body)
	}
	e.do("PUT", "/v1/platform/roles", adminToken, map[string]any{"email": "owner@example.com", "role": "root"}).wantErr(400, "validation_failed", "role")
}

// TestDeleteTenantRoles: an owner signed in may delete the tenant (as the console's
// settings page does) and the admin token may; an admin, a token of any role and an
// outsider may not, and the refusal is the envelope.
func TestDeleteTenantRoles(t *testing.T) {
	e := newEnv(t, func(c *api.Config) {
		c.People = c.Tenants.(tenants.PeopleService)
		c.Audit = c.Tenants.(tenants.AuditService)
	})
	acme := e.tenant("acme")
	admin := e.session("admin", acme, tenants.RoleAdmin, "")
	tok := e.roleToken("acme", tenants.RoleAdmin)
	outsider := e.session("outsider", "", "", "")
	e.do("DELETE", "/v1/tenants/acme", "", nil, admin.hdr...).wantErr(403, "forbidden", "")
	e.do("DELETE", "/v1/tenants/acme", tok.token, nil).wantErr(403, "forbidden", "")
	e.do("DELETE", "/v1/tenants/acme", "", nil, outsider.hdr...).wantErr(404, "not_found", "")
	e.do("GET", "/v1/tenants/acme", adminToken, nil).want(200)
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	e.do("DELETE", "/v1/tenants/acme", "", nil, owner.hdr...).want(204)
	e.do("GET", "/v1/tenants/acme", adminToken, nil).wantErr(404, "not_found", "")

	e.tenant("globex")
	e.do("DELETE", "/v1/tenants/globex", adminToken, nil).want(204)
}
