package billing

import (
	"context"
	"time"
)

// Stripe Connect: a tenant is paid directly by its consumers only on a connected account
// that the platform itself created for that tenant and that Stripe's own onboarding made
// able to take charges. An account id a tenant could type in proves nothing (anyone can
// read another business's acct_… off a receipt), so no way in takes one.

// Connected account statuses, as the API and the console name them.
const (
	// ConnectNone: no account; consumers pay the platform.
	ConnectNone = "none"
	// ConnectUnproven: only an id the tenant typed in before onboarding existed. Nothing
	// proves it is the tenant's, so Checkout refuses to run on it (or on the platform in
	// its place) until the tenant connects through Stripe or removes it.
	ConnectUnproven = "unproven"
	// ConnectOnboarding: the platform created the account for the tenant; Stripe does not
	// let it take charges yet (onboarding unfinished or under review).
	ConnectOnboarding = "onboarding"
	// ConnectReady: Stripe reports charges enabled; consumers' checkouts run on it.
	ConnectReady = "ready"
)

// ConnectedAccount is a tenant's Stripe Connect account and what Stripe last said of it.
type ConnectedAccount struct {
	// Status is one of the Connect* statuses.
	Status string `json:"status" doc:"none, unproven (an id typed in before onboarding: not used for Checkout until the tenant connects through Stripe), onboarding (created, Stripe does not let it take charges yet) or ready."`
	// AccountID is the account the platform created for the tenant; "" unless onboarding
	// or ready.
	AccountID        string     `json:"account_id,omitempty"`
	DetailsSubmitted bool       `json:"details_submitted"`
	ChargesEnabled   bool       `json:"charges_enabled"`
	CheckedAt        *time.Time `json:"checked_at,omitempty" doc:"When Stripe was last asked about the account."`
	// UnprovenAccountID is the id typed in before onboarding existed: kept to be shown,
	// never used.
	UnprovenAccountID string `json:"unproven_account_id,omitempty"`
}

// Onboarding is a Stripe-hosted onboarding link of a tenant's connected account: single
// use and short-lived, so it is made when the tenant asks, never stored.
type Onboarding struct {
	URL       string            `json:"url"`
	ExpiresAt time.Time         `json:"expires_at"`
	Account   *ConnectedAccount `json:"account"`
}

// ConnectService connects tenants' Stripe accounts (billing/stripe.Connect). Errors are
// *tenants.Error: EConflict when the account Stripe returns is another tenant's.
type ConnectService interface {
	// ConnectedAccount is the tenant's account as last recorded (Status none when it has
	// none).
	ConnectedAccount(ctx context.Context, tenantID string) (*ConnectedAccount, error)
	// StartOnboarding creates the tenant's account on Stripe unless it has one, and an
	// account_onboarding link to it; Stripe sends the tenant back to returnURL when done
	// and to refreshURL when the link expired or was used.
	StartOnboarding(ctx context.Context, tenantID, refreshURL, returnURL string) (*Onboarding, error)
	// RefreshAccount asks Stripe about the tenant's account and records its answer.
	// ENotFound when the tenant has no account the platform created.
	RefreshAccount(ctx context.Context, tenantID string) (*ConnectedAccount, error)
	// Disconnect forgets the tenant's account (and any unproven id): consumers pay the
	// platform from then on.
	Disconnect(ctx context.Context, tenantID string) error
}
