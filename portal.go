package main

import (
	"log/slog"

	"tollgate/api"
	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/config"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/web/portal"
)

// mountPortal serves the tenants' developer portals under /portal/{slug}/ on the api's
// app (and on the verified domains tenants name for them), over the same store as the
// console. checkout is nil when Stripe is not configured: priced plans then say payments
// are not set up.
func mountPortal(srv *api.Server, cp *controlPlane, cfg *config.Config, log *slog.Logger, checkout billing.Checkout) {
	_, port := tenants.SplitHostPort(cfg.EdgeAddr)
	store := billingpg.New(cp.db.Pool())
	portal.New(portal.Config{
		Tenants:        cp.db,
		Consumers:      cp.db,
		Plans:          cp.db,
		Routes:         cp.db,
		Portals:        cp.db,
		Usage:          store,
		Prices:         store,
		Checkout:       checkout,
		Mailer:         cp.mail,
		Throttle:       cp.db,
		TrustedProxies: cfg.TrustedProxy,
		PublicURL:      cfg.PublicURL,
		EdgeDomain:     cfg.EdgeDomain,
		EdgePort:       port,
		EdgePublicURL:  cfg.EdgePublicURL,
		Logger:         log,
		Unavailable:    postgres.Unavailable,
	}).Mount(srv.App())
}
