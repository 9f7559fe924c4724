package portal

import (
	"errors"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Throttles, with the console's defaults (web.Limits) and counters in the same store,
// under keys of their own ("portal-…"). Sign-in is counted per client address and per
// (tenant, account, client address), never per account alone, so nobody can lock an
// account out by failing on purpose.
var (
	signInRule  = tenants.ThrottleRule{Limit: 30, Window: 15 * time.Minute}
	accountRule = tenants.ThrottleRule{Limit: 5, Window: time.Hour, Backoff: time.Second, MaxBackoff: 15 * time.Minute}
	signUpRule  = tenants.ThrottleRule{Limit: 10, Window: time.Hour}
	mailRule    = tenants.ThrottleRule{Limit: 5, Window: time.Hour}
)

// throttled counts an attempt on each key in turn and returns the wait of the first that
// refuses it (0: go ahead).
func (p *Portal) throttled(ctx *fiber.Ctx, keys []string, rules []tenants.ThrottleRule) (time.Duration, error) {
	for i, k := range keys {
		wait, err := p.cfg.Throttle.Hit(p.ctx(ctx), k, rules[i])
		if err != nil || wait > 0 {
			return wait, err
		}
	}
	return 0, nil
}

// tooMany sets Retry-After and returns the sentence the form shows.
func tooMany(ctx *fiber.Ctx, wait time.Duration, what string) string {
	secs := int(wait.Seconds() + 0.999)
	ctx.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
	if secs < 60 {
		return "Too many " + what + ". Wait " + strconv.Itoa(secs) + " seconds and try again."
	}
	return "Too many " + what + ". Wait " + strconv.Itoa(secs/60+1) + " minutes and try again."
}

// fieldError puts a *tenants.Error on the form field it names ("form" when none) and
// reports whether err was one.
func fieldError(err error, into map[string]string) bool {
	var te *tenants.Error
	if !errors.As(err, &te) || te.Code == tenants.EInternal {
		return false
	}
	field := te.Field
	if field == "" {
		field = "form"
	}
	if _, dup := into[field]; !dup {
		into[field] = te.Message
	}
	return true
}
