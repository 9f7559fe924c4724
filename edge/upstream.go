package edge

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/edge/conn"
	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// upstream is a route's set of targets and how requests are spread over them.
//
// Round-robin is nginx's smooth weighted round-robin, computed once at compile time for
// one full cycle (sum of weights / their gcd picks): at request time a pick is one atomic
// add on the route's counter and an index, with no lock. The counter starts at a random
// point so frequent recompiles do not favour the start of the cycle. An upstream with no
// other balancing and no resilience settings (plain) takes only that path; the others go
// through choose (balance.go), which also skips targets out of rotation (health.go).
type upstream struct {
	targets []*target
	seq     []uint8  // indexes into targets, one cycle
	pools   []string // keys of the pools the targets use
	next    atomic.Uint32

	// plain: round-robin, targets never leave rotation, no retries (proxyStep's fast path).
	plain      bool
	balance    uint8 // balanceRoundRobin, balanceLeastConn or balanceHash
	hashOn     uint8 // hashConsumer, hashIP or hashHeader
	hashHeader []byte
	ring       []ringNode // balanceHash: the consistent hash ring, by hash

	check   *tenants.HealthCheck   // nil: no active checks
	passive *tenants.PassiveHealth // nil: no outlier ejection
	retries *tenants.Retries       // nil: no retries
	budget  *retryBudget           // with retries
	m       *metrics
	rm      atomic.Pointer[routeMetrics] // labels of the route it serves (bind)

	stop     chan struct{} // closed to stop the active checker
	stopOnce sync.Once

	// shareKey: a plain upstream every route of the tenant with the same targets and
	// connect timeout shares (sharedKey); "" for one of its route's own.
	shareKey string
}

// sharedKey is what identifies a plain upstream's spec among a tenant's routes, or ""
// when the spec is not plain: a plain upstream has no state of its route's (no health,
// no retries, no events to label), so routes that name the same targets share one, and
// its rotation. SetShareUpstreams(false) gives every route its own.
func sharedKey(spec *tenants.Upstream, ct time.Duration) string {
	if !shareUpstreams.Load() || spec.Balance != "" && spec.Balance != tenants.BalanceRoundRobin ||
		spec.HealthCheck != nil || spec.Passive != nil || spec.CircuitBreaker != nil || spec.Retries != nil {
		return ""
	}
	k := make([]byte, 0, 64)
	k = strconv.AppendInt(k, int64(ct), 10)
	for _, t := range spec.Targets {
		k = append(k, ' ')
		k = append(k, t.URL...)
		k = append(k, ' ')
		k = strconv.AppendInt(k, int64(t.Weight), 10)
	}
	return string(k)
}

var shareUpstreams atomic.Bool

func init() { shareUpstreams.Store(true) }

// SetShareUpstreams chooses whether a tenant's routes with the same plain upstream share
// one upstream and its rotation (true, the default) or each has its own
// (TOLLGATE_EDGE_SHARE_UPSTREAMS=off), from the next compile on.
func SetShareUpstreams(on bool) { shareUpstreams.Store(on) }

// pick is the plain upstream's round-robin pick.
func (u *upstream) pick() *target {
	if len(u.seq) == 1 {
		return u.targets[u.seq[0]]
	}
	i := u.next.Add(1)
	return u.targets[u.seq[i%uint32(len(u.seq))]]
}

// pickFor picks a target for a request that does not report its outcome (a WebSocket
// upgrade): as choose, but never a half-open circuit's trial. nil: none in rotation.
func (u *upstream) pickFor(x *exchange) *target {
	if u.plain {
		return u.pick()
	}
	var key uint64
	var hasKey bool
	if u.balance == balanceHash {
		key, hasKey = u.hashKey(x)
	}
	t, _ := u.choose(conn.MonoNow(), 0, key, hasKey, false)
	return t
}

// bind labels u's events (ejections, breaker opens, retries) with its route's metrics
// labels; a kept upstream is bound again by each compile, as its route's labels may
// have changed.
func (u *upstream) bind(rm *routeMetrics) { u.rm.Store(rm) }

// target is one upstream server of a route.
type target struct {
	url    string
	client *upstreamclient.Client // the target's pool (upstreamclient.go) and exchange (upstreamclient_roundtrip.go)
	tls    bool
	host   []byte // the Host header sent upstream: the target URL's host[:port]
	base   []byte // the target URL's path, prepended to the request path ("" or "/v1")
	weight int
	index  uint8 // in its upstream's targets (≤ MaxTargets = 64: a bit of a uint64)

	inflight atomic.Int32 // requests in flight (least_conn)
	health   targetHealth
}

// smoothWRR returns one cycle of the smooth weighted round-robin order over weights
// (each ≤ tenants.MaxWeight, at most tenants.MaxTargets of them); weight 0 is never
// picked. All-zero weights share equally.
func smoothWRR(weights []int) []uint8 {
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
		return smoothWRR(w)
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

// poolKey names a connection pool: one per scheme, host:port and connect timeout within
// a tenant. Pools outlive snapshots so a recompile keeps the warm connections.
func poolKey(tls bool, hostport string, connectTimeout time.Duration) string {
	s := "http://"
	if tls {
		s = "https://"
	}
	return s + hostport + "|" + connectTimeout.String()
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

// newUpstreamClient is the keep-alive pool of one upstream server.
func (e *Edge) newUpstreamClient(tlsOn bool, hostport string, connectTimeout time.Duration) *upstreamclient.Client {
	return upstreamclient.New(upstreamclient.Config{
		Addr:           hostport,
		TLS:            tlsOn,
		Dial:           e.dialer.Dial(connectTimeout),
		MaxConns:       e.cfg.MaxConnsPerTarget,
		MaxIdle:        e.cfg.MaxIdleConnDuration,
		MaxWait:        e.cfg.MaxConnWait,
		ReadBufferSize: e.cfg.ReadBufferSize,
		// Stream bodies from the upstream to the client instead of buffering them whole
		// (S5: 1 MB responses must not cost 1 MB of memory per request in flight): bodies
		// over the client's buffering bound or of unknown length stream, smaller ones are
		// read whole, and the connection returns to the pool once the body has been relayed.
		Stream: !e.cfg.BufferResponses,
	})
}

// newUpstream builds an upstream (a route's, or its canary's) from its validated
// settings, taking pools from (and adding them to) the tenant's pool set.
func (e *Edge) newUpstream(spec *tenants.Upstream, ct time.Duration, pools map[string]*upstreamclient.Client, used map[string]bool) (*upstream, error) {
	u := &upstream{}
	weights := make([]int, len(spec.Targets))
	for i, t := range spec.Targets {
		tlsOn, hostport, hostHeader, base, err := parseTarget(t.URL)
		if err != nil {
			return nil, fmt.Errorf("upstream.targets[%d]: %v", i, err)
		}
		key := poolKey(tlsOn, hostport, ct)
		c := pools[key]
		if c == nil {
			c = e.newUpstreamClient(tlsOn, hostport, ct)
			pools[key] = c
		}
		used[key] = true
		u.pools = append(u.pools, key)
		u.targets = append(u.targets, &target{url: t.URL, client: c, tls: tlsOn, host: []byte(hostHeader), base: []byte(base),
			weight: t.Weight, index: uint8(i)})
		weights[i] = t.Weight
	}
	u.seq = smoothWRR(weights)
	u.next.Store(rand.Uint32())
	u.m = e.m
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
		e.startChecks(u)
	}
	return u, nil
}
