package web

import (
	"context"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants/rbac"
)

// Payments through Stripe. A tenant's payments page (owners and admins) connects the
// Stripe account its consumers pay (without one they pay the platform, and the tenant
// invoices them from the checkouts listed) and lists its consumers' checkouts from the
// developer portal. The finance page shows each paying tenant's subscription and latest
// invoice, as Stripe's webhooks reported them.
//
// The account is never typed in: the platform creates it on Stripe and sends the tenant
// through Stripe's own onboarding (connect.go in billing/stripe), which is what proves
// the account is the tenant's.

// PaymentsStore is what the payments and finance pages need of billing's Stripe records
// (billing/postgres.Store).
type PaymentsStore interface {
	Payments(ctx context.Context) ([]billing.TenantPayments, error)
	ConnectStatus(ctx context.Context, tenantID string) (*billing.ConnectedAccount, error)
	DisconnectAccount(ctx context.Context, tenantID string) error
	Checkouts(ctx context.Context, tenantID string, limit int) ([]billing.CheckoutSession, error)
}

// checkoutsShown is how many of a tenant's latest checkouts its page lists.
const checkoutsShown = 100

type paymentsForm struct {
	Errors map[string]string
}

type checkoutRow struct {
	billing.CheckoutSession
	Consumer string // the consumer's name; "" when it was deleted
}

type paymentsData struct {
	Enabled    bool
	CanOnboard bool // Stripe is configured: the tenant can connect through it
	Account    *billing.ConnectedAccount
	Checkouts  []checkoutRow
}

func (c *Console) paymentsPage(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	return c.renderPayments(ctx, http.StatusOK, paymentsForm{Errors: map[string]string{}})
}

func (c *Console) renderPayments(ctx *fiber.Ctx, status int, f paymentsForm) error {
	d := paymentsData{Enabled: c.cfg.Payments != nil, CanOnboard: c.cfg.Connect != nil}
	if d.Enabled {
		acct, err := c.cfg.Payments.ConnectStatus(c.ctx(ctx), tenantOf(ctx).ID)
		if err != nil {
			return c.internal(ctx, err)
		}
		d.Account = acct
		rows, err := c.checkoutRows(ctx)
		if err != nil {
			return c.internal(ctx, err)
		}
		d.Checkouts = rows
	}
	pg := page{Title: "Payments", Nav: "payments", Form: f, Data: d}
	switch ctx.Query("done") {
	case "account-ready":
		pg.Flash = "Stripe account connected: consumers' checkouts are made on it from now on."
	case "account-pending":
		pg.Flash = "Stripe does not let the account take charges yet: finish its onboarding, or check again once Stripe has reviewed it."
	case "account-removed":
		pg.Flash = "Stripe account disconnected: consumers pay the platform from now on."
	}
	return c.render(ctx, status, "payments", pg)
}

// checkoutRows are the tenant's latest checkouts with their consumers' names.
func (c *Console) checkoutRows(ctx *fiber.Ctx) ([]checkoutRow, error) {
	tv := tenantOf(ctx)
	list, err := c.cfg.Payments.Checkouts(c.ctx(ctx), tv.ID, checkoutsShown)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	ids := make([]string, len(list))
	for i, s := range list {
		ids[i] = s.ConsumerID
	}
	names, err := c.cfg.Consumers.ConsumerNames(c.ctx(ctx), tv.ID, ids)
	if err != nil {
		return nil, err
	}
	rows := make([]checkoutRow, len(list))
	for i, s := range list {
		rows[i] = checkoutRow{CheckoutSession: s, Consumer: names[s.ConsumerID]}
	}
	return rows, nil
}

// The connect handlers are in payments_connect.go.

// financePayments are the tenants' subscriptions and latest invoices for the finance
// page; nil when payments are not recorded here.
func (c *Console) financePayments(ctx *fiber.Ctx) ([]billing.TenantPayments, error) {
	if c.cfg.Payments == nil {
		return nil, nil
	}
	return c.cfg.Payments.Payments(c.ctx(ctx))
}
