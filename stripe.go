package main

import (
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/api"
	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/config"
)

// mountStripe serves Stripe's side of the api: GET /v1/billing/invoices (the export's
// callers), POST /v1/stripe/webhook when TOLLGATE_STRIPE_WEBHOOK_SECRET is set (the
// signature is its credential, so it takes no token; unset, the path is not served and
// answers 404), and returns the portal's Checkout when TOLLGATE_STRIPE_KEY is set (nil
// otherwise: priced plans then say payments are not set up).
func mountStripe(srv *api.Server, cp *controlPlane, cfg *config.Config, log *slog.Logger) billing.Checkout {
	store := billingpg.New(cp.db.Pool())
	app := srv.App()
	invoices := billingstripe.Invoices(store, time.Now)
	app.Get("/v1/billing/invoices", func(c *fiber.Ctx) error {
		if err := srv.AuthorizeExport(c); err != nil {
			return err
		}
		return invoices(c)
	})
	if cfg.StripeWebhookSecret != "" {
		wh, err := billingstripe.NewWebhook(billingstripe.WebhookConfig{
			Secret: cfg.StripeWebhookSecret, Store: store, Consumers: cp.db, Logger: log,
		})
		if err != nil {
			log.Error("stripe: webhook not served", "err", err)
		} else {
			app.Post("/v1/stripe/webhook", wh.Handle)
		}
	}
	if cfg.StripeKey == "" {
		return nil
	}
	p, err := billingstripe.New(billingstripe.Config{
		Key: cfg.StripeKey, URL: cfg.StripeURL, EventName: cfg.StripeEvent, Store: store, Logger: log,
	})
	if err != nil {
		log.Error("stripe: checkout not available", "err", err)
		return nil
	}
	co, err := billingstripe.NewCheckout(p, store)
	if err != nil {
		log.Error("stripe: checkout not available", "err", err)
		return nil
	}
	return co
}
