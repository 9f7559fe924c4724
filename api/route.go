package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

func (s *Server) createRoute(c *fiber.Ctx, r *request) error {
	rt, err := decodeRoute(contentType(c), c.Body(), s.cfg.BodyLimit, s.cfg.Upstreams)
	if err != nil {
		return err
	}
	rt.TenantID = r.tenant.ID
	if err := s.cfg.Routes.CreateRoute(r.ctx, rt); err != nil {
		return err
	}
	c.Location("/v1/tenants/" + r.tenant.Slug + "/routes/" + rt.ID)
	return reply(c, http.StatusCreated, rt, rt.Version)
}

func (s *Server) listRoutes(c *fiber.Ctx, r *request) error {
	return listPage(c, func(p tenants.Page) ([]*tenants.Route, string, error) {
		return s.cfg.Routes.ListRoutes(r.ctx, r.tenant.ID, p)
	})
}

func (s *Server) getRoute(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "route")
	if err != nil {
		return err
	}
	rt, err := s.cfg.Routes.FindRoute(r.ctx, r.tenant.ID, id)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, rt, rt.Version)
}

func (s *Server) putRoute(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "route")
	if err != nil {
		return err
	}
	rt, bodyVersion, err := decodeRouteUpdate(contentType(c), c.Body(), s.cfg.BodyLimit, s.cfg.Upstreams)
	if err != nil {
		return err
	}
	v, current, err := version(c, bodyVersion)
	if err != nil {
		return err
	}
	if current {
		cur, err := s.cfg.Routes.FindRoute(r.ctx, r.tenant.ID, id)
		if err != nil {
			return err
		}
		v = cur.Version
	}
	rt.ID, rt.TenantID, rt.Version = id, r.tenant.ID, v
	if err := s.cfg.Routes.UpdateRoute(r.ctx, rt); err != nil {
		return err
	}
	return reply(c, http.StatusOK, rt, rt.Version)
}

func (s *Server) deleteRoute(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "route")
	if err != nil {
		return err
	}
	if err := s.cfg.Routes.DeleteRoute(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	return noContent(c)
}
