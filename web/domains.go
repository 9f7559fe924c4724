package web

import (
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Custom domains: a tenant claims a host name with its certificate, publishes the TXT
// record the claim shows, and the edges serve the name once the record is seen. The page
// calls the stores as the API's domain endpoints do (the same validation, the same first
// check after PendingMin, the same proof checker for a re-check); the private key is
// write-only here too: the form takes it, no page shows it.

type domainForm struct {
	Hostname, CertificatePEM string
	Errors                   map[string]string
}

type domainsData struct {
	Enabled  bool // the server stores domains
	CanCheck bool // the server can look for a proof now
	Domains  []*tenants.Domain
	Form     domainForm
}

func (c *Console) domainsPage(ctx *fiber.Ctx) error {
	return c.domainsView(ctx, http.StatusOK, domainsData{})
}

func (c *Console) domainsView(ctx *fiber.Ctx, status int, d domainsData) error {
	tv := tenantOf(ctx)
	d.Enabled, d.CanCheck = c.cfg.Domains != nil, c.cfg.Domains != nil && c.cfg.Proofs != nil
	if d.Form.Errors == nil {
		d.Form.Errors = map[string]string{}
	}
	if d.Enabled {
		items, _, err := c.cfg.Domains.ListDomains(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit})
		if err != nil {
			return c.internal(ctx, err)
		}
		for _, it := range items {
			it.PrivateKeyPEM = ""
		}
		d.Domains = items
	}
	return c.render(ctx, status, "domains", page{Title: "Custom domains", Nav: "domains", Data: d})
}

func (c *Console) domainCreate(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	if c.cfg.Domains == nil {
		return c.notFound(ctx, user(ctx))
	}
	tv := tenantOf(ctx)
	f := domainForm{Hostname: strings.TrimSpace(ctx.FormValue("hostname")), CertificatePEM: ctx.FormValue("certificate_pem"), Errors: map[string]string{}}
	d := &tenants.Domain{TenantID: tv.ID, Hostname: f.Hostname, CertificatePEM: f.CertificatePEM, PrivateKeyPEM: ctx.FormValue("private_key_pem")}
	now := c.cfg.Now()
	err := d.Validate(c.cfg.EdgeDomain, now)
	if err == nil {
		// Not checked at once: the record cannot be in DNS yet, and an early miss could
		// sit in a resolver's negative cache after it is published.
		first := now.Add(c.cfg.DomainChecks.WithDefaults().PendingMin)
		d.NextCheckAt = &first
		err = c.cfg.Domains.CreateDomain(c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("domains", tenants.AuditCreate), ""), d)
	}
	if err != nil && !fieldError(err, f.Errors, nil) {
		return c.internal(ctx, err)
	}
	if len(f.Errors) > 0 {
		return c.domainsView(ctx, http.StatusUnprocessableEntity, domainsData{Form: f})
	}
	return ctx.Redirect(c.tenantURL(ctx, "/domains?done=domain-claimed#domain-"+d.ID), http.StatusSeeOther)
}

// domainVerify looks for the claim's record now, as POST .../verify does, and shows the
// list with the outcome on the domain's row.
func (c *Console) domainVerify(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	if c.cfg.Domains == nil || c.cfg.Proofs == nil {
		return c.notFound(ctx, user(ctx))
	}
	tv := tenantOf(ctx)
	d, err := c.cfg.Domains.FindDomain(c.ctx(ctx), tv.ID, ctx.Params("id"))
	if err != nil {
		return c.internal(ctx, err)
	}
	token := d.Verification.Value
	p := c.cfg.Proofs.CheckProof(c.ctx(ctx), d.Hostname, token)
	saved, err := c.cfg.Domains.RecordProof(c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("domains", tenants.AuditVerify), d.ID),
		tv.ID, d.ID, token, p, c.cfg.Now(), c.cfg.DomainChecks, true)
	done := "domain-pending"
	switch {
	case tenants.ErrorCode(err) == tenants.EConflict:
		backTo(ctx, c.tenantURL(ctx, "/domains"))
		return c.domainsView(ctx, http.StatusConflict, domainsData{Form: domainForm{Errors: map[string]string{"form": d.Hostname + ": " + tenants.ErrorMessage(err)}}})
	case err != nil:
		return c.internal(ctx, err)
	case saved.Verified():
		done = "domain-verified"
	}
	return ctx.Redirect(c.tenantURL(ctx, "/domains?done="+done+"#domain-"+d.ID), http.StatusSeeOther)
}

func (c *Console) domainDelete(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	if c.cfg.Domains == nil {
		return c.notFound(ctx, user(ctx))
	}
	tv := tenantOf(ctx)
	id := ctx.Params("id")
	if err := c.cfg.Domains.DeleteDomain(c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("domains", tenants.AuditDelete), id), tv.ID, id); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/domains?done=domain-removed"), http.StatusSeeOther)
}
