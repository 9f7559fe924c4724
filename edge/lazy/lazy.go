// Package lazy keeps an edge's memory in step with its traffic rather than its config
// (TOLLGATE_EDGE_CONFIG_STORE=disk): every entry the edge receives goes to its local
// store (edge/tenantstore), and only what finds a tenant stays in memory for all of them:
// each tenant's slug, custom domains and the rev of its newest entry, and its slot in the
// host map. A tenant's entries are read from the store and compiled when a request first
// needs it; concurrent first requests wait on one load. Compiled tenants count against a
// memory budget, and when it is exceeded those idle longest are evicted, to be loaded
// again by their next request.
//
// The package is generic over the snapshot type, so the edge's own slot type is Slot and
// its request path finds a tenant exactly as it does with every tenant resident.
package lazy

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/entrycheck"
	"tollgate/edge/tenantstore"
	"tollgate/tenants"
)

// clock is a coarse clock, in seconds since the first Tenants was made (0: none was):
// what a request stores in its tenant's slot to say it was used, without reading the time.
var (
	clock     atomic.Int64
	clockOnce sync.Once
)

func startClock() {
	clockOnce.Do(func() {
		base := time.Now()
		clock.Store(1)
		go func() {
			for range time.Tick(time.Second) {
				clock.Store(int64(time.Since(base)/time.Second) + 1)
			}
		}()
	})
}

// Slot is a tenant's place in the host map. Snap is its compiled snapshot, nil while it is
// not loaded (or, for a slot not made here, while it has none).
type Slot[T any] struct {
	Snap atomic.Pointer[T]
	used atomic.Int64 // clock when last used
	t    *tenant[T]   // nil: not one of a Tenants
}

// Touch marks the slot used now: a load and, at most once a second, a store.
func (s *Slot[T]) Touch() {
	if c := clock.Load(); s.used.Load() != c {
		s.used.Store(c)
	}
}

// tenant is what stays in memory of every tenant.
type tenant[T any] struct {
	id, slug string
	maxRev   int64
	domains  map[string]entrycheck.Domain // by id; nil: none
	slot     *Slot[T]
	gone     bool // deleted
	resident bool // its entries are in the edge (loaded, or loading)
	fetched  bool // its entries were fetched on their own during a backfill
	bytes    int64
	loading  chan struct{} // closed when the running load ends; nil: none runs
}

