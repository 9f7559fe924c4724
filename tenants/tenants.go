package tenants

import (
	"context"
	"time"
)

// Tenant is a customer of the service: it owns routes, consumers, keys and plans, and is
// reached at the edge as {slug}.{edge domain}. Slug is immutable once created.
type Tenant struct {
	ID   string `json:"id"`
	Slug string `json:"slug"`
	Name string `json:"name"`
	Plan string `json:"plan"` // the platform plan that caps the whole tenant
	// Limits is the platform plan Plan names, as the store resolved it when it read or
	// wrote the tenant: it travels in the tenant's config entry so the edge can enforce it
	// (a change of the platform plan re-emits the entries of its tenants). Read-only in
	// the API; nil when the plan names no platform plan.
	Limits    *PlatformPlan `json:"limits,omitempty"`
	Version   int64         `json:"version"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`
}

// Route maps method + path at the edge to an upstream, with the checks to apply first.
type Route struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	// Paths are prefixes on segment boundaries ("/hello" matches "/hello/x", not
	// "/helloworld"); a leading "=" makes one exact ("=/hello"). Longest match wins.
	Paths []string `json:"paths"`
	// Methods the route answers; empty means every method.
	Methods  []string `json:"methods"`
	Upstream Upstream `json:"upstream"`
	// Auth is AuthNone, AuthKey, AuthJWT or AuthKeyOrJWT. Default: AuthNone.
	Auth string `json:"auth"`
	// CheckAccess makes the edge check the tenant's policy for this route.
	CheckAccess bool       `json:"policy"`
	RateLimit   *RateLimit `json:"rate_limit,omitempty"`
	// StripPrefix removes the matched path prefix before proxying.
	StripPrefix bool `json:"strip_prefix"`
	// WebSocket lets upgrade requests through to the upstream as WebSocket tunnels.
	WebSocket bool `json:"websocket"`
	// Transform rewrites requests and responses passing through (transform.go).
	Transform *Transform `json:"transform,omitempty"`
	// Cache keeps the route's answers in the edge's memory (cache.go).
	Cache *Cache `json:"cache,omitempty"`
	// Canary sends part of the traffic to another set of targets (upstream.go).
	Canary *Canary `json:"canary,omitempty"`
	// MaxBodyBytes caps the request body. Default: DefaultMaxBodyBytes.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// ConnectTimeoutMS and TimeoutMS bound dialing the upstream and the whole upstream
	// exchange. Defaults: DefaultConnectTimeoutMS, DefaultTimeoutMS.
	ConnectTimeoutMS int       `json:"connect_timeout_ms"`
	TimeoutMS        int       `json:"timeout_ms"`
	Version          int64     `json:"version"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// Route auth modes.
const (
	AuthNone     = "none"
	AuthKey      = "key"
	AuthJWT      = "jwt"
	AuthKeyOrJWT = "key_or_jwt"
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
// them, and how failing targets are found and avoided (upstream.go).
type Upstream struct {
	Targets []Target `json:"targets"`
	// Balance is BalanceRoundRobin (default), BalanceLeastConn or BalanceHash.
	Balance string `json:"balance,omitempty"`
	// HashOn is what BalanceHash hashes: HashOnConsumer (default), HashOnIP or
	// "header:<Name>".
	HashOn         string          `json:"hash_on,omitempty"`
	HealthCheck    *HealthCheck    `json:"health_check,omitempty"`
	Passive        *PassiveHealth  `json:"passive_health,omitempty"`
	CircuitBreaker *CircuitBreaker `json:"circuit_breaker,omitempty"`
	Retries        *Retries        `json:"retries,omitempty"`
}

// Target is one upstream server; traffic is spread by weight (0 drains a target).
type Target struct {
	URL    string `json:"url"`
	Weight int    `json:"weight"`
}

// RateLimit is a token bucket: RPS requests per second (or RPM per minute: exactly one
// of the two is set) on average, bursts up to Burst. Per and Mode are route settings; a
// plan's mode is the plan's.
type RateLimit struct {
	RPS   int `json:"rps,omitempty"`
	RPM   int `json:"rpm,omitempty"`
	Burst int `json:"burst"`
	// Per says what a route's limit counts: PerRoute (all its traffic together), PerIP
	// (each client address) or PerConsumer (each authenticated consumer). Default: PerRoute.
	Per string `json:"per,omitempty"`
	// Mode is where a route's limit is counted: ModeLocal, ModeExact or ModeApproximate.
	// Default: ModeLocal for PerIP, else ModeApproximate (ModeExact when the burst is too
	// small for approximate counting, see ValidateRateLimit).
	Mode string `json:"mode,omitempty"`
}

// Quota bounds the requests of a calendar month (UTC).
type Quota struct {
	Requests int64 `json:"requests"`
}

// Plan is a named bundle of limits a tenant assigns to consumers.
type Plan struct {
	ID          string     `json:"id"`
	TenantID    string     `json:"tenant_id"`
	Name        string     `json:"name"`
	RateLimit   *RateLimit `json:"rate_limit,omitempty"`
	Quota       *Quota     `json:"quota,omitempty"`
	Concurrency int        `json:"concurrency"` // 0 = no cap
	// Mode is where the plan's rate and quota are counted across the edges: ModeLocal,
	// ModeExact or ModeApproximate. Default: ModeApproximate (ModeExact when the burst is
	// too small for approximate counting).
	Mode      string    `json:"mode,omitempty"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Consumer is a client of a tenant's APIs; it authenticates with its keys.
