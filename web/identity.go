package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/web/forms"
)

// Proven addresses, password reset and the account page. Every mailed link carries a
// random token whose SHA-256 the store keeps; the store spends it in the statement that
// checks it. Answers about an address are the same whether or not it has an account: only
// the mailbox of the address learns more.

// The answers that depend on whether an address has an account take at least this long,
// whichever way they went: creating an account and its tenant costs more queries than
// mailing its owner a note, and the difference would tell the one from the other. Each
// floor is well above what either path takes on a healthy database.
const (
	signUpFloor = 800 * time.Millisecond
	forgotFloor = 400 * time.Millisecond
)

// padTo sleeps until floor has passed since start.
func padTo(start time.Time, floor time.Duration) { time.Sleep(floor - time.Since(start)) }

// notice is the Data of the notice page: a heading, a sentence and one way on.
type notice struct {
	Heading, Text  string
	Link, LinkText string
}

// dropMail is the mailer of a console configured without one.
type dropMail struct{}

func (dropMail) Send(context.Context, tenants.Mail) error { return nil }

// mail sends m in the background (forms.SendMail: the mail server's delay never tells a
// client which answer it got).
func (c *Console) mail(m tenants.Mail) { forms.SendMail(c.cfg.Mailer, m, c.log, "console") }

// link makes a single-use token for u, stores its hash, and returns the console URL that
// carries it.
func (c *Console) link(ctx *fiber.Ctx, u *tenants.User, purpose string, ttl time.Duration, path string, extra url.Values) (string, error) {
	raw := randomToken()
	t := &tenants.UserToken{Hash: tenants.HashSecret(raw), UserID: u.ID, Purpose: purpose, ExpiresAt: c.cfg.Now().Add(ttl)}
	if err := c.cfg.People.CreateUserToken(c.ctx(ctx), t); err != nil {
		return "", err
	}
	q := url.Values{"token": {raw}}
	for k, v := range extra {
		q[k] = v
	}
	return c.cfg.PublicURL + Prefix + path + "?" + q.Encode(), nil
}

// sendVerification mails u a link that proves its address; next is where the console
// goes once it is followed and the user has signed in.
func (c *Console) sendVerification(ctx *fiber.Ctx, u *tenants.User, next string) error {
	var extra url.Values
	if next != "" {
		extra = url.Values{"next": {next}}
	}
	l, err := c.link(ctx, u, tenants.TokenVerify, tenants.VerifyTokenTTL, "/verify", extra)
	if err != nil {
		return err
	}
	c.mail(tenants.Mail{To: u.Email, Subject: "Verify your address for Tollgate",
		Text: "Someone, hopefully you, created a Tollgate account with this address.\n" +
			"To prove the address is yours, follow this link within 24 hours:\n\n  " + l + "\n\n" +
			"Until then the account can run its own tenant, but the address grants nothing else:\n" +
			"no invitation, no platform role.\n\n" +
			"If it was not you, ignore this message.\n"})
	return nil
}

// verify is GET /console/verify?token=…: it spends the token and says so. A mail scanner
// that fetches the link verifies the address too, which is right: it read the mailbox.
func (c *Console) verify(ctx *fiber.Ctx) error {
	u, err := c.cfg.People.VerifyEmail(c.ctx(ctx), tenants.HashSecret(ctx.Query("token")))
	if tenants.ErrorCode(err) == tenants.ENotFound {
		text := "This link is unknown, was already used or has expired."
		if me := user(ctx); me != nil && !me.EmailVerified {
			text += " Ask for a new one with the button at the top of the page."
		}
		return c.render(ctx, http.StatusNotFound, "notice", page{Title: "Link not valid", Status: http.StatusNotFound,
			Data: notice{Heading: "This link does not work", Text: text, Link: Prefix + "/", LinkText: "Go to the console"}})
	}
	if err != nil {
		return c.internal(ctx, err)
	}
	next := localNext(ctx.Query("next"), Prefix+"/")
	n := notice{Heading: "Address verified", Text: u.Email + " is verified.", Link: next, LinkText: "Continue"}
	if me := user(ctx); me == nil || me.ID != u.ID {
		n.Link, n.LinkText = Prefix+"/login?next="+url.QueryEscape(next), "Sign in"
	} else {
		me.EmailVerified = true // the banner of this page already knows
	}
	return c.render(ctx, http.StatusOK, "notice", page{Title: "Address verified", Data: n})
}

