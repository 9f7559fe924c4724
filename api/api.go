// Package api is Tollgate's management API: the JSON/HTTP face of the tenants services,
// on Fiber. It authenticates callers (the operator's admin token, or a token scoped to one
// tenant), decodes and validates bodies strictly, maps every failure to the one error
// envelope {"error":{"code","message","request_id","field"}} and serves its own OpenAPI
// document, built from the same endpoint table that registers the routes.
//
// Rules a client can rely on:
//   - Credentials: the admin token may do everything. A tenant token (tgt_..., created
//     by POST /v1/tenants/{slug}/tokens by the admin or another token of that tenant)
//     acts only on its own tenant; any other slug is 404 not_found, the same answer as a
//     slug that does not exist. Creating, listing and deleting tenants, and changing a
//     tenant's plan, need the admin token (403 forbidden otherwise).
//   - Updates: PUT replaces the object (omitted optional fields take their defaults);
//     PATCH /v1/tenants/{slug} changes only the fields sent. Both are conditional: the
//     version comes from If-Match ("<version>", as sent in ETag) or a "version" field, and
//     a stale one is 409 version_conflict. Sending neither is 400 validation_failed on
//     "version", so a blind overwrite is never an accident; If-Match: * asks for one.
//   - Lists take ?limit= (1–500, default 50) and ?cursor= and answer
//     {"items":[...],"next_cursor":""}; next_cursor is empty on the last page.
//   - Plaintext keys and tokens appear once, in the 201 of their creation (no-store).
//   - A store that cannot be reached, or does not answer within RequestTimeout, is
//     503 not_ready with Retry-After, never a wait past that bound or a 500.
//
// It must not reach past the tenants service interfaces: no SQL, no NATS, no knowledge of
// which store is behind them. Tenant isolation is enforced twice: here (a tenant token
// never sees another tenant's slug) and in the store (every call is scoped by tenant id).
package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Config is what New needs. The services are usually one store value passed five times.
type Config struct {
	Tenants   tenants.TenantService
	Routes    tenants.RouteService
	Consumers tenants.ConsumerService
	Plans     tenants.ConsumerPlanService
	Tokens    tenants.TokenService
	// JWTIssuers and AccessRules serve /v1/tenants/{slug}/jwt-issuers and .../policy.
	JWTIssuers  tenants.JWTIssuerService
	AccessRules tenants.AccessRulesService
	// Cells serves /v1/cells and PUT /v1/tenants/{slug}/cell. Default: Tenants, when it
	// implements tenants.CellService (the Postgres store does); nil: those answer 404.
	Cells tenants.CellService
	// PlatformPlans serves /v1/platform/plans. Default: Tenants, when it implements
	// tenants.PlatformPlanService (the Postgres store does).
	PlatformPlans tenants.PlatformPlanService
	// Config serves /v1/tenants/{slug}/config, the tenant's config as one document.
	// Default: Tenants, when it implements tenants.ConfigService (the Postgres store
	// does); else those endpoints answer 404 not_found.
	Config tenants.ConfigService
	// Functions serves /v1/tenants/{slug}/functions, the tenants' WebAssembly filters.
	// Default: Tenants, when it implements tenants.FunctionService (the Postgres store
	// does); else those endpoints answer 404 not_found.
	Functions tenants.FunctionService
	// Modules is the object store the edges fetch modules from (infra/functionstore): an
	// upload is put there before Postgres keeps it. Nil: Postgres only (tests of the api
	// alone).
	Modules ModuleStore
	// FunctionLogs reads the lines functions logged at the edges. Nil: no lines.
	FunctionLogs FunctionLogReader
	// ValidateModule checks an uploaded module; its error is shown to the tenant.
	// Default: edge/function.Validate, the edges' own check.
	ValidateModule func(ctx context.Context, module []byte) error
	// APIDocs keeps the OpenAPI document of each import (POST …/routes:import), which the
	// developer portal renders as the tenant's API documentation. Nil: not kept.
	APIDocs tenants.APIDocStore

	// People enables console users: the session cookie is accepted in place of a token,
	// and a user acts in a tenant with its membership's role (or its platform role).
	// Audit serves the audit log, and is what makes the writes to a tenant record
	// their entries (the store's write transactions insert them). Access is the policy that
	// decides each tenant-scoped request. Defaults: nil, nil, rbac.Must().
	People tenants.PeopleService
	Audit  tenants.AuditService
	Access *rbac.Roles

	// Usage serves GET /v1/tenants/{slug}/usage and GET /v1/billing/export (see
	// usage.go): billing/postgres in production. Nil: both answer 404 not_found.
	Usage billing.UsageService
	// Logs serves GET /v1/tenants/{slug}/logs (logs.go): billing/postgres in production.
	// Nil: it answers 404 not_found.
	Logs LogService
	// Prices serves /v1/billing/prices and /v1/tenants/{slug}/prices, and (when it is also
	// a billing.ConsumerBills, as billing/postgres is) /v1/tenants/{slug}/billing/export.
	// Nil: those endpoints answer 404 not_found.
	Prices billing.PriceService

	// Invoices answers GET /v1/billing/invoices once the caller may export the bill;
	// StripeWebhook answers POST /v1/stripe/webhook (no token: it checks Stripe's
	// signature). Nil: the path answers 404 not_found.
	Invoices      fiber.Handler
	StripeWebhook fiber.Handler
	// Connect serves /v1/tenants/{slug}/stripe/account: the tenant's Stripe Connect
	// account, onboarded through Stripe (connect.go). Nil: those endpoints answer 404.
	Connect billing.ConnectService

	// Domains serves /v1/tenants/{slug}/domains, the tenants' custom domains and their
	// certificates. Nil: those endpoints answer 404 not_found. EdgeDomain is
	// the edge domain, under which no custom domain may be. Default: none checked.
	Domains    tenants.DomainService
	EdgeDomain string
	// Proofs looks for the DNS TXT record that proves a claim, for POST
	// .../domains/{id}/verify (tenants/dnsproof in production). DomainChecks is when
	// claims are checked (the automatic checks run beside the api with the same
	// schedule); zero fields take tenants.DomainSchedule's defaults. Nil Proofs: domains
	// stay pending and verify answers 404 not_found.
	Proofs       tenants.ProofChecker
	DomainChecks tenants.DomainSchedule

	// Mailer sends invitation mail; PublicURL is the console's address in its links
	// (scheme://host[:port]). Defaults: mail dropped, http:// and the request's host.
	Mailer    tenants.Mailer
	PublicURL string

	// AdminToken may do everything. Empty disables it (only tenant tokens work then).
	AdminToken string

	// Upstreams is the operator's rule on where route targets may point, applied when a
	// route is saved. Default: the zero policy (loopback, private, link-local refused).
	Upstreams *tenants.UpstreamAddressRule

	// Logger receives internal errors (with the request id) and, at debug level, one line
	// per request. Default: a logger that discards everything.
	Logger *slog.Logger

	// Ready reports whether the dependencies answer; /readyz calls it. Default: always ready.
	Ready func(ctx context.Context) error

	// Unavailable reports whether a service's error means its store could not be reached
	// or did not answer in time, not that something is wrong with the request or the
	// code: such a failure is answered 503 not_ready with Retry-After instead of 500
	// internal. Default: an expired deadline or a network error
	// (tenants/postgres.Unavailable also knows the driver's errors).
	Unavailable func(error) bool

	// Metrics, when set, counts every request (see NewMetrics).
	Metrics *Metrics

	// Tracer, when set, makes a span of every request (trace.go). Default: nil, no spans.
	Tracer trace.Tracer

	// BodyLimit caps request bodies in bytes. Default: 1 MB.
	BodyLimit int
	// ConfigBodyLimit caps the body of a config apply (PUT /v1/tenants/{slug}/config),
	// the one call that carries a whole tenant's config: a document of 50,000 routes is
	// about 10 MB. The binary sets TOLLGATE_API_CONFIG_BODY_LIMIT. Default:
	// DefaultConfigBodyLimit; it is never below BodyLimit.
	ConfigBodyLimit int
	// HeavyRequestTimeout replaces RequestTimeout for the heavy calls (imports, config
	// applies and exports): applying a document of 50,000 routes takes seconds. The binary
	// sets TOLLGATE_API_HEAVY_TIMEOUT. Default: DefaultHeavyRequestTimeout; it is never
	// below RequestTimeout.
	HeavyRequestTimeout time.Duration
	// ReadTimeout, WriteTimeout and IdleTimeout bound the connection phases.
	// Defaults: 10s, 15s, 60s.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	IdleTimeout  time.Duration
	// RequestTimeout bounds the store work of one request: every service call made for
	// it, the console's pages mounted on App included, shares one deadline (the request's
	// user context). When it expires the request is answered 503 not_ready. The
	// binary sets TOLLGATE_DB_TIMEOUT. Default: 10s.
	RequestTimeout time.Duration
	// HeavyCalls caps each tenant's heavy calls in flight on this process (imports, config
	// applies and dry runs, config and usage exports: heavy.go); one more is 429
	// rate_limited with Retry-After. The binary sets TOLLGATE_API_HEAVY_CALLS.
	// Default (0): DefaultHeavyCalls; negative: no cap.
	HeavyCalls int
}

