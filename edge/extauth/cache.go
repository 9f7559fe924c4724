package extauth

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
)

// CacheSlots is the size of a route's table, allocated on the first answer it keeps.
const CacheSlots = 4096

// Budget bounds cached answers: Tenant counts one tenant's (shared by its routes'
// caches), Total the edge's. A new entry needs room in both, else it is not cached.
type Budget struct {
	Tenant, Total       *atomic.Int64
	MaxTenant, MaxTotal int64
}

// Cache is a route's answers: a table of CacheSlots atomic pointers, each key in one of
// two neighbouring slots, so reading takes no lock and allocates nothing. Writes (after
// an exchange with the authorizer, a network round trip) take mu. A cache goes with its
// route entry: a changed route gets a new one (Drop gives the old one's budget back).
type Cache struct {
	table   atomic.Pointer[[CacheSlots]atomic.Pointer[Verdict]]
	budget  Budget
	mu      sync.Mutex
	used    int64 // slots filled, under mu
	dropped bool  // under mu
	flights map[[32]byte]*flight
}

// flight is an exchange with the authorizer in progress for one key.
type flight struct {
	done   chan struct{}
	v      *Verdict
	reason Reason
	err    error
}

var errAborted = errors.New("the exchange with the authorizer was abandoned")

// Do runs ask for key unless an exchange for the same key is in progress, in which case
// it waits for that one and returns its outcome: a burst of first requests with one
// credential asks the authorizer once (no stampede). ask must finish the verdict (and
// cache it) before returning: waiters only read it.
func (c *Cache) Do(key *[32]byte, ask func() (*Verdict, Reason, error)) (*Verdict, Reason, error) {
	c.mu.Lock()
	if f := c.flights[*key]; f != nil {
		c.mu.Unlock()
		<-f.done
		return f.v, f.reason, f.err
	}
	f := &flight{done: make(chan struct{}), reason: Unreachable, err: errAborted}
	if c.flights == nil {
		c.flights = make(map[[32]byte]*flight)
	}
	c.flights[*key] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.flights, *key)
		c.mu.Unlock()
		close(f.done)
	}()
	f.v, f.reason, f.err = ask()
	return f.v, f.reason, f.err
}

// NewCache returns an empty cache drawing on b.
func NewCache(b Budget) *Cache { return &Cache{budget: b} }

func slot(key *[32]byte) uint64 {
	return binary.LittleEndian.Uint64(key[:8]) & (CacheSlots - 1) &^ 1
}

// Get returns the live answer for key at now (Unix ns), or nil.
func (c *Cache) Get(key *[32]byte, now int64) *Verdict {
	t := c.table.Load()
	if t == nil {
		return nil
	}
	i := slot(key)
	for j := i; j < i+2; j++ {
		if v := t[j].Load(); v != nil && v.Key == *key && now < v.Expires {
			return v
		}
	}
	return nil
}

// Put stores v (v.Expires absolute) in one of its key's two slots: the one holding the
// same key, else an empty one, else an expired one, else the one expiring first.
func (c *Cache) Put(v *Verdict, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return
	}
	t := c.table.Load()
	if t == nil {
		t = new([CacheSlots]atomic.Pointer[Verdict])
		c.table.Store(t)
	}
	i := slot(&v.Key)
	a, b := t[i].Load(), t[i+1].Load()
	j := i + 1
	switch {
	case a != nil && a.Key == v.Key, a == nil && (b == nil || b.Key != v.Key):
		j = i
	case b != nil && b.Key == v.Key, b == nil:
	case a.Expires <= now || a.Expires <= b.Expires:
		j = i
	}
	if t[j].Load() == nil {
		if c.budget.Tenant.Load() >= c.budget.MaxTenant || c.budget.Total.Load() >= c.budget.MaxTotal {
			return
		}
		c.budget.Tenant.Add(1)
		c.budget.Total.Add(1)
		c.used++
	}
	t[j].Store(v)
}

// Drop forgets the cache's answers and gives their room back to the budget; it takes
// no more.
func (c *Cache) Drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped {
		return
	}
	c.dropped = true
	c.budget.Tenant.Add(-c.used)
	c.budget.Total.Add(-c.used)
	c.used = 0
	c.table.Store(nil)
}
