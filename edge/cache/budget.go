package cache

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/tenants"
)

// Budget is the edge's response-cache memory, shared by every tenant's cached
// routes (Config.CacheBytes). Every kept answer counts its bytes against its tenant and
// the edge; the total never passes the budget, and a tenant never passes its plan's
// cache_bytes. When the budget is full, room is made by evicting the oldest answers of
// the tenant most over its fair share (the budget ÷ the tenants holding answers), so a
// tenant flooding the cache with distinct answers evicts its own and never takes another
// tenant below its fair share.
//
// Only storing an answer (a miss the upstream answered) and dropping one touch this: a
// hit takes its shard's lock as before and nothing here.
type Budget struct {
	limit int64
	used  atomic.Int64
	// evictMu lets one store at a time make room in a full budget; the others wait and
	// then find the room it made.
	evictMu sync.Mutex
	mu      sync.Mutex // guards tenants
	tenants map[string]*Tenant

	evictTenant prometheus.Counter // evicted for the tenant's own cache_bytes
	evictBudget prometheus.Counter // evicted to make room in the edge's budget
}

// Tenant is one tenant's share of the budget: its bytes and its answers, oldest
// first, across all its routes.
type Tenant struct {
	budget *Budget
	limit  atomic.Int64 // the plan's cache_bytes, at most the budget
	used   atomic.Int64 // its answers' sizes, and stores reserved but not yet linked
	mu     sync.Mutex   // guards the list
	head   *Entry
	tail   *Entry
}

