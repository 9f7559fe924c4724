package web

import (
	"net/http"
	"regexp"
	"tollgate/web/forms"

	"github.com/gofiber/fiber/v2"
)

// Post/redirect/get (forms.Store): a form that must be shown again with its values and
// messages, or a page that shows a secret once (a key just created), is kept by render,
// tied to the browser's session (or, signed out, to its pre-session CSRF cookie), and the
// POST answers 303 to the form's page, whose next GET by the same browser draws it once.

const localBack = "web.back"

// flashKey names the browser: its session, or signed out its pre-session CSRF cookie
// (every signed-out POST carries one, or csrf refused it). "": none.
func flashKey(ctx *fiber.Ctx) string {
	if s := session(ctx); s != nil {
		return "s:" + s.Hash
	}
	if v := ctx.Cookies(preCookie); v != "" {
		return "p:" + v
	}
	return ""
}

// backTo names the page a POST handler's form lives on, when it is not the POST's own
// path or one backOf knows.
func backTo(ctx *fiber.Ctx, path string) { ctx.Locals(localBack, path) }

// backs maps a POST path to its form's page: an action under an object goes back to the
// object; the members page's actions to the members page.
var backs = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^(/console/t/[^/]+)/(members/[^/]+/(role|delete)|invites(/delete)?)$`), "$1/members"},
	{regexp.MustCompile(`^(/console/t/[^/]+/consumers/[^/]+)/(keys|plan)$`), "$1"},
	{regexp.MustCompile(`^(/console/t/[^/]+/[^/]+/[^/]+)/delete$`), "$1"},
	{regexp.MustCompile(`^/console/account/password$`), "/console/account"},
	{regexp.MustCompile(`^/console/verify/resend$`), "/console/account"},
}

func backOf(ctx *fiber.Ctx) string {
	if b, ok := ctx.Locals(localBack).(string); ok && b != "" {
		return b
	}
	path := ctx.Path()
	for _, b := range backs {
		if b.re.MatchString(path) {
			return b.re.ReplaceAllString(path, b.repl)
		}
	}
	return path
}

// keep is render's answer to a POST: the page is kept for its GET and the browser sent
// there. false: there is no browser to keep it for, so the caller draws it.
func (c *Console) keep(ctx *fiber.Ctx, status int, name string, p page) (bool, error) {
	key := flashKey(ctx)
	if key == "" {
		return false, nil
	}
	back := backOf(ctx)
	c.flash.Put(key, forms.Kept[page]{Path: pathOnly(back), Name: name, Page: p, Status: status,
		Retry: ctx.GetRespHeader(fiber.HeaderRetryAfter), Expires: c.cfg.Now().Add(forms.TTL)}, c.cfg.Now())
	return true, ctx.Redirect(back, http.StatusSeeOther)
}

// replayed swaps in the page kept for this GET, if any. A page that was a success (a key
// shown once) answers 200; a refused form keeps its status (422, 401, 429…).
func (c *Console) replayed(ctx *fiber.Ctx, status int, name string, p page) (int, string, page) {
	key := flashKey(ctx)
	if key == "" {
		return status, name, p
	}
	r, ok := c.flash.Take(key, ctx.Path(), c.cfg.Now())
	if !ok {
		return status, name, p
	}
	if r.Retry != "" {
		ctx.Set(fiber.HeaderRetryAfter, r.Retry)
	}
	if r.Status < 300 {
		r.Status = http.StatusOK
	}
	return r.Status, r.Name, r.Page
}

func pathOnly(u string) string {
	for i := 0; i < len(u); i++ {
		if u[i] == '?' || u[i] == '#' {
			return u[:i]
		}
	}
	return u
}
