// Package portal is a tenant's developer portal: the pages where the tenant's own API
// consumers sign up, read the tenant's API documentation, create and revoke their keys,
// choose one of the tenant's public plans and watch their usage. It is served at
// /portal/{slug}/ on the management API's Fiber app, and at / on the verified domain a
// tenant names for it.
//
// Each portal account acts as one tenants.Consumer of its tenant; everything it does
// goes through the tenants services (so the tenant sees it in the console and the edges
// get it through the outbox), recorded in the audit log as "portal:<email>". The package
// holds no SQL and loads nothing from another origin: pages, CSS, the tenant's theme and
// its logo are all served by the portal itself. The one call it makes out is the try-it
// form's, relayed to the tenant's own edge address and nowhere else (tryit.go).
package portal

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	neturl "net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/tenants"
	"tollgate/web/forms"
	"tollgate/web/shellword"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static/portal.css
var stylesheet []byte

// Prefix is where the portals are mounted: Prefix + "/{slug}/".
const Prefix = "/portal"

// Defaults of Config.
const (
	DefaultSessionTTL  = 12 * time.Hour
	DefaultHostRefresh = 10 * time.Second
	// MaxKeys bounds the keys of one portal account.
	MaxKeys = 20
)

// Config is what New needs.
type Config struct {
	Tenants   tenants.TenantService
	Consumers tenants.ConsumerService
	Plans     tenants.ConsumerPlanService
	Routes    tenants.RouteService
	Portals   tenants.PortalService
	// Usage draws the usage page. Nil: the page says usage is not collected here.
	Usage billing.UsageService
	// Prices prices the public plans. Nil: every plan is unpriced (chosen at once).
	Prices billing.PriceService
	// Checkout takes payment for a priced plan. Nil: priced plans say payments are not
	// set up.
	Checkout billing.Checkout
	// Mailer sends the verification and reset links. Default: mail is dropped.
	Mailer tenants.Mailer
	// Throttle counts sign-ups, sign-ins and mail requests, as the console's do.
	Throttle tenants.ThrottleService
	// TrustedProxies are the load balancers whose X-Forwarded-For names the client.
	TrustedProxies []netip.Prefix
	// PublicURL is the api's address as mailed links name it. Default: http://localhost:8080.
	PublicURL string
	// EdgeDomain and EdgePort make the edge's base URL in the docs and examples:
	// http://{slug}.{EdgeDomain}:{EdgePort}. Defaults: localhost, 8000.
	EdgeDomain string
	EdgePort   string
	// EdgePublicURL, when set, is the edges' address as clients reach it (a load
	// balancer): scheme://host[:port]; a tenant's URL is then scheme://{slug}.host[:port],
	// as in the console (TOLLGATE_EDGE_PUBLIC_URL).
	EdgePublicURL string
	// SessionTTL bounds a session. Default: DefaultSessionTTL.
	SessionTTL time.Duration
	// HostRefresh is how often the host names of portals on custom domains are reread.
	// Default: DefaultHostRefresh.
	HostRefresh time.Duration
	Logger      *slog.Logger
	Now         func() time.Time
	// Unavailable reports whether an error means the store could not be reached in
	// time: the page then says so with 503 and Retry-After, as the console's do.
	// Default: none is.
	Unavailable func(error) bool
}

// Portal serves every tenant's portal. Create it with New and Mount it.
type Portal struct {
	cfg     Config
	log     *slog.Logger
	pages   map[string]*template.Template
	hosts   *hostTable
	replays forms.Store[page]
	relay   *http.Client // the try-it form's calls to the edge (tryit.go)
}

