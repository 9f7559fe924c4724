package billing

import (
	"context"
	"time"

	"tollgate/tenants"
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

// Export row statuses: a row priced by a version in effect for its period; one priced by
// a version that charges nothing (no fee, no unit prices: amount 0 in its currency), as
// the developer portal calls such a plan free; or one whose plan had none (amount 0, no
// currency).
const (
	StatusPriced   = "priced"
	StatusFree     = "free"
	StatusUnpriced = "unpriced"
)

// DefaultUnitRequests is the unit of a price that names none: a price per 1,000 requests.
const DefaultUnitRequests = 1000

// DefaultFunctionUnitMS is the function time unit of a price that names none: a price
// per 1,000 ms (a second) of function time.
const DefaultFunctionUnitMS = 1000

// PriceService manages plan prices. TenantID "" is the platform scope (the operator's
// plans a tenant is on); otherwise the tenant's consumer plans.
type PriceService interface {
	// ListPrices returns every version of the scope's prices, by plan, then month.
	ListPrices(ctx context.Context, tenantID string) ([]Price, error)
	// SetPrice creates or replaces the version of p.Plan effective from p.EffectiveFrom
	// (this month or a later one; EValidation for an earlier one or a bad price, or a plan
	// the scope does not have).
	SetPrice(ctx context.Context, p *Price) error
	// DeletePrice removes a version that has not taken effect yet: ENotFound, EValidation
	// (already in effect).
	DeletePrice(ctx context.Context, tenantID, plan string, from Period) error
	// PriceAt is the version of the plan in effect in period p: ENotFound when unpriced.
	PriceAt(ctx context.Context, tenantID, plan string, p Period) (*Price, error)
}

// ConsumerBills is a tenant's bill of its own consumers.
type ConsumerBills interface {
	// ConsumerExport is one row per consumer of the tenant with usage in period p, priced
	// by its consumer plan's version in effect in p (StatusUnpriced when none), in
	// ExportRow order.
	ConsumerExport(ctx context.Context, tenantID string, p Period) ([]ExportRow, error)
}

// Validate checks p's own fields against the rules every price follows, with now the
// clock that decides which months are still open to change, and fills the default unit.
// Whether the plan exists is the store's to check.
func (p *Price) Validate(now time.Time) error {
	from, err := ParsePeriod(p.EffectiveFrom)
	if err != nil {
		return tenants.Invalid("effective_from", "must be a month as YYYY-MM")
	}
	if p.UnitRequests == 0 {
		p.UnitRequests = DefaultUnitRequests
	}
	if p.FunctionUnitMS == 0 {
		p.FunctionUnitMS = DefaultFunctionUnitMS
	}
	switch {
	case p.Plan == "":
		return tenants.Invalid("plan", "is required")
	case from.Before(PeriodOf(now)):
		return tenants.Invalid("effective_from", "must be this month (%s) or a later one: a month begun is billed as it started", PeriodOf(now))
	case !validCurrency(p.Currency):
		return tenants.Invalid("currency", "must be a lowercase ISO 4217 code such as usd")
	case p.MonthlyFee < 0:
		return tenants.Invalid("monthly_fee", "must be ≥ 0")
	case p.MonthlyFee > MaxUnitAmount:
		return tenants.Invalid("monthly_fee", "must be at most %d minor units (Stripe's largest amount)", MaxUnitAmount)
	case p.IncludedRequests < 0:
		return tenants.Invalid("included_requests", "must be ≥ 0")
	case p.UnitPrice < 0:
		return tenants.Invalid("unit_price", "must be ≥ 0")
	case p.UnitPrice > MaxUnitAmount:
		return tenants.Invalid("unit_price", "must be at most %d minor units per unit_requests (Stripe's largest amount)", MaxUnitAmount)
	case p.UnitRequests < 0:
		return tenants.Invalid("unit_requests", "must be > 0")
	case p.IncludedFunctionMS < 0 || p.IncludedFunctionMS > MaxFunctionMS:
		return tenants.Invalid("included_function_ms", "must be 0 to %d", int64(MaxFunctionMS))
	case p.FunctionUnitPrice < 0:
		return tenants.Invalid("function_unit_price", "must be ≥ 0")
	case p.FunctionUnitPrice > MaxUnitAmount:
		return tenants.Invalid("function_unit_price", "must be at most %d minor units per function_unit_ms (Stripe's largest amount)", MaxUnitAmount)
	case p.FunctionUnitMS < 0 || p.FunctionUnitMS > MaxFunctionMS:
		return tenants.Invalid("function_unit_ms", "must be 1 to %d", int64(MaxFunctionMS))
	case p.PerConsumer && p.TenantID != "":
		return tenants.Invalid("per_consumer", "only a platform plan's price may be per consumer")
	}
	return nil
}

func validCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// Before reports whether p is a month earlier than o.
func (p Period) Before(o Period) bool {
	return p.Year < o.Year || p.Year == o.Year && p.Month < o.Month
}

// Bill is the amount of a period on price p with billable requests: the monthly fee plus
// the overage's charge. EValidation on "amount" when it would not fit in int64.
func (p *Price) Bill(billable int64) (overage, amount int64, err error) {
	b, err := p.BillUsage(billable, 0)
	return b.Overage, b.Amount, err
}

// Bill is one period's amount on a price, in parts.
type Bill struct {
	Overage           int64 // billable requests over the allowance
	FunctionOverageUS int64 // function µs over the allowance
	FunctionAmount    int64 // the function time's charge, part of Amount
	Amount            int64 // monthly fee + the requests' charge + FunctionAmount
}

// BillUsage is the bill of a period on price p with billable requests and function time
// (µs): the monthly fee plus the charges of both units, each rounded up on its own.
// EValidation on "amount" when it would not fit in int64.
func (p *Price) BillUsage(billable, functionUS int64) (Bill, error) {
	var b Bill
	var req int64
	var err error
	if b.Overage, req, err = p.Charge(billable); err != nil {
		return Bill{}, err
	}
	if b.FunctionOverageUS, b.FunctionAmount, err = p.FunctionCharge(functionUS); err != nil {
		return Bill{}, err
	}
	if b.Amount, err = AddAmounts(p.MonthlyFee, req); err != nil {
		return Bill{}, overflow(p)
	}
	if b.Amount, err = AddAmounts(b.Amount, b.FunctionAmount); err != nil {
		return Bill{}, overflow(p)
	}
	return b, nil
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
