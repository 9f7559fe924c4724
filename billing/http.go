package billing

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// HTTPConfig is what the usage and export handlers need from the server that mounts
// them: who the caller is and what it may see is the api's business, not billing's.
type HTTPConfig struct {
	// Tenant returns the id of the tenant a usage request is about, once the caller is
	// known to be allowed to see it (the api resolves :slug with its scope rules and
	// answers ENotFound for a tenant the caller may not see). Required.
	Tenant func(c *fiber.Ctx) (tenantID string, err error)
	// AuthorizeExport returns nil when the caller may export every tenant's bill (the
	// finance role, or the admin token), else a *tenants.Error (EUnauthenticated,
	// EForbidden) that the handler returns as is. Nil refuses every export.
	AuthorizeExport func(c *fiber.Ctx) error
	// Now is the clock for default ranges. Default: time.Now.
	Now func() time.Time
}

// HTTP serves usage and export over Fiber. Its handlers return *tenants.Error values
// (EInvalidRequest for bad parameters) for the mounting server's error renderer, and
// render nothing themselves on error.
type HTTP struct {
	svc UsageService
	cfg HTTPConfig
}

// UsageParams and ExportParams are the query parameters each handler reads, for a
// server that rejects unknown ones.
var (
	UsageParams  = []string{"from", "to", "granularity", "group_by"}
	ExportParams = []string{"period", "format"}
)

// Handlers returns the handlers over svc. Mount them as, for example,
//
//	h := billing.Handlers(usage, billing.HTTPConfig{Tenant: …, AuthorizeExport: …})
//	app.Get("/v1/tenants/:slug/usage", h.Usage)
//	app.Get("/v1/billing/export", h.Export)
func Handlers(svc UsageService, cfg HTTPConfig) *HTTP {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &HTTP{svc: svc, cfg: cfg}
}

// Usage answers GET /v1/tenants/{slug}/usage?from=&to=&granularity=hour|day&group_by=
// with a UsageReport: {"from","to","granularity","total":{…},"items":[…]}.
//
// from and to are RFC 3339 times or YYYY-MM-DD dates on whole UTC hours, to exclusive.
// Defaults: from the start of the current UTC month, to the end of the current hour.
// group_by is a comma-separated subset of route, consumer, status.
func (h *HTTP) Usage(c *fiber.Ctx) error {
	if h.cfg.Tenant == nil {
		return tenants.Errorf(tenants.EInternal, "billing: usage handler mounted without HTTPConfig.Tenant")
	}
	tenantID, err := h.cfg.Tenant(c)
	if err != nil {
		return err
	}
	return h.UsageOf(c, tenantID)
}

// UsageOf is Usage for a tenant the caller has already resolved and authorized.
func (h *HTTP) UsageOf(c *fiber.Ctx, tenantID string) error {
	now := h.cfg.Now().UTC()
	q := UsageQuery{TenantID: tenantID, Granularity: c.Query("granularity")}
	var err error
	if q.From, err = parseTime("from", c.Query("from"), PeriodOf(now).Start()); err != nil {
		return err
	}
	if q.To, err = parseTime("to", c.Query("to"), Hour(now).Add(time.Hour)); err != nil {
		return err
	}
	if err := q.ParseGroupBy(c.Query("group_by")); err != nil {
		return err
	}
	if err := q.Validate(); err != nil {
		return err
	}
	rep, err := h.svc.Usage(c.UserContext(), q)
	if err != nil {
		return err
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(body)
}

// Export answers GET /v1/billing/export?period=YYYY-MM&format=csv|json (default csv) with
// every tenant's bill for the month: CSV with ExportHeader, or an ExportDocument. The
// caller must pass AuthorizeExport.
func (h *HTTP) Export(c *fiber.Ctx) error {
	if h.cfg.AuthorizeExport == nil {
		return tenants.Errorf(tenants.EForbidden, "exports are not enabled on this server")
	}
	if err := h.cfg.AuthorizeExport(c); err != nil {
		return err
	}
	p, err := ParsePeriod(c.Query("period"))
	if err != nil {
		return err
	}
	format := c.Query("format", "csv")
	if format != "csv" && format != "json" {
		return tenants.Errorf(tenants.EInvalidRequest, "format must be csv or json")
	}
	rows, err := h.svc.Export(c.UserContext(), p)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if format == "csv" {
		err = WriteCSV(&buf, rows)
		c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
	} else {
		err = WriteJSON(&buf, p, rows)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="tollgate-usage-`+p.String()+`.`+format+`"`)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(buf.Bytes())
}

// parseTime reads an RFC 3339 time or a YYYY-MM-DD date (midnight UTC); def when empty.
func parseTime(name, s string, def time.Time) (time.Time, error) {
	if s == "" {
		return def, nil
	}
	// A '+' of an offset arrives as a space when the client did not escape it.
	s = strings.ReplaceAll(s, " ", "+")
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, tenants.Errorf(tenants.EInvalidRequest, "%s %q must be an RFC 3339 time (2024-05-01T13:00:00Z) or a date (2024-05-01)", name, s)
}
