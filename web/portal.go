package web

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// The developer portal's settings (package portal serves the portal itself): on or off,
// the name and logo it shows, its two colours and, optionally, one of the tenant's
// verified domains to serve it on. Owners and admins change them; the others see them.

type portalForm struct {
	Enabled                    bool
	DisplayName                string
	Primary, Accent            string
	DomainID                   string
	HasLogo                    bool
	Errors                     map[string]string
	Domains                    []*tenants.Domain // the tenant's verified domains
	URL, DomainURL             string
	ReadOnly, ManagedElsewhere bool
}

func (c *Console) portalPage(ctx *fiber.Ctx) error {
	if c.cfg.Portals == nil {
		return c.render(ctx, http.StatusOK, "portal_settings", page{Title: "Developer portal", Nav: "portal", Form: portalForm{ManagedElsewhere: true}})
	}
	s, err := c.cfg.Portals.FindPortal(c.ctx(ctx), tenantOf(ctx).ID)
	if err != nil {
		return c.internal(ctx, err)
	}
	f := portalForm{Enabled: s.Enabled, DisplayName: s.DisplayName, Primary: s.PrimaryColor, Accent: s.AccentColor,
		DomainID: s.DomainID, HasLogo: s.Logo != "", Errors: map[string]string{}}
	return c.renderPortal(ctx, http.StatusOK, f, s)
}

func (c *Console) renderPortal(ctx *fiber.Ctx, status int, f portalForm, s *tenants.PortalSettings) error {
	tv := tenantOf(ctx)
	f.ReadOnly = !c.cfg.Roles.Allow(tv.Role, tv.ID, rbac.TenantAdmin)
	f.URL = c.cfg.PublicURL + "/portal/" + tv.Slug + "/"
	if s.Hostname != "" {
		f.DomainURL = "https://" + s.Hostname + "/"
	}
	if c.cfg.Domains != nil {
		ds, _, err := c.cfg.Domains.ListDomains(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit})
		if err != nil {
			return c.internal(ctx, err)
		}
		for _, d := range ds {
			if d.Status == tenants.DomainVerified {
				f.Domains = append(f.Domains, d)
			}
		}
	}
	pg := page{Title: "Developer portal", Nav: "portal", Form: f}
	if ctx.Query("done") == "portal-saved" {
		pg.Flash = "Portal settings saved."
	}
	return c.render(ctx, status, "portal_settings", pg)
}

// portalSave stores the form; a logo file replaces the logo, "remove logo" drops it,
// neither keeps it.
func (c *Console) portalSave(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	if c.cfg.Portals == nil {
		return c.notFound(ctx, nil)
	}
	tv := tenantOf(ctx)
	old, err := c.cfg.Portals.FindPortal(c.ctx(ctx), tv.ID)
	if err != nil {
		return c.internal(ctx, err)
	}
	f := portalForm{Enabled: ctx.FormValue("enabled") != "", DisplayName: strings.TrimSpace(ctx.FormValue("display_name")),
		Primary: strings.TrimSpace(ctx.FormValue("primary_color")), Accent: strings.TrimSpace(ctx.FormValue("accent_color")),
		DomainID: ctx.FormValue("domain_id"), Errors: map[string]string{}}
	s := &tenants.PortalSettings{TenantID: tv.ID, Enabled: f.Enabled, DisplayName: f.DisplayName, Logo: old.Logo,
		PrimaryColor: f.Primary, AccentColor: f.Accent, DomainID: f.DomainID}
	if ctx.FormValue("remove_logo") != "" {
		s.Logo = ""
	}
	if fh, err := ctx.FormFile("logo"); err == nil && fh.Size > 0 {
		s.Logo = c.readLogo(fh.Size, func() (io.ReadCloser, error) { return fh.Open() }, f.Errors)
	}
	f.HasLogo = s.Logo != ""
	if len(f.Errors) == 0 {
		err = c.cfg.Portals.PutPortal(c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("portal", tenants.AuditUpdate), ""), s)
		switch {
		case err == nil:
			return ctx.Redirect(c.tenantURL(ctx, "/portal?done=portal-saved"), http.StatusSeeOther)
		case !fieldError(err, f.Errors, nil):
			return c.internal(ctx, err)
		}
	}
	return c.renderPortal(ctx, http.StatusUnprocessableEntity, f, old)
}

// readLogo reads an uploaded image into the data: URL the settings store, or puts why
// it cannot on the logo field.
func (c *Console) readLogo(size int64, open func() (io.ReadCloser, error), errs map[string]string) string {
	if size > tenants.MaxPortalLogo {
		errs["logo"] = "The image is too large: logos up to 64 KiB are kept."
		return ""
	}
	r, err := open()
	if err != nil {
		errs["logo"] = "The image could not be read. Choose it again."
		return ""
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, tenants.MaxPortalLogo+1))
	if err != nil || len(b) > tenants.MaxPortalLogo {
		errs["logo"] = "The image could not be read, or is larger than 64 KiB."
		return ""
	}
	// The content decides what the image is, not the type the browser claims.
	switch mime := http.DetectContentType(b); mime {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
	}
	errs["logo"] = "The logo must be a PNG, JPEG, GIF or WebP image."
	return ""
}
