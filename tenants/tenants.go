package tenants

import (
	"context"
	"time"
	"unicode"
	"unicode/utf8"
)

// Tenant is a customer of the service: it owns routes, consumers, keys and plans, and is
// reached at the edge as {slug}.{edge domain}. Slug is immutable once created.
type Tenant struct {
	ID           string `json:"id"`
	Slug         string `json:"slug"`
	Name         string `json:"name"`
	PlatformPlan string `json:"plan"` // the platform plan that caps the whole tenant
	// Limits is the platform plan PlatformPlan names, as the store resolved it when it read or
	// wrote the tenant: it travels in the tenant's config entry so the edge can enforce it
	// (a change of the platform plan re-emits the entries of its tenants). Read-only in
	// the API; nil when the plan names no platform plan.
	Limits *PlatformPlan `json:"limits,omitempty"`
	// Cell is the edge pool that serves the tenant, chosen by the control plane when the
	// tenant is made (see postgres.DB's placement) and changed only by the operator.
	Cell      string    `json:"cell,omitempty"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Route maps method + path at the edge to an upstream, with the checks to apply first.
// It is one type from the management API's body (POST /v1/tenants/{slug}/routes decodes
// into it) through the store and the config entry to the edge's compiler, so a new
// setting is a field here, its rule in Validate and its use at the edge.
//
// Struct tags beyond json are the API's (api/openapi.go, api/decode.go): doc describes
// the field, required and enum constrain requests, and readonly marks what the server
// owns: a request may not set it, a response always shows it.
type Route struct {
	ID       string `json:"id" readonly:"true"`
	TenantID string `json:"tenant_id" readonly:"true"`
	Name     string `json:"name" required:"true" doc:"Unique within the tenant."`
	// Paths are prefixes on segment boundaries ("/hello" matches "/hello/x", not
	// "/helloworld"); a leading "=" makes one exact ("=/hello"). A "{name}" segment
	// matches any one segment. Longest match wins.
	Paths []string `json:"paths" required:"true" doc:"1–32 path prefixes (\"/hello\" matches /hello and /hello/x) or exact paths (\"=/hello\"); a {name} segment matches any one segment (\"=/users/{id}\")."`
	// Methods the route answers; empty means every method.
	Methods  []string `json:"methods" doc:"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS. Default: every method."`
	Upstream Upstream `json:"upstream" required:"true"`
	// Auth is AuthNone, AuthKey, AuthJWT, AuthKeyOrJWT, AuthFunction or AuthExternal. Default: AuthNone.
	Auth string `json:"auth" enum:"none,key,jwt,key_or_jwt,function,external" doc:"function: functions[0] runs before authentication and names the consumer; external: the route's external_auth decides. Default: none."`
	// ExternalAuth is the tenant's own authorizer, with auth AuthExternal (externalauth.go).
	ExternalAuth *ExternalAuth `json:"external_auth,omitempty" doc:"With auth external: the tenant's HTTPS authorizer (url), the request headers it receives (headers), timeout_ms (default 1000, max 5000), cache_ttl_s (default 60, 0 = no cache, max 3600) and deny_cache_ttl_s (default 10, at most cache_ttl_s). Default: none."`
	// CheckAccess makes the edge check the tenant's access rules for this route.
	CheckAccess bool       `json:"policy" doc:"Check the tenant's policy for this route."`
	RateLimit   *RateLimit `json:"rate_limit,omitempty" doc:"Per-route limit. Default: none."`
	// StripPrefix removes the matched path prefix before proxying.
	StripPrefix bool `json:"strip_prefix" doc:"Remove the matched prefix before proxying."`
	// WebSocket lets upgrade requests through to the upstream as WebSocket tunnels.
	WebSocket bool `json:"websocket" doc:"Let WebSocket upgrades through (auth, policy and limits apply at the upgrade); the tunnel closes after 10 idle minutes or 24 hours. Default: false."`
	// Transform rewrites requests and responses passing through (transform.go).
	Transform *Transform `json:"transform,omitempty" doc:"Request header, JSON body and path rewrites, response header rewrites. Default: none."`
	// CORS lets browsers on other origins call the route (cors.go).
	CORS *CORS `json:"cors,omitempty" doc:"Let browsers on other origins call the route: allow_origins (origins like https://app.example.com, or [\"*\"]), allow_methods (default: the route's), allow_headers (default: those a preflight asks for), expose_headers (Grpc-Status, Grpc-Message, X-Request-Id and X-Tollgate-Error always are), allow_credentials, max_age_s (default 600). The edge answers the route's preflights itself, before authentication. Default: none."`
	// Cache keeps the route's answers in the edge's memory (cache.go).
	Cache *Cache `json:"cache,omitempty" doc:"Keep GET answers in the edge's memory for ttl_ms. Default: none."`
	// Functions are the tenant's Wasm filters the route runs, in order, after
	// authentication, access rules and limits; with AuthFunction the first one runs
	// before them instead and names the consumer.
	Functions []FunctionRef `json:"functions,omitempty" doc:"Up to 8 of the tenant's functions (proxy-wasm filters), run in order after authentication; with auth function the first authenticates. Default: none."`
	// Canary sends part of the traffic to another set of targets (edge/canary.go).
	Canary *Canary `json:"canary,omitempty" doc:"Send part of the traffic to upstream (same settings as the route's): requests matching match (a header, or a JWT claim; any of values, or any value when values is empty) always, others by weight percent (0–100; an exact schedule, or a hash of sticky_on when sticky: consumer, ip or header:<Name>). Default: none."`
	// MaxBodyBytes caps the request body. Default: DefaultMaxBodyBytes.
	MaxBodyBytes int64 `json:"max_body_bytes" doc:"Request body cap, 1–1073741824. Default: 10485760."`
	// ConnectTimeoutMS and TimeoutMS bound dialing the upstream and the whole upstream
	// exchange. Defaults: DefaultConnectTimeoutMS, DefaultTimeoutMS.
	ConnectTimeoutMS int       `json:"connect_timeout_ms" doc:"Dial timeout, 1–300000 ms. Default: 2000."`
	TimeoutMS        int       `json:"timeout_ms" doc:"Whole upstream exchange, 1–300000 ms. Default: 30000."`
	Version          int64     `json:"version" readonly:"true" doc:"Bumped by every change; the ETag. Send it back in If-Match."`
	CreatedAt        time.Time `json:"created_at" readonly:"true"`
	UpdatedAt        time.Time `json:"updated_at" readonly:"true"`
}

// Route auth modes.
const (
	AuthNone     = "none"
	AuthKey      = "key"
	AuthJWT      = "jwt"
	AuthKeyOrJWT = "key_or_jwt"
	// AuthFunction: the route's first function runs before authentication and names the
	// consumer (the proxy-wasm property ["tollgate","consumer"]); a request it neither
	// answers nor names a consumer for is refused as unauthenticated.
	AuthFunction = "function"
	// AuthExternal asks the route's ExternalAuth service about every request (or its
	// cached answer for the same credentials).
	AuthExternal = "external"
)

// FunctionRef names one of the tenant's functions on a route.
type FunctionRef struct {
	Name string `json:"name" required:"true" doc:"A function the tenant uploaded (PUT /v1/tenants/{slug}/functions/{name})."`
	// Config is the plugin configuration handed to proxy_on_configure.
	Config string `json:"config,omitempty" doc:"The plugin configuration the filter reads in proxy_on_configure, up to 65536 bytes. Default: empty."`
	// SHA256 is the module version the route runs. Empty on input means the function's
	// current version when the route is saved; what the store keeps and the edge gets
	// always names one, so uploading a new version changes no route until it is saved
	// again, and setting an older digest rolls the route back.
	SHA256 string `json:"sha256,omitempty" doc:"The version (hex sha256 of the module) to run; one the tenant uploaded under this name. Default: the function's current version when the route is saved."`
}

// Bounds of a route's functions.
const (
	MaxRouteFunctions      = 8
	MaxFunctionConfigBytes = 64 << 10
)

// Defaults and bounds of route settings.
const (
	DefaultMaxBodyBytes     = 10 << 20
	MaxMaxBodyBytes         = 1 << 30
	DefaultConnectTimeoutMS = 2_000
	DefaultTimeoutMS        = 30_000
	MaxTimeoutMS            = 300_000
	MaxPaths                = 32
	MaxTargets              = 64
	MaxWeight               = 1000
	MaxRate                 = 1_000_000
)

// Upstream is where a route's traffic goes: its targets, how requests are spread over
// them, and how failing targets are found and avoided (package edge/balancer).
type Upstream struct {
	Targets []Target `json:"targets" required:"true" doc:"1–64 servers."`
	// Balance is BalanceRoundRobin (default), BalanceLeastConn or BalanceHash.
	Balance string `json:"balance,omitempty" enum:"round_robin,least_conn,hash" doc:"How requests are spread: smooth weighted round-robin, fewest in flight relative to weight, or a consistent hash on hash_on. Default: round_robin."`
	// HashOn is what BalanceHash hashes: HashOnConsumer (default), HashOnIP or
	// "header:<Name>".
	HashOn         string          `json:"hash_on,omitempty" doc:"With balance hash: consumer (the client address when anonymous), ip, or header:<Name>. Default: consumer."`
	HealthCheck    *HealthCheck    `json:"health_check,omitempty" doc:"Active check: GET path every interval_ms (default 5000, min 100), timeout_ms (default 1000); out after unhealthy_threshold failures in a row (default 3), back after healthy_threshold successes (default 2). Default: none."`
	Passive        *PassiveHealth  `json:"passive_health,omitempty" doc:"Outlier ejection: failures in a row (connect error, timeout, 502/503/504; default 5) eject a target for eject_ms (default 30000). Default: none."`
	CircuitBreaker *CircuitBreaker `json:"circuit_breaker,omitempty" doc:"Per target: open when error_percent (default 50) of at least min_requests (default 20) failed within window_ms (default 10000); stay open open_ms (default 30000), then let one trial through. Default: none."`
	Retries        *Retries        `json:"retries,omitempty" doc:"Retry on another target up to attempts times (1–5, default 1): idempotent methods after any failure, others only when no connection was made; at most budget_percent (default 20) extra requests plus min_per_second (default 3). Default: none."`
	// Protocol is what the edge speaks to the targets: ProtocolHTTP1 (default, kept
	// empty so documents saved before it existed read back unchanged) or ProtocolH2.
	Protocol string `json:"protocol,omitempty" enum:"http1,h2" doc:"What the edge speaks to the targets: http1 (HTTP/1.1) or h2 (HTTP/2: h2c with prior knowledge for http:// targets, ALPN h2 for https://; needed for gRPC). Default: http1."`
}

// Upstream protocols (Upstream.Protocol).
const (
	ProtocolHTTP1 = "http1"
	ProtocolH2    = "h2"
)

// Target is one upstream server; traffic is spread by weight (0 drains a target).
type Target struct {
	URL    string `json:"url" required:"true" doc:"http:// or https:// URL of one upstream server; no credentials, query or fragment."`
	Weight int    `json:"weight" doc:"Share of traffic, 0–1000 (0 drains the target). Default: equal shares."`
}

// RateLimit is a token bucket: RPS requests per second (or RPM per minute: exactly one
// of the two is set) on average, bursts up to Burst. Per and Mode are route settings; a
// plan's mode is the plan's.
type RateLimit struct {
	RPS   int `json:"rps,omitempty" doc:"Requests per second on average, 1–1000000. Set rps or rpm, not both."`
	RPM   int `json:"rpm,omitempty" doc:"Requests per minute on average, 1–1000000, instead of rps."`
	Burst int `json:"burst" doc:"Largest burst (the bucket size). Default: the rate (rps or rpm)."`
	// Per says what a route's limit counts: PerRoute (all its traffic together), PerIP
	// (each client address) or PerConsumer (each authenticated consumer). Default: PerRoute.
	Per string `json:"per,omitempty" enum:"route,ip,consumer" doc:"What is counted: route (all its traffic together), ip (each client address; X-Forwarded-For only from trusted proxies) or consumer (each authenticated consumer; not with auth none). Default: route."`
	// Mode is where a route's limit is counted: ModeLocal, ModeExact or ModeApproximate.
	// Default: ModeLocal for PerIP, else ModeApproximate (ModeExact when the burst is too
	// small for approximate counting, see ValidateRateLimit).
	Mode string `json:"mode,omitempty" enum:"local,exact,approximate" doc:"Where it is counted across edges (see the README for each mode's error bound). Default: local for per ip; else approximate, or exact when burst < rate × 0.1 s + 1 (approximate with such a burst is refused)."`
}

// Quota bounds the requests of a calendar month (UTC).
type Quota struct {
	Requests int64 `json:"requests" required:"true" doc:"Requests per calendar month (UTC)."`
}

// ConsumerPlan is a named bundle of limits a tenant assigns to its API consumers (the
// API's and the console's "plan"; not the tenant's own PlatformPlan).
// Like Route, it is the API's body, the stored object and the config entry alike. Its
// RateLimit is only a rate (RPS or RPM, Burst; Validate refuses Per and Mode): a plan's
// rate counts per consumer, and its mode is the plan's.
type ConsumerPlan struct {
	ID          string     `json:"id" readonly:"true"`
	TenantID    string     `json:"tenant_id" readonly:"true"`
	Name        string     `json:"name" required:"true" doc:"Unique within the tenant: lowercase letters, digits, '-' and '_'."`
	RateLimit   *RateLimit `json:"rate_limit,omitempty" doc:"Per-consumer rate. Default: none."`
	Quota       *Quota     `json:"quota,omitempty" doc:"Per-consumer monthly quota. Default: none."`
	Concurrency int        `json:"concurrency" doc:"Concurrent requests per consumer; 0 = no cap."`
	// Mode is where the plan's rate and quota are counted across the edges: ModeLocal,
	// ModeExact or ModeApproximate. Default: ModeApproximate (ModeExact when the burst is
	// too small for approximate counting).
	Mode string `json:"mode,omitempty" enum:"local,exact,approximate" doc:"Where the rate and quota are counted across edges (see the README for each mode's error bound). Default: approximate, or exact when burst < rate × 0.1 s + 1 (approximate with such a burst is refused)."`
	// Public plans are offered on the tenant's developer portal, where consumers choose
	// one themselves (a priced one through Stripe Checkout).
	Public      bool   `json:"public,omitempty" doc:"Offered on the tenant's developer portal. Default: false."`
	Description string `json:"description,omitempty" doc:"Shown beside the plan on the developer portal."`
	// Warnings are set on the answer to a create or a replace only, never stored.
	Warnings  []Warning `json:"warnings,omitempty" readonly:"true" doc:"Where the plan allows more than the tenant's platform plan (rate, burst, quota, concurrency): saved all the same, since the platform plan caps the whole tenant at the edge. Only in the answer to a create or a replace."`
	Version   int64     `json:"version" readonly:"true" doc:"Bumped by every change; the ETag. Send it back in If-Match."`
	CreatedAt time.Time `json:"created_at" readonly:"true"`
	UpdatedAt time.Time `json:"updated_at" readonly:"true"`
}

// Consumer is a client of a tenant's APIs; it authenticates with its keys.
type Consumer struct {
	ID        string    `json:"id" readonly:"true"`
	TenantID  string    `json:"tenant_id" readonly:"true"`
	Name      string    `json:"name" required:"true" doc:"Unique within the tenant."`
	Plan      string    `json:"plan,omitempty" doc:"Name of one of the tenant's plans. Default: none."` // a plan name of the tenant, or empty
	Version   int64     `json:"version" readonly:"true" doc:"Bumped by every change; the ETag. Send it back in If-Match."`
	CreatedAt time.Time `json:"created_at" readonly:"true"`
	UpdatedAt time.Time `json:"updated_at" readonly:"true"`
}

// Key is a consumer's API key. Only its SHA-256 is stored; the plaintext is shown once.
type Key struct {
	ID         string `json:"id"`
	TenantID   string `json:"tenant_id"`
	ConsumerID string `json:"consumer_id"`
	Prefix     string `json:"prefix"` // the first characters, to tell keys apart
	Hash       string `json:"-"`      // hex SHA-256 of the plaintext
	// Label tells a consumer's keys apart ("ci", "laptop"); up to 100 characters.
	Label string `json:"label,omitempty" doc:"Tells the consumer's keys apart; up to 100 characters."`
	// ExpiresAt, when set, is when the edges stop taking the key (401 expired_key).
	ExpiresAt *time.Time `json:"expires_at,omitempty" doc:"RFC 3339; from then on the edges answer 401 expired_key. Absent: the key does not expire."`
	// LastUsedAt is when an edge last took the key, to the minute at best: the edges
	// report uses in batches, so it trails the last request by up to a minute.
	LastUsedAt *time.Time `json:"last_used_at,omitempty" readonly:"true" doc:"When an edge last took the key, reported in batches: it trails the last call by up to a minute. Absent: never used."`
	CreatedAt  time.Time  `json:"created_at"`
}

// Validate checks what the key's owner chose: a label of up to 100 characters without
// control characters and, if set, an expiry after now.
func (k *Key) Validate(now time.Time) error {
	if utf8.RuneCountInString(k.Label) > 100 {
		return Invalid("label", "must be at most 100 characters")
	}
	for _, r := range k.Label {
		if unicode.IsControl(r) {
			return Invalid("label", "must not contain control characters")
		}
	}
	if k.ExpiresAt != nil && !k.ExpiresAt.After(now) {
		return Invalid("expires_at", "must be in the future")
	}
	return nil
}

// Token is a management API credential scoped to one tenant. Only its hash is stored.
type Token struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	Prefix    string    `json:"prefix"`
	Hash      string    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
}

// Page asks for one page of a list ordered by id: up to Limit items after the id Cursor.
type Page struct {
	Limit  int
	Cursor string
}

// Page bounds.
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 500
)

// Services. Every method that takes a tenantID reads and writes only that tenant's
// objects: an id of another tenant's object is ENotFound. Writes publish their config
// entries through the outbox in the same transaction. Each method's errors are *Error
// with the codes named, or an internal error.

// TenantService manages tenants.
type TenantService interface {
	// CreateTenant: EValidation (also when PlatformPlan names no platform plan), EConflict (slug
	// taken). t.Limits is filled in from the platform plan.
	CreateTenant(ctx context.Context, t *Tenant) error
	// FindTenant looks a tenant up by slug: ENotFound.
	FindTenant(ctx context.Context, slug string) (*Tenant, error)
	ListTenants(ctx context.Context, p Page) ([]*Tenant, string, error)
	// UpdateTenant changes name and plan when t.Version is current: ENotFound,
	// EVersionConflict, EValidation (also when PlatformPlan names no platform plan).
	UpdateTenant(ctx context.Context, t *Tenant) error
	// DeleteTenant removes the tenant and everything it owns: ENotFound.
	DeleteTenant(ctx context.Context, tenantID string) error
}

// CellService places tenants on cells: the edge pools, each following the config of its
// own tenants only.
type CellService interface {
	// ListCells lists the declared cells with how many tenants each holds.
	ListCells(ctx context.Context) ([]*CellInfo, error)
	// MoveTenant places the tenant in cell and moves its config to that cell's edges:
	// ENotFound, EValidation (cell not declared).
	MoveTenant(ctx context.Context, tenantID, cell string) (*Tenant, error)
}

// CellInfo is a declared cell and its load.
type CellInfo struct {
	Name    string `json:"name"`
	Tenants int64  `json:"tenants"`
}

// RouteService manages a tenant's routes.
type RouteService interface {
	// CreateRoute: EValidation, EConflict (name or path+method taken).
	CreateRoute(ctx context.Context, r *Route) error
	FindRoute(ctx context.Context, tenantID, id string) (*Route, error)
	ListRoutes(ctx context.Context, tenantID string, p Page) ([]*Route, string, error)
	// SearchRoutes returns a page of the routes whose name starts with prefix (case
	// sensitive), in bytewise name order, and the cursor of its next page; the cursors of
	// ListRoutes are not its cursors (EInvalidRequest).
	SearchRoutes(ctx context.Context, tenantID, prefix string, p Page) ([]*Route, string, error)
	// RouteNames maps those of ids that are the tenant's routes to their names: at most
	// MaxPageLimit ids (EInvalidRequest beyond), so a page names what it shows.
	RouteNames(ctx context.Context, tenantID string, ids []string) (map[string]string, error)
	// UpdateRoute replaces the route when r.Version is current:
	// ENotFound, EVersionConflict, EConflict, EValidation.
	UpdateRoute(ctx context.Context, r *Route) error
	DeleteRoute(ctx context.Context, tenantID, id string) error
}

// ConsumerService manages a tenant's consumers and their keys.
type ConsumerService interface {
	// CreateConsumer: EValidation (also when plan names no plan of the tenant), EConflict.
	CreateConsumer(ctx context.Context, c *Consumer) error
	FindConsumer(ctx context.Context, tenantID, id string) (*Consumer, error)
	ListConsumers(ctx context.Context, tenantID string, p Page) ([]*Consumer, string, error)
	// ConsumerNames is RouteNames for consumers.
	ConsumerNames(ctx context.Context, tenantID string, ids []string) (map[string]string, error)
	UpdateConsumer(ctx context.Context, c *Consumer) error
	// DeleteConsumer removes the consumer and its keys.
	DeleteConsumer(ctx context.Context, tenantID, id string) error

	// CreateKey stores k (Hash set by the caller from a NewSecret): ENotFound (consumer).
	CreateKey(ctx context.Context, k *Key) error
	ListKeys(ctx context.Context, tenantID, consumerID string, p Page) ([]*Key, string, error)
	DeleteKey(ctx context.Context, tenantID, consumerID, keyID string) error
}

// ConsumerPlanService manages a tenant's consumer plans.
type ConsumerPlanService interface {
	// CreatePlan: EValidation, EConflict (name taken).
	CreatePlan(ctx context.Context, p *ConsumerPlan) error
	FindPlan(ctx context.Context, tenantID, id string) (*ConsumerPlan, error)
	ListPlans(ctx context.Context, tenantID string, p Page) ([]*ConsumerPlan, string, error)
	UpdatePlan(ctx context.Context, p *ConsumerPlan) error
	// DeletePlan: EConflict while a consumer uses it.
	DeletePlan(ctx context.Context, tenantID, id string) error
}

// TokenService manages tenant-scoped management API tokens.
type TokenService interface {
	CreateToken(ctx context.Context, t *Token) error
	// FindTokenByHash: ENotFound.
	FindTokenByHash(ctx context.Context, hash string) (*Token, error)
	ListTokens(ctx context.Context, tenantID string, p Page) ([]*Token, string, error)
	DeleteToken(ctx context.Context, tenantID, id string) error
}

// JWTIssuerService manages the identity providers whose tokens a tenant's "jwt" routes
// accept.
type JWTIssuerService interface {
	// CreateJWTIssuer: EValidation (also past the platform plan's jwt_issuers, and for a
	// jwks_url host the upstream policy refuses), EConflict (issuer taken), ENotFound
	// (tenant).
	CreateJWTIssuer(ctx context.Context, is *Issuer) error
	FindJWTIssuer(ctx context.Context, tenantID, id string) (*Issuer, error)
	ListJWTIssuers(ctx context.Context, tenantID string, p Page) ([]*Issuer, string, error)
	// UpdateJWTIssuer replaces the issuer when is.Version is current. An update that
	// names no key source (no jwks_url, keys or hs256_secret) keeps a stored
	// hs256_secret, which clients cannot read back. ENotFound, EVersionConflict,
	// EConflict, EValidation.
	UpdateJWTIssuer(ctx context.Context, is *Issuer) error
	DeleteJWTIssuer(ctx context.Context, tenantID, id string) error
}

// AccessRulesService manages a tenant's access rules. Validating them is the compiler's job
// (accessrules.Compile); callers validate before PutAccessRules.
type AccessRulesService interface {
	// FindAccessRules: ENotFound when the tenant has none.
	FindAccessRules(ctx context.Context, tenantID string) (*AccessRules, error)
	// PutAccessRules creates or replaces the tenant's access rules; when p.Version is not 0 only if
	// it is current. ENotFound (tenant, or no access rules to update at that version),
	// EVersionConflict.
	PutAccessRules(ctx context.Context, p *AccessRules) error
}
