package limit

import (
	"math"
	"runtime"
	"sync/atomic"
)

// table is a fixed-size, set-associative map from a 64-bit key hash to one int64 (a
// GCRA theoretical arrival time, or an in-flight count). Its memory is allocated once:
// a flood of distinct keys evicts, it never grows.
//
// Reads and updates take no lock: a slot's value is changed with compare-and-swap, and
// a slot changes owner only while its value holds the busy mark, so a reader that sees
// the same key before and after reading a non-busy value read that key's value.
// Inserting a key takes its bucket's insert lock (one bucket of many, never the whole
// table), so two first requests of one key cannot create two slots for it.
type table struct {
	buckets   []bucket
	mask      uint64
	evictions atomic.Uint64 // evictions of keys that still had state (not idle ones)
}

const ways = 8

type bucket struct {
	lock  atomic.Uint32 // held while a key is inserted; lookups never take it
	_     [4]byte
	slots [ways]slot
}

type slot struct {
	key atomic.Uint64 // key hash; 0 = empty
	val atomic.Int64
}

// busy marks a slot whose key is being replaced.
const busy = math.MinInt64

// newTable makes a table of at least n slots (a power of two buckets of 8). Each slot
// costs 16 bytes.
func newTable(n int) *table {
	nb := 1
	for nb*ways < n {
		nb <<= 1
	}
	return &table{buckets: make([]bucket, nb), mask: uint64(nb - 1)}
}

func (t *table) bucketOf(h uint64) *bucket { return &t.buckets[h&t.mask] }

func (b *bucket) lookup(h uint64) *slot {
	for i := range b.slots {
		if b.slots[i].key.Load() == h {
			return &b.slots[i]
		}
	}
	return nil
}

// read returns the slot's value while it belongs to h; ok is false when it does not.
func (s *slot) read(h uint64) (v int64, ok bool) {
	for {
		if s.key.Load() != h {
			return 0, false
		}
		v = s.val.Load()
		if v == busy {
			runtime.Gosched()
			continue
		}
		if s.key.Load() != h {
			return 0, false
		}
		return v, true
	}
}

// insert gives h a slot holding init, or returns the slot h already has (inserted
// false). A victim is an empty slot, else (idleOnly) a slot whose value is 0, else the
// slot with the smallest value — for GCRA the key closest to a full bucket, idle
// (lossless to forget) when its value is not after now. It returns nil when idleOnly
// finds no victim.
func (b *bucket) insert(t *table, h uint64, init, now int64, idleOnly bool) (s *slot, inserted bool) {
	for !b.lock.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
	defer b.lock.Store(0)
	for {
		if s := b.lookup(h); s != nil {
			return s, false
		}
		var victim *slot
		var vv int64
		best := int64(math.MaxInt64)
		for i := range b.slots {
			c := &b.slots[i]
			v := c.val.Load()
			if c.key.Load() == 0 {
				victim, vv = c, v
				break
			}
			if idleOnly {
				if v == 0 {
					victim, vv = c, v
					break
				}
				continue
			}
			if v < best {
				victim, vv, best = c, v, v
			}
		}
		if victim == nil {
			return nil, false
		}
		if !victim.val.CompareAndSwap(vv, busy) {
			continue // its owner just changed it: choose again
		}
		if victim.key.Load() != 0 && !idleOnly && vv > now {
			t.evictions.Add(1)
		}
		victim.key.Store(h)
		victim.val.Store(init)
		return victim, true
	}
}

// take admits one request of key h to a GCRA with emission interval ti and tolerance
// tol at now. When admitted, tat is the new theoretical arrival time; when refused, the
// current one (unchanged). s is the slot to refund through.
func (t *table) take(h uint64, ti, tol, now int64) (ok bool, tat int64, s *slot) {
	b := t.bucketOf(h)
	for {
		s = b.lookup(h)
		if s == nil {
			// An unknown key has a full bucket: admitted (tol ≥ ti as burst ≥ 1).
			var inserted bool
			if s, inserted = b.insert(t, h, now+ti, now, false); inserted {
				return true, now + ti, s
			}
			if s == nil {
				return true, now + ti, nil // unreachable without idleOnly
			}
		}
		for {
			v, ok := s.read(h)
			if !ok {
				break // the slot changed owner: look again
			}
			tat = max(v, now)
			nt := tat + ti
			if nt-now > tol {
				return false, tat, s
			}
			if s.val.CompareAndSwap(v, nt) {
				if s.key.Load() != h {
					// Lost a race with an eviction that reused the slot for another key
					// and happened to leave the same value: undo, look again.
					s.val.CompareAndSwap(nt, v)
					break
				}
				return true, nt, s
			}
		}
	}
}

// refund gives back one emission interval taken from h's slot s (nil: nothing to give
// back).
func (s *slot) refund(h uint64, ti int64) {
	if s == nil {
		return
	}
	for {
		v, ok := s.read(h)
		if !ok {
			return // evicted meanwhile: its state is gone anyway
		}
		if s.val.CompareAndSwap(v, v-ti) {
			return
		}
	}
}

// acquire counts one more in-flight request of key h unless max are in flight. A nil
// slot with ok true means the bucket had no room to track h: admitted untracked.
func (t *table) acquire(h uint64, max int64) (s *slot, ok bool) {
	b := t.bucketOf(h)
	for {
		s = b.lookup(h)
		if s == nil {
			var inserted bool
			if s, inserted = b.insert(t, h, 1, 0, true); inserted {
				return s, true
			}
			if s == nil {
				return nil, true
			}
		}
		for {
			v, ok := s.read(h)
			if !ok {
				break
			}
			if v >= max {
				return nil, false
			}
			if s.val.CompareAndSwap(v, v+1) {
				// With a count above 0 the slot cannot change owner, so this check
				// is final.
				if s.key.Load() != h {
					s.val.Add(-1)
					break
				}
				return s, true
			}
		}
	}
}