func NewBudget(limit int64, reg prometheus.Registerer) (*Budget, error) {
	b := &Budget{limit: limit, tenants: map[string]*Tenant{}}
	evictions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_edge_cache_evictions_total",
		Help: "Answers the response cache evicted before they expired to make room: reason tenant_limit (the tenant's plan's cache_bytes) or budget (the edge's TOLLGATE_EDGE_CACHE_BYTES, taken from the tenant most over its fair share).",
	}, []string{"reason"})
	cs := []prometheus.Collector{
		evictions,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_edge_cache_bytes",
			Help: "Bytes of kept answers in the edge's response cache (bodies, headers, keys and a fixed overhead each).",
		}, func() float64 { return float64(b.used.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_edge_cache_budget_bytes",
			Help: "The edge's response-cache budget (TOLLGATE_EDGE_CACHE_BYTES).",
		}, func() float64 { return float64(b.limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_edge_cache_tenants",
			Help: "Tenants holding answers in the edge's response cache: the budget's fair share is the budget divided by them.",
		}, func() float64 { return float64(b.holders()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	b.evictTenant = evictions.WithLabelValues("tenant_limit")
	b.evictBudget = evictions.WithLabelValues("budget")
	return b, nil
}

// Tenant returns t's share, made on first use, with its limit set from t's platform plan
// (the whole budget when the entry carries none); a lowered limit evicts at once.
func (b *Budget) Tenant(t *tenants.Tenant) *Tenant {
	b.mu.Lock()
	tc := b.tenants[t.ID]
	if tc == nil {
		tc = &Tenant{budget: b}
		b.tenants[t.ID] = tc
	}
	b.mu.Unlock()
	limit := b.limit
	if t.Limits != nil && t.Limits.Resources != nil {
		limit = min(limit, t.Limits.Resources.CacheBytes)
	}
	tc.limit.Store(limit)
	for tc.used.Load() > limit && tc.evictOldest(b.evictTenant) {
	}
	return tc
}

// Forget drops a tenant's share once none of its routes caches any more (the caller has
// dropped them all).
func (b *Budget) Forget(tenantID string) {
	b.mu.Lock()
	delete(b.tenants, tenantID)
	b.mu.Unlock()
}

func (b *Budget) holders() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, tc := range b.tenants {
		if tc.used.Load() > 0 {
			n++
		}
	}
	return n
}

func (t *Tenant) limitNow() int { return int(t.limit.Load()) }

// addWithin adds n to a when the sum stays within max, atomically.
func addWithin(a *atomic.Int64, n, max int64) bool {
	for {
		u := a.Load()
		if u+n > max {
			return false
		}
		if a.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// reserve counts size bytes against t and the budget, evicting t's own oldest answers
// past its limit and, past the budget, those of the tenant most over its fair share. It
// reports whether the bytes are counted; the caller then links the entry, or gives them
// back with unreserve.
func (t *Tenant) reserve(size int64) bool {
	b := t.budget
	if size > t.limit.Load() {
		return false
	}
	for !addWithin(&t.used, size, t.limit.Load()) {
		if !t.evictOldest(b.evictTenant) {
			return false
		}
	}
	if addWithin(&b.used, size, b.limit) || b.makeRoom(size) {
		return true
	}
	t.used.Add(-size)
	return false
}

func (t *Tenant) unreserve(size int64) {
	t.used.Add(-size)
	t.budget.used.Add(-size)
}

// makeRoom evicts until size more bytes fit in the budget, and counts them. The tenant
// evicted from is the one most over its fair share, its oldest answers first, until
// another is further over or there is room: each scan of the tenants pays for a run of
// evictions. The storing tenant has counted size already, so a tenant flooding the
// cache is the most over and evicts its own answers; a tenant within its fair share is
// never the most over while the budget is full.
func (b *Budget) makeRoom(size int64) bool {
	b.evictMu.Lock()
	defer b.evictMu.Unlock()
	for !addWithin(&b.used, size, b.limit) {
		victim, next := b.mostOver()
		if victim == nil {
			return false
		}
		for {
			if !victim.evictOldest(b.evictBudget) {
				if victim.used.Load() > 0 {
					// Its bytes are stores in flight, not answers yet: nothing to evict.
					return false
				}
				break
			}
			if b.used.Load()+size <= b.limit || victim.used.Load() < next {
				break
			}
		}
	}
	return true
}

// mostOver returns the tenant holding the most bytes over its fair share, and the bytes
// at which it would stop being the most over (the runner-up's usage, as fair shares are
// equal), or nil when no tenant holds any.
func (b *Budget) mostOver() (victim *Tenant, next int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var top int64
	for _, tc := range b.tenants {
		u := tc.used.Load()
		switch {
		case u > top:
			next, top, victim = top, u, tc
		case u > next:
			next = u
		}
	}
	return victim, next
}

// link appends a stored entry (counted by reserve) to t's list.
func (t *Tenant) link(e *Entry) {
	t.mu.Lock()
	e.tprev = t.tail
	if t.tail != nil {
		t.tail.tnext = e
	} else {
		t.head = e
	}
	t.tail = e
	t.mu.Unlock()
}

// unlink takes a removed entry off t's list and gives its bytes back (the caller holds
// the entry's shard lock and has taken it out of the shard's map).
func (t *Tenant) unlink(e *Entry) {
	t.mu.Lock()
	if e.tprev != nil {
		e.tprev.tnext = e.tnext
	} else {
		t.head = e.tnext
	}
	if e.tnext != nil {
		e.tnext.tprev = e.tprev
	} else {
		t.tail = e.tprev
	}
	e.tprev, e.tnext = nil, nil
	t.mu.Unlock()
	t.used.Add(-int64(e.size))
	t.budget.used.Add(-int64(e.size))
}

// evictOldest removes t's oldest answer, wherever it is kept; false when t holds none.
// The list is read under t's lock, the entry removed under its shard's (the lock order
// everywhere is shard, then tenant): an entry removed meanwhile by someone else is
// already off the list, and the next call sees the new oldest.
func (t *Tenant) evictOldest(c prometheus.Counter) bool {
	t.mu.Lock()
	e := t.head
	t.mu.Unlock()
	if e == nil {
		return false
	}
	s := e.shard
	s.mu.Lock()
	if e.ck != nil {
		s.removeLocked(e)
		c.Inc()
	}
	s.mu.Unlock()
	return true
}
