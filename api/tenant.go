package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

func (s *Server) createTenant(c *fiber.Ctx, r *request) error {
	t, err := decodeTenantCreate(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	if err := s.cfg.Tenants.CreateTenant(r.ctx, t); err != nil {
		return err
	}
	c.Location("/v1/tenants/" + t.Slug)
	return reply(c, http.StatusCreated, t, t.Version)
}

func (s *Server) listTenants(c *fiber.Ctx, r *request) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	items, next, err := s.cfg.Tenants.ListTenants(r.ctx, p)
	if err != nil {
		return err
	}
	return replyList(c, items, next)
}

func (s *Server) getTenant(c *fiber.Ctx, r *request) error {
	return reply(c, http.StatusOK, r.tenant, r.tenant.Version)
}

func (s *Server) patchTenant(c *fiber.Ctx, r *request) error {
	p, err := decodeTenantPatch(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	v, current, err := version(c, p.Version)
	if err != nil {
		return err
	}
	t, err := p.apply(r.tenant)
	if err != nil {
		return err
	}
	if t.PlatformPlan != r.tenant.PlatformPlan && !r.who.admin {
		e := tenants.Errorf(tenants.EForbidden, "only the platform admin may change a tenant's plan")
		e.Field = "plan"
		return e
	}
	if !current {
		t.Version = v
	}
	if err := s.cfg.Tenants.UpdateTenant(r.ctx, t); err != nil {
		return err
	}
	return reply(c, http.StatusOK, t, t.Version)
}

// deleteTenant is for the operator and the tenant's owners: a signed-in owner may end the
// tenant as the console's settings page does. Tokens are never owners, so automation
// cannot delete the tenant it configures.
func (s *Server) deleteTenant(c *fiber.Ctx, r *request) error {
	if !r.who.admin && r.role != tenants.RoleOwner {
		return tenants.Errorf(tenants.EForbidden, "only the platform admin or an owner of the tenant may delete it")
	}
	if err := s.cfg.Tenants.DeleteTenant(r.ctx, r.tenant.ID); err != nil {
		return err
	}
	return noContent(c)
}
