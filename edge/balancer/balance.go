package balancer

import (
	"slices"
	"strconv"

	"tollgate/tenants"
)

// Balancing over the targets that are in rotation.
//
// A target is out of rotation while its active check says unhealthy, while passive health
// has it ejected, or while its circuit is open (and, half-open, while its one trial
// request is in flight). Every method skips such targets and spreads over the rest as it
// would over a smaller set: round-robin skips their slots of the weighted cycle (the
// others keep their weights' proportions), least_conn compares only the targets in
// rotation, and hash walks the ring on to the next virtual node of a target in rotation,
// so only the keys of the targets out move, and they come back when their target does.
// With none left the caller answers 503 no_healthy_upstream.

// Balancing methods, compiled.
const (
	balanceRoundRobin = iota
	balanceLeastConn
	balanceHash
)

// HashSource is what a hash upstream's key is computed from; the caller, which has the
// request, computes it (Key) and passes it in.
type HashSource uint8

const (
	HashNone     HashSource = iota // not a hash upstream: no key
	HashConsumer                   // the consumer's id, else the client's address
	HashIP                         // the client's address
	HashHeader                     // a request header's value (HashOn's name)
)

// HashOn is what u's requests are hashed by and, for HashHeader, the header's name.
func (u *Upstream) HashOn() (HashSource, []byte) { return u.hashOn, u.hashHeader }

// vnodesPerTarget is the ring's size per target of average weight: enough virtual nodes
// that targets of equal weight get shares within a few percent of each other.
const vnodesPerTarget = 160

// ringNode is a virtual node of the consistent hash ring.
type ringNode struct {
	hash   uint64
	target uint8
}

// buildRing places weight-proportional virtual nodes of each target on the ring: target
// i gets about weight_i / mean weight × vnodesPerTarget of them (at least one unless its
// weight is 0). A node's place depends only on its target's URL and its number, so every
// edge builds the same ring and a target added or removed moves only its own keys.
func buildRing(targets []*Target) []ringNode {
	total := 0
	for _, t := range targets {
		total += t.weight
	}
	if total == 0 {
		return nil
	}
	var ring []ringNode
	var buf []byte
	for i, t := range targets {
		if t.weight == 0 {
			continue
		}
		n := max(1, t.weight*vnodesPerTarget*len(targets)/total)
		for v := range n {
			buf = append(buf[:0], t.URL...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(v), 10)
			ring = append(ring, ringNode{hash: Key(buf), target: uint8(i)})
		}
	}
	slices.SortFunc(ring, func(a, b ringNode) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return int(a.target) - int(b.target)
	})
	return ring
}

// Key is the ring position of a request's hash key: FNV-1a 64 of b, the same on every
// edge (unlike maphash) and allocation-free, then spread by Mix.
func Key(b []byte) uint64 { return Mix(FNV1a(FNVOffset, b)) }