// New checks cfg and parses the templates; it panics on a missing service or a template
// error (a build bug).
func New(cfg Config) *Portal {
	if cfg.Tenants == nil || cfg.Consumers == nil || cfg.Plans == nil || cfg.Routes == nil || cfg.Portals == nil || cfg.Throttle == nil {
		panic("portal.New: Config needs Tenants, Consumers, Plans, Routes, Portals and Throttle")
	}
	if cfg.Mailer == nil {
		cfg.Mailer = dropMail{}
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://localhost:8080"
	}
	cfg.PublicURL = strings.TrimSuffix(cfg.PublicURL, "/")
	if cfg.EdgeDomain == "" {
		cfg.EdgeDomain = "localhost"
	}
	if cfg.EdgePort == "" {
		cfg.EdgePort = "8000"
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.HostRefresh <= 0 {
		cfg.HostRefresh = DefaultHostRefresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Unavailable == nil {
		cfg.Unavailable = func(error) bool { return false }
	}
	p := &Portal{cfg: cfg, log: cfg.Logger, pages: map[string]*template.Template{}}
	p.hosts = newHostTable(cfg.Portals.PortalHosts, cfg.HostRefresh, cfg.Logger)
	p.relay = newRelayClient(p.dialEdge)
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/schema.html"))
	names, _ := fs.Glob(templateFiles, "templates/*.html")
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base != "layout" && base != "schema" {
			p.pages[base] = template.Must(template.Must(layout.Clone()).ParseFS(templateFiles, n))
		}
	}
	return p
}

// Mount registers the portal's routes on app, and serves the portals on custom domains:
// a request whose Host is one of them is routed as if it had asked for the path under
// that tenant's /portal/{slug}. Requests for any other host are not touched.
func (p *Portal) Mount(app *fiber.App) {
	if !app.Config().Immutable {
		// Values of a request outlive it in the pages kept for the next GET (forms.Store);
		// without Immutable they alias buffers fasthttp reuses.
		panic("portal: Mount needs a fiber app with Config.Immutable")
	}
	p.hosts.wrap(app.Server())
	g := app.Group(Prefix+"/:slug", p.headers, p.tenantScope, p.csrf, p.replayed)
	g.Get("/", p.docsPage)
	g.Get("/portal.css", p.css)
	g.Get("/theme.css", p.theme)
	g.Get("/logo", p.logo)
	g.Get("/signup", p.signupPage)
	g.Post("/signup", p.signup)
	g.Get("/login", p.loginPage)
	g.Post("/login", p.login)
	g.Post("/logout", p.logout)
	g.Get("/verify", p.verify)
	g.Post("/verify/resend", p.verifyResend)
	g.Get("/forgot", p.forgotPage)
	g.Post("/forgot", p.forgot)
	g.Get("/reset", p.resetPage)
	g.Post("/reset", p.reset)
	g.Get("/keys", p.signedIn(p.keysPage))
	g.Post("/keys", p.signedIn(p.keyCreate))
	g.Post("/keys/:id/delete", p.signedIn(p.keyDelete))
	g.Get("/plans", p.plansPage)
	g.Post("/plans/choose", p.signedIn(p.planChoose))
	g.Get("/usage", p.signedIn(p.usagePage))
	g.Get("/operations/:id", p.operationPage)
	g.Post("/operations/:id", p.tryOperation)
	g.All("/*", func(ctx *fiber.Ctx) error { return p.notFound(ctx) })
}

// headers are the console's: no framing, no sniffing, nothing from another origin, no
// caching of pages.
func (p *Portal) headers(ctx *fiber.Ctx) error {
	ctx.Set("Content-Security-Policy", "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'none'; form-action 'self' https:; frame-ancestors 'none'; base-uri 'none'")
	ctx.Set("X-Content-Type-Options", "nosniff")
	ctx.Set("Referrer-Policy", "same-origin")
	ctx.Set(fiber.HeaderCacheControl, "no-store")
	return ctx.Next()
}

// view is the portal a request is about: its tenant, settings and the path it is
// served under ("/portal/{slug}", or "" on its custom domain).
type view struct {
	Tenant   *tenants.Tenant
	Settings *tenants.PortalSettings
	Base     string
	Name     string // the display name, or the tenant's
}

const (
	localView    = "portal.view"
	localSession = "portal.session"
	localAccount = "portal.account"
)

// tenantScope resolves :slug to a tenant whose portal is on; anything else is 404.
func (p *Portal) tenantScope(ctx *fiber.Ctx) error {
	slug := ctx.Params("slug")
	if tenants.ValidateSlug(slug) != nil {
		return p.plainNotFound(ctx)
	}
	t, err := p.cfg.Tenants.FindTenant(p.ctx(ctx), slug)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return p.plainNotFound(ctx)
	}
	if err != nil {
		return p.internalPlain(ctx, err)
	}
	s, err := p.cfg.Portals.FindPortal(p.ctx(ctx), t.ID)
	if err != nil {
		return p.internalPlain(ctx, err)
	}
	if !s.Enabled {
		return p.plainNotFound(ctx)
	}
	v := &view{Tenant: t, Settings: s, Base: Prefix + "/" + slug, Name: s.DisplayName}
	if onCustomHost(ctx) {
		v.Base = ""
	}
	if v.Name == "" {
		v.Name = t.Name
	}
	ctx.Locals(localView, v)
	return ctx.Next()
}

