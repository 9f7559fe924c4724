package api

import (
	"net/http"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Members and invites beyond adding a member (authz.go): the same changes the console's
// members page makes, with the same rule that only an owner makes an owner or changes an
// owner's membership, and the store's rule that a tenant keeps at least one owner.

// memberRoleBody is the body of PUT /v1/tenants/{slug}/members/{id}.
type memberRoleBody struct {
	Role string `json:"role" required:"true" enum:"owner,admin,developer,viewer"`
}

// inviteBody is the body of POST /v1/tenants/{slug}/invites.
type inviteBody struct {
	Email string `json:"email" required:"true" doc:"Anyone's email: a user who has signed up gets the role at once, another email when it signs up."`
	Role  string `json:"role" required:"true" enum:"owner,admin,developer,viewer"`
}

// inviteResult is what an invite did: exactly one of the two is set.
type inviteResult struct {
	Member *tenants.Membership `json:"member,omitempty" doc:"The email has an account: it is a member now."`
	Invite *tenants.Invite     `json:"invite,omitempty" doc:"The email has no account yet: the invite waits for it to sign up."`
}

func (s *Server) people() (tenants.PeopleService, error) {
	if s.cfg.People == nil {
		return nil, tenants.Errorf(tenants.ENotFound, "this server has no console users")
	}
	return s.cfg.People, nil
}

// ownerGuard refuses a change to userID's membership that makes or touches an owner,
// unless the caller is an owner or the admin token.
func (s *Server) ownerGuard(r *request, p tenants.PeopleService, userID, newRole string) error {
	m, err := p.FindMembership(r.ctx, r.tenant.ID, userID)
	if err != nil {
		return err
	}
	if r.role != tenants.RoleOwner && !r.who.admin && (m.Role == tenants.RoleOwner || newRole == tenants.RoleOwner) {
		e := tenants.Errorf(tenants.EForbidden, "only an owner may make an owner or change an owner's membership")
		e.Field = "role"
		return e
	}
	return nil
}

func (s *Server) putMember(c *fiber.Ctx, r *request) error {
	p, err := s.people()
	if err != nil {
		return err
	}
	id, err := idParam(c, "id", "member")
	if err != nil {
		return err
	}
	var b memberRoleBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	if err := s.ownerGuard(r, p, id, b.Role); err != nil {
		return err
	}
	m, err := p.SetMemberRole(r.ctx, r.tenant.ID, id, b.Role)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, m, 0)
}

func (s *Server) deleteMember(c *fiber.Ctx, r *request) error {
	p, err := s.people()
	if err != nil {
		return err
	}
	id, err := idParam(c, "id", "member")
	if err != nil {
		return err
	}
	if err := s.ownerGuard(r, p, id, ""); err != nil {
		return err
	}
	if err := p.RemoveMember(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	return noContent(c)
}

func (s *Server) listInvites(c *fiber.Ctx, r *request) error {
	if s.cfg.People == nil {
		return replyList(c, []*tenants.Invite{}, "")
	}
	items, err := s.cfg.People.ListInvites(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	return replyList(c, items, "")
}

func (s *Server) createInvite(c *fiber.Ctx, r *request) error {
	p, err := s.people()
	if err != nil {
		return err
	}
	var b inviteBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	if b.Role == tenants.RoleOwner && r.role != tenants.RoleOwner && !r.who.admin {
		e := tenants.Errorf(tenants.EForbidden, "only an owner may make another owner")
		e.Field = "role"
		return e
	}
	if u, err := p.FindUserByEmail(r.ctx, b.Email); err == nil {
		if err := s.ownerGuard(r, p, u.ID, b.Role); err != nil && tenants.ErrorCode(err) != tenants.ENotFound {
			return err
		}
	}
	inv := &tenants.Invite{TenantID: r.tenant.ID, Email: b.Email, Role: b.Role, InvitedBy: r.who.actor()}
	m, err := p.Invite(r.ctx, inv)
	if err != nil {
		return err
	}
	c.Location("/v1/tenants/" + r.tenant.Slug + "/invites")
	if m != nil {
		return reply(c, http.StatusCreated, inviteResult{Member: m}, 0)
	}
	return reply(c, http.StatusCreated, inviteResult{Invite: inv}, 0)
}

func (s *Server) deleteInvite(c *fiber.Ctx, r *request) error {
	p, err := s.people()
	if err != nil {
		return err
	}
	email, err := url.PathUnescape(c.Params("email"))
	if err != nil || email == "" || len(email) > 320 {
		return tenants.Errorf(tenants.ENotFound, "invite not found")
	}
	if err := p.DeleteInvite(r.ctx, r.tenant.ID, email); err != nil {
		return err
	}
	return noContent(c)
}