// Config connects a Tenants to its edge.
type Config[T any] struct {
	Store *tenantstore.Store
	// Budget is the estimated memory of compiled tenants above which those idle longest
	// are evicted.
	Budget int64
	// Apply hands an entry to the edge (value nil: a delete); Compile compiles what was
	// applied; Evict drops a tenant's entries and snapshot from the edge.
	Apply   func(key string, value []byte, rev uint64)
	Compile func()
	Evict   func(id string)
	// Seen hears of every update's KV revision, for the edge's metric of it.
	Seen func(rev uint64)
	// Publish installs new host maps: slug → slot, custom domain → slot (Pending for a
	// domain not verified) and custom domain → certificate.
	Publish  func(hosts, custom map[string]*Slot[T], certs map[string]*tls.Certificate)
	Pending  *Slot[T]
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Tenants is the index of every tenant of a store, and the edge's set of loaded ones.
type Tenants[T any] struct {
	cfg Config[T]

	// mu serializes the store, the index and the entries handed to the edge: a load's
	// entries reach the edge before any update that follows them in the store.
	mu            sync.Mutex
	st            *tenantstore.Store
	byID          map[string]*tenant[T]
	res           map[*tenant[T]]struct{}
	residentBytes int64
	hostsDirty    bool

	smu   sync.RWMutex // guards slots only; taken inside mu and inside the edge's locks
	slots map[string]*Slot[T]

	bf *backfill // nil: the store is whole and the watch its only source

	m metrics
}

type metrics struct {
	resident      prometheus.Gauge
	residentBytes prometheus.Gauge
	loads         prometheus.Counter
	evictions     prometheus.Counter
	loadSeconds   prometheus.Histogram
	ignored       prometheus.Counter
	updates       prometheus.Counter
	backfilling   prometheus.Gauge
	fetches       prometheus.Counter
}

// tenantOverhead and entryFactor estimate a compiled tenant's memory from its entries'
// bytes: a compiled route with its decoded entry takes about eight times its JSON, and a
// tenant's snapshot, metrics and maps some 32 KiB (an edge's RSS grew by 68 KiB per
// tenant of 10 routes loaded, garbage not yet collected included).
const (
	tenantOverhead = 32 << 10
	entryFactor    = 8
)

// New reads the store's index (tenants, slugs, custom domains) and publishes the host
// maps: every tenant is found from then on, none is compiled.
func New[T any](cfg Config[T]) (*Tenants[T], error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Tenants[T]{
		cfg: cfg, st: cfg.Store,
		byID: map[string]*tenant[T]{}, res: map[*tenant[T]]struct{}{}, slots: map[string]*Slot[T]{},
	}
	l.m = metrics{
		resident: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_edge_tenants_resident",
			Help: "Tenants compiled in memory (TOLLGATE_EDGE_CONFIG_STORE=disk)."}),
		residentBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_edge_tenants_resident_bytes",
			Help: "Estimated memory of the tenants compiled in memory, against TOLLGATE_EDGE_TENANT_MEMORY."}),
		loads: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_edge_tenant_loads_total",
			Help: "Tenants read from the config store and compiled because a request needed them."}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_edge_tenant_evictions_total",
			Help: "Compiled tenants dropped from memory to stay within TOLLGATE_EDGE_TENANT_MEMORY."}),
		loadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tollgate_edge_tenant_load_seconds",
			Help:    "Time to read a tenant from the config store and compile it, as its first request waits for it.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 10}}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_edge_config_store_updates_total",
			Help: "Updates the watch delivered to the config store; after a restart, only those since its last revision."}),
		backfilling: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_edge_config_store_backfilling",
			Help: "1 while the config store is backfilled behind a fast start (TOLLGATE_EDGE_FAST_START), else 0."}),
		fetches: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_edge_tenant_fetches_total",
			Help: "Tenants fetched from the bucket on their own because a request needed them before the backfill reached them."}),
		ignored: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_edge_config_store_ignored_total",
			Help: "Entries the config store did not take: not newer than the one it holds."}),
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.st.Index(func(id, slug string, maxRev int64) {
		t := l.tenantLocked(id)
		t.slug, t.maxRev = slug, maxRev
	})
	if err == nil {
		err = l.st.Domains(func(key string, value []byte) {
			pk, ent, err := tenants.DecodeEntry(key, value)
			if err != nil || pk.Kind != tenants.KindDomain {
				return
			}
			if d, err := entrycheck.ParseDomain(ent.Domain); err == nil {
				t := l.tenantLocked(pk.TenantID)
				if t.domains == nil {
					t.domains = map[string]entrycheck.Domain{}
				}
				t.domains[pk.ID] = d
			}
		})
	}
	if err != nil {
		return nil, err
	}
	if cfg.Registry != nil {
		for _, c := range []prometheus.Collector{l.m.resident, l.m.residentBytes, l.m.loads, l.m.evictions, l.m.loadSeconds, l.m.ignored, l.m.updates, l.m.backfilling, l.m.fetches} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, err
			}
		}
	}
	startClock()
	l.publishLocked()
	return l, nil
}

// Close commits and closes the store; a load after it finds no entries.
func (l *Tenants[T]) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.Close()
}

// Tenants is the number of tenants the index holds.
func (l *Tenants[T]) Tenants() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byID)
}

// Resident is the number of tenants compiled in memory and their estimated bytes.
func (l *Tenants[T]) Resident() (n int, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.res), l.residentBytes
}

// SlotOf is the slot of a tenant the index holds, or nil. It takes no lock the edge's
// callbacks hold.
func (l *Tenants[T]) SlotOf(id string) *Slot[T] {
	l.smu.RLock()
	defer l.smu.RUnlock()
	return l.slots[id]
}

func (l *Tenants[T]) tenantLocked(id string) *tenant[T] {
	t := l.byID[id]
	if t == nil {
		t = &tenant[T]{id: id}
		t.slot = &Slot[T]{t: t}
		l.byID[id] = t
		l.smu.Lock()
		l.slots[id] = t.slot
		l.smu.Unlock()
	}
	return t
}

