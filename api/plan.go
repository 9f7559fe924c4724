package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

func (s *Server) createPlan(c *fiber.Ctx, r *request) error {
	p, err := decodePlan(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	p.TenantID = r.tenant.ID
	if err := s.cfg.Plans.CreatePlan(r.ctx, p); err != nil {
		return err
	}
	c.Location("/v1/tenants/" + r.tenant.Slug + "/plans/" + p.ID)
	return reply(c, http.StatusCreated, p, p.Version)
}

func (s *Server) listPlans(c *fiber.Ctx, r *request) error {
	return listPage(c, func(p tenants.Page) ([]*tenants.Plan, string, error) {
		return s.cfg.Plans.ListPlans(r.ctx, r.tenant.ID, p)
	})
}

func (s *Server) getPlan(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "plan")
	if err != nil {
		return err
	}
	p, err := s.cfg.Plans.FindPlan(r.ctx, r.tenant.ID, id)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, p, p.Version)
}

func (s *Server) putPlan(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "plan")
	if err != nil {
		return err
	}
	p, bodyVersion, err := decodePlanUpdate(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	v, current, err := version(c, bodyVersion)
	if err != nil {
		return err
	}
	if current {
		cur, err := s.cfg.Plans.FindPlan(r.ctx, r.tenant.ID, id)
		if err != nil {
			return err
		}
		v = cur.Version
	}
	p.ID, p.TenantID, p.Version = id, r.tenant.ID, v
	if err := s.cfg.Plans.UpdatePlan(r.ctx, p); err != nil {
		return err
	}
	return reply(c, http.StatusOK, p, p.Version)
}

func (s *Server) deletePlan(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "plan")
	if err != nil {
		return err
	}
	if err := s.cfg.Plans.DeletePlan(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	return noContent(c)
}
