package web

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/rbac"
)

// Sessions: the cookie holds a random id; Postgres holds its SHA-256, the user, the expiry
// and the session's CSRF token. The cookie is HttpOnly, SameSite=Lax, and Secure when the
// console is reached over TLS.
//
// CSRF: every POST carries a token in the _csrf field. Signed in, it is the session's
// synchronizer token; signed out (the sign-in and sign-up forms), it is a double-submit
// token that must match the pre-session cookie tollgate_csrf. Anything else is a 403 page.

const (
	csrfField  = "_csrf"
	preCookie  = "tollgate_csrf"
	localUser  = "web.user"
	localSess  = "web.session"
	localPage  = "web.page"
	csrfFailed = "This form was not sent from a page of this console, or it has expired. Reload the page and try again."
)

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func secure(ctx *fiber.Ctx) bool { return ctx.Protocol() == "https" }

// csrf loads the session (if any) and rejects a POST whose token does not match.
func (c *Console) csrf(ctx *fiber.Ctx) error {
	if raw := ctx.Cookies(tenants.SessionCookie); raw != "" && len(raw) < 256 {
		s, err := c.cfg.People.FindSession(c.ctx(ctx), tenants.HashSecret(raw))
		switch {
		case err == nil:
			u, err := c.cfg.People.FindUser(c.ctx(ctx), s.UserID)
			if err == nil {
				ctx.Locals(localSess, s)
				ctx.Locals(localUser, u)
			} else if tenants.ErrorCode(err) != tenants.ENotFound {
				return c.internal(ctx, err)
			}
		case tenants.ErrorCode(err) != tenants.ENotFound:
			return c.internal(ctx, err)
		}
	}
	if ctx.Method() != fiber.MethodPost {
		return ctx.Next()
	}
	got := ctx.FormValue(csrfField)
	want := ""
	if s := session(ctx); s != nil {
		want = s.CSRF
	} else {
		want = ctx.Cookies(preCookie)
	}
	if got == "" || want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return c.errorPage(ctx, http.StatusForbidden, "Request refused", csrfFailed)
	}
	return ctx.Next()
}

func session(ctx *fiber.Ctx) *tenants.Session {
	s, _ := ctx.Locals(localSess).(*tenants.Session)
	return s
}

func user(ctx *fiber.Ctx) *tenants.User {
	u, _ := ctx.Locals(localUser).(*tenants.User)
	return u
}

// csrfToken is the token forms of this response carry, setting the pre-session cookie
// when there is no session.
func csrfToken(ctx *fiber.Ctx) string {
	if s := session(ctx); s != nil {
		return s.CSRF
	}
	if v := ctx.Cookies(preCookie); len(v) == 43 {
		return v
	}
	if v, ok := ctx.Locals(preCookie).(string); ok {
		return v
	}
	v := randomToken()
	ctx.Locals(preCookie, v)
	ctx.Cookie(&fiber.Cookie{Name: preCookie, Value: v, Path: Prefix, HTTPOnly: true, Secure: secure(ctx), SameSite: fiber.CookieSameSiteStrictMode})
	return v
}

func (c *Console) home(ctx *fiber.Ctx) error {
	u := user(ctx)
	if u == nil {
		return ctx.Redirect(Prefix+"/login", http.StatusSeeOther)
	}
	ms, err := c.cfg.People.ListMemberships(c.ctx(ctx), u.ID)
	if err != nil {
		return c.internal(ctx, err)
	}
	if len(ms) == 0 {
		// A finance user needs no tenant: the bill is the platform's.
		if c.mayExport(ctx) {
			return ctx.Redirect(Prefix+"/finance", http.StatusSeeOther)
		}
		return c.render(ctx, http.StatusOK, "notenant", page{Title: "No tenant yet"})
	}
	return ctx.Redirect(Prefix+"/t/"+ms[0].TenantSlug+"/routes", http.StatusSeeOther)
}

type authForm struct {
	Email, Slug, Name string
	// NoTenant asks for an account of no tenant: a finance user's, or someone's who joins
	// tenants by invitation.
	NoTenant bool
	Errors   map[string]string
	Next     string
}

