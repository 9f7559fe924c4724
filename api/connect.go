package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
)

// A tenant's Stripe Connect account. No endpoint takes an account id: the platform creates
// the account on Stripe and the tenant proves it is theirs by Stripe's own onboarding, so
// an id someone typed in (another business's, read off a receipt) can never carry a
// tenant's consumers' payments.

// onboardingBody is the optional body of POST …/stripe/account/onboarding: nothing. An
// object is accepted so clients may always send one; any field in it (account_id
// included) is 400 invalid_request.
type onboardingBody struct{}

// connectService is Config.Connect, or 404 when Stripe is not configured here.
func (s *Server) connectService() (billing.ConnectService, error) {
	if s.cfg.Connect == nil {
		return nil, tenants.Errorf(tenants.ENotFound, "Stripe Connect is not configured on this server (TOLLGATE_STRIPE_KEY is unset)")
	}
	return s.cfg.Connect, nil
}

func (s *Server) getConnectedAccount(c *fiber.Ctx, r *request) error {
	cs, err := s.connectService()
	if err != nil {
		return err
	}
	a, err := cs.ConnectedAccount(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	return c.Status(http.StatusOK).JSON(a)
}

// startOnboarding answers the Stripe URL the tenant's admin opens in a browser. Stripe
// sends them back to the console's payments page, which records what became of the
// account.
func (s *Server) startOnboarding(c *fiber.Ctx, r *request) error {
	cs, err := s.connectService()
	if err != nil {
		return err
	}
	var b onboardingBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, true); err != nil {
		return err
	}
	base := s.cfg.PublicURL
	if base == "" {
		base = "http://" + c.Hostname()
	}
	back := base + "/console/t/" + r.tenant.Slug + "/payments/connect/"
	ctx := s.audited(r.ctx, r, r.tenant.ID, "stripe_account", tenants.AuditCreate, "")
	ob, err := cs.StartOnboarding(ctx, r.tenant.ID, back+"refresh", back+"return")
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store") // the link is single use
	return c.Status(http.StatusOK).JSON(ob)
}

func (s *Server) refreshConnectedAccount(c *fiber.Ctx, r *request) error {
	cs, err := s.connectService()
	if err != nil {
		return err
	}
	var b onboardingBody
	if err := decodeBody(contentType(c), c.Body(), s.cfg.BodyLimit, &b, true); err != nil {
		return err
	}
	a, err := cs.RefreshAccount(r.ctx, r.tenant.ID)
	if err != nil {
		return err
	}
	return c.Status(http.StatusOK).JSON(a)
}

func (s *Server) disconnectAccount(c *fiber.Ctx, r *request) error {
	cs, err := s.connectService()
	if err != nil {
		return err
	}
	ctx := s.audited(r.ctx, r, r.tenant.ID, "stripe_account", tenants.AuditDelete, "")
	if err := cs.Disconnect(ctx, r.tenant.ID); err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}