func viewOf(ctx *fiber.Ctx) *view {
	v, _ := ctx.Locals(localView).(*view)
	return v
}

func (p *Portal) ctx(ctx *fiber.Ctx) context.Context { return ctx.UserContext() }

// url is path under the portal the request is about.
func url(ctx *fiber.Ctx, path string) string {
	if b := viewOf(ctx).Base; b != "" || path != "" {
		return b + path
	}
	return "/"
}

// page is what every template gets.
type page struct {
	Title   string
	View    *view
	Account *tenants.PortalAccount
	Nav     string
	CSRF    string
	Flash   string
	Message string
	Status  int
	Form    any
	Data    any
}

var funcs = template.FuncMap{
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"day":   func(t time.Time) string { return t.UTC().Format("Jan 2") },
	"join":  strings.Join,
	"num":   forms.GroupDigits,
	"price": priceText,
	"shq":   shellword.Quote,
}

// priceText says what a priced plan costs: "usd 9.00 a month", then the overage.
func priceText(pr *billing.Price) string {
	if pr == nil {
		return ""
	}
	cur := strings.ToUpper(pr.Currency) + " "
	parts := []string{}
	if pr.MonthlyFee > 0 {
		parts = append(parts, cur+minor(pr.MonthlyFee)+" a month")
	}
	if pr.UnitPrice > 0 {
		unit := max(pr.UnitRequests, 1)
		over := cur + minor(pr.UnitPrice) + " per " + forms.GroupDigits(unit) + " requests"
		if pr.IncludedRequests > 0 {
			over += " over " + forms.GroupDigits(pr.IncludedRequests)
		}
		parts = append(parts, over)
	}
	return strings.Join(parts, ", ")
}

// minor writes an amount of minor units (cents) in major units.
func minor(n int64) string {
	return forms.GroupDigits(n/100) + "." + fmt.Sprintf("%02d", n%100)
}

// render answers with the page: at once for a GET, through a kept page and a redirect
// for a POST (replay.go).
func (p *Portal) render(ctx *fiber.Ctx, status int, name string, pg page) error {
	pg.Status = status
	if kept, err := p.keep(ctx, name, pg); kept {
		return err
	}
	return p.draw(ctx, status, name, pg)
}

func (p *Portal) draw(ctx *fiber.Ctx, status int, name string, pg page) error {
	t := p.pages[name]
	if t == nil {
		return p.internal(ctx, errors.New("portal: no template "+name))
	}
	pg.View = viewOf(ctx)
	pg.Account = account(ctx)
	pg.CSRF = p.csrfToken(ctx)
	pg.Status = status
	if pg.Flash == "" {
		pg.Flash = flashOf(ctx.Query("done"))
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", pg); err != nil {
		p.log.Error("portal: render", "page", name, "err", err)
		return ctx.Status(http.StatusInternalServerError).SendString("Something went wrong on our side. Reload the page.")
	}
	ctx.Status(status)
	ctx.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return ctx.Send(buf.Bytes())
}

func flashOf(done string) string {
	return map[string]string{
		"key-revoked":    "Key revoked. The edges refuse it within moments.",
		"plan-chosen":    "Plan changed. The edges apply its limits within moments.",
		"checkout":       "Thank you. Your plan changes as soon as the payment is confirmed.",
		"password-reset": "Password changed. Sign in with the new password.",
	}[done]
}

func (p *Portal) errorPage(ctx *fiber.Ctx, status int, title, msg string) error {
	return p.render(ctx, status, "error", page{Title: title, Message: msg})
}

