package web

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/web/forms"
)

// Limits are the console's throttles. Their counters live in the store
// (tenants.ThrottleService), so every api replica counts against the same numbers and
// concurrent attempts cannot slip past them.
//
// Sign-in is throttled per client address and per (account, client address), never per
// account alone: a stranger's failures from their address slow down only that address,
// so nobody can lock an owner out of their account by guessing wrong on purpose.
type Limits struct {
	// SignIn bounds every sign-in attempt from one client address.
	// Default: 30 per 15 minutes.
	SignIn tenants.ThrottleRule
	// Account bounds attempts on one account from one client address: a few freely, then
	// a pause that doubles with each further attempt. A successful sign-in clears it.
	// Default: 5, then 1 s doubling up to 15 minutes; counted over an hour.
	Account tenants.ThrottleRule
	// SignUp bounds sign-ups from one client address. Default: 10 per hour.
	SignUp tenants.ThrottleRule
	// Mail bounds the requests that send mail (password reset, a new verification link)
	// from one client address, and for one signed-in user. Default: 5 per hour.
	Mail tenants.ThrottleRule
}

func (l Limits) withDefaults() Limits {
	def := func(r *tenants.ThrottleRule, d tenants.ThrottleRule) {
		if r.Limit <= 0 || r.Window <= 0 {
			*r = d
		}
	}
	def(&l.SignIn, tenants.ThrottleRule{Limit: 30, Window: 15 * time.Minute})
	def(&l.Account, tenants.ThrottleRule{Limit: 5, Window: time.Hour, Backoff: time.Second, MaxBackoff: 15 * time.Minute})
	def(&l.SignUp, tenants.ThrottleRule{Limit: 10, Window: time.Hour})
	def(&l.Mail, tenants.ThrottleRule{Limit: 5, Window: time.Hour})
	return l
}

// clientIP is the address throttles count by (forms.ClientIP: the peer, or behind a
// trusted proxy the client it names).
func (c *Console) clientIP(ctx *fiber.Ctx) string { return forms.ClientIP(ctx, c.cfg.TrustedProxies) }

// Throttle keys. An email is normalized before it is part of a key.
func signInKey(ip string) string         { return "signin:" + ip }
func accountKey(email, ip string) string { return "account:" + email + "|" + ip }
func signUpKey(ip string) string         { return "signup:" + ip }
func mailKey(ip string) string           { return "mail:" + ip }
func userMailKey(userID string) string   { return "mail-user:" + userID }

// throttled counts an attempt on each key in turn and returns the wait of the first that
// refuses it (0: go ahead). A key that refuses stops the count, so a throttled address
// does not also spend an account's allowance.
func (c *Console) throttled(ctx *fiber.Ctx, keys []string, rules []tenants.ThrottleRule) (time.Duration, error) {
	for i, k := range keys {
		wait, err := c.cfg.Throttle.Hit(c.ctx(ctx), k, rules[i])
		if err != nil || wait > 0 {
			return wait, err
		}
	}
	return 0, nil
}

// tooMany sets Retry-After and returns the sentence the 429 page shows.
func tooMany(ctx *fiber.Ctx, wait time.Duration, what string) string {
	ctx.Set(fiber.HeaderRetryAfter, itoa(int(wait.Seconds()+0.999)))
	return "Too many " + what + ". Wait " + humanWait(wait) + " and try again."
}

func itoa(n int) string { return strconv.Itoa(n) }
