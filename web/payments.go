package web

import (
	"context"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Payments through Stripe. A tenant's payments page (owners and admins) sets the Stripe
// account its consumers pay (Connect: acct_…; without one they pay the platform, and the
// tenant invoices them from the checkouts listed) and lists its consumers' checkouts from
// the developer portal. The finance page shows each paying tenant's subscription and
// latest invoice, as Stripe's webhooks reported them.

// PaymentsStore is what the payments and finance pages need of billing's Stripe records
// (billing/postgres.Store).
type PaymentsStore interface {
	Payments(ctx context.Context) ([]billing.TenantPayments, error)
	ConnectedAccount(ctx context.Context, tenantID string) (string, error)
	// SetConnectedAccount: "" removes it; EValidation (field account_id) for a bad id.
	SetConnectedAccount(ctx context.Context, tenantID, account string) error
	Checkouts(ctx context.Context, tenantID string, limit int) ([]billing.CheckoutSession, error)
}

// checkoutsShown is how many of a tenant's latest checkouts its page lists.
const checkoutsShown = 100

type paymentsForm struct {
	Account string
	Errors  map[string]string
}

type checkoutRow struct {
	billing.CheckoutSession
	Consumer string // the consumer's name; "" when it was deleted
}

type paymentsData struct {
	Enabled   bool
	Checkouts []checkoutRow
}

func (c *Console) paymentsPage(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	f := paymentsForm{Errors: map[string]string{}}
	if c.cfg.Payments != nil {
		acct, err := c.cfg.Payments.ConnectedAccount(c.ctx(ctx), tenantOf(ctx).ID)
		if err != nil {
			return c.internal(ctx, err)
		}
		f.Account = acct
	}
	return c.renderPayments(ctx, http.StatusOK, f)
}

func (c *Console) renderPayments(ctx *fiber.Ctx, status int, f paymentsForm) error {
	d := paymentsData{Enabled: c.cfg.Payments != nil}
	if d.Enabled {
		rows, err := c.checkoutRows(ctx)
		if err != nil {
			return c.internal(ctx, err)
		}
		d.Checkouts = rows
	}
	pg := page{Title: "Payments", Nav: "payments", Form: f, Data: d}
	switch ctx.Query("done") {
	case "account-saved":
		pg.Flash = "Stripe account saved: consumers' checkouts are made on it from now on."
	case "account-removed":
		pg.Flash = "Stripe account removed: consumers pay the platform from now on."
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
	names := map[string]string{}
	cursor := ""
	for {
		cs, next, err := c.cfg.Consumers.ListConsumers(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, x := range cs {
			names[x.ID] = x.Name
		}
		if next == "" {
			break
		}
		cursor = next
	}
	rows := make([]checkoutRow, len(list))
	for i, s := range list {
		rows[i] = checkoutRow{CheckoutSession: s, Consumer: names[s.ConsumerID]}
	}
	return rows, nil
}

// paymentsSave sets or removes the connected account.
func (c *Console) paymentsSave(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	if c.cfg.Payments == nil {
		return ctx.Redirect(c.tenantURL(ctx, "/payments"), http.StatusSeeOther)
	}
	f := paymentsForm{Account: strings.TrimSpace(ctx.FormValue("account_id")), Errors: map[string]string{}}
	verb := tenants.AuditUpdate
	if f.Account == "" {
		verb = tenants.AuditDelete
	}
	actx := c.audited(ctx, user(ctx), tenantOf(ctx).ID, tenants.AuditAction("stripe_account", verb), f.Account)
	err := c.cfg.Payments.SetConnectedAccount(actx, tenantOf(ctx).ID, f.Account)
	switch {
	case err == nil && f.Account == "":
		return ctx.Redirect(c.tenantURL(ctx, "/payments?done=account-removed"), http.StatusSeeOther)
	case err == nil:
		return ctx.Redirect(c.tenantURL(ctx, "/payments?done=account-saved"), http.StatusSeeOther)
	case !fieldError(err, f.Errors, nil):
		return c.internal(ctx, err)
	}
	return c.renderPayments(ctx, http.StatusUnprocessableEntity, f)
}

// financePayments are the tenants' subscriptions and latest invoices for the finance
// page; nil when payments are not recorded here.
func (c *Console) financePayments(ctx *fiber.Ctx) ([]billing.TenantPayments, error) {
	if c.cfg.Payments == nil {
		return nil, nil
	}
	return c.cfg.Payments.Payments(c.ctx(ctx))
}