func (p *Portal) notFound(ctx *fiber.Ctx) error {
	return p.errorPage(ctx, http.StatusNotFound, "Not found", "There is nothing here.")
}

// plainNotFound answers for a portal that does not exist or is off: a bare page that
// names no tenant, the same whichever it was.
func (p *Portal) plainNotFound(ctx *fiber.Ctx) error {
	ctx.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
	return ctx.Status(http.StatusNotFound).SendString("Not found.")
}

func (p *Portal) internalPlain(ctx *fiber.Ctx, err error) error {
	ctx.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
	if p.cfg.Unavailable(err) {
		p.log.Warn("portal: the store did not answer", "path", ctx.Path(), "err", err)
		ctx.Set(fiber.HeaderRetryAfter, "5")
		return ctx.Status(http.StatusServiceUnavailable).SendString("The database is not answering right now. Try again in a few seconds.")
	}
	p.log.Error("portal: internal error", "path", ctx.Path(), "err", err)
	return ctx.Status(http.StatusInternalServerError).SendString("Something failed on our side. Try again in a moment.")
}

// internal logs err and shows a page without its details; a domain error shows its own
// message.
func (p *Portal) internal(ctx *fiber.Ctx, err error) error {
	var te *tenants.Error
	if errors.As(err, &te) && te.Code != tenants.EInternal {
		if te.Code == tenants.ENotFound {
			return p.notFound(ctx)
		}
		status := tenants.Status(te.Code)
		return p.errorPage(ctx, status, http.StatusText(status), te.Message)
	}
	id := ctx.GetRespHeader(fiber.HeaderXRequestID)
	if p.cfg.Unavailable(err) {
		p.log.Warn("portal: the store did not answer", "request_id", id, "path", ctx.Path(), "err", err)
		ctx.Set(fiber.HeaderRetryAfter, "5")
		return p.errorPage(ctx, http.StatusServiceUnavailable, "Temporarily unavailable", "The database is not answering right now. Try again in a few seconds.")
	}
	p.log.Error("portal: internal error", "request_id", id, "path", ctx.Path(), "err", err)
	return p.errorPage(ctx, http.StatusInternalServerError, "Something went wrong",
		"Something failed on our side. Try again in a moment; if it keeps happening, tell the API's owner request id "+id+".")
}

// edgeURL is where the tenant's APIs answer, as the console's examples name it.
func (p *Portal) edgeURL(slug string) string {
	if u, err := neturl.Parse(p.cfg.EdgePublicURL); err == nil && u.Host != "" && u.Scheme != "" {
		return u.Scheme + "://" + slug + "." + u.Host
	}
	return "http://" + slug + "." + p.cfg.EdgeDomain + ":" + p.cfg.EdgePort
}

func (p *Portal) css(ctx *fiber.Ctx) error {
	ctx.Set(fiber.HeaderContentType, "text/css; charset=utf-8")
	ctx.Set(fiber.HeaderCacheControl, "public, max-age=3600")
	return ctx.Send(stylesheet)
}

// theme carries the tenant's colours as CSS custom properties: a stylesheet of its own,
// so the pages need no inline style (the CSP allows none).
func (p *Portal) theme(ctx *fiber.Ctx) error {
	s := viewOf(ctx).Settings
	var b strings.Builder
	b.WriteString(":root{")
	if s.PrimaryColor != "" {
		b.WriteString("--primary:" + s.PrimaryColor + ";")
	}
	if s.AccentColor != "" {
		b.WriteString("--accent:" + s.AccentColor + ";")
	}
	b.WriteString("}\n")
	ctx.Set(fiber.HeaderContentType, "text/css; charset=utf-8")
	return ctx.SendString(b.String())
}

// logo serves the uploaded logo from the portal's own origin.
func (p *Portal) logo(ctx *fiber.Ctx) error {
	mime, img, ok := tenants.DecodeLogo(viewOf(ctx).Settings.Logo)
	if !ok {
		return p.notFound(ctx)
	}
	ctx.Set(fiber.HeaderContentType, mime)
	return ctx.Send(img)
}
