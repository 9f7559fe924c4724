package api

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Authorization. Every tenant-scoped request is decided by one policy
// (tenants/rbac): the caller's role in the tenant — its token's role, its membership's
// role, or its platform role when it has no membership — against the endpoint's class.
// The admin token is not asked: it may do everything.

// headerCSRF carries a session's CSRF token on API writes made with the session cookie.
const headerCSRF = "X-CSRF-Token"

// sessionPrincipal authenticates the console's session cookie, when the server has people
// and the request carries one. ok is false when there is no cookie to try.
func (s *Server) sessionPrincipal(ctx context.Context, c *fiber.Ctx) (who principal, ok bool, err error) {
	raw := c.Cookies(tenants.SessionCookie)
	if s.cfg.People == nil || raw == "" {
		return principal{}, false, nil
	}
	invalid := tenants.Errorf(tenants.EInvalidCredential, "the session has expired: sign in again")
	if len(raw) > maxCredential {
		return principal{}, true, invalid
	}
	sess, err := s.cfg.People.FindSession(ctx, tenants.HashSecret(raw))
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return principal{}, true, invalid
	}
	if err != nil {
		return principal{}, true, err
	}
	if m := c.Method(); m != fiber.MethodGet && m != fiber.MethodHead && m != fiber.MethodOptions {
		got := c.Get(headerCSRF)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) != 1 {
			return principal{}, true, tenants.Errorf(tenants.EForbidden, "a write with the session cookie needs the session's CSRF token in %s", headerCSRF)
		}
	}
	u, err := s.cfg.People.FindUser(ctx, sess.UserID)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return principal{}, true, invalid
	}
	if err != nil {
		return principal{}, true, err
	}
	return principal{user: u}, true, nil
}

// roleIn is the caller's role in tenant t; "" when it has none (then it may not even see
// the tenant).
func (s *Server) roleIn(ctx context.Context, who principal, t *tenants.Tenant) (string, error) {
	switch {
	case who.token != nil:
		if who.token.TenantID == t.ID {
			return who.token.Role, nil
		}
		return "", nil
	case who.user != nil:
		m, err := s.cfg.People.FindMembership(ctx, t.ID, who.user.ID)
		if err == nil {
			return m.Role, nil
		}
		if tenants.ErrorCode(err) != tenants.ENotFound {
			return "", err
		}
		return who.user.PlatformRole, nil
	}
	return "", nil
}

// authorize asks the policy whether r's caller may do ep's class in r's tenant.
func (s *Server) authorize(ep *endpoint, r *request) error {
	if r.who.admin {
		return nil
	}
	if !s.cfg.Access.Allow(r.role, r.tenant.ID, ep.class) {
		class := ep.class
		if class == "" {
			class = rbac.TenantAdmin
		}
		return tenants.Errorf(tenants.EForbidden, "the %s role may not do this (%s %s needs %s access)", r.role, ep.method, ep.path, class)
	}
	return nil
}

// AuthorizeExport checks the caller of GET /v1/billing/export: the admin token, or a user
// whose platform role the policy allows billing exports. It fits billing.HTTPConfig.
func (s *Server) AuthorizeExport(c *fiber.Ctx) error {
	who, err := s.authenticate(c.UserContext(), c)
	if err != nil {
		return err
	}
	if who.admin {
		return nil
	}
	role := ""
	if who.user != nil {
		role = who.user.PlatformRole
	}
	if !s.cfg.Access.Allow(role, rbac.PlatformDomain, rbac.BillingExport) {
		return tenants.Errorf(tenants.EForbidden, "exporting the bill needs the finance role")
	}
	return nil
}

// actor names the caller in the audit log.
func (who principal) actor() string {
	switch {
	case who.admin:
		return "admin"
	case who.user != nil:
		return who.user.Email
	case who.token != nil:
		return "token:" + who.token.Name
	}
	return "anonymous"
}

