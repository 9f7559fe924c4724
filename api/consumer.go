package api

import (
	"net/http"

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

func (s *Server) createConsumer(c *fiber.Ctx, r *request) error {
	cn, err := decodeConsumer(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	cn.TenantID = r.tenant.ID
	if err := s.cfg.Consumers.CreateConsumer(r.ctx, cn); err != nil {
		return planRef(err, cn)
	}
	c.Location("/v1/tenants/" + r.tenant.Slug + "/consumers/" + cn.ID)
	return reply(c, http.StatusCreated, cn, cn.Version)
}

func (s *Server) listConsumers(c *fiber.Ctx, r *request) error {
	return listPage(c, func(p tenants.Page) ([]*tenants.Consumer, string, error) {
		return s.cfg.Consumers.ListConsumers(r.ctx, r.tenant.ID, p)
	})
}

func (s *Server) getConsumer(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "consumer")
	if err != nil {
		return err
	}
	cn, err := s.cfg.Consumers.FindConsumer(r.ctx, r.tenant.ID, id)
	if err != nil {
		return err
	}
	return reply(c, http.StatusOK, cn, cn.Version)
}

func (s *Server) putConsumer(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "consumer")
	if err != nil {
		return err
	}
	cn, bodyVersion, err := decodeConsumerUpdate(contentType(c), c.Body(), s.cfg.BodyLimit)
	if err != nil {
		return err
	}
	v, current, err := version(c, bodyVersion)
	if err != nil {
		return err
	}
	if current {
		cur, err := s.cfg.Consumers.FindConsumer(r.ctx, r.tenant.ID, id)
		if err != nil {
			return err
		}
		v = cur.Version
	}
	cn.ID, cn.TenantID, cn.Version = id, r.tenant.ID, v
	if err := s.cfg.Consumers.UpdateConsumer(r.ctx, cn); err != nil {
		return planRef(err, cn)
	}
	return reply(c, http.StatusOK, cn, cn.Version)
}

func (s *Server) deleteConsumer(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "consumer")
	if err != nil {
		return err
	}
	if err := s.cfg.Consumers.DeleteConsumer(r.ctx, r.tenant.ID, id); err != nil {
		return err
	}
	return noContent(c)
}

func (s *Server) createKey(c *fiber.Ctx, r *request) error {
	id, err := idParam(c, "id", "consumer")
	if err != nil {
		return err
	}
	if err := decodeKey(contentType(c), c.Body(), s.cfg.BodyLimit); err != nil {
		return err
	}
	plain, hash, display := tenants.NewSecret(tenants.KeyPrefix)
	k := &tenants.Key{TenantID: r.tenant.ID, ConsumerID: id, Prefix: display, Hash: hash}
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
