package edge

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"tollgate/edge/balancer"
	"tollgate/edge/edgemetrics"
	"tollgate/edge/jwtauth"
	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// Canary routing.
//
// A route with a canary sends each request (when the proxy or the WebSocket step picks
// its upstream; retries stay on the side picked) to the canary's targets or to its own,
// decided in this order:
//
//  1. Match: a request whose Match header, or on JWT routes the verified token's Match
//     claim, has one of Values (any value when Values is empty) goes to the canary,
//     whatever the weight. A header with an empty value, a null claim and a request
//     authenticated by key on a key_or_jwt route count as not having it.
//  2. Sticky: the request's StickyOn key (consumer id, client address, or a header's
//     value) is hashed into a bucket 0–9999, and buckets below weight×100 are the
//     canary's. The hash is fixed (FNV-1a 64 over a fixed prefix and the key, then a
//     murmur3 finalizer), so every edge, before and after restarts, puts a key on the
//     same side, and raising the weight only moves keys from the primary to the canary.
//     A request without the key (sticky on a header it lacks) falls through to 3.
//  3. Schedule: a fixed cycle of smooth weighted round-robin over [100−weight, weight],
//     walked by one atomic counter. The cycle's length divides 100, so any 100·k
//     consecutive requests the schedule decides for a route on one edge include exactly
//     weight·k canary ones.
//
// Weight 0 sends only matched requests to the canary; 100 sends everything.
//
// A claim is only known while the token is at hand: bearerStep asks the canary's ClaimMatch
// about the verified token and leaves the answer on the exchange (canaryClaim) for
// choose, rather than keeping the token's claims around.

// canary is a route's second set of targets and the rule that sends requests to it. It
// is built once per route entry and kept across recompiles while the entry is unchanged
// (compile.go), so the schedule keeps its place.
type canary struct {
	upstream *upstream
	weight   int // percent of the unmatched requests

	header []byte              // Match.Header; nil: no header match
	claim  *jwtauth.ClaimMatch // Match.Claim; nil: no claim match
	values []string            // Match.Values; empty: any value

	sticky       int    // stickyOff or what the bucket is hashed from
	stickyHeader []byte // sticky == stickyHeader: the header's name
	threshold    uint64 // buckets below it are the canary's: weight × 100

	sched []uint8 // one cycle; 1 sends to the canary
	next  atomic.Uint64
}

// What a sticky canary hashes.
const (
	stickyOff = iota
	stickyConsumer
	stickyIP
	stickyHeader
)

// stickyBuckets is how many buckets the sticky hash spreads keys over: 100 per percent
// of weight.
const stickyBuckets = 10_000

// newCanary builds r's canary (r.Canary validated), taking pools as newUpstream does.
func (e *Edge) newCanary(r *tenants.Route, pools map[string]*upstreamclient.Client, used map[string]bool) (*canary, error) {
	up, err := e.newUpstream(&r.Canary.Upstream, time.Duration(r.ConnectTimeoutMS)*time.Millisecond, pools, used)
	if err != nil {
		return nil, err
	}
	spec := r.Canary
	c := &canary{
		upstream:  up,
		weight:    spec.Weight,
		threshold: uint64(spec.Weight) * stickyBuckets / 100,
		sched:     balancer.SmoothWRR([]int{100 - spec.Weight, spec.Weight}),
	}
	// A random start, as for the targets' rotation: the cycle begins with the primary's
	// turns, so a route changed more often than it is called would otherwise starve its
	// canary.
	c.next.Store(rand.Uint64())
	if m := spec.Match; m != nil {
		c.values = m.Values
		if m.Header != "" {
			c.header = []byte(m.Header)
		} else {
			c.claim = jwtauth.NewClaimMatch(m.Claim, m.Values)
		}
	}
	if spec.Sticky {
		switch on := spec.StickyOn; {
		case on == tenants.HashOnIP:
			c.sticky = stickyIP
		case strings.HasPrefix(on, tenants.HashOnHeader):
			c.sticky, c.stickyHeader = stickyHeader, []byte(on[len(tenants.HashOnHeader):])
		default:
			c.sticky = stickyConsumer
		}
	}
	return c, nil
}

