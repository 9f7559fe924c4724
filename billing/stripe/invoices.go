package stripe

import (
	"context"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
)

// invoiceLister is what GET /v1/billing/invoices needs of billing/postgres.Store.
type invoiceLister interface {
	Invoices(ctx context.Context, p billing.Period) ([]billing.Invoice, error)
}

// Invoices answers GET /v1/billing/invoices?period=YYYY-MM (default: this month) with the
// Stripe invoices whose billing period starts in the month, as the webhooks last left
// them. The caller must have passed the export's authorization.
func Invoices(store invoiceLister, now func() time.Time) fiber.Handler {
	return func(c *fiber.Ctx) error {
		q := strings.TrimSpace(c.Query("period"))
		if q == "" {
			q = billing.PeriodOf(now()).String()
		}
		p, err := billing.ParsePeriod(q)
		if err != nil {
			return err
		}
		list, err := store.Invoices(c.UserContext(), p)
		if err != nil {
			return err
		}
		c.Set(fiber.HeaderCacheControl, "no-store")
		return c.JSON(billing.InvoiceList{Period: p.String(), Invoices: list})
	}
}
