package api_test

import (
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
