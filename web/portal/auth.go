package portal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/web/forms"
)

// Sessions and CSRF work as the console's (web/session.go): the cookie holds a random
// value, the store its SHA-256, the account and the session's CSRF token. Each tenant's
// portal has a cookie of its own name and path, and the store finds a session only with
// its tenant, so a session of one portal is nothing at another. Signed out, forms carry
// a double-submit token matching a cookie of the portal.

const (
	csrfField = "_csrf"
	csrfLen   = 43
	// signUpFloor pads the sign-up answer, as the console's: creating an account costs
	// more than mailing a note to the owner of a taken address, and the difference would
	// tell which it was.
	signUpFloor = 600 * time.Millisecond
	forgotFloor = 300 * time.Millisecond
)

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func cookieName(ctx *fiber.Ctx) string { return "tollgate_portal_" + viewOf(ctx).Tenant.Slug }
func csrfCookie(ctx *fiber.Ctx) string { return cookieName(ctx) + "_csrf" }
func cookiePath(ctx *fiber.Ctx) string { return url(ctx, "/") }
func secure(ctx *fiber.Ctx) bool       { return ctx.Protocol() == "https" }

func (p *Portal) setCookie(ctx *fiber.Ctx, name, value string, expires time.Time) {
	ctx.Cookie(&fiber.Cookie{Name: name, Value: value, Path: cookiePath(ctx), Expires: expires,
		HTTPOnly: true, Secure: secure(ctx), SameSite: fiber.CookieSameSiteLaxMode})
}

// csrf loads the session (if any) and refuses a POST whose token does not match.
func (p *Portal) csrf(ctx *fiber.Ctx) error {
	if raw := ctx.Cookies(cookieName(ctx)); raw != "" && len(raw) < 256 {
		if err := p.loadSession(ctx, raw); err != nil {
			return p.internal(ctx, err)
		}
	}
	if ctx.Method() != fiber.MethodPost {
		return ctx.Next()
	}
	want := ctx.Cookies(csrfCookie(ctx))
	if s := session(ctx); s != nil {
		want = s.CSRF
	}
	got := ctx.FormValue(csrfField)
	if got == "" || want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return p.errorPage(ctx, http.StatusForbidden, "Request refused",
			"This form was not sent from a page of this portal, or it has expired. Reload the page and try again.")
	}
	return ctx.Next()
}

func (p *Portal) loadSession(ctx *fiber.Ctx, raw string) error {
	tid := viewOf(ctx).Tenant.ID
	s, err := p.cfg.Portals.FindPortalSession(p.ctx(ctx), tid, tenants.HashSecret(raw))
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return nil
	}
	if err != nil {
		return err
	}
	a, err := p.cfg.Portals.FindPortalAccount(p.ctx(ctx), tid, s.AccountID)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return nil
	}
	if err != nil {
		return err
	}
	ctx.Locals(localSession, s)
	ctx.Locals(localAccount, a)
	return nil
}

func session(ctx *fiber.Ctx) *tenants.PortalSession {
	s, _ := ctx.Locals(localSession).(*tenants.PortalSession)
	return s
}

func account(ctx *fiber.Ctx) *tenants.PortalAccount {
	a, _ := ctx.Locals(localAccount).(*tenants.PortalAccount)
	return a
}

// csrfToken is the token this response's forms carry, setting the double-submit cookie
// when there is no session.
func (p *Portal) csrfToken(ctx *fiber.Ctx) string {
	if s := session(ctx); s != nil {
		return s.CSRF
	}
	if v := ctx.Cookies(csrfCookie(ctx)); len(v) == csrfLen {
		return v
	}
	if v, ok := ctx.Locals(csrfField).(string); ok {
		return v
	}
	v := randomToken()
	ctx.Locals(csrfField, v)
	p.setCookie(ctx, csrfCookie(ctx), v, time.Time{})
	return v
}

