package web

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Connecting a tenant's Stripe account through Stripe's onboarding (Account Links). The
// POSTs carry the session's CSRF token like every console form. The two GETs are where
// Stripe sends the tenant's browser back, so they cannot carry one; neither does more
// than the page's owner could ask for anyway: return asks Stripe about the account the
// platform made for the tenant, refresh makes a new link to it (never a new account).

// connectURL is where Stripe sends the tenant back to, on the console's public address.
func (c *Console) connectURL(ctx *fiber.Ctx, what string) string {
	return c.cfg.PublicURL + c.tenantURL(ctx, "/payments/connect/"+what)
}

// paymentsConnect creates the tenant's account on Stripe unless it has one, and sends the
// tenant to Stripe's onboarding of it.
func (c *Console) paymentsConnect(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	if c.cfg.Payments == nil || c.cfg.Connect == nil {
		return ctx.Redirect(c.tenantURL(ctx, "/payments"), http.StatusSeeOther)
	}
	tv := tenantOf(ctx)
	actx := c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("stripe_account", tenants.AuditCreate), "")
	ob, err := c.cfg.Connect.StartOnboarding(actx, tv.ID, c.connectURL(ctx, "refresh"), c.connectURL(ctx, "return"))
	if err != nil {
		return c.connectProblem(ctx, err)
	}
	return ctx.Redirect(ob.URL, http.StatusSeeOther)
}

// paymentsReturn is Stripe's return_url: the tenant left the onboarding, finished or not,
// so Stripe is asked what the account may do now.
func (c *Console) paymentsReturn(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	return c.checkAccount(ctx)
}

// paymentsCheck asks Stripe again, for an account whose review took a while.
func (c *Console) paymentsCheck(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	return c.checkAccount(ctx)
}

func (c *Console) checkAccount(ctx *fiber.Ctx) error {
	if c.cfg.Payments == nil || c.cfg.Connect == nil {
		return ctx.Redirect(c.tenantURL(ctx, "/payments"), http.StatusSeeOther)
	}
	a, err := c.cfg.Connect.RefreshAccount(c.ctx(ctx), tenantOf(ctx).ID)
	switch {
	case tenants.ErrorCode(err) == tenants.ENotFound:
		return ctx.Redirect(c.tenantURL(ctx, "/payments"), http.StatusSeeOther)
	case err != nil:
		return c.connectProblem(ctx, err)
	case a.Status == billing.ConnectReady:
		return ctx.Redirect(c.tenantURL(ctx, "/payments?done=account-ready"), http.StatusSeeOther)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/payments?done=account-pending"), http.StatusSeeOther)
}

// paymentsRefresh is Stripe's refresh_url: the link expired or was used, so a new one is
// made for the account the tenant already has.
func (c *Console) paymentsRefresh(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	if c.cfg.Payments == nil || c.cfg.Connect == nil {
		return ctx.Redirect(c.tenantURL(ctx, "/payments"), http.StatusSeeOther)
	}
	tv := tenantOf(ctx)
	a, err := c.cfg.Payments.ConnectStatus(c.ctx(ctx), tv.ID)
	if err != nil {
		return c.internal(ctx, err)
	}
	if a.AccountID == "" {
		return ctx.Redirect(c.tenantURL(ctx, "/payments"), http.StatusSeeOther)
	}
	ob, err := c.cfg.Connect.StartOnboarding(c.ctx(ctx), tv.ID, c.connectURL(ctx, "refresh"), c.connectURL(ctx, "return"))
	if err != nil {
		return c.connectProblem(ctx, err)
	}
	return ctx.Redirect(ob.URL, http.StatusSeeOther)
}

// paymentsDisconnect forgets the tenant's account, or the unproven id it typed in before.
func (c *Console) paymentsDisconnect(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	if c.cfg.Payments == nil {
		return ctx.Redirect(c.tenantURL(ctx, "/payments"), http.StatusSeeOther)
	}
	tv := tenantOf(ctx)
	actx := c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("stripe_account", tenants.AuditDelete), "")
	if err := c.cfg.Payments.DisconnectAccount(actx, tv.ID); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/payments?done=account-removed"), http.StatusSeeOther)
}

// connectProblem shows a refusal (another tenant's account) at the top of the page, and
// Stripe's failures as a retry the tenant can make; only our own bugs are a 500.
func (c *Console) connectProblem(ctx *fiber.Ctx, err error) error {
	f := paymentsForm{Errors: map[string]string{}}
	if fieldError(err, f.Errors, nil) {
		return c.renderPayments(ctx, tenants.Status(tenants.ErrorCode(err)), f)
	}
	if c.cfg.Unavailable(err) {
		return c.internal(ctx, err)
	}
	c.cfg.Logger.Error("stripe connect", "tenant", tenantOf(ctx).Slug, "err", err)
	f.Errors["form"] = "Stripe did not answer as expected. Try again in a moment."
	return c.renderPayments(ctx, http.StatusBadGateway, f)
}