// Update takes one KV update (value nil: a delete) as the watch delivers it, in revision
// order; pending is how many more the server has queued behind it: at 0 the store
// commits and changed host maps are published.
func (l *Tenants[T]) Update(key string, value []byte, rev, pending uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m.updates.Inc()
	if l.cfg.Seen != nil {
		l.cfg.Seen(rev)
	}
	if l.bf == nil || l.bf.admit(key, rev, false) {
		if value == nil {
			l.deleteLocked(key, rev)
		} else {
			l.putLocked(key, value, rev)
		}
	} else {
		l.m.ignored.Inc()
	}
	if l.bf != nil && l.bf.done && rev >= l.bf.maxSide {
		l.bf = nil // the watch is past everything any other source wrote
	}
	if err := l.st.Written(rev, pending == 0); err != nil {
		l.cfg.Logger.Warn("edge: config store write failed; the edge keeps serving and replays from its last written revision after a restart", "err", err)
	}
	if pending == 0 && l.hostsDirty {
		l.publishLocked()
	}
}

// Flush commits the store and publishes changed host maps (the watch's initial load is in).
func (l *Tenants[T]) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.st.Commit(); err != nil {
		l.cfg.Logger.Warn("edge: config store write failed", "err", err)
	}
	if l.bf == nil && l.st.Partial() {
		// A backfill interrupted by a restart and finished without one (a fast start turned off).
		if err := l.st.SetPartial(false); err != nil {
			l.cfg.Logger.Warn("edge: config store write failed", "err", err)
		}
	}
	if l.hostsDirty {
		l.publishLocked()
	}
}

func (l *Tenants[T]) putLocked(key string, value []byte, rev uint64) {
	pk, ent, err := tenants.DecodeEntry(key, value)
	if err == nil {
		err = entrycheck.Validate(pk, ent)
	}
	var dom entrycheck.Domain
	if err == nil && pk.Kind == tenants.KindDomain {
		dom, err = entrycheck.ParseDomain(ent.Domain)
	}
	if err != nil {
		l.cfg.Apply(key, value, rev) // the edge rejects it, with its log line and metric
		return
	}
	if pk.Kind == tenants.KindTenant {
		if tomb := l.tomb(pk.TenantID, key); tomb != 0 && ent.Rev <= tomb {
			l.m.ignored.Inc()
			return
		}
	}
	held, oldSize, ok := l.held(key)
	if ok && ent.Rev <= held {
		l.m.ignored.Inc()
		return
	}
	t := l.tenantLocked(pk.TenantID)
	l.st.Put(key, ent.Rev, value, pk.Kind == tenants.KindDomain)
	t.maxRev = max(t.maxRev, ent.Rev)
	switch pk.Kind {
	case tenants.KindTenant:
		if t.slug != ent.Tenant.Slug {
			t.slug = ent.Tenant.Slug
			l.hostsDirty = true
		}
	case tenants.KindDomain:
		if t.domains == nil {
			t.domains = map[string]entrycheck.Domain{}
		}
		t.domains[pk.ID] = dom
		l.hostsDirty = true
	}
	l.st.SetIndex(t.id, t.slug, t.maxRev)
	if t.resident {
		l.cfg.Apply(key, value, rev)
		l.growLocked(t, int64(len(value)-oldSize))
	}
}

func (l *Tenants[T]) deleteLocked(key string, rev uint64) {
	pk, err := tenants.ParseKey(key)
	if err != nil {
		l.cfg.Apply(key, nil, rev) // rejected there
		return
	}
	t := l.byID[pk.TenantID]
	held, size, ok := l.held(key)
	if pk.Kind == tenants.KindTenant {
		if t == nil {
			return
		}
		// The tenant goes with everything it owns; its children's deletes follow and
		// find nothing. The tombstone keeps a late put of the old entry from reviving it.
		l.st.DeleteTenant(t.id, held)
		if t.resident {
			l.cfg.Apply(key, nil, rev)
			l.dropLocked(t)
		}
		t.gone = true
		delete(l.byID, t.id)
		l.smu.Lock()
		delete(l.slots, t.id)
		l.smu.Unlock()
		l.hostsDirty = true
		return
	}
	if !ok || size == 0 {
		return // nothing held: a replayed delete
	}
	l.st.Delete(key, held)
	if t == nil {
		return
	}
	if pk.Kind == tenants.KindDomain {
		delete(t.domains, pk.ID)
		l.hostsDirty = true
	}
	if t.resident {
		l.cfg.Apply(key, nil, rev)
		l.growLocked(t, -int64(size))
	}
}