// signedIn lets h run for a signed-in account that acts as a consumer; anyone else is
// sent to sign in.
func (p *Portal) signedIn(h fiber.Handler) fiber.Handler {
	return func(ctx *fiber.Ctx) error {
		a := account(ctx)
		if a == nil {
			if ctx.Method() == fiber.MethodGet {
				return ctx.Redirect(url(ctx, "/login"), http.StatusSeeOther)
			}
			return p.errorPage(ctx, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again.")
		}
		if a.ConsumerID == "" {
			if err := p.ensureConsumer(ctx, a); err != nil {
				return p.internal(ctx, err)
			}
		}
		return h(ctx)
	}
}

// ensureConsumer creates the consumer a verified account acts as: at verification, or
// at its next page if the tenant deleted that consumer meanwhile. Its name is the
// address (a consumer's name is unique within the tenant; when a consumer the tenant
// made has that name, the portal's takes a suffix).
func (p *Portal) ensureConsumer(ctx *fiber.Ctx, a *tenants.PortalAccount) error {
	v := viewOf(ctx)
	actx := p.audited(ctx, a, tenants.AuditAction("consumers", tenants.AuditCreate), "")
	var c *tenants.Consumer
	for _, name := range []string{a.Email, a.Email + " (portal)", a.Email + " (portal " + randomToken()[:6] + ")"} {
		c = &tenants.Consumer{TenantID: v.Tenant.ID, Name: name}
		err := p.cfg.Consumers.CreateConsumer(actx, c)
		if err == nil {
			break
		}
		if tenants.ErrorCode(err) != tenants.EConflict {
			return err
		}
		c = nil
	}
	if c == nil {
		return tenants.Errorf(tenants.EConflict, "no free consumer name for %s", a.Email)
	}
	if err := p.cfg.Portals.SetPortalConsumer(p.ctx(ctx), v.Tenant.ID, a.ID, c.ID); err != nil {
		return err
	}
	a.ConsumerID = c.ID
	return nil
}

// audited is the context of the one write of a portal request: the tenant's audit log
// records it as done by "portal:<email>".
func (p *Portal) audited(ctx *fiber.Ctx, a *tenants.PortalAccount, action, object string) context.Context {
	return tenants.WithAudit(p.ctx(ctx), tenants.Audit{TenantID: viewOf(ctx).Tenant.ID, Actor: "portal:" + a.Email, Action: action, Object: object})
}

type authForm struct {
	Email      string
	Token      string
	Errors     map[string]string
	Unverified bool // the sign-in form offers a new verification link
}

func (p *Portal) signupPage(ctx *fiber.Ctx) error {
	return p.render(ctx, http.StatusOK, "signup", page{Title: "Create your account", Form: authForm{}})
}

// signup answers a new address and a taken one alike (same page, same status, about the
// same time): only the mailbox learns which it was.
func (p *Portal) signup(ctx *fiber.Ctx) error {
	f := authForm{Email: strings.TrimSpace(ctx.FormValue("email")), Errors: map[string]string{}}
	hash, err := tenants.HashPassword(ctx.FormValue("password"))
	if err != nil && !fieldError(err, f.Errors) {
		return p.internal(ctx, err)
	}
	email, err := tenants.NormalizeEmail(f.Email)
	if err != nil {
		fieldError(err, f.Errors)
	}
	if len(f.Errors) > 0 {
		return p.render(ctx, http.StatusUnprocessableEntity, "signup", page{Title: "Create your account", Form: f})
	}
	if wait, err := p.throttled(ctx, []string{"portal-signup:" + forms.ClientIP(ctx, p.cfg.TrustedProxies)}, []tenants.ThrottleRule{signUpRule}); err != nil {
		return p.internal(ctx, err)
	} else if wait > 0 {
		f.Errors["form"] = tooMany(ctx, wait, "sign-ups from your address")
		return p.render(ctx, http.StatusTooManyRequests, "signup", page{Title: "Create your account", Form: f})
	}
	defer padTo(time.Now(), signUpFloor)
	v := viewOf(ctx)
	a := &tenants.PortalAccount{TenantID: v.Tenant.ID, Email: email, PasswordHash: hash}
	err = p.cfg.Portals.CreatePortalAccount(p.ctx(ctx), a)
	switch {
	case err == nil:
		if err := p.mailLink(ctx, a, tenants.TokenVerify, tenants.VerifyTokenTTL, "/verify", "Verify your address for "+v.Name,
			"Someone, hopefully you, signed up to the developer portal of "+v.Name+" with this address.\n"+
				"To prove the address is yours and start using the API, follow this link within 24 hours:\n\n  %s\n\n"+
				"If it was not you, ignore this message.\n"); err != nil {
			return p.internal(ctx, err)
		}
	case tenants.ErrorCode(err) == tenants.EConflict:
		p.mail(tenants.Mail{To: email, Subject: "Someone tried to sign up to " + v.Name + " with your address",
			Text: "Someone tried to create an account on the developer portal of " + v.Name + " with this address,\n" +
				"which already has one. Nothing was changed.\n\nIf it was you, sign in instead:\n\n  " + p.publicBase(ctx) + "/login\n\n" +
				"Forgot your password? Ask for a reset link:\n\n  " + p.publicBase(ctx) + "/forgot\n"})
	default:
		return p.internal(ctx, err)
	}
	return p.render(ctx, http.StatusOK, "notice", page{Title: "Check your inbox", Data: notice{
		Heading: "Check your inbox",
		Text:    "We sent a message to " + email + ". Follow the link in it to verify your address, then sign in.",
		Link:    url(ctx, "/login"), LinkText: "Sign in"}})
}

type notice struct {
	Heading, Text  string
	Link, LinkText string
}

// verify is GET …/verify?token=: it spends the token, proves the address and makes the
// account's consumer.
func (p *Portal) verify(ctx *fiber.Ctx) error {
	a, err := p.cfg.Portals.VerifyPortalEmail(p.ctx(ctx), viewOf(ctx).Tenant.ID, tenants.HashSecret(ctx.Query("token")))
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return p.render(ctx, http.StatusNotFound, "notice", page{Title: "Link not valid", Data: notice{
			Heading: "This link does not work", Text: "This link is unknown, was already used or has expired.",
			Link: url(ctx, "/login"), LinkText: "Sign in"}})
	}
	if err != nil {
		return p.internal(ctx, err)
	}
	if a.ConsumerID == "" {
		if err := p.ensureConsumer(ctx, a); err != nil {
			return p.internal(ctx, err)
		}
	}
	return p.render(ctx, http.StatusOK, "notice", page{Title: "Address verified", Data: notice{
		Heading: "Address verified", Text: a.Email + " is verified. Sign in to create your keys.",
		Link: url(ctx, "/login"), LinkText: "Sign in"}})
}

