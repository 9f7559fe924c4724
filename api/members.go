package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Members and invitations: the same changes the console's members page makes. Nobody is
// put in a tenant by someone else: an owner or admin invites an address, the link is
// mailed to it, and only a signed-in user who proved that address accepts. Roles change
// under the rule that only an owner makes an owner or touches an owner's membership, and
// the store's rule that a tenant keeps at least one owner.

// memberRoleBody is the body of PUT /v1/tenants/{slug}/members/{id}.
type memberRoleBody struct {
	Role string `json:"role" required:"true" enum:"owner,admin,developer,viewer"`
}

// inviteBody is the body of POST /v1/tenants/{slug}/invites.
type inviteBody struct {
	Email string `json:"email" required:"true" doc:"The address to invite. It is mailed a link; the answer is the same whether or not it has an account."`
	Role  string `json:"role" required:"true" enum:"owner,admin,developer,viewer"`
}

// inviteTokenBody is the body of POST /v1/invites/accept and /v1/invites/decline.
type inviteTokenBody struct {
	Token string `json:"token" required:"true" doc:"The token of the invitation link (its token query parameter)."`
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

func (s *Server) listMembers(c *fiber.Ctx, r *request) error {
	if s.cfg.People == nil {
		return replyList(c, []*tenants.Membership{}, "")
	}
	items, err := s.cfg.People.ListMembers(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	return replyList(c, items, "")
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
	b, err := decodeInvite(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	if b.Role == tenants.RoleOwner && r.role != tenants.RoleOwner && !r.who.admin {
		e := tenants.Errorf(tenants.EForbidden, "only an owner may invite an owner")
		e.Field = "role"
		return e
	}
	inv := &tenants.Invite{TenantID: r.tenant.ID, Email: b.Email, Role: b.Role, InvitedBy: r.who.actor()}
	token, err := p.Invite(r.ctx, inv)
	if err != nil {
		return err
	}
	if err := s.mailInvite(c, r, inv, token); err != nil {
		return err
	}
	c.Location("/v1/tenants/" + r.tenant.Slug + "/invites/" + url.PathEscape(inv.Email))
	return reply(c, http.StatusCreated, inv, 0)
}

// mailInvite sends the invitation's link. A mail that cannot be handed to the mail server
// withdraws the invite, so no invite is left pending whose link nobody has.
func (s *Server) mailInvite(c *fiber.Ctx, r *request, inv *tenants.Invite, token string) error {
	if s.cfg.Mailer == nil {
		return nil
	}
	base := s.cfg.PublicURL
	if base == "" {
		base = "http://" + c.Hostname()
	}
	m := tenants.InvitationMail(inv, r.tenant.Slug, r.tenant.Name, base, token)
	if err := s.cfg.Mailer.Send(r.ctx, m); err != nil {
		// A fresh context: the request's may be what ran out.
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		defer cancel()
		ctx = s.audited(ctx, r, inv.TenantID, tagInvites, tenants.AuditDelete, inv.Email) // the create is in the log
		if derr := s.cfg.People.DeleteInvite(ctx, inv.TenantID, inv.Email); derr != nil && tenants.ErrorCode(derr) != tenants.ENotFound {
			s.log.Error("api: withdraw an unsent invite", "request_id", requestID(c), "err", derr)
		}
		return fmt.Errorf("mail the invitation: %w", err)
	}
	return nil
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

// invitee is the signed-in person who may answer an invitation, and the invitation's token
// from the body: a token (automation) or the admin token never may answer, since an
// invitation is a person's consent.
func (s *Server) invitee(c *fiber.Ctx, r *request) (tenants.PeopleService, string, error) {
	p, err := s.people()
	if err != nil {
		return nil, "", err
	}
	if r.who.user == nil {
		return nil, "", tenants.Errorf(tenants.EForbidden, "only a signed-in person answers an invitation: send the console's session cookie (and X-CSRF-Token), not a token")
	}
	b, err := decodeInviteToken(contentType(c), c.Body(), s.cfg.BodyLimit)
	return p, b.Token, err
}

// decodeInvite reads and checks an invitation's body; the store checks it again.
func decodeInvite(ct string, body []byte, limit int) (inviteBody, error) {
	var b inviteBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return b, err
	}
	email, err := tenants.NormalizeEmail(b.Email)
	if err != nil {
		return b, err
	}
	b.Email = email
	return b, tenants.ValidateMemberRole(b.Role)
}

// decodeInviteToken reads the body of an answer to an invitation.
func decodeInviteToken(ct string, body []byte, limit int) (inviteTokenBody, error) {
	var b inviteTokenBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return b, err
	}
	if b.Token == "" {
		return b, tenants.Invalid("token", "is required: the token parameter of the invitation link")
	}
	return b, nil
}

func (s *Server) acceptInvite(c *fiber.Ctx, r *request) error {
	p, token, err := s.invitee(c, r)
	if err != nil {
		return err
	}
	// Not scoped to a tenant: the store knows the invitation's tenant, and records there
	// the acceptance and the membership it makes.
	m, err := p.AcceptInvite(s.audited(r.ctx, r, "", tagInvites, tenants.AuditAccept, ""), token, r.who.user.ID)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, m, 0)
}

func (s *Server) declineInvite(c *fiber.Ctx, r *request) error {
	p, token, err := s.invitee(c, r)
	if err != nil {
		return err
	}
	if _, err := p.DeclineInvite(s.audited(r.ctx, r, "", tagInvites, tenants.AuditDecline, ""), token, r.who.user.ID); err != nil {
		return err
	}
	return noContent(c)
}