func (c *Console) signupPage(ctx *fiber.Ctx) error {
	return c.render(ctx, http.StatusOK, "signup", page{Title: "Create your account", Form: authForm{Next: localNext(ctx.Query("next"), ""),
		Email: ctx.Query("email"), NoTenant: ctx.Query("no_tenant") != ""}})
}

// signup answers a new address and a taken one alike, with the same page and status,
// after the same work (a bcrypt hash, one mail): only the mailbox learns which it was. A
// new address gets its account and tenant, unverified, and a verification link; the owner
// of a taken address gets a note that someone tried. Neither is signed in: the new account
// signs in with its password (or follows the link first).
func (c *Console) signup(ctx *fiber.Ctx) error {
	f := authForm{Email: strings.TrimSpace(ctx.FormValue("email")), Slug: strings.TrimSpace(ctx.FormValue("slug")), Name: strings.TrimSpace(ctx.FormValue("name")), Errors: map[string]string{},
		Next: localNext(ctx.FormValue("next"), ""), NoTenant: ctx.FormValue("no_tenant") != ""}
	if f.NoTenant {
		f.Slug, f.Name = "", ""
	}
	pw := ctx.FormValue("password")
	hash, err := tenants.HashPassword(pw)
	if err != nil && !fieldError(err, f.Errors, nil) {
		return c.internal(ctx, err)
	}
	email, err := tenants.NormalizeEmail(f.Email)
	if err != nil {
		fieldError(err, f.Errors, nil)
	}
	var t *tenants.Tenant // nil: an account of no tenant
	if !f.NoTenant {
		t = &tenants.Tenant{Slug: f.Slug, Name: f.Name}
		if err := t.Validate(); err != nil && !fieldError(err, f.Errors, map[string]string{"slug": "slug", "name": "name", "plan": "slug"}) {
			return c.internal(ctx, err)
		}
	}
	if len(f.Errors) > 0 {
		return c.render(ctx, http.StatusUnprocessableEntity, "signup", page{Title: "Create your account", Form: f})
	}
	if wait, err := c.throttled(ctx, []string{signUpKey(c.clientIP(ctx))}, []tenants.ThrottleRule{c.cfg.Limits.SignUp}); err != nil {
		return c.internal(ctx, err)
	} else if wait > 0 {
		f.Errors["form"] = tooMany(ctx, wait, "sign-ups from your address")
		return c.render(ctx, http.StatusTooManyRequests, "signup", page{Title: "Create your account", Form: f})
	}
	defer padTo(time.Now(), signUpFloor)
	_, err = c.cfg.People.FindUserByEmail(c.ctx(ctx), email)
	taken := err == nil
	if err != nil && tenants.ErrorCode(err) != tenants.ENotFound {
		return c.internal(ctx, err)
	}
	if !taken {
		u := &tenants.User{Email: email, PasswordHash: hash}
		sctx := c.ctx(ctx) // an account alone changes no tenant: no audit entry
		if t != nil {
			sctx = c.audited(ctx, u, "", tenants.AuditAction("tenant", tenants.AuditCreate), "")
		}
		err = c.cfg.People.SignUp(sctx, u, t)
		switch {
		case err == nil:
			if err := c.sendVerification(ctx, u, f.Next); err != nil {
				return c.internal(ctx, err)
			}
		case tenants.ErrorCode(err) == tenants.EConflict && fieldOf(err) == "email":
			taken = true // signed up between the look-up and the insert
		case !fieldError(err, f.Errors, map[string]string{"slug": "slug", "name": "name", "plan": "slug"}):
			return c.internal(ctx, err)
		}
	} else if t != nil {
		// The same answer a new address gets when the slug is taken: the slug is public
		// (it names the tenant on the edge), the account behind the address is not.
		_, err := c.cfg.Tenants.FindTenant(c.ctx(ctx), t.Slug)
		switch {
		case err == nil:
			f.Errors["slug"] = `slug "` + t.Slug + `" is taken`
		case tenants.ErrorCode(err) != tenants.ENotFound:
			return c.internal(ctx, err)
		}
	}
	if len(f.Errors) > 0 {
		return c.render(ctx, http.StatusUnprocessableEntity, "signup", page{Title: "Create your account", Form: f})
	}
	if taken {
		c.mail(tenants.Mail{To: email, Subject: "Someone tried to sign up to Tollgate with your address",
			Text: "Someone tried to create a Tollgate account with this address, which already has one.\n" +
				"Nothing was changed and no tenant was created.\n\n" +
				"If it was you, sign in instead:\n\n  " + c.cfg.PublicURL + Prefix + "/login\n\n" +
				"Forgot your password? Ask for a reset link here:\n\n  " + c.cfg.PublicURL + Prefix + "/forgot\n\n" +
				"If it was not you, you need do nothing.\n"})
	}
	return c.render(ctx, http.StatusOK, "notice", page{Title: "Check your inbox", Data: notice{
		Heading: "Check your inbox",
		Text:    "We sent a message to " + email + ". Follow the link in it to verify your address; you can sign in meanwhile.",
		Link:    loginNext(f.Next), LinkText: "Sign in"}})
}

