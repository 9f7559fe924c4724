package portal

import (
	"net/http"
	"strings"
	"tollgate/web/forms"

	"github.com/gofiber/fiber/v2"
)

// Post/redirect/get, as the console's (web/flash.go, over the same forms.Store): a POST never answers with a page.
// A page a POST would draw (a form with its messages, the notice after a sign-up) is
// kept here for the browser that posted, and the POST answers 303 to the form's own
// page, whose next GET by that browser draws it, once. A reload then draws the page
// afresh and posts nothing again; nothing of the form goes into a URL.
//
// Kept pages live in this process's memory: behind a load balancer the browser must come
// back to the same api replica to see them (elsewhere it sees the page as a fresh GET
// draws it). A new key's plaintext does not depend on that: it is kept in the store.

// backOf is the page (under the portal) each form lives on.
var backOf = map[string]string{
	"/signup": "/signup", "/login": "/login", "/logout": "/login", "/forgot": "/forgot", "/reset": "/reset",
	"/keys": "/keys", "/plans/choose": "/plans", "/verify/resend": "/login",
}

// relPath is the request's path under its portal ("/keys"); a key's delete form lives on
// the keys page.
func relPath(ctx *fiber.Ctx) string {
	rel := strings.TrimPrefix(ctx.Path(), Prefix+"/"+viewOf(ctx).Tenant.Slug)
	if strings.HasPrefix(rel, "/keys/") {
		return "/keys"
	}
	if rel == "" {
		return "/"
	}
	return rel
}

// replayKey names the browser within the portal: its session, or its double-submit
// cookie (a signed-out POST carries one, or csrf refused it). "": none.
func replayKey(ctx *fiber.Ctx) string {
	prefix := viewOf(ctx).Tenant.ID + "|"
	if s := session(ctx); s != nil {
		return prefix + "s:" + s.Hash
	}
	if v := ctx.Cookies(csrfCookie(ctx)); v != "" {
		return prefix + "p:" + v
	}
	return ""
}

// keep stores the page a POST would draw and redirects to its form's page; false when
// the request cannot be answered that way (then the page is drawn at once).
func (p *Portal) keep(ctx *fiber.Ctx, name string, pg page) (bool, error) {
	back, ok := backOf[relPath(ctx)]
	if rel := relPath(ctx); !ok && strings.HasPrefix(rel, "/operations/") {
		back, ok = rel, true // the try-it form draws its answer on the operation's page
	}
	key := replayKey(ctx)
	if ctx.Method() != fiber.MethodPost || !ok || key == "" {
		return false, nil
	}
	now := p.cfg.Now()
	p.replays.Put(key, forms.Kept[page]{Path: back, Name: name, Page: pg, Retry: string(ctx.Response().Header.Peek(fiber.HeaderRetryAfter)),
		Expires: now.Add(forms.TTL)}, now)
	ctx.Response().Header.Del(fiber.HeaderRetryAfter)
	return true, ctx.Redirect(url(ctx, back), http.StatusSeeOther)
}

// replayed draws the page kept for this GET, if any.
func (p *Portal) replayed(ctx *fiber.Ctx) error {
	if ctx.Method() != fiber.MethodGet {
		return ctx.Next()
	}
	key := replayKey(ctx)
	if key == "" {
		return ctx.Next()
	}
	rp, ok := p.replays.Take(key, relPath(ctx), p.cfg.Now())
	if !ok {
		return ctx.Next()
	}
	if rp.Retry != "" {
		ctx.Set(fiber.HeaderRetryAfter, rp.Retry)
	}
	return p.draw(ctx, rp.Page.Status, rp.Name, rp.Page)
}
