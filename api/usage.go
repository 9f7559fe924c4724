package api

import (
	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
)

// Usage and billing. The handlers are billing's own (billing.HTTP); the api
// only decides who may call them: a tenant's usage is tenant-scoped like every other read
// of the tenant (rbac.Read), and the export is for the admin token or the finance platform
// role (Server.AuthorizeExport, the one hook for it).

// billingHTTP is billing's handlers over the configured usage service.
func (s *Server) billingHTTP() (*billing.HTTP, error) {
	if s.cfg.Usage == nil {
		return nil, tenants.Errorf(tenants.ENotFound, "usage is not enabled on this server")
	}
	return billing.Handlers(s.cfg.Usage, billing.HTTPConfig{AuthorizeExport: s.exportAllowed}), nil
}

// exportAllowed is billing.HTTPConfig.AuthorizeExport.
func (s *Server) exportAllowed(c *fiber.Ctx) error { return s.AuthorizeExport(c) }

func (s *Server) tenantUsage(c *fiber.Ctx, r *request) error {
	h, err := s.billingHTTP()
	if err != nil {
		return err
	}
	c.SetUserContext(r.ctx)
	return h.UsageOf(c, r.tenant.ID)
}

func (s *Server) tenantLatency(c *fiber.Ctx, r *request) error {
	h, err := s.billingHTTP()
	if err != nil {
		return err
	}
	c.SetUserContext(r.ctx)
	return h.LatencyOf(c, r.tenant.ID)
}

func (s *Server) billingExport(c *fiber.Ctx, r *request) error {
	h, err := s.billingHTTP()
	if err != nil {
		return err
	}
	c.SetUserContext(r.ctx)
	return h.Export(c)
}
