package api_test

import (
	"slices"
	"testing"

	"tollgate/api"
	"tollgate/tenants"
)

// TestMemberOwnerGuard: an admin may not change an owner's role, and the last owner may
// not be demoted; an owner changes an admin's role.
func TestMemberOwnerGuard(t *testing.T) {
	e := newEnv(t, func(c *api.Config) {
		c.People = c.Tenants.(tenants.PeopleService)
		c.Audit = c.Tenants.(tenants.AuditService)
	})
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	admin := e.session("admin", acme, tenants.RoleAdmin, "")
	e.do("POST", "/v1/tenants/acme/members", "", map[string]any{"email": "owner@example.com", "role": "viewer"}, admin.hdr...).wantErr(403, "forbidden", "role")
	e.do("POST", "/v1/tenants/acme/members", "", map[string]any{"email": "owner@example.com", "role": "viewer"}, owner.hdr...).wantErr(409, "conflict", "role")
	e.do("POST", "/v1/tenants/acme/members", "", map[string]any{"email": "admin@example.com", "role": "developer"}, owner.hdr...).want(201)
}

// TestMemberChangesAndInvites: roles change and members leave through the API under the
// owner rules; an invite of an email with an account makes a member at once, one without
// waits (listed, withdrawable); every change is in the audit log.
func TestMemberChangesAndInvites(t *testing.T) {
	e := newEnv(t, func(c *api.Config) {
		c.People = c.Tenants.(tenants.PeopleService)
		c.Audit = c.Tenants.(tenants.AuditService)
	})
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	admin := e.session("admin", acme, tenants.RoleAdmin, "")
	e.session("dev", "", "", "") // signed up, not a member yet

	ids := map[string]string{}
	for _, it := range e.do("GET", "/v1/tenants/acme/members", adminToken, nil).want(200).items() {
		m := it.(map[string]any)
		ids[m["email"].(string)] = m["user_id"].(string)
	}
	ownerID, adminID := ids["owner@example.com"], ids["admin@example.com"]

	// Roles.
	e.do("PUT", "/v1/tenants/acme/members/"+ownerID, "", map[string]any{"role": "viewer"}, admin.hdr...).wantErr(403, "forbidden", "role")
	e.do("PUT", "/v1/tenants/acme/members/"+adminID, "", map[string]any{"role": "owner"}, admin.hdr...).wantErr(403, "forbidden", "role")
	e.do("PUT", "/v1/tenants/acme/members/"+ownerID, "", map[string]any{"role": "viewer"}, owner.hdr...).want(409)
	e.do("PUT", "/v1/tenants/acme/members/"+adminID, "", map[string]any{"role": "astronaut"}, owner.hdr...).want(400)
	if r := e.do("PUT", "/v1/tenants/acme/members/"+adminID, "", map[string]any{"role": "developer"}, owner.hdr...).want(200); r.str("role") != "developer" {
		t.Errorf("role after PUT: %s", r.body)
	}
	e.do("PUT", "/v1/tenants/acme/members/00000000-0000-0000-0000-000000000000", "", map[string]any{"role": "viewer"}, owner.hdr...).wantErr(404, "not_found", "")

	// Invites: an email with an account is a member at once; one without waits.
	r := e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "dev@example.com", "role": "viewer"}, owner.hdr...).want(201)
	devID := ""
	if m, _ := r.json["member"].(map[string]any); m == nil || m["role"] != "viewer" || r.json["invite"] != nil {
		t.Errorf("inviting a user with an account: %s, want a member", r.body)
	} else {
		devID, _ = m["user_id"].(string)
	}
	r = e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "new@example.com", "role": "admin"}, owner.hdr...).want(201)
	if inv, _ := r.json["invite"].(map[string]any); inv == nil || inv["email"] != "new@example.com" || r.json["member"] != nil {
		t.Errorf("inviting an email without an account: %s, want an invite", r.body)
	}
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "boss@example.com", "role": "owner"}, admin.hdr...).want(403)
	if n := len(e.do("GET", "/v1/tenants/acme/invites", adminToken, nil).want(200).items()); n != 1 {
		t.Errorf("%d pending invites, want 1", n)
	}
	e.do("DELETE", "/v1/tenants/acme/invites/new%40example.com", "", nil, owner.hdr...).want(204)
	e.do("DELETE", "/v1/tenants/acme/invites/new%40example.com", "", nil, owner.hdr...).wantErr(404, "not_found", "")
	if n := len(e.do("GET", "/v1/tenants/acme/invites", adminToken, nil).want(200).items()); n != 0 {
		t.Errorf("%d pending invites after the withdrawal, want 0", n)
	}

	// Leaving.
	e.do("DELETE", "/v1/tenants/acme/members/"+ownerID, "", nil, owner.hdr...).want(409) // the last owner
	e.do("DELETE", "/v1/tenants/acme/members/"+adminID, "", nil, owner.hdr...).want(204)
	e.do("DELETE", "/v1/tenants/acme/members/"+adminID, "", nil, owner.hdr...).wantErr(404, "not_found", "")

	var actions []string
	for _, it := range e.do("GET", "/v1/tenants/acme/audit", adminToken, nil).want(200).items() {
		a := it.(map[string]any)
		actions = append(actions, a["action"].(string)+" "+a["object"].(string))
	}
	for _, want := range []string{"members.update " + adminID, "invites.create new@example.com", "invites.create " + devID,
		"invites.delete new@example.com", "members.delete " + adminID} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit log lacks %q: %q", want, actions)
		}
	}
}