type Consumer struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	Name      string    `json:"name"`
	Plan      string    `json:"plan,omitempty"` // a plan name of the tenant, or empty
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Key is a consumer's API key. Only its SHA-256 is stored; the plaintext is shown once.
type Key struct {
	ID         string    `json:"id"`
	TenantID   string    `json:"tenant_id"`
	ConsumerID string    `json:"consumer_id"`
	Prefix     string    `json:"prefix"` // the first characters, to tell keys apart
	Hash       string    `json:"-"`      // hex SHA-256 of the plaintext
	CreatedAt  time.Time `json:"created_at"`
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
	// CreateTenant: EValidation (also when Plan names no platform plan), EConflict (slug
	// taken). t.Limits is filled in from the platform plan.
	CreateTenant(ctx context.Context, t *Tenant) error
	// FindTenant looks a tenant up by slug: ENotFound.
	FindTenant(ctx context.Context, slug string) (*Tenant, error)
	ListTenants(ctx context.Context, p Page) ([]*Tenant, string, error)
	// UpdateTenant changes name and plan when t.Version is current: ENotFound,
	// EVersionConflict, EValidation (also when Plan names no platform plan).
	UpdateTenant(ctx context.Context, t *Tenant) error
	// DeleteTenant removes the tenant and everything it owns: ENotFound.
	DeleteTenant(ctx context.Context, tenantID string) error
}

// RouteService manages a tenant's routes.
type RouteService interface {
	// CreateRoute: EValidation, EConflict (name or path+method taken).
	CreateRoute(ctx context.Context, r *Route) error
	FindRoute(ctx context.Context, tenantID, id string) (*Route, error)
	ListRoutes(ctx context.Context, tenantID string, p Page) ([]*Route, string, error)
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
	UpdateConsumer(ctx context.Context, c *Consumer) error
	// DeleteConsumer removes the consumer and its keys.
	DeleteConsumer(ctx context.Context, tenantID, id string) error

	// CreateKey stores k (Hash set by the caller from a NewSecret): ENotFound (consumer).
	CreateKey(ctx context.Context, k *Key) error
	ListKeys(ctx context.Context, tenantID, consumerID string, p Page) ([]*Key, string, error)
	DeleteKey(ctx context.Context, tenantID, consumerID, keyID string) error
}

// PlanService manages a tenant's plans.
type PlanService interface {
	// CreatePlan: EValidation, EConflict (name taken).
	CreatePlan(ctx context.Context, p *Plan) error
	FindPlan(ctx context.Context, tenantID, id string) (*Plan, error)
	ListPlans(ctx context.Context, tenantID string, p Page) ([]*Plan, string, error)
	UpdatePlan(ctx context.Context, p *Plan) error
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

// AccessRulesService manages a tenant's policy. Validating a policy is the compiler's job
// (accessrules.Compile); callers validate before PutAccessRules.
type AccessRulesService interface {
	// FindAccessRules: ENotFound when the tenant has none.
	FindAccessRules(ctx context.Context, tenantID string) (*AccessRules, error)
	// PutAccessRules creates or replaces the tenant's policy; when p.Version is not 0 only if
	// it is current. ENotFound (tenant, or no policy to update at that version),
	// EVersionConflict.
	PutAccessRules(ctx context.Context, p *AccessRules) error
}
