package api

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// planRef turns the store's "plan not found" into a validation error on the field that
// named it: the tenant exists (it was resolved), so the missing object is the plan.
func planRef(err error, c *tenants.Consumer) error {
	if tenants.ErrorCode(err) == tenants.ENotFound && c.Plan != "" {
		return tenants.Invalid("plan", "the tenant has no plan named %q", c.Plan)
	}
	return err
}

func (s *Server) createKey(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "consumer")
	if err != nil {
		return err
	}
	k, err := decodeKey(contentType(c), c.Body(), s.cfg.BodyLimit, time.Now())
	if err != nil {
		return err
	}
	plain, hash, display := tenants.NewSecret(tenants.KeyPrefix)
	k.TenantID, k.ConsumerID, k.Prefix, k.Hash = r.tenant.ID, id, display, hash
	if err := s.cfg.Consumers.CreateKey(r.ctx, k); err != nil {
		return err
	}
	return replySecret(c, createdKey{Key: k, Plaintext: plain})
}

func (s *Server) listKeys(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "consumer")
	if err != nil {
		return err
	}
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	// An unknown consumer is 404, not an empty list.
	if _, err := s.cfg.Consumers.FindConsumer(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	items, next, err := s.cfg.Consumers.ListKeys(r.ctx, r.tenant.ID, id, p)
	if err != nil {
		return err
	}
	return replyList(c, items, next)
}

func (s *Server) deleteKey(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "consumer")
	if err != nil {
		return err
	}
	keyID, err := idParam(c, "key_id", "key")
	if err != nil {
		return err
	}
	if err := s.cfg.Consumers.DeleteKey(r.ctx, r.tenant.ID, id, keyID); err != nil {
		return err
	}
	return noContent(c)
}
