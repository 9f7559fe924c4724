package api

import (
	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// invoices serves GET /v1/billing/invoices to those who may export the bill: the Stripe
// invoices are the same money seen from Stripe's side.
func (s *Server) invoices(c *fiber.Ctx, _ *request) error {
	if s.cfg.Invoices == nil {
		return tenants.Errorf(tenants.ENotFound, "invoices are not recorded here")
	}
	if err := s.AuthorizeExport(c); err != nil {
		return err
	}
	return s.cfg.Invoices(c)
}

// stripeWebhook serves POST /v1/stripe/webhook. It takes no token: the event's signature,
// checked by the handler against the endpoint's secret, is its credential.
func (s *Server) stripeWebhook(c *fiber.Ctx, _ *request) error {
	if s.cfg.StripeWebhook == nil {
		return tenants.Errorf(tenants.ENotFound, "Stripe webhooks are not received here (TOLLGATE_STRIPE_WEBHOOK_SECRET is unset)")
	}
	return s.cfg.StripeWebhook(c)
}
