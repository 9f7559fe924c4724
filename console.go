package main

import (
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/api"
	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/config"
	"tollgate/infra/functionstore"
	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
	"tollgate/tenants/postgres"
	"tollgate/web"
)

// mountConsole serves the web console under /console/ on the api's app, over the same
// store, upstream rules and policy as the API. Usage comes from billing's rollups in the
// same database (empty until the edges' meter and `tollgate billing` feed them).
func mountConsole(srv *api.Server, cp *controlPlane, cfg *config.Config, log *slog.Logger, connect billing.ConnectService) {
	_, port := tenants.SplitHostPort(cfg.EdgeAddr)
	var (
		modules web.ModuleStore
		logs    web.FunctionLogReader
	)
	if cp.modules != nil {
		modules = cp.modules
	}
	if js, err := jetstream.New(cp.nc); err == nil {
		logs = functionstore.NewLogReader(js, cfg.NATSPrefix, cfg.NATSReplicas)
	}
	web.New(web.Config{
		Modules:      modules,
		FunctionLogs: logs,
		Tenants:      cp.db,
		Routes:       cp.db,
		Consumers:    cp.db,
		People:       cp.db,
		Audit:        cp.db,
		Plans:        cp.db,
		JWTIssuers:   cp.db,
		AccessRules:  cp.db,
		Usage:        billingpg.New(cp.db.Pool()),
		Logs:         billingpg.New(cp.db.Pool()),
		Payments:     billingpg.New(cp.db.Pool()),
		Connect:      connect,
		Prices:       billingpg.New(cp.db.Pool()),
		Portals:      cp.db,
		Domains:      cp.db,
		Tokens:       cp.db,
		// The same checker and schedule as the api's domain checks.
		Proofs:       dnsproof.New(cfg.DNSResolver),
		DomainChecks: domainChecks(cfg),
		Functions:    cp.db,
		Upstreams:    upstreamRule(cfg),
		EdgeDomain:   cfg.EdgeDomain,
		EdgePort:     port,
		Mailer:       cp.mail,
		PublicURL:    cfg.PublicURL,
		// The api's load balancers are the edge's trusted proxies too.
		TrustedProxies: cfg.TrustedProxy,
		Logger:         log,
		Unavailable:    postgres.Unavailable,
		EdgePublicURL:  cfg.EdgePublicURL,
	}).Mount(srv.App())
}