// verifyResend mails a new verification link to an unverified account of the address,
// and answers the same whatever the address, throttled like the reset requests.
func (p *Portal) verifyResend(ctx *fiber.Ctx) error {
	email, err := tenants.NormalizeEmail(ctx.FormValue("email"))
	if err != nil {
		return ctx.Redirect(url(ctx, "/login"), http.StatusSeeOther)
	}
	if wait, err := p.throttled(ctx, []string{"portal-mail:" + forms.ClientIP(ctx, p.cfg.TrustedProxies)}, []tenants.ThrottleRule{mailRule}); err != nil {
		return p.internal(ctx, err)
	} else if wait > 0 {
		return p.render(ctx, http.StatusTooManyRequests, "login", page{Title: "Sign in",
			Form: authForm{Email: email, Errors: map[string]string{"form": tooMany(ctx, wait, "mail requests from your address")}}})
	}
	defer padTo(time.Now(), forgotFloor)
	v := viewOf(ctx)
	a, err := p.cfg.Portals.FindPortalAccountByEmail(p.ctx(ctx), v.Tenant.ID, email)
	switch {
	case err == nil && !a.EmailVerified:
		if err := p.mailLink(ctx, a, tenants.TokenVerify, tenants.VerifyTokenTTL, "/verify", "Verify your address for "+v.Name,
			"Here is a new link to verify your address on the developer portal of "+v.Name+".\n"+
				"Follow it within 24 hours:\n\n  %s\n\nIf you did not ask for it, ignore this message.\n"); err != nil {
			return p.internal(ctx, err)
		}
	case err != nil && tenants.ErrorCode(err) != tenants.ENotFound:
		return p.internal(ctx, err)
	}
	return p.render(ctx, http.StatusOK, "notice", page{Title: "Check your inbox", Data: notice{
		Heading: "Check your inbox",
		Text:    "If " + email + " has an account here waiting for its address, we sent it a new link.",
		Link:    url(ctx, "/login"), LinkText: "Back to sign in"}})
}

