package api

import (
	"sync"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Heavy calls: the management endpoints whose cost grows with what the caller sends or
// asks for (an OpenAPI import parses and diffs a document of up to BodyLimit bytes, a
// config apply or dry run diffs the whole config, exports and usage read rollups). Six
// concurrent 1 MB imports by one tenant used to take every core and every database
// connection, and every tenant's calls waited. Each tenant may now run only a few of them
// at once on one api process; the next is refused at once with 429 rate_limited, so the
// refused tenant spends nothing and the others keep their share. The cap is per process,
// not per cluster: what it protects is this process's cores and connections.

// DefaultHeavyCalls is Config.HeavyCalls when zero: one call working and one waiting for
// the database leaves a tenant's script busy without letting it crowd out the rest.
const DefaultHeavyCalls = 2

// heavyRetryAfter is the Retry-After of a refused heavy call, in seconds: about what one
// import of a large document takes here.
const heavyRetryAfter = "1"

// heavyCalls counts each tenant's heavy calls in flight. A mutex suffices: heavy calls
// are rare and each costs far more than the lock.
type heavyCalls struct {
	max      int // <= 0: no cap
	mu       sync.Mutex
	inFlight map[string]int // tenant id → calls
}

// acquire takes a slot of tenantID's, or refuses with the 429 envelope's error (and sets
// Retry-After on c). release gives the slot back; call it once the handler returns.
func (h *heavyCalls) acquire(c *fiber.Ctx, tenantID string) (release func(), err error) {
	if h.max <= 0 {
		return func() {}, nil
	}
	h.mu.Lock()
	n := h.inFlight[tenantID]
	if n >= h.max {
		h.mu.Unlock()
		c.Set(fiber.HeaderRetryAfter, heavyRetryAfter)
		return nil, tenants.Errorf(tenants.ERateLimited,
			"this tenant already has %d imports, config applies or exports running: retry after %s s", h.max, heavyRetryAfter)
	}
	if h.inFlight == nil {
		h.inFlight = map[string]int{}
	}
	h.inFlight[tenantID] = n + 1
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		if h.inFlight[tenantID] <= 1 {
			delete(h.inFlight, tenantID)
		} else {
			h.inFlight[tenantID]--
		}
		h.mu.Unlock()
	}, nil
}

// heavyCallsOf is the cap Config.HeavyCalls asks for.
func heavyCallsOf(n int) int {
	switch {
	case n == 0:
		return DefaultHeavyCalls
	case n < 0:
		return 0
	}
	return n
}
