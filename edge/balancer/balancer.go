// Package balancer is a route's set of upstream targets: how requests are spread over
// them (smooth weighted round-robin, least_conn, a consistent hash ring), what takes a
// target out of rotation and brings it back (active checks, passive ejection, circuit
// breakers), how a failed attempt is retried within a budget, and how a route's requests
// are split between its own targets and its canary's (Split).
//
// It knows nothing of the request beyond what its caller hands it: the edge computes a
// hash upstream's key from the request (HashOn says from what), sends each attempt over
// the target's pool and reports the outcome (Attempts). What happens to the targets goes
// out through Events, which the edge counts under its route's metric labels.
package balancer

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/tenants"
)

// Upstream is a route's set of targets and how requests are spread over them.
//
// Round-robin is nginx's smooth weighted round-robin, computed once at compile time for
// one full cycle (sum of weights / their gcd picks): at request time a pick is one atomic
// add on the route's counter and an index, with no lock. The counter starts at a random
// point so frequent recompiles do not favour the start of the cycle. An upstream with no
// other balancing and no resilience settings (Plain) takes only that path (Pick); the
// others go through choose (balance.go), which also skips targets out of rotation
// (health.go).
//
// An Upstream is set up in place (Init), so the caller can hold it inside its own type
// without one more pointer to follow per request; it must not be copied after.
type Upstream struct {
	targets []*Target
	seq     []uint8 // indexes into targets, one cycle
	next    atomic.Uint32

	// plain: round-robin, targets never leave rotation, no retries.
	plain      bool
	balance    uint8 // balanceRoundRobin, balanceLeastConn or balanceHash
	hashOn     HashSource
	hashHeader []byte
	ring       []ringNode // balanceHash: the consistent hash ring, by hash

	check   *tenants.HealthCheck   // nil: no active checks
	passive *tenants.PassiveHealth // nil: no outlier ejection
	retries *tenants.Retries       // nil: no retries
	budget  *retryBudget           // with retries

	events   atomic.Pointer[Events] // Bind's, else Options.Events
	checkers *Checkers
	log      *slog.Logger // failed checks, at debug level; nil: not logged

	stop     chan struct{} // closed to stop the active checker
	stopOnce sync.Once
}

// Target is one upstream server of a route. Its exported fields are set by Init and
// never change.
type Target struct {
	URL    string
	Client Transport // the target's connection pool
	Addr   string    // host:port the pool connects to
	TLS    bool
	Host   []byte // the Host header sent upstream: the target URL's host[:port]
	Base   []byte // the target URL's path, prepended to the request path ("" or "/v1")
	weight int
	index  uint8 // in its upstream's targets (≤ MaxTargets = 64: a bit of a uint64)

	inflight atomic.Int32 // requests in flight (least_conn)
	health   targetHealth
}