func (p *Portal) loginPage(ctx *fiber.Ctx) error {
	if account(ctx) != nil {
		return ctx.Redirect(url(ctx, "/keys"), http.StatusSeeOther)
	}
	return p.render(ctx, http.StatusOK, "login", page{Title: "Sign in", Form: authForm{}})
}

func (p *Portal) login(ctx *fiber.Ctx) error {
	f := authForm{Email: strings.TrimSpace(ctx.FormValue("email")), Errors: map[string]string{}}
	pw := ctx.FormValue("password")
	v := viewOf(ctx)
	email, _ := tenants.NormalizeEmail(f.Email)
	ip := forms.ClientIP(ctx, p.cfg.TrustedProxies)
	accountKey := "portal-account:" + v.Tenant.ID + "|" + email + "|" + ip
	keys, rules := []string{"portal-signin:" + ip}, []tenants.ThrottleRule{signInRule}
	if email != "" {
		keys, rules = append(keys, accountKey), append(rules, accountRule)
	}
	if wait, err := p.throttled(ctx, keys, rules); err != nil {
		return p.internal(ctx, err)
	} else if wait > 0 {
		f.Errors["form"] = tooMany(ctx, wait, "sign-in attempts")
		return p.render(ctx, http.StatusTooManyRequests, "login", page{Title: "Sign in", Form: f})
	}
	a, err := p.cfg.Portals.FindPortalAccountByEmail(p.ctx(ctx), v.Tenant.ID, email)
	switch {
	case tenants.ErrorCode(err) == tenants.ENotFound:
		tenants.SpendPasswordCheck(pw)
	case err != nil:
		return p.internal(ctx, err)
	case !tenants.CheckPassword(a.PasswordHash, pw):
	case !a.EmailVerified:
		// Only the right password learns that the account waits for its address.
		f.Errors["form"] = "Verify your address first: follow the link we mailed to " + a.Email + "."
		f.Unverified = true
		return p.render(ctx, http.StatusForbidden, "login", page{Title: "Sign in", Form: f})
	default:
		if err := p.cfg.Throttle.ClearHits(p.ctx(ctx), accountKey); err != nil {
			return p.internal(ctx, err)
		}
		return p.startSession(ctx, a)
	}
	f.Errors["form"] = "The email or the password is not right."
	return p.render(ctx, http.StatusUnauthorized, "login", page{Title: "Sign in", Form: f})
}

func (p *Portal) startSession(ctx *fiber.Ctx, a *tenants.PortalAccount) error {
	raw := randomToken()
	s := &tenants.PortalSession{Hash: tenants.HashSecret(raw), TenantID: a.TenantID, AccountID: a.ID, CSRF: randomToken(),
		ExpiresAt: p.cfg.Now().Add(p.cfg.SessionTTL)}
	if err := p.cfg.Portals.CreatePortalSession(p.ctx(ctx), s); err != nil {
		return p.internal(ctx, err)
	}
	p.setCookie(ctx, cookieName(ctx), raw, s.ExpiresAt)
	p.setCookie(ctx, csrfCookie(ctx), "", time.Unix(1, 0))
	return ctx.Redirect(url(ctx, "/keys"), http.StatusSeeOther)
}