func (l *Tenants[T]) growLocked(t *tenant[T], n int64) {
	t.bytes += n * entryFactor
	l.residentBytes += n * entryFactor
	l.m.residentBytes.Set(float64(l.residentBytes))
}

// dropLocked forgets that t is resident (the edge has dropped it).
func (l *Tenants[T]) dropLocked(t *tenant[T]) {
	t.resident = false
	l.residentBytes -= t.bytes
	t.bytes = 0
	delete(l.res, t)
	l.m.resident.Set(float64(len(l.res)))
	l.m.residentBytes.Set(float64(l.residentBytes))
}

// Load returns the snapshot of s's tenant, loading and compiling it from the store if it
// is not resident; nil when s is not a slot of l, or its tenant has nothing to serve.
func (l *Tenants[T]) Load(s *Slot[T]) *T {
	t := s.t
	if t == nil {
		return nil
	}
	l.mu.Lock()
	if p := s.Snap.Load(); p != nil || t.gone {
		l.mu.Unlock()
		return p
	}
	if ch := t.loading; ch != nil {
		l.mu.Unlock()
		<-ch
		return s.Snap.Load()
	}
	start := time.Now()
	ch := make(chan struct{})
	t.loading = ch
	if !l.fetchLocked(t) {
		t.loading = nil
		close(ch)
		l.mu.Unlock()
		return nil
	}
	if !t.resident {
		t.resident = true
		var n int64
		err := l.st.Tenant(t.id, func(key string, value []byte) {
			n += int64(len(value))
			l.cfg.Apply(key, bytes.Clone(value), 0)
		})
		if err != nil {
			l.cfg.Logger.Error("edge: reading a tenant from the config store", "tenant", t.id, "err", err)
		}
		t.bytes = tenantOverhead + n*entryFactor
		l.residentBytes += t.bytes
		l.res[t] = struct{}{}
	}
	l.mu.Unlock()

	l.cfg.Compile()

	l.mu.Lock()
	t.loading = nil
	close(ch)
	s.Touch()
	p := s.Snap.Load()
	l.m.loads.Inc()
	l.m.loadSeconds.Observe(time.Since(start).Seconds())
	l.evictLocked(t)
	l.m.resident.Set(float64(len(l.res)))
	l.m.residentBytes.Set(float64(l.residentBytes))
	l.mu.Unlock()
	return p
}

// evictLocked evicts the tenants idle longest until the resident ones are within 90% of
// the budget (a margin, so that one more load does not evict again). Loading tenants
// and keep, the one just loaded, stay.
func (l *Tenants[T]) evictLocked(keep *tenant[T]) {
	if l.residentBytes <= l.cfg.Budget {
		return
	}
	cands := make([]*tenant[T], 0, len(l.res))
	for t := range l.res {
		if t.loading == nil && t != keep {
			cands = append(cands, t)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].slot.used.Load() < cands[j].slot.used.Load() })
	target := l.cfg.Budget / 10 * 9
	for _, t := range cands {
		if l.residentBytes <= target {
			break
		}
		l.cfg.Evict(t.id)
		l.dropLocked(t)
		l.m.evictions.Inc()
	}
}

// publishLocked builds and publishes the host maps. Two tenants claiming one slug or one
// verified custom domain (only possible with inconsistent config) resolve to the smaller
// tenant id, as with every tenant resident.
func (l *Tenants[T]) publishLocked() {
	hosts := make(map[string]*Slot[T], len(l.byID))
	owner := make(map[string]string, len(l.byID))
	for id, t := range l.byID {
		if t.slug == "" {
			continue
		}
		if prev, ok := owner[t.slug]; ok && prev < id {
			continue
		}
		hosts[t.slug], owner[t.slug] = t.slot, id
	}
	custom, certs := map[string]*Slot[T]{}, map[string]*tls.Certificate{}
	downer := map[string]string{}
	for id, t := range l.byID {
		if len(t.domains) == 0 || t.slug == "" || hosts[t.slug] != t.slot {
			continue
		}
		for _, d := range t.domains {
			if !d.Verified {
				if _, ok := custom[d.Host]; !ok {
					custom[d.Host] = l.cfg.Pending
				}
				continue
			}
			if prev, ok := downer[d.Host]; ok && prev < id {
				continue
			}
			downer[d.Host], custom[d.Host], certs[d.Host] = id, t.slot, d.Cert
		}
	}
	l.hostsDirty = false
	l.cfg.Publish(hosts, custom, certs)
}