// Transport is what a target's requests and active checks go over: the edge's HTTP/1.1
// pool (upstreamclient.Client) or its HTTP/2 transport, by the upstream's protocol. Its
// errors speak one vocabulary: a *upstreamclient.DialError for a connect that failed or
// was refused, fasthttp.ErrNoFreeConns when the edge's own bound on the target was
// reached, a timeout error when the time ran out.
type Transport interface {
	// DoAt sends req and reads the answer into resp within timeout from now (a
	// conn.MonoNow reading).
	DoAt(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration, now int64) error
	// DoTimeout is DoAt from the current time.
	DoTimeout(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error
	// CloseIdleConnections closes the connections no request uses, when the pool is dropped.
	CloseIdleConnections()
}

// Events receives what happens to an upstream's targets, for the operator's metrics.
// Its methods are called from the request path and the health checkers.
type Events interface {
	Ejected()                   // passive health took a target out of rotation
	BreakerOpened()             // a target's circuit opened
	HealthChanged(healthy bool) // the active check turned a target healthy or unhealthy
	Retried(r RetryResult)      // a retry was sent and how it went, or the budget refused it
}

// Options are what an Upstream takes from the edge that builds it.
type Options struct {
	// Pool returns the connection pool of one target's scheme and host:port.
	Pool func(tls bool, hostport string) Transport
	// Events receives the upstream's events until Bind gives it others; required.
	Events Events
	// Checkers counts the active checkers, which an upstream with a health check starts.
	Checkers *Checkers
	// Log, when not nil, gets each failed active check at debug level.
	Log *slog.Logger
}

// Init sets u up from its validated settings and, when they ask for it, starts its
// active health checker (stopped by Close).
func (u *Upstream) Init(spec *tenants.Upstream, o Options) error {
	weights := make([]int, len(spec.Targets))
	for i, t := range spec.Targets {
		tlsOn, hostport, hostHeader, base, err := parseTarget(t.URL)
		if err != nil {
			return fmt.Errorf("upstream.targets[%d]: %v", i, err)
		}
		u.targets = append(u.targets, &Target{URL: t.URL, Client: o.Pool(tlsOn, hostport), Addr: hostport, TLS: tlsOn, Host: []byte(hostHeader),
			Base: []byte(base), weight: t.Weight, index: uint8(i)})
		weights[i] = t.Weight
	}
	u.seq = SmoothWRR(weights)
	u.next.Store(rand.Uint32())
	u.events.Store(&o.Events)
	u.checkers, u.log = o.Checkers, o.Log
	u.compileBalance(spec)
	u.check, u.passive, u.retries = spec.HealthCheck, spec.Passive, spec.Retries
	if u.retries != nil {
		u.budget = newRetryBudget(u.retries)
	}
	if b := spec.CircuitBreaker; b != nil {
		for _, t := range u.targets {
			t.health.br = newBreaker(b.ErrorPercent, b.MinRequests, b.WindowMS, b.OpenMS)
		}
	}
	u.plain = u.balance == balanceRoundRobin && u.check == nil && u.passive == nil &&
		spec.CircuitBreaker == nil && u.retries == nil
	if u.check != nil {
		u.startChecks()
	}
	return nil
}

// Plain reports an upstream that takes only the round-robin path (Pick): no other
// balancing, no health tracking, no retries.
func (u *Upstream) Plain() bool { return u.plain }

// Retries reports whether a failed attempt may be retried, so the caller keeps the
// request body in memory to send it again.
func (u *Upstream) Retries() bool { return u.retries != nil }

// Targets is the upstream's targets, in the order of its settings.
func (u *Upstream) Targets() []*Target { return u.targets }

// Pick is the plain upstream's round-robin pick.
func (u *Upstream) Pick() *Target {
	if len(u.seq) == 1 {
		return u.targets[u.seq[0]]
	}
	i := u.next.Add(1)
	return u.targets[u.seq[i%uint32(len(u.seq))]]
}

// PickFor picks a target for a request that does not report its outcome (a WebSocket
// upgrade): as Start does, but never a half-open circuit's trial. key is the request's
// hash key when hasKey (see HashOn). nil: none in rotation.
func (u *Upstream) PickFor(key uint64, hasKey bool) *Target {
	if u.plain {
		return u.Pick()
	}
	t, _ := u.choose(conn.MonoNow(), 0, key, hasKey, false)
	return t
}

// Bind sends u's events to ev from now on: a kept upstream is bound again by each
// compile, as its route's labels may have changed.
func (u *Upstream) Bind(ev Events) { u.events.Store(&ev) }

func (u *Upstream) ev() Events { return *u.events.Load() }

// SmoothWRR returns one cycle of the smooth weighted round-robin order over weights
// (each ≤ tenants.MaxWeight, at most tenants.MaxTargets of them); weight 0 is never
// picked. All-zero weights share equally.
func SmoothWRR(weights []int) []uint8 {
	g, total := 0, 0
	for _, w := range weights {
		g = gcd(g, w)
		total += w
	}
	if total == 0 {
		w := make([]int, len(weights))
		for i := range w {
			w[i] = 1
		}
		return SmoothWRR(w)
	}
	w := make([]int, len(weights))
	for i := range weights {
		w[i] = weights[i] / g
	}
	total /= g
	cur := make([]int, len(w))
	seq := make([]uint8, 0, total)
	for range total {
		best := -1
		for i := range w {
			if w[i] == 0 {
				continue
			}
			cur[i] += w[i]
			if best < 0 || cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		seq = append(seq, uint8(best))
	}
	return seq
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// parseTarget splits a validated target URL into what the proxy needs.
func parseTarget(raw string) (tlsOn bool, hostport string, hostHeader, base string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return false, "", "", "", err
	}
	tlsOn = u.Scheme == "https"
	port := u.Port()
	if port == "" {
		port = "80"
		if tlsOn {
			port = "443"
		}
	}
	return tlsOn, net.JoinHostPort(u.Hostname(), port), u.Host, strings.TrimSuffix(u.EscapedPath(), "/"), nil
}