// audit makes the write ep is about to do to r's tenant record its audit entry, in the
// store's transaction of the change: a change and its entry commit or roll back together.
// The object is the one the path names; a create's new object is named by the store.
func (s *Server) audit(c *fiber.Ctx, ep *endpoint, r *request) {
	if r.tenant == nil {
		return
	}
	verb := map[string]string{http.MethodPost: tenants.AuditCreate, http.MethodPut: tenants.AuditUpdate,
		http.MethodPatch: tenants.AuditUpdate, http.MethodDelete: tenants.AuditDelete}[ep.method]
	if strings.HasSuffix(ep.path, "/verify") {
		verb = tenants.AuditVerify
	}
	if verb == "" {
		return
	}
	kind := ep.tag
	if kind == "" {
		kind = "tenant"
	}
	object := ""
	if verb != tenants.AuditCreate { // the path of a key's create names its consumer
		object = c.Params("key_id")
		if object == "" {
			object = c.Params("id")
		}
		if object == "" {
			object, _ = url.PathUnescape(c.Params("email"))
		}
		if object == "" {
			object = c.Params("name")
		}
	}
	r.ctx = s.audited(r.ctx, r, r.tenant.ID, kind, verb, object)
}

// audited is ctx made to record, in the transaction of the write made with it, that r's
// caller did verb to object, of kind, in tenantID. The store fills in what is left empty:
// the tenant of an invitation answered by its token, the id of a created object.
func (s *Server) audited(ctx context.Context, r *request, tenantID, kind, verb, object string) context.Context {
	if s.cfg.Audit == nil {
		return ctx
	}
	return tenants.WithAudit(ctx, tenants.Audit{TenantID: tenantID, Actor: r.who.actor(), Action: tenants.AuditAction(kind, verb), Object: object})
}

func (s *Server) listAudit(c *fiber.Ctx, r *request) error {
	if s.cfg.Audit == nil {
		return replyList(c, []*tenants.AuditEntry{}, "")
	}
	p := tenants.Page{Limit: c.QueryInt("limit", tenants.DefaultPageLimit), Cursor: c.Query("cursor")}
	if p.Limit < 1 || p.Limit > tenants.MaxPageLimit {
		return tenants.Errorf(tenants.EInvalidRequest, "limit must be 1–%d", tenants.MaxPageLimit)
	}
	from, to, err := tenants.ParseAuditRange(c.Query("from"), c.Query("to"))
	if err != nil {
		return err
	}
	items, next, err := s.cfg.Audit.ListAudit(r.ctx, r.tenant.ID, tenants.AuditQuery{Page: p, From: from, To: to})
	if err != nil {
		return err
	}
	return replyList(c, items, next)
}

// platformRoleBody is the body of PUT /v1/platform/roles.
type platformRoleBody struct {
	Email string `json:"email" doc:"The address the role is granted to."`
	Role  string `json:"role" enum:"operator,finance," doc:"operator, finance, or empty to remove the platform role."`
}

func (s *Server) putPlatformRole(c *fiber.Ctx, r *request) error {
	if s.cfg.People == nil {
		return tenants.Errorf(tenants.ENotFound, "this server has no console users")
	}
	var b platformRoleBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	g, err := s.cfg.People.SetPlatformRole(r.ctx, b.Email, b.Role)
	if err != nil {
		return err
	}
	if g.Role != "" && s.cfg.Mailer != nil {
		// The same mail whether or not the address has an account, as the answer is: it
		// says how to sign in, or to create an account of no tenant.
		base := s.cfg.PublicURL
		if base == "" {
			base = "http://" + c.Hostname()
		}
		if err := s.cfg.Mailer.Send(r.ctx, tenants.PlatformRoleMail(g, base)); err != nil {
			return fmt.Errorf("mail the platform role: %w", err)
		}
	}
	return reply(c, http.StatusOK, g, 0)
}
