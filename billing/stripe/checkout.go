package stripe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	stripeapi "github.com/stripe/stripe-go/v76"

	"tollgate/billing"
	"tollgate/tenants"
)

// Checkout for the developer portal: a consumer buys one of the tenant's priced consumer
// plans through a Stripe Checkout session (mode subscription, the plan's monthly fee).
// A tenant that connected its Stripe account (Connect) gets the session made on that
// account, so the consumer pays the tenant directly; otherwise it is made on the
// platform's account and the tenant invoices the consumer from the record. Every session
// is recorded pending; the plan changes when checkout.session.completed arrives
// (Webhook).

// checkoutStore is what Checkout needs of billing/postgres.Store.
type checkoutStore interface {
	// CheckoutAccount refuses (EConflict) a connected account Stripe's onboarding has not
	// made able to take charges, typed-in ids included.
	CheckoutAccount(ctx context.Context, tenantID string) (string, error)
	RecordCheckout(ctx context.Context, c *billing.CheckoutSession) error
}

// Checkout implements billing.Checkout.
type Checkout struct {
	p     *Pusher
	store checkoutStore
}

// NewCheckout returns the Checkout of the Pusher's Stripe account.
func NewCheckout(p *Pusher, store checkoutStore) (*Checkout, error) {
	if p == nil || store == nil {
		return nil, errors.New("stripe: NewCheckout needs a Pusher and a store")
	}
	return &Checkout{p: p, store: store}, nil
}

// sameClick is how long the same consumer asking for the same plan again gets the same
// session (Stripe answers a repeated Idempotency-Key with the first session), so a double
// click makes one session.
const sameClick = 10 * time.Minute

// StartCheckout creates the session and returns its URL. A plan with a monthly fee is a
// subscription to it; a plan that charges only for usage collects a payment method (mode
// setup) for the tenant to charge the usage it invoices. EValidation when the plan charges
// nothing.
func (c *Checkout) StartCheckout(ctx context.Context, r billing.CheckoutRequest) (string, error) {
	if r.Price.MonthlyFee <= 0 && r.Price.UnitPrice <= 0 {
		return "", tenants.Invalid("plan", "the plan charges nothing: choose it without a checkout")
	}
	acct, err := c.store.CheckoutAccount(ctx, r.TenantID)
	if err != nil {
		return "", err
	}
	params := sessionParams(r)
	params.Context = ctx
	if acct != "" {
		params.SetStripeAccount(acct)
	}
	bucket := c.p.cfg.Now().UTC().Truncate(sameClick).Unix()
	params.SetIdempotencyKey(fmt.Sprintf("tollgate-checkout-%s-%s-%s-%s-%d", r.TenantID, r.ConsumerID, r.Plan, r.Price.EffectiveFrom, bucket))
	s, err := c.p.api.CheckoutSessions.New(params)
	if err != nil {
		return "", fmt.Errorf("stripe: create checkout session: %w", err)
	}
	err = c.store.RecordCheckout(ctx, &billing.CheckoutSession{
		SessionID: s.ID, TenantID: r.TenantID, ConsumerID: r.ConsumerID, Plan: r.Plan,
		Amount: r.Price.MonthlyFee, Currency: r.Price.Currency, Account: acct,
	})
	if err != nil {
		return "", err
	}
	return s.URL, nil
}

func sessionParams(r billing.CheckoutRequest) *stripeapi.CheckoutSessionParams {
	meta := map[string]string{"tenant_id": r.TenantID, "consumer_id": r.ConsumerID, "plan": r.Plan}
	if r.Price.MonthlyFee <= 0 {
		params := &stripeapi.CheckoutSessionParams{
			Mode:              stripeapi.String(string(stripeapi.CheckoutSessionModeSetup)),
			Currency:          stripeapi.String(strings.ToLower(r.Price.Currency)),
			ClientReferenceID: stripeapi.String(r.ConsumerID),
			SuccessURL:        stripeapi.String(r.SuccessURL),
			CancelURL:         stripeapi.String(r.CancelURL),
			Metadata:          meta,
			SetupIntentData:   &stripeapi.CheckoutSessionSetupIntentDataParams{Metadata: meta},
			// The payment method is kept on a customer the tenant can charge.
			CustomerCreation: stripeapi.String(string(stripeapi.CheckoutSessionCustomerCreationAlways)),
		}
		if r.Email != "" {
			params.CustomerEmail = stripeapi.String(r.Email)
		}
		return params
	}
	params := &stripeapi.CheckoutSessionParams{
		Mode:              stripeapi.String(string(stripeapi.CheckoutSessionModeSubscription)),
		ClientReferenceID: stripeapi.String(r.ConsumerID),
		SuccessURL:        stripeapi.String(r.SuccessURL),
		CancelURL:         stripeapi.String(r.CancelURL),
		LineItems: []*stripeapi.CheckoutSessionLineItemParams{{
			Quantity: stripeapi.Int64(1),
			PriceData: &stripeapi.CheckoutSessionLineItemPriceDataParams{
				Currency:   stripeapi.String(strings.ToLower(r.Price.Currency)),
				UnitAmount: stripeapi.Int64(r.Price.MonthlyFee),
				Recurring: &stripeapi.CheckoutSessionLineItemPriceDataRecurringParams{
					Interval: stripeapi.String(string(stripeapi.PriceRecurringIntervalMonth)),
				},
				ProductData: &stripeapi.CheckoutSessionLineItemPriceDataProductDataParams{
					Name: stripeapi.String(r.Plan + " plan"),
				},
			},
		}},
		Metadata:         meta,
		SubscriptionData: &stripeapi.CheckoutSessionSubscriptionDataParams{Metadata: meta},
	}
	if r.Email != "" {
		params.CustomerEmail = stripeapi.String(r.Email)
	}
	return params
}

var _ billing.Checkout = (*Checkout)(nil)
