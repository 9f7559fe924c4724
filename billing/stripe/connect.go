package stripe

import (
	"context"
	"errors"
	"fmt"
	"time"

	stripeapi "github.com/stripe/stripe-go/v76"

	"tollgate/billing"
	"tollgate/tenants"
)

// Connect onboards tenants' Stripe accounts through Stripe's Account Links: the platform
// creates the account (so its id comes from Stripe, never from the tenant), sends the
// tenant to Stripe's hosted onboarding, and asks Stripe what became of it when the tenant
// comes back. OAuth (/oauth/token) would prove an existing account the same way, but
// stripe-mock does not serve it, so it is not offered.

// connectStore is what Connect needs of billing/postgres.Store.
type connectStore interface {
	ConnectStatus(ctx context.Context, tenantID string) (*billing.ConnectedAccount, error)
	AttachConnectedAccount(ctx context.Context, tenantID, accountID string) (*billing.ConnectedAccount, error)
	RecordConnectedAccount(ctx context.Context, tenantID, accountID string, detailsSubmitted, chargesEnabled bool, at time.Time) (*billing.ConnectedAccount, error)
	DisconnectAccount(ctx context.Context, tenantID string) error
}

// Connect implements billing.ConnectService on the Pusher's Stripe account (the platform).
type Connect struct {
	p     *Pusher
	store connectStore
}

// NewConnect returns the Connect of the Pusher's Stripe account.
func NewConnect(p *Pusher, store connectStore) (*Connect, error) {
	if p == nil || store == nil {
		return nil, errors.New("stripe: NewConnect needs a Pusher and a store")
	}
	return &Connect{p: p, store: store}, nil
}

// ConnectedAccount implements billing.ConnectService.
func (c *Connect) ConnectedAccount(ctx context.Context, tenantID string) (*billing.ConnectedAccount, error) {
	return c.store.ConnectStatus(ctx, tenantID)
}

// StartOnboarding implements billing.ConnectService. The account create carries an
// Idempotency-Key of the tenant, so a retry after a lost answer gets the same account
// instead of a second one.
func (c *Connect) StartOnboarding(ctx context.Context, tenantID, refreshURL, returnURL string) (*billing.Onboarding, error) {
	a, err := c.store.ConnectStatus(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	if a.AccountID == "" {
		params := &stripeapi.AccountParams{
			Type:     stripeapi.String(string(stripeapi.AccountTypeExpress)),
			Metadata: map[string]string{"tollgate_tenant_id": tenantID},
		}
		params.Context = ctx
		params.SetIdempotencyKey("tollgate-connect-account-" + tenantID)
		created, err := c.p.api.Accounts.New(params)
		if err != nil {
			return nil, fmt.Errorf("stripe: create connected account: %w", err)
		}
		if a, err = c.store.AttachConnectedAccount(ctx, tenantID, created.ID); err != nil {
			return nil, err
		}
	}
	lp := &stripeapi.AccountLinkParams{
		Account:    stripeapi.String(a.AccountID),
		Type:       stripeapi.String(string(stripeapi.AccountLinkTypeAccountOnboarding)),
		RefreshURL: stripeapi.String(refreshURL),
		ReturnURL:  stripeapi.String(returnURL),
	}
	lp.Context = ctx
	link, err := c.p.api.AccountLinks.New(lp)
	if err != nil {
		return nil, fmt.Errorf("stripe: create account link: %w", err)
	}
	return &billing.Onboarding{URL: link.URL, ExpiresAt: time.Unix(link.ExpiresAt, 0).UTC(), Account: a}, nil
}

// RefreshAccount implements billing.ConnectService.
func (c *Connect) RefreshAccount(ctx context.Context, tenantID string) (*billing.ConnectedAccount, error) {
	a, err := c.store.ConnectStatus(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	if a.AccountID == "" {
		return nil, tenants.Errorf(tenants.ENotFound, "the tenant has no Stripe account connected through Stripe: start the onboarding first")
	}
	params := &stripeapi.AccountParams{}
	params.Context = ctx
	got, err := c.p.api.Accounts.GetByID(a.AccountID, params)
	if err != nil {
		return nil, fmt.Errorf("stripe: retrieve connected account: %w", err)
	}
	if got.ID != a.AccountID {
		return nil, fmt.Errorf("stripe: asked for account %s, got %s", a.AccountID, got.ID)
	}
	return c.store.RecordConnectedAccount(ctx, tenantID, got.ID, got.DetailsSubmitted, got.ChargesEnabled, c.p.cfg.Now().UTC())
}

// Disconnect implements billing.ConnectService. The account stays on Stripe, connected to
// the platform: only the tenant can close it there.
func (c *Connect) Disconnect(ctx context.Context, tenantID string) error {
	return c.store.DisconnectAccount(ctx, tenantID)
}

var _ billing.ConnectService = (*Connect)(nil)
