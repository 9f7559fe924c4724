package main

import (
	"context"
	"log/slog"

	billingpg "tollgate/billing/postgres"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/config"
)

// sweepEntitlements takes back consumers' plans whose payment grace ended, beside the
// webhook that learns of the failures (so only where TOLLGATE_STRIPE_WEBHOOK_SECRET is
// set); replicas share the due ones through leases in the store. The returned func stops
// it and waits.
func sweepEntitlements(ctx context.Context, cfg *config.Config, cp *controlPlane, log *slog.Logger) (stop func()) {
	if cfg.StripeWebhookSecret == "" {
		return func() {}
	}
	en := &billingstripe.Entitlements{Store: billingpg.New(cp.db.Pool()), Consumers: cp.db, Logger: log}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); en.Run(ctx, billingstripe.SweepEvery) }()
	return func() { cancel(); <-done }
}