// pickUpstream is the upstream x goes to: the canary's or the route's own. It decides
// once per request (the cache step may have asked first: the side is part of its key).
func (rt *route) pickUpstream(x *exchange) *upstream {
	c := rt.canary
	if c == nil {
		return rt.upstream
	}
	if x.up != nil {
		return x.up
	}
	x.up = rt.chooseSide(x)
	return x.up
}

func (rt *route) chooseSide(x *exchange) *upstream {
	c := rt.canary
	if c.choose(x) {
		rt.metrics.CanarySide(edgemetrics.SideCanary)
		return c.upstream
	}
	rt.metrics.CanarySide(edgemetrics.SidePrimary)
	return rt.upstream
}

// choose reports whether x goes to the canary.
func (c *canary) choose(x *exchange) bool {
	if c.matched(x) {
		return true
	}
	switch c.weight {
	case 0:
		return false
	case 100:
		return true
	}
	if c.sticky != stickyOff {
		if b, ok := c.bucket(x); ok {
			return b < c.threshold
		}
	}
	return c.sched[c.next.Add(1)%uint64(len(c.sched))] == 1
}

// matched reports whether x meets the canary's match.
func (c *canary) matched(x *exchange) bool {
	switch {
	case c.header != nil:
		return c.matchValue(x.ctx.Request.Header.PeekBytes(c.header))
	case c.claim != nil:
		return x.canaryClaim
	}
	return false
}

// matchValue reports whether a header value selects the canary: any non-empty value
// when Values is empty, else one of Values exactly.
func (c *canary) matchValue(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	if len(c.values) == 0 {
		return true
	}
	for _, want := range c.values {
		if string(v) == want {
			return true
		}
	}
	return false
}

// bucket is x's sticky bucket; ok is false when x has no key to stick by.
func (c *canary) bucket(x *exchange) (b uint64, ok bool) {
	var key []byte
	switch c.sticky {
	case stickyConsumer:
		if cn := x.consumer; cn != nil {
			key = cn.id
		} else {
			key = x.clientIP()
		}
	case stickyIP:
		key = x.clientIP()
	default:
		key = x.ctx.Request.Header.PeekBytes(c.stickyHeader)
		if len(key) == 0 {
			return 0, false
		}
	}
	return stickyBucket(key), true
}

// stickyBucket hashes a sticky key into 0…stickyBuckets-1. Every edge must compute the
// same bucket for the same key, today and after any upgrade: changing this function
// moves consumers between the primary and the canary across the whole fleet.
func stickyBucket(key []byte) uint64 {
	// FNV's low bits mix poorly for short keys that differ in their last byte; the
	// murmur3 finalizer spreads every input bit over the whole word before the modulo.
	return balancer.Mix(balancer.FNV1a(stickyBasis, key)) % stickyBuckets
}

// stickyBasis is FNV-1a's state after the prefix "tollgate/canary\x00": the sticky hash
// of a key is then unrelated to other hashes the edge takes of the same key (the hash
// balancer's ring), so the consumers a canary gets are not crowded onto a few of its
// targets.
var stickyBasis = balancer.FNV1a(balancer.FNVOffset, []byte("tollgate/canary\x00"))

// noteCanaryClaim records on x whether the claim of tok (a token bearerStep has just
// verified) selects the canary. The payload is decoded into the exchange's scratch
// buffer, which is free until a later step takes it.
func (x *exchange) noteCanaryClaim(m *jwtauth.ClaimMatch, tok []byte) {
	var ok bool
	ok, x.scratch = m.MatchToken(tok, x.scratch)
	if ok {
		x.canaryClaim = true
	}
}