// Defaults of Config.
const (
	DefaultBodyLimit      = 1 << 20
	DefaultReadTimeout    = 10 * time.Second
	DefaultWriteTimeout   = 15 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultRequestTimeout = 10 * time.Second

	DefaultConfigBodyLimit     = 64 << 20
	DefaultHeavyRequestTimeout = 60 * time.Second
)

// Server is the management API. Create it with New.
type Server struct {
	cfg       Config
	app       *fiber.App
	log       *slog.Logger
	adminHash []byte // SHA-256 of the admin token; nil when disabled
	endpoints []endpoint
	openapi   []byte // the OpenAPI document, rendered once
	draining  atomic.Bool
	heavy     heavyCalls
}

// New builds the server and registers every endpoint. It panics when a service is
// missing: that is a wiring bug, not a runtime condition.
func New(cfg Config) *Server {
	if cfg.Tenants == nil || cfg.Routes == nil || cfg.Consumers == nil || cfg.Plans == nil || cfg.Tokens == nil {
		panic("api.New: Config needs Tenants, Routes, Consumers, Plans and Tokens")
	}
	if cfg.JWTIssuers == nil || cfg.AccessRules == nil {
		panic("api.New: Config needs JWTIssuers and AccessRules")
	}
	if cfg.PlatformPlans == nil {
		pp, ok := cfg.Tenants.(tenants.PlatformPlanService)
		if !ok {
			panic("api.New: Config needs PlatformPlans (Tenants does not implement it)")
		}
		cfg.PlatformPlans = pp
	}
	if cfg.Config == nil {
		cfg.Config, _ = cfg.Tenants.(tenants.ConfigService)
	}
	if cfg.Cells == nil {
		cfg.Cells, _ = cfg.Tenants.(tenants.CellService)
	}
	if cfg.Functions == nil {
		cfg.Functions, _ = cfg.Tenants.(tenants.FunctionService)
	}
	if cfg.ValidateModule == nil {
		cfg.ValidateModule = validateModuleDefault
	}
	if cfg.Upstreams == nil {
		cfg.Upstreams = &tenants.UpstreamAddressRule{}
	}
	if cfg.Access == nil {
		cfg.Access = rbac.Must()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) error { return nil }
	}
	if cfg.Unavailable == nil {
		cfg.Unavailable = unreachable
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = DefaultBodyLimit
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.ConfigBodyLimit <= 0 {
		cfg.ConfigBodyLimit = DefaultConfigBodyLimit
	}
	cfg.ConfigBodyLimit = max(cfg.ConfigBodyLimit, cfg.BodyLimit)
	if cfg.HeavyRequestTimeout <= 0 {
		cfg.HeavyRequestTimeout = DefaultHeavyRequestTimeout
	}
	cfg.HeavyRequestTimeout = max(cfg.HeavyRequestTimeout, cfg.RequestTimeout)
	s := &Server{cfg: cfg, log: cfg.Logger, heavy: heavyCalls{max: heavyCallsOf(cfg.HeavyCalls)}}
	if cfg.AdminToken != "" {
		h := sha256.Sum256([]byte(cfg.AdminToken))
		s.adminHash = h[:]
	}
	s.app = fiber.New(fiber.Config{
		AppName:               "tollgate-api",
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		IdleTimeout:           cfg.IdleTimeout,
		BodyLimit:             cfg.BodyLimit,
		CaseSensitive:         true,
		// Values from the context stay valid after the handler: this is the control
		// plane, where safety beats the allocations Immutable costs.
		Immutable: true,
	})
	// Function uploads and config applies are the bodies allowed past BodyLimit; the
	// limit is set per request from its header, so every other body over BodyLimit is
	// still refused on its Content-Length alone.
	s.app.Server().HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		if limit := s.bodyLimit(string(h.Method()), string(h.RequestURI())); limit != cfg.BodyLimit {
			return fasthttp.RequestConfig{MaxRequestBodySize: limit}
		}
		return fasthttp.RequestConfig{}
	}
	s.endpoints = s.table()
	if cfg.Tracer != nil {
		s.app.Use(s.traced)
	}
	if cfg.Metrics != nil {
		s.app.Use(cfg.Metrics.handler)
	}
	s.app.Use(s.frame)
	s.app.Use(s.bound)
	for i := range s.endpoints {
		ep := &s.endpoints[i]
		h := s.wrap(ep)
		if ep.method == fiber.MethodGet {
			s.app.Add(fiber.MethodHead, fiberPath(ep.path), h) // as app.Get does
		}
		s.app.Add(ep.method, fiberPath(ep.path), h)
	}
	doc, err := json.Marshal(s.document())
	if err != nil {
		panic("api: render OpenAPI document: " + err.Error())
	}
	s.openapi = doc
	s.guardMethods()
	return s
}

// App is the Fiber application, for app.Test in tests and for mounting.
func (s *Server) App() *fiber.App { return s.app }

// Listen serves on addr until Shutdown.
func (s *Server) Listen(addr string) error { return s.app.Listen(addr) }

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.app.Listener(ln) }

// Shutdown makes /readyz fail at once, then stops accepting connections and waits for
// in-flight requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	return s.app.ShutdownWithContext(ctx)
}
