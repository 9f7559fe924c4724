package web

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Tenant settings: the display name (owners and admins, as PATCH /v1/tenants/{slug}), the
// tenant's deletion (its owners only, after typing its slug), and a further tenant of
// the signed-in user's own (a page of its own, outside any tenant: the new tenant is the
// user's, whichever tenant they came from). The slug never changes: it names the tenant
// on the edge, in clients' URLs.

type settingsData struct {
	Name, Version string
	Errors        map[string]string
	CanDelete     bool   // the user owns the tenant
	Confirm       string // what was typed in the delete confirmation
}

func (c *Console) settingsPage(ctx *fiber.Ctx) error {
	tv := tenantOf(ctx)
	return c.settingsView(ctx, http.StatusOK, settingsData{Name: tv.Name, Version: strconv.FormatInt(tv.Version, 10)})
}

func (c *Console) settingsView(ctx *fiber.Ctx, status int, d settingsData) error {
	if d.Errors == nil {
		d.Errors = map[string]string{}
	}
	d.CanDelete = tenantOf(ctx).Role == tenants.RoleOwner
	return c.render(ctx, status, "settings", page{Title: "Tenant settings", Nav: "settings", Data: d})
}

func (c *Console) tenantRename(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	tv := tenantOf(ctx)
	d := settingsData{Name: strings.TrimSpace(ctx.FormValue("name")), Version: ctx.FormValue("version"), Errors: map[string]string{}}
	t := *tv.Tenant
	t.Name = d.Name
	if d.Name == "" {
		d.Errors["name"] = "is required: the name the console and the portal show (the slug stays " + tv.Slug + ")"
	}
	if v, err := strconv.ParseInt(d.Version, 10, 64); err == nil {
		t.Version = v
	}
	sent, err := c.submit(ctx, formSave{errs: d.Errors, noun: "tenant", audit: tenants.AuditAction("tenants", tenants.AuditUpdate),
		id:    func() string { return "" },
		save:  func() error { return c.cfg.Tenants.UpdateTenant(c.ctx(ctx), &t) },
		field: func(err error) bool { return fieldError(err, d.Errors, nil) },
		done:  "/settings?done=tenant-renamed"})
	if sent {
		return err
	}
	return c.settingsView(ctx, http.StatusUnprocessableEntity, d)
}

// tenantDelete ends the tenant. Only its owners may: an admin can be invited by an owner
// and must not be able to erase the owner's tenant. The slug typed again guards against
// a slip of the mouse; the browser then goes to the user's next tenant, if any.
func (c *Console) tenantDelete(ctx *fiber.Ctx) error {
	tv := tenantOf(ctx)
	if tv.Role != tenants.RoleOwner {
		return c.errorPage(ctx, http.StatusForbidden, "Not allowed",
			"Only an owner of "+tv.Slug+" may delete it. Your role is "+tv.Role+".")
	}
	backTo(ctx, c.tenantURL(ctx, "/settings"))
	d := settingsData{Name: tv.Name, Version: strconv.FormatInt(tv.Version, 10), Confirm: strings.TrimSpace(ctx.FormValue("confirm")), Errors: map[string]string{}}
	if d.Confirm != tv.Slug {
		d.Errors["confirm"] = "Type the slug " + tv.Slug + " exactly to confirm."
		return c.settingsView(ctx, http.StatusUnprocessableEntity, d)
	}
	u := user(ctx)
	if err := c.cfg.Tenants.DeleteTenant(c.audited(ctx, u, tv.ID, tenants.AuditAction("tenants", tenants.AuditDelete), tv.ID), tv.ID); err != nil {
		return c.internal(ctx, err)
	}
	ms, err := c.cfg.People.ListMemberships(c.ctx(ctx), u.ID)
	if err != nil {
		return c.internal(ctx, err)
	}
	if len(ms) > 0 {
		return ctx.Redirect(Prefix+"/t/"+ms[0].TenantSlug+"/routes?done=tenant-deleted", http.StatusSeeOther)
	}
	return ctx.Redirect(Prefix+"/tenants/new?done=tenant-deleted", http.StatusSeeOther)
}

type newTenantForm struct {
	Slug, Name string
	Errors     map[string]string
}

func (c *Console) tenantNewPage(ctx *fiber.Ctx) error {
	if user(ctx) == nil {
		return ctx.Redirect(loginFor(ctx), http.StatusSeeOther)
	}
	return c.render(ctx, http.StatusOK, "tenant_new", page{Title: "New tenant", Form: newTenantForm{Errors: map[string]string{}}})
}

// tenantCreate makes a tenant the signed-in user owns. An unverified address may not: it
// grants nothing beyond the tenant made at sign-up, so a throwaway address cannot mint
// tenants.
func (c *Console) tenantCreate(ctx *fiber.Ctx) error {
	u := user(ctx)
	if u == nil {
		return c.errorPage(ctx, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again.")
	}
	backTo(ctx, Prefix+"/tenants/new")
	f := newTenantForm{Slug: strings.TrimSpace(ctx.FormValue("slug")), Name: strings.TrimSpace(ctx.FormValue("name")), Errors: map[string]string{}}
	if !u.EmailVerified {
		f.Errors["form"] = "Verify your address first: follow the link we mailed to " + u.Email + ", then create the tenant."
		return c.render(ctx, http.StatusForbidden, "tenant_new", page{Title: "New tenant", Form: f})
	}
	t := &tenants.Tenant{Slug: f.Slug, Name: f.Name}
	err := c.cfg.People.CreateOwnedTenant(c.audited(ctx, u, "", tenants.AuditAction("tenant", tenants.AuditCreate), ""), u.ID, t)
	if err != nil && !fieldError(err, f.Errors, map[string]string{"plan": "slug"}) {
		return c.internal(ctx, err)
	}
	if len(f.Errors) > 0 {
		return c.render(ctx, http.StatusUnprocessableEntity, "tenant_new", page{Title: "New tenant", Form: f})
	}
	return ctx.Redirect(Prefix+"/t/"+t.Slug+"/routes?done=tenant-created", http.StatusSeeOther)
}
