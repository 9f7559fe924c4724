package web

import (
	"context"

	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// JWT issuers: the identity providers whose tokens the tenant's jwt routes accept. The key
// source is a jwks_url, inline JWKS JSON, or an HS256 secret; the secret is write-only —
// no page ever shows it, and an edit that leaves it empty keeps the stored one.

type issuerForm struct {
	ID, Version   string
	Issuer        string
	Audiences     string // one per line
	Algorithms    string // comma-separated
	Source        string // "jwks_url", "keys" or "hs256"
	JWKSURL       string
	KeysJSON      string
	HasSecret     bool // the stored issuer has a secret (never shown)
	ConsumerClaim string
	RolesClaim    string
	Leeway        string
	Errors        map[string]string
}

func issuerFormOf(is *tenants.Issuer) issuerForm {
	f := issuerForm{ID: is.ID, Version: strconv.FormatInt(is.Version, 10), Issuer: is.Issuer,
		Audiences: strings.Join(is.Audiences, "\n"), Algorithms: strings.Join(is.Algorithms, ", "),
		JWKSURL: is.JWKSURL, ConsumerClaim: is.ConsumerClaim, RolesClaim: is.RolesClaim, Errors: map[string]string{}}
	switch {
	case is.JWKSURL != "":
		f.Source = "jwks_url"
	case len(is.Keys) > 0:
		f.Source = "keys"
		b, _ := json.MarshalIndent(map[string]any{"keys": is.Keys}, "", "  ")
		f.KeysJSON = string(b)
	default:
		f.Source, f.HasSecret = "hs256", true
	}
	if is.LeewaySeconds != nil {
		f.Leeway = strconv.Itoa(*is.LeewaySeconds)
	}
	return f
}

// parseJWKS reads a JWK set ({"keys": [...]}), a list of keys, or one key.
func parseJWKS(s string) ([]tenants.JWK, error) {
	s = strings.TrimSpace(s)
	var set struct {
		Keys []tenants.JWK `json:"keys"`
	}
	var err error
	switch {
	case strings.HasPrefix(s, "["):
		err = json.Unmarshal([]byte(s), &set.Keys)
	case strings.Contains(s, `"keys"`):
		err = json.Unmarshal([]byte(s), &set)
	default:
		var k tenants.JWK
		if err = json.Unmarshal([]byte(s), &k); err == nil {
			set.Keys = []tenants.JWK{k}
		}
	}
	return set.Keys, err
}

// readIssuerForm reads the form onto is (keeping what the form does not show).
func readIssuerForm(ctx *fiber.Ctx, is *tenants.Issuer, editing bool) issuerForm {
	f := issuerForm{ID: is.ID, Version: ctx.FormValue("version"), Issuer: strings.TrimSpace(ctx.FormValue("issuer")),
		Audiences: ctx.FormValue("audiences"), Algorithms: ctx.FormValue("algorithms"), Source: ctx.FormValue("source"),
		JWKSURL: strings.TrimSpace(ctx.FormValue("jwks_url")), KeysJSON: ctx.FormValue("keys"),
		ConsumerClaim: strings.TrimSpace(ctx.FormValue("consumer_claim")), RolesClaim: strings.TrimSpace(ctx.FormValue("roles_claim")),
		Leeway: strings.TrimSpace(ctx.FormValue("leeway")), Errors: map[string]string{}}
	hadSecret := is.HS256Secret != "" || (editing && is.JWKSURL == "" && len(is.Keys) == 0)
	is.Issuer, is.Audiences, is.Algorithms = f.Issuer, lines(f.Audiences), lines(f.Algorithms)
	is.ConsumerClaim, is.RolesClaim = f.ConsumerClaim, f.RolesClaim
	is.JWKSURL, is.Keys, is.HS256Secret = "", nil, ""
	switch f.Source {
	case "jwks_url":
		is.JWKSURL = f.JWKSURL
		if f.JWKSURL == "" {
			f.Errors["jwks_url"] = "is required: the https URL of the provider's JWK set"
		}
	case "keys":
		keys, err := parseJWKS(f.KeysJSON)
		if err != nil || len(keys) == 0 {
			f.Errors["keys"] = `paste the provider's JWK set as JSON: {"keys": [{"kty": "RSA", "n": "…", "e": "AQAB", …}]}`
		}
		is.Keys = keys
	default:
		f.Source = "hs256"
		is.HS256Secret = ctx.FormValue("hs256_secret")
		if is.HS256Secret == "" && !(editing && hadSecret) {
			f.Errors["hs256_secret"] = "is required: a shared secret of at least 32 bytes"
		}
		f.HasSecret = editing && hadSecret
	}
	is.LeewaySeconds = nil
	if f.Leeway != "" {
		n, err := strconv.Atoi(f.Leeway)
		if err != nil {
			f.Errors["leeway_seconds"] = "must be a whole number of seconds, 0–300"
		}
		is.LeewaySeconds = &n
	}
	return f
}

// issuerError puts err on the form: a key's problem says which key.
func issuerError(err error, f *issuerForm) bool {
	if !fieldError(err, f.Errors, nil) {
		return false
	}
	if m, ok := f.Errors["keys"]; ok && strings.HasPrefix(m, "Line ") {
		f.Errors["keys"] = "Key " + strings.TrimPrefix(m, "Line ")
	}
	return true
}

func (c *Console) issuersEnabled(ctx *fiber.Ctx) (bool, error) {
	if c.cfg.JWTIssuers == nil {
		return false, c.notFound(ctx, nil)
	}
	return true, nil
}

func (c *Console) issuersPage(ctx *fiber.Ctx) error {
	tv := tenantOf(ctx)
	var items []*tenants.Issuer
	if c.cfg.JWTIssuers != nil {
		list, _, err := c.cfg.JWTIssuers.ListJWTIssuers(c.ctx(ctx), tv.ID, tenants.Page{Limit: tenants.MaxPageLimit})
		if err != nil {
			return c.internal(ctx, err)
		}
		for _, is := range list {
			cp := *is
			cp.HS256Secret = "" // never into a template
			items = append(items, &cp)
		}
	}
	return c.render(ctx, http.StatusOK, "issuers", page{Title: "JWT issuers", Nav: "jwt", Data: map[string]any{"Items": items, "Enabled": c.cfg.JWTIssuers != nil}})
}

func (c *Console) issuerNewPage(ctx *fiber.Ctx) error {
	if ok, err := c.issuersEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	f := issuerForm{Source: "jwks_url", Errors: map[string]string{}}
	return c.render(ctx, http.StatusOK, "issuer", page{Title: "New JWT issuer", Nav: "jwt", Form: f})
}

func (c *Console) issuerCreate(ctx *fiber.Ctx) error {
	if ok, err := c.issuersEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	is := &tenants.Issuer{TenantID: tv.ID}
	f := readIssuerForm(ctx, is, false)
	if sent, err := c.submit(ctx, c.issuerSave(ctx, is, &f, true, c.cfg.JWTIssuers.CreateJWTIssuer, "jwt_issuers.create", "/jwt-issuers?done=issuer-created")); sent {
		return err
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "issuer", page{Title: "New JWT issuer", Nav: "jwt", Form: f})
}

// issuerSave validates is (when validate) and stores it with store.
func (c *Console) issuerSave(ctx *fiber.Ctx, is *tenants.Issuer, f *issuerForm, validate bool, store func(context.Context, *tenants.Issuer) error, audit, done string) formSave {
	return formSave{
		errs: f.Errors, noun: "issuer", audit: audit, done: done,
		save: func() error {
			if validate {
				if err := is.Validate(); err != nil {
					return err
				}
			}
			return store(c.ctx(ctx), is)
		},
		field: func(err error) bool { return issuerError(err, f) },
		id:    func() string { return is.ID },
	}
}

func (c *Console) issuerEditPage(ctx *fiber.Ctx) error {
	if ok, err := c.issuersEnabled(ctx); !ok {
		return err
	}
	is, err := c.cfg.JWTIssuers.FindJWTIssuer(c.ctx(ctx), tenantOf(ctx).ID, ctx.Params("id"))
	if err != nil {
		return c.internal(ctx, err)
	}
	return c.render(ctx, http.StatusOK, "issuer", page{Title: "JWT issuer " + is.Issuer, Nav: "jwt", Form: issuerFormOf(is)})
}

func (c *Console) issuerUpdate(ctx *fiber.Ctx) error {
	if ok, err := c.issuersEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	is, err := c.cfg.JWTIssuers.FindJWTIssuer(c.ctx(ctx), tv.ID, ctx.Params("id"))
	if err != nil {
		return c.internal(ctx, err)
	}
	f := readIssuerForm(ctx, is, true)
	if v, err := strconv.ParseInt(f.Version, 10, 64); err == nil {
		is.Version = v
	}
	// Without a key source the stored secret completes the issuer: the store validates.
	validate := is.JWKSURL != "" || is.Keys != nil || is.HS256Secret != ""
	if sent, err := c.submit(ctx, c.issuerSave(ctx, is, &f, validate, c.cfg.JWTIssuers.UpdateJWTIssuer, "jwt_issuers.update", "/jwt-issuers?done=issuer-updated")); sent {
		return err
	}
	return c.render(ctx, http.StatusUnprocessableEntity, "issuer", page{Title: "JWT issuer " + f.Issuer, Nav: "jwt", Form: f})
}

func (c *Console) issuerDelete(ctx *fiber.Ctx) error {
	if ok, err := c.issuersEnabled(ctx); !ok {
		return err
	}
	if ok, err := c.may(ctx, rbac.Write); !ok {
		return err
	}
	tv := tenantOf(ctx)
	if err := c.cfg.JWTIssuers.DeleteJWTIssuer(c.audited(ctx, user(ctx), tv.ID, "jwt_issuers.delete", ctx.Params("id")), tv.ID, ctx.Params("id")); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(c.tenantURL(ctx, "/jwt-issuers?done=issuer-deleted"), http.StatusSeeOther)
}