func (c *Console) loginPage(ctx *fiber.Ctx) error {
	if user(ctx) != nil {
		return ctx.Redirect(localNext(ctx.Query("next"), Prefix+"/"), http.StatusSeeOther)
	}
	return c.render(ctx, http.StatusOK, "login", page{Title: "Sign in", Form: authForm{Next: localNext(ctx.Query("next"), "")}})
}

func (c *Console) login(ctx *fiber.Ctx) error {
	f := authForm{Email: strings.TrimSpace(ctx.FormValue("email")), Errors: map[string]string{}, Next: localNext(ctx.FormValue("next"), "")}
	pw := ctx.FormValue("password")
	email, _ := tenants.NormalizeEmail(f.Email)
	ip := c.clientIP(ctx)
	keys, rules := []string{signInKey(ip)}, []tenants.ThrottleRule{c.cfg.Limits.SignIn}
	if email != "" {
		keys, rules = append(keys, accountKey(email, ip)), append(rules, c.cfg.Limits.Account)
	}
	if wait, err := c.throttled(ctx, keys, rules); err != nil {
		return c.internal(ctx, err)
	} else if wait > 0 {
		f.Errors["form"] = tooMany(ctx, wait, "sign-in attempts")
		return c.render(ctx, http.StatusTooManyRequests, "login", page{Title: "Sign in", Form: f})
	}
	u, err := c.cfg.People.FindUserByEmail(c.ctx(ctx), f.Email)
	switch {
	case tenants.ErrorCode(err) == tenants.ENotFound:
		tenants.SpendPasswordCheck(pw)
	case err != nil:
		return c.internal(ctx, err)
	case tenants.CheckPassword(u.PasswordHash, pw):
		if err := c.cfg.Throttle.ClearHits(c.ctx(ctx), accountKey(email, ip)); err != nil {
			return c.internal(ctx, err)
		}
		return c.startSession(ctx, u, localNext(f.Next, Prefix+"/"))
	}
	f.Errors["form"] = "The email or the password is not right."
	return c.render(ctx, http.StatusUnauthorized, "login", page{Title: "Sign in", Form: f})
}

func (c *Console) startSession(ctx *fiber.Ctx, u *tenants.User, next string) error {
	raw := randomToken()
	s := &tenants.Session{Hash: tenants.HashSecret(raw), UserID: u.ID, CSRF: randomToken(), ExpiresAt: c.cfg.Now().Add(c.cfg.SessionTTL)}
	if err := c.cfg.People.CreateSession(c.ctx(ctx), s); err != nil {
		return c.internal(ctx, err)
	}
	ctx.Cookie(&fiber.Cookie{Name: tenants.SessionCookie, Value: raw, Path: "/", Expires: s.ExpiresAt,
		HTTPOnly: true, Secure: secure(ctx), SameSite: fiber.CookieSameSiteLaxMode})
	ctx.ClearCookie(preCookie)
	return ctx.Redirect(next, http.StatusSeeOther)
}

// loginFor is the sign-in page that comes back to the page asked for (when it is one of
// the console's, see localNext).
func loginFor(ctx *fiber.Ctx) string {
	return loginNext(string(ctx.Request().URI().RequestURI()))
}

