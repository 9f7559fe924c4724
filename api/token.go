package api

import (
	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

func (s *Server) createToken(c *fiber.Ctx, r *request) error {
	t, err := decodeToken(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	plain, hash, display := tenants.NewSecret(tenants.TokenPrefix)
	t.TenantID, t.Prefix, t.Hash = r.tenant.ID, display, hash
	if err := s.cfg.Tokens.CreateToken(r.ctx, t); err != nil {
		return err
	}
	return replySecret(c, createdToken{Token: t, Plaintext: plain})
}

func (s *Server) listTokens(c *fiber.Ctx, r *request) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	items, next, err := s.cfg.Tokens.ListTokens(r.ctx, r.tenant.ID, p)
	if err != nil {
		return err
	}
	return replyList(c, items, next)
}

func (s *Server) deleteToken(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "token")
	if err != nil {
		return err
	}
	if err := s.cfg.Tokens.DeleteToken(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	return noContent(c)
}