// FNV1a continues an FNV-1a 64 hash in state h over b; FNVOffset is its start.
func FNV1a(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

const (
	FNVOffset  = 14695981039346656037
	fnvPrime64 = 1099511628211
)

// Mix spreads FNV's output over the whole range (a murmur3 finalizer), so short keys
// that differ in a byte land far apart.
func Mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// compileBalance sets u's balancing from its validated settings.
func (u *Upstream) compileBalance(spec *tenants.Upstream) {
	switch spec.Balance {
	case tenants.BalanceLeastConn:
		u.balance = balanceLeastConn
	case tenants.BalanceHash:
		u.balance = balanceHash
		u.ring = buildRing(u.targets)
		switch spec.HashOn {
		case tenants.HashOnIP:
			u.hashOn = HashIP
		case tenants.HashOnConsumer, "":
			u.hashOn = HashConsumer
		default:
			u.hashOn = HashHeader
			u.hashHeader = []byte(spec.HashOn[len(tenants.HashOnHeader):])
		}
	default:
		u.balance = balanceRoundRobin
	}
}

// choose picks a target in rotation for one attempt of a request, avoiding the targets
// in tried (a bit per target index); key is the request's hash key when hasKey. With
// trial, a target whose circuit is half-open may be chosen for its one trial request
// (isTrial; the caller must then report the outcome); without, such targets are
// skipped. It returns nil when no target outside tried is in rotation.
func (u *Upstream) choose(now int64, tried uint64, key uint64, hasKey, trial bool) (t *Target, isTrial bool) {
	// A target that loses the race for its half-open trial is skipped and the pick made
	// again without it; each round excludes one more target, so this ends.
	for range len(u.targets) + 1 {
		switch {
		case u.balance == balanceLeastConn:
			t = u.leastConn(now, tried)
		case u.balance == balanceHash && hasKey:
			t = u.onRing(now, tried, key)
		default:
			t = u.roundRobin(now, tried)
		}
		if t == nil {
			return nil, false
		}
		if ok, isTrial := t.admit(now, trial); ok {
			return t, isTrial
		}
		tried |= 1 << t.index
	}
	return nil, false
}

// roundRobin takes the weighted cycle's next slot whose target is in rotation. A slot
// of a target out of rotation is skipped by taking the next slot of the shared counter,
// so over a cycle each target in rotation still gets exactly its weight's slots (walking
// on from the skipped slot instead would hand all its turns to the target after it).
// After a few skips (most targets out, or concurrent picks taking the slots this one
// could have had) it takes any target in rotation, as a cycle may be 64,000 slots long.
// A retry (tried not empty) looks ahead from the current slot without taking any.
func (u *Upstream) roundRobin(now int64, tried uint64) *Target {
	n := uint32(len(u.seq))
	tries := min(n, 4*uint32(len(u.targets)))
	var i uint32
	if tried != 0 {
		// A retry walks on from the current slot without taking slots: taking them
		// would hand the next request the target that just failed, every time.
		i = u.next.Load()
		for k := range tries {
			t := u.targets[u.seq[(i+k)%n]]
			if tried&(1<<t.index) == 0 && t.inRotation(now) {
				return t
			}
		}
	} else {
		for range tries {
			i = u.next.Add(1)
			t := u.targets[u.seq[i%n]]
			if t.inRotation(now) {
				return t
			}
		}
	}
	m := uint32(len(u.targets))
	for k := range m {
		t := u.targets[(i+k)%m]
		if t.weight > 0 && tried&(1<<t.index) == 0 && t.inRotation(now) {
			return t
		}
	}
	return nil
}

// leastConn picks the target in rotation with the fewest requests in flight relative to
// its weight. The scan starts at a rotating offset and keeps the first of equals, so
// equally loaded targets (an idle route) share requests round-robin instead of the first
// one taking them all.
func (u *Upstream) leastConn(now int64, tried uint64) *Target {
	n := uint32(len(u.targets))
	start := u.next.Add(1)
	var best *Target
	var bestLoad int64
	for k := range n {
		t := u.targets[(start+k)%n]
		if t.weight == 0 || tried&(1<<t.index) != 0 || !t.inRotation(now) {
			continue
		}
		load := int64(t.inflight.Load())
		// load/weight < bestLoad/best.weight, without division.
		if best == nil || load*int64(best.weight) < bestLoad*int64(t.weight) {
			best, bestLoad = t, load
		}
	}
	return best
}

// onRing walks the ring clockwise from key to the first virtual node of a target in
// rotation. Once every target has been seen out of rotation the walk stops early.
func (u *Upstream) onRing(now int64, tried uint64, key uint64) *Target {
	ring := u.ring
	n := len(ring)
	if n == 0 {
		return nil
	}
	i, _ := slices.BinarySearchFunc(ring, key, func(nd ringNode, k uint64) int {
		switch {
		case nd.hash < k:
			return -1
		case nd.hash > k:
			return 1
		}
		return 0
	})
	all := uint64(1)<<len(u.targets) - 1
	if len(u.targets) == 64 {
		all = ^uint64(0)
	}
	seen := tried
	for k := range n {
		t := u.targets[ring[(i+k)%n].target]
		bit := uint64(1) << t.index
		if seen&bit != 0 {
			continue
		}
		if t.inRotation(now) {
			return t
		}
		seen |= bit
		if seen&all == all {
			break
		}
	}
	return nil
}
