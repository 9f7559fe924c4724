package billing

import (
	"context"
	"time"
)

// Prices are versioned by the month they take effect: a price set for a month applies to
// that month and every later one until the next version, so changing a price never
// changes the bill of a month already begun or past. A plan (platform or a tenant's
// consumer plan) with no version in effect for a month is unpriced for it: exported as
// such, never with another plan's numbers.

// Price scopes: the platform's plans (a tenant's plan) and a tenant's own consumer plans.
const (
	ScopePlatform = "platform"
	ScopeTenant   = "tenant"
)

// PriceService manages plan prices. TenantID "" is the platform scope (the operator's
// plans a tenant is on); otherwise the tenant's consumer plans.
type PriceService interface {
	// ListPrices returns every version of the scope's prices, by plan, then month.
	ListPrices(ctx context.Context, tenantID string) ([]Price, error)
	// SetPrice creates or replaces the version of p.Plan effective from p.EffectiveFrom
	// (this month or a later one; EValidation for an earlier one or a bad price).
	SetPrice(ctx context.Context, p *Price) error
	// DeletePrice removes a version that has not taken effect yet: ENotFound, EValidation
	// (already in effect).
	DeletePrice(ctx context.Context, tenantID, plan string, from Period) error
	// PriceAt is the version of the plan in effect in period p: ENotFound when unpriced.
	PriceAt(ctx context.Context, tenantID, plan string, p Period) (*Price, error)
}

// CheckoutRequest asks for a Stripe Checkout session: a consumer of a tenant buying one of
// the tenant's priced consumer plans from the developer portal.
type CheckoutRequest struct {
	TenantID   string
	ConsumerID string
	Plan       string
	Price      Price
	Email      string // the consumer's verified address, prefilled on the payment page
	SuccessURL string // where Stripe sends the consumer back ({CHECKOUT_SESSION_ID} allowed)
	CancelURL  string
}

// Checkout starts payments for consumer plans. The plan changes when Stripe's
// checkout.session.completed webhook arrives, not when the session is created.
type Checkout interface {
	// StartCheckout creates the session and returns the URL to send the consumer to.
	StartCheckout(ctx context.Context, r CheckoutRequest) (url string, err error)
}

// now is the clock of price checks; tests of this package may replace it.
var now = time.Now
