package web

import (
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// API tokens: the management API's credentials of one tenant, for automation such as
// `tollgate config apply`. Owners and admins mint and revoke them here as the API's token
// endpoints let them; the plaintext is shown once, on the page the create answers, and
// only its hash is kept. A token never outranks admin: it cannot delete the tenant or
// change its platform plan.

type tokenForm struct {
	Name, Role string
	Errors     map[string]string
}

type tokensData struct {
	Enabled  bool
	Tokens   []*tenants.Token
	Form     tokenForm
	NewToken string         // the plaintext, on the answer to the create only
	Created  *tenants.Token // the token NewToken is
	APIURL   string         // the management API, for the config-as-code example
}

func (c *Console) tokensPage(ctx *fiber.Ctx) error {
	return c.tokensView(ctx, http.StatusOK, tokensData{Form: tokenForm{Role: tenants.RoleAdmin}})
}

// tokensView draws the page; only owners and admins see the list and the form, as only
// they may call the token endpoints.
func (c *Console) tokensView(ctx *fiber.Ctx, status int, d tokensData) error {
	tv := tenantOf(ctx)
	d.Enabled, d.APIURL = c.cfg.Tokens != nil, c.cfg.PublicURL
	if d.Form.Errors == nil {
		d.Form.Errors = map[string]string{}
	}
	if d.Enabled && tv.CanAdmin {
		items, _, err := c.cfg.Tokens.ListTokens(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit})
		if err != nil {
			return c.internal(ctx, err)
		}
		d.Tokens = items
	}
	return c.render(ctx, status, "tokens", page{Title: "API tokens", Nav: "tokens", Data: d})
}

func (c *Console) tokenCreate(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	if c.cfg.Tokens == nil {
		return c.notFound(ctx, user(ctx))
	}
	tv := tenantOf(ctx)
	f := tokenForm{Name: strings.TrimSpace(ctx.FormValue("name")), Role: ctx.FormValue("role"), Errors: map[string]string{}}
	plain, hash, display := tenants.NewSecret(tenants.TokenPrefix)
	t := &tenants.Token{TenantID: tv.ID, Name: f.Name, Role: f.Role, Prefix: display, Hash: hash}
	err := t.Validate()
	if err == nil {
		err = c.cfg.Tokens.CreateToken(c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("tokens", tenants.AuditCreate), ""), t)
	}
	if err != nil && !fieldError(err, f.Errors, nil) {
		return c.internal(ctx, err)
	}
	if len(f.Errors) > 0 {
		return c.tokensView(ctx, http.StatusUnprocessableEntity, tokensData{Form: f})
	}
	return c.tokensView(ctx, http.StatusOK, tokensData{Form: tokenForm{Role: t.Role}, NewToken: plain, Created: t})
}

func (c *Console) tokenDelete(ctx *fiber.Ctx) error {
	if ok, err := c.may(ctx, rbac.TenantAdmin); !ok {
		return err
	}
	if c.cfg.Tokens == nil {
		return c.notFound(ctx, user(ctx))
	}
	tv := tenantOf(ctx)
	id := ctx.Params("id")
	if err := c.cfg.Tokens.DeleteToken(c.audited(ctx, user(ctx), tv.ID, tenants.AuditAction("tokens", tenants.AuditDelete), id), tv.ID, id); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/tokens?done=token-revoked"), http.StatusSeeOther)
}
