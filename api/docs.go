package api

import (
	"github.com/gofiber/fiber/v2"

	"tollgate/api/apidocs"
	"tollgate/tenants"
)

// The reference page (apidocs) is served by the api itself, beside the document it
// renders: same origin, so the page's policy needs nothing but 'self'.

func (s *Server) serveDocs(c *fiber.Ctx, _ *request) error {
	docsHeaders(c)
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return c.Send(apidocs.Page)
}

func (s *Server) serveDocsAsset(c *fiber.Ctx, _ *request) error {
	a, ok := apidocs.Lookup(c.Params("asset"))
	if !ok {
		return tenants.Errorf(tenants.ENotFound, "no file %q in the reference page: see /v1/docs", c.Params("asset"))
	}
	docsHeaders(c)
	// The files change only with the binary: an hour of caching spares a 2 MB script per
	// visit, and an upgrade shows within the hour.
	c.Set(fiber.HeaderCacheControl, "public, max-age=3600")
	c.Set(fiber.HeaderContentType, a.MediaType)
	return c.Send(a.Body)
}

// docsHeaders are the console's security headers: the page runs under its policy.
func docsHeaders(c *fiber.Ctx) {
	c.Set("Content-Security-Policy", apidocs.CSP)
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Referrer-Policy", "same-origin")
}