// verifyResend is POST /console/verify/resend: a new link for the signed-in, unverified
// user, throttled per user and per client address.
func (c *Console) verifyResend(ctx *fiber.Ctx) error {
	u := user(ctx)
	if u == nil {
		return c.errorPage(ctx, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again.")
	}
	if u.EmailVerified {
		return ctx.Redirect(Prefix+"/account", http.StatusSeeOther)
	}
	wait, err := c.throttled(ctx, []string{userMailKey(u.ID), mailKey(c.clientIP(ctx))}, []tenants.ThrottleRule{c.cfg.Limits.Mail, c.cfg.Limits.Mail})
	if err != nil {
		return c.internal(ctx, err)
	}
	if wait > 0 {
		return c.errorPage(ctx, http.StatusTooManyRequests, "Too many requests", tooMany(ctx, wait, "verification mails"))
	}
	// From an invitation's page, the new link leads back to it once followed.
	if err := c.sendVerification(ctx, u, localNext(ctx.FormValue("next"), "")); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(Prefix+"/account?done=verify-sent", http.StatusSeeOther)
}

type emailForm struct {
	Email  string
	Errors map[string]string
}

func (c *Console) forgotPage(ctx *fiber.Ctx) error {
	return c.render(ctx, http.StatusOK, "forgot", page{Title: "Reset your password", Form: emailForm{Email: ctx.Query("email")}})
}

// forgot is POST /console/forgot: a reset link for the address when it has an account,
// and the same answer when it does not.
func (c *Console) forgot(ctx *fiber.Ctx) error {
	f := emailForm{Email: strings.TrimSpace(ctx.FormValue("email")), Errors: map[string]string{}}
	email, err := tenants.NormalizeEmail(f.Email)
	if err != nil {
		fieldError(err, f.Errors, nil)
		return c.render(ctx, http.StatusUnprocessableEntity, "forgot", page{Title: "Reset your password", Form: f})
	}
	wait, err := c.throttled(ctx, []string{mailKey(c.clientIP(ctx))}, []tenants.ThrottleRule{c.cfg.Limits.Mail})
	if err != nil {
		return c.internal(ctx, err)
	}
	if wait > 0 {
		f.Errors["form"] = tooMany(ctx, wait, "reset requests from your address")
		return c.render(ctx, http.StatusTooManyRequests, "forgot", page{Title: "Reset your password", Form: f})
	}
	defer padTo(time.Now(), forgotFloor)
	u, err := c.cfg.People.FindUserByEmail(c.ctx(ctx), email)
	switch {
	case err == nil:
		l, err := c.link(ctx, u, tenants.TokenReset, tenants.ResetTokenTTL, "/reset", nil)
		if err != nil {
			return c.internal(ctx, err)
		}
		c.mail(tenants.Mail{To: u.Email, Subject: "Reset your Tollgate password",
			Text: "Someone, hopefully you, asked to reset the password of the Tollgate account of this address.\n" +
				"To choose a new password, follow this link within an hour:\n\n  " + l + "\n\n" +
				"A reset signs the account out everywhere. If you did not ask for it, ignore this\n" +
				"message: your password stays as it is.\n"})
	case tenants.ErrorCode(err) != tenants.ENotFound:
		return c.internal(ctx, err)
	}
	return c.render(ctx, http.StatusOK, "notice", page{Title: "Check your inbox", Data: notice{
		Heading: "Check your inbox",
		Text:    "If an account exists for " + email + ", we sent it a link to reset its password. The link works once, for an hour.",
		Link:    Prefix + "/login", LinkText: "Back to sign in"}})
}

type resetForm struct {
	Token  string
	Errors map[string]string
}

func (c *Console) resetPage(ctx *fiber.Ctx) error {
	return c.render(ctx, http.StatusOK, "reset", page{Title: "Choose a new password", Form: resetForm{Token: ctx.Query("token")}})
}

// reset is POST /console/reset: it spends the link, sets the password and ends every
// session of the account, this browser's included.
func (c *Console) reset(ctx *fiber.Ctx) error {
	f := resetForm{Token: ctx.FormValue("token"), Errors: map[string]string{}}
	hash, err := tenants.HashPassword(ctx.FormValue("password"))
	if err != nil {
		if !fieldError(err, f.Errors, nil) {
			return c.internal(ctx, err)
		}
		return c.render(ctx, http.StatusUnprocessableEntity, "reset", page{Title: "Choose a new password", Form: f})
	}
	_, err = c.cfg.People.ResetPassword(c.ctx(ctx), tenants.HashSecret(f.Token), hash)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		return c.render(ctx, http.StatusNotFound, "notice", page{Title: "Link not valid", Status: http.StatusNotFound,
			Data: notice{Heading: "This link does not work", Text: "This reset link is unknown, was already used or has expired. Ask for a new one.",
				Link: Prefix + "/forgot", LinkText: "Reset your password"}})
	}
	if err != nil {
		return c.internal(ctx, err)
	}
	c.clearSessionCookie(ctx)
	return ctx.Redirect(Prefix+"/login?done=password-reset", http.StatusSeeOther)
}

