package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants/rbac"
	"tollgate/web/forms"
)

// The finance export page: the platform's bill for a month, previewed as a table, with
// links to the CSV and JSON the API serves (GET /v1/billing/export accepts the console
// session). Only users whose platform role may export the bill see it; anyone else gets
// the not-found page, as for a tenant they have no role in.

type financeData struct {
	Enabled         bool
	Period          string
	Rows            []billing.ExportRow
	Totals          []string // "12.34 EUR" per currency
	CSVURL, JSONURL string
	Error           string
	// Payments are the tenants' Stripe subscriptions and latest invoices (payments.go).
	Payments []billing.TenantPayments
}

// mayExport reports whether the signed-in user may export the bill.
func (c *Console) mayExport(ctx *fiber.Ctx) bool {
	u := user(ctx)
	return u != nil && c.cfg.Roles.Allow(u.PlatformRole, rbac.PlatformDomain, rbac.BillingExport)
}

// zeroDecimal are ISO 4217 currencies without minor units.
var zeroDecimal = map[string]bool{"JPY": true, "KRW": true, "VND": true, "CLP": true, "ISK": true, "UGX": true, "XAF": true, "XOF": true, "PYG": true}

// money formats an amount in minor units.
func money(amount int64, currency string) string {
	cur := strings.ToUpper(currency)
	if zeroDecimal[cur] {
		return forms.GroupDigits(amount) + " " + cur
	}
	neg := amount < 0
	if neg {
		amount = -amount
	}
	s := forms.GroupDigits(amount/100) + "." + strconv.FormatInt(100+amount%100, 10)[1:]
	if neg {
		s = "-" + s
	}
	return strings.TrimSpace(s + " " + cur)
}

func (c *Console) financePage(ctx *fiber.Ctx) error {
	if user(ctx) == nil {
		return ctx.Redirect(loginFor(ctx), http.StatusSeeOther)
	}
	if !c.mayExport(ctx) {
		return c.notFound(ctx, user(ctx))
	}
	d := financeData{Enabled: c.cfg.Usage != nil, Period: billing.PeriodOf(c.cfg.Now().UTC()).String()}
	if q := strings.TrimSpace(ctx.Query("period")); q != "" {
		d.Period = q
	}
	status := http.StatusOK
	p, err := billing.ParsePeriod(d.Period)
	switch {
	case err != nil:
		d.Error = "Pick a month (YYYY-MM), for example " + billing.PeriodOf(c.cfg.Now().UTC()).String() + "."
		status = http.StatusUnprocessableEntity
	case d.Enabled:
		rows, err := c.cfg.Usage.Export(c.ctx(ctx), p)
		if err != nil {
			return c.internal(ctx, err)
		}
		d.Rows = rows
		// The export's own totals: checked sums, so a total past 64 bits is said, not wrapped.
		totals, err := billing.Totals(rows)
		if err != nil {
			d.Error = "The totals of this month do not fit in 64 bits of minor units; the export lists every row."
			status = http.StatusUnprocessableEntity
		}
		for _, t := range totals {
			d.Totals = append(d.Totals, money(t.Amount, t.Currency))
		}
		q := url.Values{"period": {p.String()}}
		q.Set("format", "csv")
		d.CSVURL = "/v1/billing/export?" + q.Encode()
		q.Set("format", "json")
		d.JSONURL = "/v1/billing/export?" + q.Encode()
	}
	pays, err := c.financePayments(ctx)
	if err != nil {
		return c.internal(ctx, err)
	}
	d.Payments = pays
	return c.render(ctx, status, "finance", page{Title: "Billing export", Nav: "finance", Data: d})
}
