package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Cells: the edge pools tenants are placed on. Only the operator sees or changes them: a
// tenant is served the same wherever it is.

// cellBody is the body of PUT /v1/tenants/{slug}/cell.
type cellBody struct {
	Cell string `json:"cell" required:"true" doc:"The declared cell (GET /v1/cells) to move the tenant to."`
}

func (s *Server) listCells(c *fiber.Ctx, r *request) error {
	if s.cfg.Cells == nil {
		return tenants.Errorf(tenants.ENotFound, "this api has no cells")
	}
	items, err := s.cfg.Cells.ListCells(r.ctx)
	if err != nil {
		return err
	}
	return replyList(c, items, "")
}

// putTenantCell moves a tenant between cells. It is tenant-scoped (so an unknown slug is
// 404 as everywhere) but the admin token's alone: placement is the platform's business.
func (s *Server) putTenantCell(c *fiber.Ctx, r *request) error {
	if !r.who.admin {
		return tenants.Errorf(tenants.EForbidden, "only the platform admin may move a tenant between cells")
	}
	if s.cfg.Cells == nil {
		return tenants.Errorf(tenants.ENotFound, "this api has no cells")
	}
	var b cellBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, false); err != nil {
		return err
	}
	if b.Cell == "" {
		return tenants.Invalid("cell", "cell is required")
	}
	t, err := s.cfg.Cells.MoveTenant(r.ctx, r.tenant.ID, b.Cell)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, t, t.Version)
}