// loginNext is the sign-in page that goes on to next ("": the console's home).
func loginNext(next string) string {
	if next = localNext(next, ""); next != "" {
		return Prefix + "/login?next=" + url.QueryEscape(next)
	}
	return Prefix + "/login"
}

func (c *Console) logout(ctx *fiber.Ctx) error {
	if raw := ctx.Cookies(tenants.SessionCookie); raw != "" {
		if err := c.cfg.People.DeleteSession(c.ctx(ctx), tenants.HashSecret(raw)); err != nil {
			return c.internal(ctx, err)
		}
	}
	ctx.Cookie(&fiber.Cookie{Name: tenants.SessionCookie, Value: "", Path: "/", Expires: time.Unix(1, 0),
		HTTPOnly: true, Secure: secure(ctx), SameSite: fiber.CookieSameSiteLaxMode})
	return ctx.Redirect(Prefix+"/login", http.StatusSeeOther)
}

// tenantView is the tenant a page is about, and what the user may do in it.
type tenantView struct {
	*tenants.Tenant
	Role                        string
	CanWrite, CanKeys, CanAdmin bool
}

// tenantScope resolves :slug for the signed-in user. A tenant the user has no role in is
// a 404, exactly like one that does not exist.
func (c *Console) tenantScope(ctx *fiber.Ctx) error {
	u := user(ctx)
	if u == nil {
		if ctx.Method() == fiber.MethodGet {
			return ctx.Redirect(loginFor(ctx), http.StatusSeeOther)
		}
		return c.errorPage(ctx, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again.")
	}
	slug := ctx.Params("slug")
	if tenants.ValidateSlug(slug) != nil {
		return c.notFound(ctx, u)
	}
	t, err := c.cfg.Tenants.FindTenant(c.ctx(ctx), slug)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return c.notFound(ctx, u)
	}
	if err != nil {
		return c.internal(ctx, err)
	}
	role := u.PlatformRole
	m, err := c.cfg.People.FindMembership(c.ctx(ctx), t.ID, u.ID)
	switch {
	case err == nil:
		role = m.Role
	case tenants.ErrorCode(err) != tenants.ENotFound:
		return c.internal(ctx, err)
	}
	p := c.cfg.Roles
	if !p.Allow(role, t.ID, rbac.Read) {
		return c.notFound(ctx, u)
	}
	ctx.Locals(localPage, &tenantView{Tenant: t, Role: role,
		CanWrite: p.Allow(role, t.ID, rbac.Write), CanKeys: p.Allow(role, t.ID, rbac.Keys), CanAdmin: p.Allow(role, t.ID, rbac.TenantAdmin)})
	return ctx.Next()
}

func tenantOf(ctx *fiber.Ctx) *tenantView {
	v, _ := ctx.Locals(localPage).(*tenantView)
	return v
}

// may checks a write's class; false means the 403 page has been rendered.
func (c *Console) may(ctx *fiber.Ctx, class rbac.Class) (bool, error) {
	tv := tenantOf(ctx)
	if c.cfg.Roles.Allow(tv.Role, tv.ID, class) {
		return true, nil
	}
	return false, c.errorPage(ctx, http.StatusForbidden, "Not allowed",
		"Your role in this tenant ("+tv.Role+") may not do this. Ask an owner or admin of "+tv.Slug+".")
}

func (c *Console) tenantURL(ctx *fiber.Ctx, path string) string {
	return Prefix + "/t/" + ctx.Params("slug") + path
}

// audited is the context for the one store write of a console request: the write records
// that u did action (named by tenants.AuditAction, as the API names it) to object in
// tenantID, in the write's own transaction, so the change and its entry commit together.
// The store fills in what is left empty: a created object's id, the tenant of an
// invitation answered by its token.
func (c *Console) audited(ctx *fiber.Ctx, u *tenants.User, tenantID, action, object string) context.Context {
	return tenants.WithAudit(c.ctx(ctx), tenants.Audit{TenantID: tenantID, Actor: u.Email, Action: action, Object: object})
}

func humanWait(d time.Duration) string {
	if d < time.Minute {
		return itoa(int(d.Seconds()+1)) + " seconds"
	}
	return itoa(int(d.Minutes()+1)) + " minutes"
}