func (c *Console) accountPage(ctx *fiber.Ctx) error {
	if user(ctx) == nil {
		return ctx.Redirect(Prefix+"/login?next="+url.QueryEscape(Prefix+"/account"), http.StatusSeeOther)
	}
	return c.render(ctx, http.StatusOK, "account", page{Title: "Your account", Nav: "account", Form: emailForm{Errors: map[string]string{}}})
}

// passwordChange is POST /console/account/password: the current password, then the new
// one; every other session of the account ends, this one stays.
func (c *Console) passwordChange(ctx *fiber.Ctx) error {
	u, s := user(ctx), session(ctx)
	if u == nil || s == nil {
		return c.errorPage(ctx, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again.")
	}
	f := emailForm{Errors: map[string]string{}}
	// The current password is checked like a sign-in, under the same throttle, so a stolen
	// session cannot guess it faster than a sign-in could.
	key := accountKey(u.Email, c.clientIP(ctx))
	wait, err := c.throttled(ctx, []string{signInKey(c.clientIP(ctx)), key}, []tenants.ThrottleRule{c.cfg.Limits.SignIn, c.cfg.Limits.Account})
	if err != nil {
		return c.internal(ctx, err)
	}
	if wait > 0 {
		f.Errors["current"] = tooMany(ctx, wait, "attempts")
		return c.render(ctx, http.StatusTooManyRequests, "account", page{Title: "Your account", Nav: "account", Form: f})
	}
	if !tenants.CheckPassword(u.PasswordHash, ctx.FormValue("current")) {
		f.Errors["current"] = "This is not your current password."
		return c.render(ctx, http.StatusUnprocessableEntity, "account", page{Title: "Your account", Nav: "account", Form: f})
	}
	hash, err := tenants.HashPassword(ctx.FormValue("password"))
	if err != nil {
		if !fieldError(err, f.Errors, nil) {
			return c.internal(ctx, err)
		}
		return c.render(ctx, http.StatusUnprocessableEntity, "account", page{Title: "Your account", Nav: "account", Form: f})
	}
	if err := c.cfg.People.ChangePassword(c.ctx(ctx), u.ID, hash, s.Hash); err != nil {
		return c.internal(ctx, err)
	}
	if err := c.cfg.Throttle.ClearHits(c.ctx(ctx), key); err != nil {
		return c.internal(ctx, err)
	}
	return ctx.Redirect(Prefix+"/account?done=password-changed", http.StatusSeeOther)
}

func (c *Console) clearSessionCookie(ctx *fiber.Ctx) {
	ctx.Cookie(&fiber.Cookie{Name: tenants.SessionCookie, Value: "", Path: "/", Expires: time.Unix(1, 0),
		HTTPOnly: true, Secure: secure(ctx), SameSite: fiber.CookieSameSiteLaxMode})
}

// fieldOf is the field a domain error names, "" for none.
func fieldOf(err error) string {
	var te *tenants.Error
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}
