package billing

import (
	"strings"
	"time"

	"tollgate/tenants"
)

// Payments through Stripe: what Tollgate made there (billing/stripe makes it,
// billing/postgres remembers it) and what Stripe's webhooks report back.

// StripePrice is the Stripe product and prices of one platform price version. A part the
// version does not charge (no monthly fee, no usage price) has no price id.
type StripePrice struct {
	Plan          string
	EffectiveFrom string // the version's first month, "YYYY-MM"
	Fingerprint   string // of the version's numbers: a version replaced in effect differs
	ProductID     string
	FeePriceID    string // licensed, monthly
	UsagePriceID  string // metered, on the Billing Meter
	// FunctionPriceID is metered on the function time's meter: "" unless the version
	// charges function time.
	FunctionPriceID string
}

// Subscription is a paying tenant's Stripe subscription: its plan and price version as
// last synced, and its status as Stripe last reported it.
type Subscription struct {
	TenantID         string     `json:"tenant_id"`
	CustomerID       string     `json:"customer_id"`
	SubscriptionID   string     `json:"subscription_id"`
	Generation       int        `json:"-"`
	Plan             string     `json:"plan"`
	EffectiveFrom    string     `json:"effective_from"`
	Fingerprint      string     `json:"-"`
	Status           string     `json:"status"` // Stripe's: active, past_due, canceled…
	CurrentPeriodEnd *time.Time `json:"current_period_end,omitempty"`
}

// Canceled is the status of a subscription that ended.
const Canceled = "canceled"

// Invoice is a Stripe invoice of a tenant's subscription, as its last webhook left it.
type Invoice struct {
	ID          string     `json:"id"`
	TenantID    string     `json:"tenant_id,omitempty"` // "": a customer Tollgate does not know
	Tenant      string     `json:"tenant,omitempty"`    // the tenant's slug, when it still exists
	CustomerID  string     `json:"customer_id"`
	Status      string     `json:"status"` // draft, open, paid, uncollectible, void
	AmountDue   int64      `json:"amount_due"`
	AmountPaid  int64      `json:"amount_paid"`
	Currency    string     `json:"currency"`
	PeriodStart *time.Time `json:"period_start,omitempty"`
	PeriodEnd   *time.Time `json:"period_end,omitempty"`
	HostedURL   string     `json:"hosted_invoice_url,omitempty"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// Checkout statuses.
const (
	CheckoutPending = "pending"
	CheckoutPaid    = "paid"
)

// CheckoutSession is a Checkout session made for a consumer of a tenant. Account is the
// tenant's connected account it was made on; "" means the platform's account, and the
// record is what the tenant invoices the consumer from.
type CheckoutSession struct {
	SessionID      string
	TenantID       string
	ConsumerID     string
	Plan           string
	Status         string
	Amount         int64
	Currency       string
	Account        string
	SubscriptionID string
	CreatedAt      time.Time
	CompletedAt    *time.Time
}

// TenantPayments is one tenant's line on the finance page: its subscription and its latest
// invoice, each nil when there is none.
type TenantPayments struct {
	TenantID     string
	Tenant       string // slug
	Subscription *Subscription
	Invoice      *Invoice
}

// BilledTenant is a tenant the subscriber looks at: every existing tenant, and each
// deleted one whose subscription is not canceled yet (Gone, with its last plan).
type BilledTenant struct {
	ID, Slug, Name, Plan string
	Gone                 bool
	Subscription         *Subscription // nil: never subscribed
}

// ValidAccount checks a Stripe Connect account id: "acct_" and letters or digits.
func ValidAccount(id string) error {
	rest, ok := strings.CutPrefix(id, "acct_")
	if !ok || rest == "" || len(id) > 255 || strings.TrimFunc(rest, isAlnum) != "" {
		return tenants.Invalid("account_id", "must be a Stripe account id (acct_ then letters and digits)")
	}
	return nil
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// InvoiceList is the answer of GET /v1/billing/invoices.
type InvoiceList struct {
	Period   string    `json:"period"`
	Invoices []Invoice `json:"invoices"`
}

// WebhookResult is the answer of POST /v1/stripe/webhook to a delivered event.
type WebhookResult struct {
	Received  bool `json:"received"`
	Duplicate bool `json:"duplicate"` // delivered before: nothing changed
}
