package edge

import (
	"time"

	"tollgate/edge/cache"
	"tollgate/edge/cors"
	"tollgate/edge/edgemetrics"
	"tollgate/edge/fnchain"
	"tollgate/edge/jwtauth"
	"tollgate/edge/meter"
	"tollgate/edge/reqlog"
	"tollgate/edge/routing"
	"tollgate/edge/transform"
	"tollgate/edge/upstreamerr"
	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

// Snapshot is one tenant's compiled config: everything a request of the tenant needs,
// built once when the tenant's config changes and then only read. The edge publishes it
// with one atomic store; a request loads it once and finishes on it even if a newer one
// is published meanwhile.
type Snapshot struct {
	TenantID string
	Slug     string
	// Rev is the newest entry rev the snapshot was built from.
	Rev int64

	routes routing.Table[route]
	labels *edgemetrics.TenantLabels
	// meter counts the tenant's requests that matched no route (meter.go); nil: off.
	meter *meter.Route
	*tenantConfig
}

// tenantConfig is the part of a snapshot its routes' chains read: everything but the
// route table. A compile that only changes routes (compile.go) carries it over to the
// next snapshot, and with it every unchanged route, whose chain holds it; a route does
// not point at its Snapshot, which would keep every older route table alive.
type tenantConfig struct {
	TenantID, Slug string

	keys        map[[32]byte]apiKey  // by SHA-256 of the plaintext key
	consumers   map[string]*Consumer // by id
	plans       map[string]*tenants.ConsumerPlan
	jwt         *jwtauth.Verifier     // nil: no usable issuer (jwt routes refuse every token)
	accessRules *accessrules.Enforcer // nil: none (routes that check access deny every call)
	// limits is the tenant's platform plan, compiled; consumerLimits: some consumer
	// has a plan with limits (see limit.go).
	limits         planRules
	consumerLimits bool
	resources      *tenants.ResourceLimits // the platform plan's; nil: the edge's defaults (function.go)
	logs           *reqlog.Tenant          // nil: no request log (reqlog.go)
	consumerIndex                          // function.go
}

// Consumer is a tenant's client as the edge knows it once its key matched.
type Consumer struct {
	ID   string
	Name string
	Plan *tenants.ConsumerPlan // nil when the consumer has no plan (or names an unknown one)

	id, name []byte          // header values, made once
	subjects []string        // who the access rules see: id and name (a JWT caller: <iss>|<claim>, the claim, its roles)
	limits   planRules       // Plan, compiled
	meter    *meter.Consumer // nil: metering off, or a JWT caller (meter.go)
}

// route is one compiled route: its settings in the form the request path uses, and the
// handler chain built for it.
type route struct {
	id, name string
	auth     string
	strip    bool
	maxBody  int
	timeout  time.Duration
	// connectTimeout bounds dialing a WebSocket route's target (websocket.go); a
	// connect that runs out of it is named in upstreamFailed's answer.
	connectTimeout time.Duration
	failLog        upstreamerr.Gate // bounds upstreamFailed's and noHealthy's log lines
	websocket      bool
	upstream       *upstream
	canary         *canary // nil: none (canary.go)
	metrics        *edgemetrics.RouteMetrics
	serve          handler
	snapshot       *tenantConfig  // of the snapshots the route is compiled into
	src            *tenants.Route // the entry it was compiled from: kept while that is unchanged
	rateLimit      *tenants.RateLimit
	checkAccess    bool                 // check the tenant's access rules
	meter          *meter.Route         // nil: metering off
	transform      *transform.Transform // nil: none (edge/transform)
	cache          *cache.Cache         // nil: none (edge/cache)
	cors           *cors.Policy         // nil: none (edge/cors)
	functions      *fnchain.Chain       // nil: none (function.go)
	authz          *authorizer          // auth external (authenticate_external.go)
}

// Routes is the number of (path, route) entries of the snapshot's route table.
func (s *Snapshot) Routes() int { return s.routes.Len() }

// Consumer returns the consumer holding a key (its SHA-256), or nil.
func (s *Snapshot) consumerByKey(sum *[32]byte) *Consumer { return s.keys[*sum].consumer }
