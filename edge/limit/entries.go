package limit

import (
	"math"
	"runtime"
	"sync/atomic"
)

// entry is the in-process state of one key that is counted in Redis in batches: an
// approximate rate (this edge's view of the shared TAT and its admissions not yet
// pushed) or one month of a quota (the last cluster total heard and the admissions not
// yet pushed). Entries are created on a key's first request, which is the only
// allocation on those paths; the sync loop pushes and refreshes the tracked ones.
type entry struct {
	h        uint64
	quota    bool
	redisKey string
	expireAt int64 // quota: unix seconds at which the Redis key may expire

	// view is, for a rate, the shared TAT as last read plus this edge's admissions
	// since (ns); for a quota, the cluster's count as last read.
	view     atomic.Int64
	pending  atomic.Int64 // admissions not yet pushed
	inflight atomic.Int64 // quota: pushed, answer not back yet
	interval atomic.Int64 // rate: emission interval of the rule last used, ns
	used     atomic.Int64 // time of the last request, ns
	tracked  atomic.Bool  // on the sync loop's list
	evicted  atomic.Bool  // dropped from the table: synced until drained, then forgotten
}

// etable holds the entries: fixed-size and set-associative like table, with pointers
// in the slots. A full bucket evicts its least recently used entry.
type etable struct {
	buckets   []ebucket
	mask      uint64
	evictions atomic.Uint64
}

type ebucket struct {
	lock  atomic.Uint32
	slots [ways]atomic.Pointer[entry]
}

func newETable(n int) *etable {
	nb := 1
	for nb*ways < n {
		nb <<= 1
	}
	return &etable{buckets: make([]ebucket, nb), mask: uint64(nb - 1)}
}

func (t *etable) capacity() int { return len(t.buckets) * ways }

func (t *etable) get(h uint64) *entry {
	b := &t.buckets[h&t.mask]
	for i := range b.slots {
		if e := b.slots[i].Load(); e != nil && e.h == h {
			return e
		}
	}
	return nil
}

// insert stores e unless its key is already there, and returns the entry of the key.
func (t *etable) insert(e *entry) *entry {
	b := &t.buckets[e.h&t.mask]
	for !b.lock.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
	defer b.lock.Store(0)
	var empty, lru *atomic.Pointer[entry]
	oldest := int64(math.MaxInt64)
	for i := range b.slots {
		s := &b.slots[i]
		o := s.Load()
		if o == nil {
			if empty == nil {
				empty = s
			}
			continue
		}
		if o.h == e.h {
			return o
		}
		if u := o.used.Load(); lru == nil || u < oldest {
			lru, oldest = s, u
		}
	}
	victim := empty
	if victim == nil {
		victim = lru
		victim.Load().evicted.Store(true)
		t.evictions.Add(1)
	}
	victim.Store(e)
	return e
}

// takeRate admits one request against the entry's view of the shared GCRA.
func (e *entry) takeRate(ti, tol, now int64) (ok bool, tat int64) {
	for {
		v := e.view.Load()
		tat = max(v, now)
		nt := tat + ti
		if nt-now > tol {
			return false, tat
		}
		if e.view.CompareAndSwap(v, nt) {
			e.pending.Add(1)
			return true, nt
		}
	}
}

func (e *entry) refundRate(ti int64) {
	e.view.Add(-ti)
	e.pending.Add(-1)
}

// takeQuota admits one request against a quota of limit. Healthy, the edge admits while
// the cluster count heard plus its own unconfirmed admissions stays within the limit;
// degraded (Redis unavailable), within its share of what was left: (limit − count) ÷
// edges. used is the count after the request as far as this edge knows.
func (e *entry) takeQuota(limit, edges int64, degraded bool) (ok bool, used int64) {
	for {
		pend := e.pending.Load()
		known := max(e.view.Load(), 0) // -1: not read yet
		if degraded {
			if (pend+1)*edges > limit-known {
				return false, known + pend*edges
			}
			used = known + (pend+1)*edges
		} else {
			u := known + e.inflight.Load() + pend
			if u+1 > limit {
				return false, u
			}
			used = u + 1
		}
		if e.pending.CompareAndSwap(pend, pend+1) {
			return true, min(used, limit)
		}
	}
}

func (e *entry) refundQuota() { e.pending.Add(-1) }