func (p *Portal) logout(ctx *fiber.Ctx) error {
	if raw := ctx.Cookies(cookieName(ctx)); raw != "" {
		if err := p.cfg.Portals.DeletePortalSession(p.ctx(ctx), viewOf(ctx).Tenant.ID, tenants.HashSecret(raw)); err != nil {
			return p.internal(ctx, err)
		}
	}
	p.setCookie(ctx, cookieName(ctx), "", time.Unix(1, 0))
	return ctx.Redirect(url(ctx, "/login"), http.StatusSeeOther)
}

func (p *Portal) forgotPage(ctx *fiber.Ctx) error {
	return p.render(ctx, http.StatusOK, "forgot", page{Title: "Reset your password", Form: authForm{}})
}

// forgot mails a reset link when the address has an account here, and answers the same
// when it has none.
func (p *Portal) forgot(ctx *fiber.Ctx) error {
	f := authForm{Email: strings.TrimSpace(ctx.FormValue("email")), Errors: map[string]string{}}
	email, err := tenants.NormalizeEmail(f.Email)
	if err != nil {
		fieldError(err, f.Errors)
		return p.render(ctx, http.StatusUnprocessableEntity, "forgot", page{Title: "Reset your password", Form: f})
	}
	if wait, err := p.throttled(ctx, []string{"portal-mail:" + forms.ClientIP(ctx, p.cfg.TrustedProxies)}, []tenants.ThrottleRule{mailRule}); err != nil {
		return p.internal(ctx, err)
	} else if wait > 0 {
		f.Errors["form"] = tooMany(ctx, wait, "reset requests from your address")
		return p.render(ctx, http.StatusTooManyRequests, "forgot", page{Title: "Reset your password", Form: f})
	}
	defer padTo(time.Now(), forgotFloor)
	v := viewOf(ctx)
	a, err := p.cfg.Portals.FindPortalAccountByEmail(p.ctx(ctx), v.Tenant.ID, email)
	switch {
	case err == nil:
		if err := p.mailLink(ctx, a, tenants.TokenReset, tenants.ResetTokenTTL, "/reset", "Reset your password for "+v.Name,
			"Someone, hopefully you, asked to reset the password of your account on the developer portal of "+v.Name+".\n"+
				"To choose a new password, follow this link within an hour:\n\n  %s\n\n"+
				"If you did not ask for it, ignore this message: your password stays as it is.\n"); err != nil {
			return p.internal(ctx, err)
		}
	case tenants.ErrorCode(err) != tenants.ENotFound:
		return p.internal(ctx, err)
	}
	return p.render(ctx, http.StatusOK, "notice", page{Title: "Check your inbox", Data: notice{
		Heading: "Check your inbox",
		Text:    "If " + email + " has an account here, we sent it a link to reset its password. The link works once, for an hour.",
		Link:    url(ctx, "/login"), LinkText: "Back to sign in"}})
}

func (p *Portal) resetPage(ctx *fiber.Ctx) error {
	return p.render(ctx, http.StatusOK, "reset", page{Title: "Choose a new password", Form: authForm{Token: ctx.Query("token"), Errors: map[string]string{}}})
}

