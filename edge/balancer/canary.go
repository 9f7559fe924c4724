package balancer

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"

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
// Split holds the rule; the edge reads the request for it (the match header's value,
// the sticky key) and matches the claim, which is known only while the token is at hand.

// Split is the rule that sends a route's requests to its canary or to its own targets.
// It is built once per route entry and kept across recompiles while the entry is
// unchanged, so the schedule keeps its place.
type Split struct {
	// Header is Match.Header (nil: no header match); the edge hands its value to
	// MatchValue.
	Header []byte
	// Sticky is what the bucket is hashed from (StickyOff: no sticky split, or a weight
	// of 0 or 100, where no key is needed); StickyHeader, when it is StickyOnHeader, the
	// header's name.
	Sticky       int
	StickyHeader []byte

	weight    int      // percent of the unmatched requests
	values    []string // Match.Values; empty: any value
	threshold uint64   // buckets below it are the canary's: weight × 100
	sched     []uint8  // one cycle; 1 sends to the canary
	next      atomic.Uint64
}

// What a sticky canary hashes.
const (
	StickyOff = iota
	StickyOnConsumer
	StickyOnIP
	StickyOnHeader
)

// stickyBuckets is how many buckets the sticky hash spreads keys over: 100 per percent
// of weight.
const stickyBuckets = 10_000

// Init sets s, a zero Split (held by value, so that its caller reaches it without a
// pointer), to the split of a validated canary.
func (s *Split) Init(spec *tenants.Canary) {
	s.weight = spec.Weight
	s.threshold = uint64(spec.Weight) * stickyBuckets / 100
	s.sched = SmoothWRR([]int{100 - spec.Weight, spec.Weight})
	// A random start, as for the targets' rotation: the cycle begins with the primary's
	// turns, so a route changed more often than it is called would otherwise starve its
	// canary.
	s.next.Store(rand.Uint64())
	if m := spec.Match; m != nil {
		s.values = m.Values
		if m.Header != "" {
			s.Header = []byte(m.Header)
		}
	}
	if spec.Sticky && spec.Weight != 0 && spec.Weight != 100 {
		switch on := spec.StickyOn; {
		case on == tenants.HashOnIP:
			s.Sticky = StickyOnIP
		case strings.HasPrefix(on, tenants.HashOnHeader):
			s.Sticky, s.StickyHeader = StickyOnHeader, []byte(on[len(tenants.HashOnHeader):])
		default:
			s.Sticky = StickyOnConsumer
		}
	}
}

// Pick reports whether an unmatched request goes to the canary; key is its sticky key,
// ok false when it has none (or the split is not sticky).
func (s *Split) Pick(key []byte, ok bool) bool {
	switch s.weight {
	case 0:
		return false
	case 100:
		return true
	}
	if ok {
		return StickyBucket(key) < s.threshold
	}
	return s.sched[s.next.Add(1)%uint64(len(s.sched))] == 1
}

// MatchValue reports whether a header value selects the canary: any non-empty value
// when Values is empty, else one of Values exactly.
func (s *Split) MatchValue(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	if len(s.values) == 0 {
		return true
	}
	for _, want := range s.values {
		if string(v) == want {
			return true
		}
	}
	return false
}

// StickyBucket hashes a sticky key into 0…9999. Every edge must compute the same bucket
// for the same key, today and after any upgrade: changing this function moves consumers
// between the primary and the canary across the whole fleet.
func StickyBucket(key []byte) uint64 {
	// FNV's low bits mix poorly for short keys that differ in their last byte; the
	// murmur3 finalizer spreads every input bit over the whole word before the modulo.
	return Mix(FNV1a(stickyBasis, key)) % stickyBuckets
}

// stickyBasis is FNV-1a's state after the prefix "tollgate/canary\x00": the sticky hash
// of a key is then unrelated to other hashes the edge takes of the same key (the hash
// balancer's ring), so the consumers a canary gets are not crowded onto a few of its
// targets.
var stickyBasis = FNV1a(FNVOffset, []byte("tollgate/canary\x00"))
