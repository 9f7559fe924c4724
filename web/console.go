// Package web is Tollgate's console: server-rendered pages (html/template, one CSS file,
// a little vanilla JavaScript, all embedded) that let people sign up, sign in and run
// their tenant's APIs — routes, consumers and keys, plans, JWT issuers, the access rules, usage,
// the audit log, members — and lets the finance role export the bill.
//
// It is mounted on the management API's Fiber app under /console/ and calls the same
// tenants services, validations and policy (tenants/rbac) as the API, so a form shows the
// API's own messages next to the field and a role may do in the browser exactly what it
// may do with a token. It must not reach past those interfaces (no SQL), load anything
// from another origin, or show raw JSON or stack traces to people.
package web

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/tenants/rbac"
	"tollgate/web/forms"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Prefix is where the console is mounted.
const Prefix = "/console"

// Defaults of Config.
const (
	DefaultSessionTTL = 12 * time.Hour
	DefaultPageSize   = 100
)

// Config is what New needs.
type Config struct {
	Tenants   tenants.TenantService
	Routes    tenants.RouteService
	Consumers tenants.ConsumerService
	People    tenants.PeopleService
	Audit     tenants.AuditService
	// Plans, JWTIssuers and AccessRules serve the plans, JWT issuers and access-rules pages. Nil:
	// the page says the setting is not managed here.
	Plans       tenants.ConsumerPlanService
	JWTIssuers  tenants.JWTIssuerService
	AccessRules tenants.AccessRulesService
	// Usage draws the usage page. Nil: the page says usage is not collected here.
	Usage billing.UsageService
	// Logs serves the request log page (logs.go). Nil: the page says no log is kept here.
	Logs LogService
	// Payments serves a tenant's payments page (connected Stripe account, consumers'
	// checkouts) and the subscriptions and invoices on the finance page. Nil: the pages say
	// payments are not recorded here.
	Payments PaymentsStore
	// Connect onboards the tenant's Stripe account through Stripe (billing/stripe.Connect).
	// Nil: the payments page cannot connect one (Stripe is not configured here).
	Connect billing.ConnectService
	// Prices serves /console/finance/prices and the price versions on a plan's page.
	// Nil: the pages say prices are not managed here.
	Prices billing.PriceService
	// Portals and Domains serve the developer portal's settings page (package portal
	// serves the portal). Nil Portals: the page says the portal is not served here.
	Portals tenants.PortalService
	Domains tenants.DomainService
	// Functions serves the functions page and the route form's functions. Modules is the
	// object store an upload goes to before Postgres (nil: Postgres only), FunctionLogs
	// reads the functions' log lines (nil: none shown), ValidateModule checks an upload
	// (default: edge/function.Validate, the edges' own check). Nil Functions: the page
	// says functions are not managed here.
	Functions      tenants.FunctionService
	Modules        ModuleStore
	FunctionLogs   FunctionLogReader
	ValidateModule func(ctx context.Context, module []byte) error
	// Tokens serves the API tokens page. Nil: the page says tokens are not managed here.
	Tokens tenants.TokenService
	// Proofs looks for a custom domain's DNS proof when the domains page asks for a check
	// (the api's checker, tenants/dnsproof); DomainChecks is the schedule a check resumes
	// (the api's). Nil Proofs: the page offers no check, the automatic ones still run.
	Proofs       tenants.ProofChecker
	DomainChecks tenants.DomainSchedule
	// Roles decides what each role may do. Default: rbac.Must().
	Roles *rbac.Roles
	// Upstreams is the operator's rule on route targets (as the API's). Default: zero policy.
	Upstreams *tenants.UpstreamAddressRule
	// EdgeDomain and EdgePort make the example URLs: http://{slug}.{EdgeDomain}:{EdgePort}/.
	// Defaults: "localhost", "8000".
	EdgeDomain string
	EdgePort   string
	// EdgePublicURL, when set, is the edges' address as clients reach it (a load balancer
	// in front of them): scheme://host[:port]; a tenant's URL is scheme://{slug}.host[:port].
	// It overrides EdgeDomain and EdgePort in the examples.
	EdgePublicURL string
	// SessionTTL bounds a session. Default: DefaultSessionTTL.
	SessionTTL time.Duration
	// PageSize is how many routes, consumers or audit entries a page of their lists shows,
	// at most tenants.MaxPageLimit. Default: DefaultPageSize.
	PageSize int
	// Mailer sends verification, password-reset and invitation mail. Default: mail is
	// dropped (tests that follow links set one).
	Mailer tenants.Mailer
	// PublicURL is the console's address as mailed links name it (scheme://host[:port],
	// without /console). Never the request's Host header, which a client chooses: a reset
	// link must not point where the requester says. Default: http://localhost:8080.
	PublicURL string
	// Throttle keeps the counters of Limits. Default: People, when it implements
	// tenants.ThrottleService (the Postgres store does).
	Throttle tenants.ThrottleService
	// Limits throttle sign-in, sign-up and mail requests. Zero rules take their defaults.
	Limits Limits
	// TrustedProxies are the load balancers whose X-Forwarded-For names the client address
	// that Limits count by. Default: none (the peer is the client).
	TrustedProxies []netip.Prefix
	// Logger receives internal errors. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// Unavailable reports whether an error means the store could not be reached or did
	// not answer in time: the page says so with 503 and Retry-After instead of 500, as
	// the API does (see api.Config.Unavailable). Default: none is.
	Unavailable func(error) bool
}