// reset spends the link, sets the password and ends every session of the account.
func (p *Portal) reset(ctx *fiber.Ctx) error {
	f := authForm{Token: ctx.FormValue("token"), Errors: map[string]string{}}
	hash, err := tenants.HashPassword(ctx.FormValue("password"))
	if err != nil {
		if !fieldError(err, f.Errors) {
			return p.internal(ctx, err)
		}
		return p.render(ctx, http.StatusUnprocessableEntity, "reset", page{Title: "Choose a new password", Form: f})
	}
	_, err = p.cfg.Portals.ResetPortalPassword(p.ctx(ctx), viewOf(ctx).Tenant.ID, tenants.HashSecret(f.Token), hash)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return p.render(ctx, http.StatusNotFound, "notice", page{Title: "Link not valid", Data: notice{
			Heading: "This link does not work", Text: "This reset link is unknown, was already used or has expired. Ask for a new one.",
			Link: url(ctx, "/forgot"), LinkText: "Reset your password"}})
	}
	if err != nil {
		return p.internal(ctx, err)
	}
	p.setCookie(ctx, cookieName(ctx), "", time.Unix(1, 0))
	return ctx.Redirect(url(ctx, "/login?done=password-reset"), http.StatusSeeOther)
}

// publicBase is the portal's address in mail: the api's public URL, never the Host of
// the request, which the client chooses.
func (p *Portal) publicBase(ctx *fiber.Ctx) string {
	return p.cfg.PublicURL + Prefix + "/" + viewOf(ctx).Tenant.Slug
}

// mailLink makes a single-use token for a, stores its hash and mails the link; text has
// one %s, where the link goes.
func (p *Portal) mailLink(ctx *fiber.Ctx, a *tenants.PortalAccount, purpose string, ttl time.Duration, path, subject, text string) error {
	raw := randomToken()
	t := &tenants.PortalToken{Hash: tenants.HashSecret(raw), TenantID: a.TenantID, AccountID: a.ID, Purpose: purpose, ExpiresAt: p.cfg.Now().Add(ttl)}
	if err := p.cfg.Portals.CreatePortalToken(p.ctx(ctx), t); err != nil {
		return err
	}
	link := p.publicBase(ctx) + path + "?" + neturl.Values{"token": {raw}}.Encode()
	p.mail(tenants.Mail{To: a.Email, Subject: subject, Text: strings.Replace(text, "%s", link, 1)})
	return nil
}

// mail sends m in the background, as the console does (forms.SendMail).
func (p *Portal) mail(m tenants.Mail) { forms.SendMail(p.cfg.Mailer, m, p.log, "portal") }

type dropMail struct{}

func (dropMail) Send(context.Context, tenants.Mail) error { return nil }

func padTo(start time.Time, floor time.Duration) { time.Sleep(floor - time.Since(start)) }

// The one-time flash: a new key's plaintext, kept for the page the browser is sent to
// next. It is sealed (AES-GCM) with a key derived from the session cookie's value, which
// only the browser holds: what the store keeps for that moment is useless without it.

func flashKey(raw string) cipher.AEAD {
	k := sha256.Sum256([]byte("tollgate portal flash\x00" + raw))
	block, _ := aes.NewCipher(k[:])
	aead, _ := cipher.NewGCM(block)
	return aead
}

func sealFlash(raw, msg string) string {
	aead := flashKey(raw)
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawStdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(msg), nil))
}

func openFlash(raw, sealed string) string {
	b, err := base64.RawStdEncoding.DecodeString(sealed)
	aead := flashKey(raw)
	if err != nil || len(b) < aead.NonceSize() {
		return ""
	}
	msg, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], nil)
	if err != nil {
		return ""
	}
	return string(msg)
}

func (p *Portal) setFlash(ctx *fiber.Ctx, msg string) error {
	raw := ctx.Cookies(cookieName(ctx))
	return p.cfg.Portals.SetPortalFlash(p.ctx(ctx), viewOf(ctx).Tenant.ID, tenants.HashSecret(raw), sealFlash(raw, msg))
}

func (p *Portal) takeFlash(ctx *fiber.Ctx) (string, error) {
	raw := ctx.Cookies(cookieName(ctx))
	sealed, err := p.cfg.Portals.TakePortalFlash(p.ctx(ctx), viewOf(ctx).Tenant.ID, tenants.HashSecret(raw))
	if err != nil || sealed == "" {
		return "", err
	}
	return openFlash(raw, sealed), nil
}
