package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// maxID bounds an id taken from the path before it reaches the store.
const maxID = 64

// idParam reads an object id from the path. A malformed id is simply not found.
func idParam(c *fiber.Ctx, name, what string) (string, error) {
	id := c.Params(name)
	if id == "" || len(id) > maxID || !validID(id) {
		return "", tenants.Errorf(tenants.ENotFound, "%s not found", what)
	}
	return id, nil
}

// validID accepts the UUIDs the store hands out (any case, with dashes).
func validID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// reply sends v as JSON with status, and ETag when version is set.
func reply(c *fiber.Ctx, status int, v any, version int64) error {
	if version > 0 {
		setETag(c, version)
	}
	return c.Status(status).JSON(v)
}

// replySecret sends a body holding a plaintext secret: never cached anywhere.
func replySecret(c *fiber.Ctx, v any) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(http.StatusCreated).JSON(v)
}

func replyList[T any](c *fiber.Ctx, items []*T, next string) error {
	if items == nil {
		items = []*T{}
	}
	return c.JSON(list[*T]{Items: items, NextCursor: next})
}

func noContent(c *fiber.Ctx) error {
	return c.SendStatus(http.StatusNoContent)
}

func contentType(c *fiber.Ctx) string { return c.Get(fiber.HeaderContentType) }

func (s *Server) healthz(c *fiber.Ctx, _ *request) error {
	return c.JSON(status{Status: "ok"})
}

// readyTimeout bounds the readiness probe, well under a typical probe timeout.
const readyTimeout = 2 * time.Second

func (s *Server) readyz(c *fiber.Ctx, r *request) error {
	if s.draining.Load() {
		return tenants.Errorf(tenants.ENotReady, "shutting down")
	}
	ctx, cancel := context.WithTimeout(r.ctx, readyTimeout)
	defer cancel()
	if err := s.cfg.Ready(ctx); err != nil {
		s.log.Warn("api: not ready", "request_id", requestID(c), "err", err)
		return tenants.Errorf(tenants.ENotReady, "not ready: a dependency does not answer")
	}
	return c.JSON(status{Status: "ready"})
}

func (s *Server) serveOpenAPI(c *fiber.Ctx, _ *request) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(s.openapi)
}