// Console serves the pages. Create it with New and Mount it.
type Console struct {
	cfg   Config
	log   *slog.Logger
	pages map[string]*template.Template
	flash forms.Store[page] // pages kept for the GET after a POST (flash.go)
}

// New parses the templates; it panics on a template error (a build bug).
func New(cfg Config) *Console {
	if cfg.Tenants == nil || cfg.Routes == nil || cfg.Consumers == nil || cfg.People == nil || cfg.Audit == nil {
		panic("web.New: Config needs Tenants, Routes, Consumers, People and Audit")
	}
	if cfg.ValidateModule == nil {
		cfg.ValidateModule = validateModuleDefault
	}
	if cfg.Roles == nil {
		cfg.Roles = rbac.Must()
	}
	if cfg.Upstreams == nil {
		cfg.Upstreams = &tenants.UpstreamAddressRule{}
	}
	if cfg.EdgeDomain == "" {
		cfg.EdgeDomain = "localhost"
	}
	if cfg.EdgePort == "" {
		cfg.EdgePort = "8000"
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.PageSize <= 0 || cfg.PageSize > tenants.MaxPageLimit {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Throttle == nil {
		th, ok := cfg.People.(tenants.ThrottleService)
		if !ok {
			panic("web.New: Config needs a Throttle (People does not count attempts)")
		}
		cfg.Throttle = th
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Mailer == nil {
		cfg.Mailer = dropMail{}
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://localhost:8080"
	}
	cfg.PublicURL = strings.TrimSuffix(cfg.PublicURL, "/")
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Unavailable == nil {
		cfg.Unavailable = func(error) bool { return false }
	}
	c := &Console{cfg: cfg, log: cfg.Logger, pages: map[string]*template.Template{}}
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/_shared.html"))
	names, _ := fs.Glob(templateFiles, "templates/*.html")
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" || base == "_shared" {
			continue
		}
		c.pages[base] = template.Must(template.Must(layout.Clone()).ParseFS(templateFiles, n))
	}
	return c
}

// Mount registers the console's routes on app under Prefix.
func (c *Console) Mount(app *fiber.App) {
	if !app.Config().Immutable {
		// Values of a request (form fields, headers) outlive it in the pages kept for the
		// next GET (forms.Store); without Immutable they alias buffers fasthttp reuses.
		panic("web: Mount needs a fiber app with Config.Immutable")
	}
	static, _ := fs.Sub(staticFiles, "static")
	app.Get(Prefix+"/static/:file", func(ctx *fiber.Ctx) error {
		name := ctx.Params("file")
		b, err := fs.ReadFile(static, name)
		if err != nil || strings.Contains(name, "/") {
			return c.notFound(ctx, nil)
		}
		switch {
		case strings.HasSuffix(name, ".css"):
			ctx.Set(fiber.HeaderContentType, "text/css; charset=utf-8")
		case strings.HasSuffix(name, ".js"):
			ctx.Set(fiber.HeaderContentType, "text/javascript; charset=utf-8")
		case strings.HasSuffix(name, ".svg"):
			ctx.Set(fiber.HeaderContentType, "image/svg+xml")
		}
		ctx.Set(fiber.HeaderCacheControl, "public, max-age=3600")
		return ctx.Send(b)
	})
	g := app.Group(Prefix, c.headers, c.csrf)
	g.Get("/", c.home)
	g.Get("/signup", c.signupPage)
	g.Post("/signup", c.signup)
	g.Get("/login", c.loginPage)
	g.Post("/login", c.login)
	g.Post("/logout", c.logout)
	g.Get("/verify", c.verify)
	g.Post("/verify/resend", c.verifyResend)
	g.Get("/forgot", c.forgotPage)
	g.Post("/forgot", c.forgot)
	g.Get("/reset", c.resetPage)
	g.Post("/reset", c.reset)
	g.Get("/account", c.accountPage)
	g.Post("/account/password", c.passwordChange)
	g.Get("/invites/accept", c.invitePage)
	g.Post("/invites/accept", c.inviteAccept)
	g.Post("/invites/decline", c.inviteDecline)
	g.Get("/tenants/new", c.tenantNewPage)
	g.Post("/tenants", c.tenantCreate)

	t := g.Group("/t/:slug", c.tenantScope)
	t.Get("/", func(ctx *fiber.Ctx) error { return ctx.Redirect(c.tenantURL(ctx, "/routes"), http.StatusSeeOther) })
	t.Get("/routes", c.routesPage)
	t.Get("/routes/new", c.routeNewPage)
	t.Get("/routes/import", c.importPage)
	t.Post("/routes/import", c.importRun)
	t.Post("/routes/new", c.routeCreate)
	t.Get("/routes/:id", c.routeEditPage)
	t.Post("/routes/:id", c.routeUpdate)
	t.Post("/routes/:id/delete", c.routeDelete)
	t.Get("/functions", c.functionsPage)
	t.Post("/functions", c.functionUpload)
	t.Get("/functions/:name", c.functionPage)
	t.Get("/functions/:name/module", c.functionModule)
	t.Post("/functions/:name/delete", c.functionDelete)
	t.Get("/consumers", c.consumersPage)
	t.Post("/consumers", c.consumerCreate)
	t.Get("/consumers/:id", c.consumerPage)
	t.Post("/consumers/:id/keys", c.keyCreate)
	t.Post("/consumers/:id/keys/:key_id/delete", c.keyDelete)
	t.Post("/consumers/:id/delete", c.consumerDelete)
	t.Post("/consumers/:id/plan", c.consumerPlan)
	t.Get("/usage", c.usagePage)
	t.Get("/logs", c.logsPage)
	t.Get("/payments", c.paymentsPage)
	t.Post("/payments/connect", c.paymentsConnect)
	t.Get("/payments/connect/return", c.paymentsReturn)
	t.Get("/payments/connect/refresh", c.paymentsRefresh)
	t.Post("/payments/connect/check", c.paymentsCheck)
	t.Post("/payments/disconnect", c.paymentsDisconnect)
	t.Get("/audit", c.auditPage)
	t.Get("/members", c.membersPage)
	t.Post("/members/:user_id/role", c.memberRole)
	t.Post("/members/:user_id/delete", c.memberRemove)
	t.Post("/invites", c.inviteCreate)
	t.Post("/invites/delete", c.inviteDelete)
	t.Get("/plans", c.plansPage)
	t.Get("/plans/new", c.planNewPage)
	t.Post("/plans/new", c.planCreate)
	t.Get("/plans/:id", c.planEditPage)
	t.Post("/plans/:id", c.planUpdate)
	t.Post("/plans/:id/delete", c.planDelete)
	t.Post("/plans/:id/prices", c.planPriceCreate)
	t.Post("/plans/:id/prices/delete", c.planPriceDelete)
	t.Get("/jwt-issuers", c.issuersPage)
	t.Get("/jwt-issuers/new", c.issuerNewPage)
	t.Post("/jwt-issuers/new", c.issuerCreate)
	t.Get("/jwt-issuers/:id", c.issuerEditPage)
	t.Post("/jwt-issuers/:id", c.issuerUpdate)
	t.Post("/jwt-issuers/:id/delete", c.issuerDelete)
	t.Get("/policy", c.accessRulesPage)
	t.Get("/portal", c.portalPage)
	t.Post("/portal", c.portalSave)
	t.Post("/policy", c.accessRulesSave)
	t.Get("/tokens", c.tokensPage)
	t.Post("/tokens", c.tokenCreate)
	t.Post("/tokens/:id/delete", c.tokenDelete)
	t.Get("/domains", c.domainsPage)
	t.Post("/domains", c.domainCreate)
	t.Post("/domains/:id/verify", c.domainVerify)
	t.Post("/domains/:id/delete", c.domainDelete)
	t.Get("/settings", c.settingsPage)
	t.Post("/settings", c.tenantRename)
	t.Post("/settings/delete", c.tenantDelete)
	g.Get("/finance", c.financePage)
	g.Get("/finance/prices", c.pricesPage)
	g.Post("/finance/prices", c.priceCreate)
	g.Post("/finance/prices/delete", c.priceDelete)
	g.All("/*", func(ctx *fiber.Ctx) error { return c.notFound(ctx, nil) })
}

// headers sets the console's security headers: no framing, no sniffing, same-origin
// everything (no CDN: every asset is embedded), no caching of pages.
func (c *Console) headers(ctx *fiber.Ctx) error {
	ctx.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	ctx.Set("X-Content-Type-Options", "nosniff")
	ctx.Set("Referrer-Policy", "same-origin")
	ctx.Set(fiber.HeaderCacheControl, "no-store")
	return ctx.Next()
}

func (c *Console) ctx(ctx *fiber.Ctx) context.Context { return ctx.UserContext() }
