package edge

// Config changes arrive here: Apply takes KV entries, the compiler goroutine recompiles
// the tenants they touch (compile.go) and swaps their snapshots in; no lock is taken on
// the request path.

import (
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"tollgate/edge/entrycheck"
	"tollgate/tenants"
)

// Apply takes one KV entry: value is the entry's JSON, nil for a delete; kvRevision is
// the KV sequence it came with. Entries whose Rev is not newer than the one held for
// their key are ignored (replays, late publishes); invalid ones are rejected with a log
// line and tollgate_edge_config_rejected_total, and the tenant keeps its config. Before
// Loaded, entries only accumulate; afterwards the tenant recompiles within CompileDelay.
// Apply is safe to call from any goroutine, but entries must arrive in KV order.
// kvRevision 0 marks an entry read back from the edge's own store (a tenant's load in
// disk mode): it starts no apply span, since its change was not in flight.
func (e *Edge) Apply(key string, value []byte, kvRevision uint64) {
	if kvRevision > 0 {
		e.m.KVRevision.Set(float64(kvRevision))
	}
	if value == nil {
		e.applyDelete(key)
		return
	}
	pk, ent, err := tenants.DecodeEntry(key, value)
	if err == nil {
		err = entrycheck.Validate(pk, ent)
	}
	var dom entrycheck.Domain
	if err == nil && pk.Kind == tenants.KindDomain {
		dom, err = entrycheck.ParseDomain(ent.Domain) // outside the lock: parsing a key takes a while
	}
	if err != nil {
		e.reject(key, pk.Kind, err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if pk.Kind == tenants.KindTenant {
		if tomb, ok := e.tombs[pk.TenantID]; ok && ent.Rev <= tomb {
			e.m.ConfigIgnored.Inc()
			return
		}
	}
	ts := e.state[pk.TenantID]
	if ts == nil {
		ts = newTenantState(pk.TenantID, e.slotFor(pk.TenantID))
		e.state[pk.TenantID] = ts
	}
	if held, ok := ts.revs[key]; ok && ent.Rev <= held {
		e.m.ConfigIgnored.Inc()
		return
	}
	ts.revs[key] = ent.Rev
	ts.maxRev = max(ts.maxRev, ent.Rev)
	if e.cfg.Tracing != nil && ent.Trace != "" && kvRevision > 0 {
		e.startApplyLocked(pk, key, ent) // trace.go
	}
	ts.pending.note(pk)
	switch pk.Kind {
	case tenants.KindTenant:
		ts.tenant = ent.Tenant
	case tenants.KindRoute:
		ts.routes[pk.ID] = ent.Route
	case tenants.KindConsumer:
		ts.consumers[pk.ID] = ent.Consumer
	case tenants.KindKey:
		sum, _ := entrycheck.KeyHash(ent.Key.Hash) // checked by Validate
		use := ts.keys[pk.ID].use
		if use == nil {
			use = e.cfg.Meter.Key(pk.TenantID, ent.Key.ID)
		}
		ts.keys[pk.ID] = keyEntry{id: ent.Key.ID, consumerID: ent.Key.ConsumerID, sum: sum, expires: ent.Key.ExpiresAt, use: use}
	case tenants.KindPlan:
		ts.plans[pk.ID] = ent.Plan
	case tenants.KindJWTIssuer:
		ts.issuers[pk.ID] = ent.JWTIssuer
	case tenants.KindAccessRules:
		ts.accessRules = ent.AccessRules
	case tenants.KindDomain:
		ts.domains[pk.ID] = dom
		ts.domainsDirty = true
	}
	e.m.ConfigApplied.Inc()
	e.markDirtyLocked(pk.TenantID)
}

func (e *Edge) applyDelete(key string) {
	pk, err := tenants.ParseKey(key)
	if err != nil {
		e.reject(key, "", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ts := e.state[pk.TenantID]
	if ts == nil {
		return // nothing held: a replayed delete
	}
	if pk.Kind == tenants.KindTenant {
		// The tenant goes with everything it owns; its children's deletes follow and
		// find nothing. The tombstone keeps a late put of the old entry from reviving it.
		e.tombs[pk.TenantID] = ts.revs[key]
		delete(e.state, pk.TenantID)
		delete(e.dirty, pk.TenantID)
		e.removed = append(e.removed, ts)
		e.m.ConfigApplied.Inc()
		e.kickLocked()
		return
	}
	ts.pending.note(pk)
	switch pk.Kind {
	case tenants.KindRoute:
		delete(ts.routes, pk.ID)
	case tenants.KindConsumer:
		delete(ts.consumers, pk.ID)
	case tenants.KindKey:
		delete(ts.keys, pk.ID)
	case tenants.KindPlan:
		delete(ts.plans, pk.ID)
	case tenants.KindJWTIssuer:
		delete(ts.issuers, pk.ID)
	case tenants.KindAccessRules:
		ts.accessRules = nil
	case tenants.KindDomain:
		delete(ts.domains, pk.ID)
		ts.domainsDirty = true
	}
	e.m.ConfigApplied.Inc()
	e.markDirtyLocked(pk.TenantID)
}

func (e *Edge) reject(key, kind string, err error) {
	if kind == "" {
		kind = "unknown"
	}
	e.m.ConfigRejected.WithLabelValues(kind).Inc()
	e.log.Warn("edge: config entry rejected; the tenant keeps its last good config", "key", key, "err", err)
}

func (e *Edge) markDirtyLocked(tenantID string) {
	if _, ok := e.dirty[tenantID]; !ok {
		e.dirty[tenantID] = time.Now()
	}
	if e.loaded {
		e.kickLocked()
	}
}

func (e *Edge) kickLocked() {
	if !e.loaded {
		return
	}
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Loaded tells the edge the initial load is complete: every tenant compiles once and the
// edge starts serving (and /readyz answers 200). Later calls do nothing.
func (e *Edge) Loaded() {
	e.mu.Lock()
	if e.loaded {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	start := time.Now()
	n := e.compileDirty()
	e.mu.Lock()
	first := !e.loaded
	e.loaded = true
	if len(e.dirty) > 0 || len(e.removed) > 0 {
		e.kickLocked() // entries that arrived during the initial compile
	}
	e.mu.Unlock()
	if first {
		// Only now do the routes say which cached modules are still in use.
		e.fn.SweepCacheEvery(e.functionDigests)
	}
	if !e.draining.Load() {
		e.ready.Store(true)
		e.m.Ready.Set(1)
	}
	e.log.Info("edge: initial config loaded", "tenants", n, "took", time.Since(start).Round(time.Millisecond))
}

// compiler recompiles changed tenants after Loaded: it waits CompileDelay after the first
// change of a burst, so a burst (5,000 route creations) costs a few compiles of its
// tenant, not one per entry.
func (e *Edge) compiler() {
	defer close(e.stopped)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-e.kick:
		}
		t.Reset(e.cfg.CompileDelay)
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.compileDirty()
	}
}

// compileDirty compiles every changed tenant and unpublishes deleted ones, then rebuilds
// the host map when the set of tenants or their slugs changed. It returns the number of
// tenants compiled.
func (e *Edge) compileDirty() int {
	e.compileMu.Lock()
	defer e.compileMu.Unlock()

	type job struct {
		ts      *tenantState
		view    *tenantView
		since   time.Time
		applies []trace.Span // ended once the snapshot is published (trace.go)
	}
	e.mu.Lock()
	loaded := e.loaded
	jobs := make([]job, 0, len(e.dirty))
	hostsChanged := false
	for id, since := range e.dirty {
		ts := e.state[id]
		if ts == nil {
			continue
		}
		if ts.domainsDirty {
			ts.domainsDirty = false
			hostsChanged = true
		}
		jobs = append(jobs, job{ts: ts, view: ts.viewLocked(incremental.Load()), since: since, applies: e.takeApplyingLocked(id)})
	}
	clear(e.dirty)
	removed := e.removed
	e.removed = nil
	var unapplied []trace.Span // of deleted tenants
	for _, ts := range removed {
		unapplied = append(unapplied, e.takeApplyingLocked(ts.id)...)
	}
	e.mu.Unlock()
	endApplying(unapplied, 0, false)

	for _, ts := range removed {
		if ts.published != "" {
			hostsChanged = true
		}
		e.unpublish(ts)
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ts.id < jobs[j].ts.id })
	// Labels first, in tenant id order: which tenants get their own label values does
	// not depend on which compile finishes first.
	for _, j := range jobs {
		if v := j.view; v.tenant != nil {
			ts := j.ts
			if ts.labels == nil || ts.labels.Value != v.tenant.Slug && ts.labels.Own {
				ts.labels = e.labels.Tenant(ts.id, v.tenant.Slug)
			}
		}
	}
	now := time.Now()
	var slugsChanged atomic.Bool
	compileOne := func(j *job) {
		ts, v := j.ts, j.view
		if v.tenant == nil {
			// Entries of a tenant whose tenant entry has not arrived (yet): nothing to serve.
			endApplying(j.applies, 0, false)
			return
		}
		start := time.Now()
		snap, unused := e.compile(v, ts.labels, &ts.compiled)
		ts.slot.Snap.Store(snap)
		for _, hc := range unused {
			hc.CloseIdleConnections()
		}
		e.m.Compiles.Inc()
		e.m.CompileSeconds.Observe(time.Since(start).Seconds())
		if ts.published != snap.Slug {
			slugsChanged.Store(true)
			ts.published = snap.Slug
		}
		if loaded {
			e.m.ApplyDelay.Observe(now.Sub(j.since).Seconds())
		}
	}
	// Tenants compile side by side on the cores there are (a cold start's thousands, or
	// two of 50,000 routes each); each compile touches its own tenant's state only.
	workers := min(len(jobs), runtime.GOMAXPROCS(0))
	if !parallelCompiles.Load() {
		workers = min(workers, 1)
	}
	if workers <= 1 {
		for i := range jobs {
			compileOne(&jobs[i])
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(len(jobs)); i = next.Add(1) - 1 {
					compileOne(&jobs[i])
				}
			}()
		}
		wg.Wait()
	}
	hostsChanged = hostsChanged || slugsChanged.Load()
	if hostsChanged || !loaded {
		e.rebuildHosts()
	}
	if e.lazy != nil {
		e.setResidentRoutes()
	}
	for _, j := range jobs {
		if j.view.tenant != nil {
			endApplying(j.applies, j.view.rev, true)
		}
	}
	return len(jobs)
}

// parallelCompiles: compileDirty compiles the tenants it has on every core
// (SetParallelCompiles).
var parallelCompiles atomic.Bool

func init() { parallelCompiles.Store(true) }

// SetParallelCompiles chooses whether tenants that compile at once do so side by side on
// every core (true, the default) or one after the other
// (TOLLGATE_EDGE_PARALLEL_COMPILES=off).
func SetParallelCompiles(on bool) { parallelCompiles.Store(on) }

// pendingChanges is what changed in a tenant's entries since its last compile: which
// routes, or something else (all: the whole tenant recompiles).
type pendingChanges struct {
	all    bool
	routes map[string]bool // ids of routes put or deleted
}

func (p *pendingChanges) note(pk tenants.ParsedKey) {
	switch pk.Kind {
	case tenants.KindRoute:
		if p.routes == nil {
			p.routes = map[string]bool{}
		}
		p.routes[pk.ID] = true
	case tenants.KindDomain:
		// Custom domains change the host maps only (tls.go).
	default:
		p.all = true
	}
}

// viewLocked copies what the tenant's compile needs and forgets its pending changes:
// only the changed routes when they are all that changed, incrementally allows it and
// the tenant has compiled before (compile.go); else every entry.
func (ts *tenantState) viewLocked(incrementally bool) *tenantView {
	v := &tenantView{tenant: ts.tenant, rev: ts.maxRev}
	p := ts.pending
	ts.pending = pendingChanges{}
	if incrementally && !p.all && ts.compiled.snap != nil {
		v.changed = make(map[string]*tenants.Route, len(p.routes))
		for id := range p.routes {
			v.changed[id] = ts.routes[id] // nil: deleted
		}
		return v
	}
	v.routes = make([]*tenants.Route, 0, len(ts.routes))
	for _, r := range ts.routes {
		v.routes = append(v.routes, r)
	}
	v.consumers = make([]*tenants.Consumer, 0, len(ts.consumers))
	for _, c := range ts.consumers {
		v.consumers = append(v.consumers, c)
	}
	v.keys = make([]keyEntry, 0, len(ts.keys))
	for _, k := range ts.keys {
		v.keys = append(v.keys, k)
	}
	v.plans = make([]*tenants.ConsumerPlan, 0, len(ts.plans))
	for _, p := range ts.plans {
		v.plans = append(v.plans, p)
	}
	v.issuers = make([]*tenants.Issuer, 0, len(ts.issuers))
	for _, is := range ts.issuers {
		v.issuers = append(v.issuers, is)
	}
	v.accessRules = ts.accessRules
	return v
}

// unpublish forgets a deleted tenant: requests stop finding it once the host map is
// rebuilt, its idle upstream connections close, and the meter lets go of its routes'
// latency counters at its next flush.
func (e *Edge) unpublish(ts *tenantState) {
	ts.slot.Snap.Store(nil)
	ts.compiled.closeUpstreams()
	for _, hc := range ts.compiled.pools {
		hc.CloseIdleConnections()
	}
	for _, rt := range ts.compiled.routes {
		if rt.cache != nil {
			rt.cache.Drop()
		}
		releaseFunctions(rt, nil)
		if rt.meter != nil {
			rt.meter.Release()
		}
	}
	if snap := ts.compiled.snap; snap != nil && snap.meter != nil {
		snap.meter.Release()
	}
	if e.cache != nil {
		e.cache.Forget(ts.id)
	}
	ts.compiled = compiled{}
	e.labels.Drop(ts.id)
}

// rebuildHosts publishes a new host map from the compiled tenants. Two tenants claiming
// one slug (only possible with inconsistent config) resolve to the smaller tenant id.
func (e *Edge) rebuildHosts() {
	if e.lazy != nil {
		return // the index of every tenant publishes them (lazy.go)
	}
	e.mu.Lock()
	hosts := make(map[string]*tenantSlot, len(e.state))
	owner := make(map[string]string, len(e.state))
	routes := 0
	for id, ts := range e.state {
		snap := ts.slot.Snap.Load()
		if snap == nil || ts.published == "" {
			continue
		}
		if prev, ok := owner[ts.published]; ok {
			e.log.Warn("edge: two tenants claim one slug", "slug", ts.published, "tenants", []string{prev, id})
			if prev < id {
				continue
			}
		}
		hosts[ts.published] = ts.slot
		owner[ts.published] = id
		routes += snap.routes.Len()
	}
	custom := e.buildCustomHostsLocked(hosts)
	e.mu.Unlock()
	e.hosts.Store(&hosts)
	e.custom.Store(custom)
	e.m.Tenants.Set(float64(len(hosts)))
	e.m.Routes.Set(float64(routes))
}
