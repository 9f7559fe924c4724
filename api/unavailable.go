package api

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// While the store is down or frozen (it accepts connections and never answers) the API
// answers at once or within one RequestTimeout, never later: every request's service
// calls share one deadline, and a failure that means "the store cannot answer now" is
// 503 not_ready with Retry-After, which clients and load balancers take as "retry", not
// 500 internal, which means a bug.

// retryAfterSeconds is the Retry-After of a 503 not_ready: about how long a Postgres
// restart or failover takes, so a client's retry is likely to find it back.
const retryAfterSeconds = "5"

// bound gives the request a context with the RequestTimeout deadline, which every service
// call of the request (and of the console's pages, mounted on the same app) inherits.
func (s *Server) bound(c *fiber.Ctx) error {
	parent := c.UserContext()
	ctx, cancel := context.WithTimeout(parent, s.cfg.RequestTimeout)
	defer cancel()
	c.SetUserContext(ctx)
	c.Locals(unboundKey{}, parent)
	return c.Next()
}

type unboundKey struct{}

// rebound gives a heavy call HeavyRequestTimeout, from when it began, instead of
// RequestTimeout.
func (s *Server) rebound(c *fiber.Ctx, began time.Time) (context.Context, context.CancelFunc) {
	parent, ok := c.Locals(unboundKey{}).(context.Context)
	if !ok {
		return context.WithCancel(c.UserContext())
	}
	ctx, cancel := context.WithDeadline(parent, began.Add(s.cfg.HeavyRequestTimeout))
	c.SetUserContext(ctx)
	return ctx, cancel
}

// unreachable is the default Config.Unavailable: what any store's failure to answer looks
// like without knowing its driver.
func unreachable(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr)
}

// notReady is the answer to a request the store could not serve in time.
func notReady() *tenants.Error {
	return tenants.Errorf(tenants.ENotReady, "the database is unreachable or did not answer in time: retry in a few seconds")
}
