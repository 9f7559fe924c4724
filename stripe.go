package main

import (
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/config"
)

// stripeSide is Stripe's side of the api: the handler of GET /v1/billing/invoices (for the
// export's callers), that of POST /v1/stripe/webhook when TOLLGATE_STRIPE_WEBHOOK_SECRET
// is set (nil otherwise: the path answers 404), and the portal's Checkout and the tenants'
// Connect onboarding when TOLLGATE_STRIPE_KEY is set (nil otherwise: priced plans then say
// payments are not set up, and no account can be connected).
type stripeSide struct {
	invoices, webhook fiber.Handler
	checkout          billing.Checkout
	connect           billing.ConnectService
}

func newStripeSide(cp *controlPlane, cfg *config.Config, log *slog.Logger) stripeSide {
	store := billingpg.New(cp.db.Pool())
	side := stripeSide{invoices: billingstripe.Invoices(store, time.Now)}
	if cfg.StripeWebhookSecret != "" {
		wh, err := billingstripe.NewWebhook(billingstripe.WebhookConfig{
			Secret: cfg.StripeWebhookSecret, Store: store, Consumers: cp.db, Logger: log,
		})
		if err != nil {
			log.Error("stripe: webhook not served", "err", err)
		} else {
			side.webhook = wh.Handle
		}
	}
	if cfg.StripeKey == "" {
		return side
	}
	p, err := billingstripe.New(billingstripe.Config{
		Key: cfg.StripeKey, URL: cfg.StripeURL, EventName: cfg.StripeEvent, Store: store, Logger: log,
	})
	if err != nil {
		log.Error("stripe: checkout not available", "err", err)
		return side
	}
	co, err := billingstripe.NewCheckout(p, store)
	if err != nil {
		log.Error("stripe: checkout not available", "err", err)
		return side
	}
	side.checkout = co
	if cn, err := billingstripe.NewConnect(p, store); err != nil {
		log.Error("stripe: connect not available", "err", err)
	} else {
		side.connect = cn
	}
	return side
}
