package edge

import (
	"crypto/tls"

	"tollgate/edge/lazy"
	"tollgate/edge/tenantstore"
)

// With TOLLGATE_EDGE_CONFIG_STORE=disk the edge's config lives in a local store, and a
// tenant's entries come into the edge (Apply) and compile when its first request needs
// them (package lazy); the hooks here are all the edge knows of it.

// UseStore makes st the edge's config (TOLLGATE_EDGE_CONFIG_STORE=disk): the host maps
// come from its index at once, tenants load on demand and those idle longest are evicted
// beyond budget bytes of compiled tenants. Call it before the edge serves; feed the
// watch's updates to the returned index's Update instead of Apply.
func (e *Edge) UseStore(st *tenantstore.Store, budget int64) (*lazy.Tenants[Snapshot], error) {
	l, err := lazy.New(lazy.Config[Snapshot]{
		Store: st, Budget: budget, Pending: pendingDomain, Registry: e.cfg.Registry, Logger: e.log,
		Apply: e.Apply, Compile: func() { e.compileDirty() }, Evict: e.evict,
		Seen: func(rev uint64) { e.m.KVRevision.Set(float64(rev)) },
		Publish: func(hosts, custom map[string]*tenantSlot, certs map[string]*tls.Certificate) {
			e.hosts.Store(&hosts)
			e.custom.Store(&customHosts{slots: custom, certs: certs})
			e.m.Tenants.Set(float64(len(hosts)))
		},
	})
	if err != nil {
		return nil, err
	}
	e.lazy = l
	return l, nil
}

// StoreBehind says whether the edge serves its store while NATS is unreachable: a Host
// naming no tenant of it is then answered 503 not_ready (the tenant may be newer than the
// store), as with memory mode's snapshot, until it is called with false on catching up.
func (e *Edge) StoreBehind(behind bool) { e.storeBehind.Store(behind) }

// snapshotOf is the snapshot behind a slot, loaded first when its tenant is not resident.
func (e *Edge) snapshotOf(slot *tenantSlot) *Snapshot {
	snap := slot.Snap.Load()
	if snap == nil && e.lazy != nil {
		snap = e.lazy.Load(slot)
	}
	slot.Touch()
	return snap
}

func (e *Edge) slotFor(id string) *tenantSlot {
	if e.lazy != nil {
		if s := e.lazy.SlotOf(id); s != nil {
			return s
		}
	}
	return &tenantSlot{}
}

// evict drops a tenant's entries and compiled state, as a deletion would, except that it
// leaves no tombstone: its next load brings it back. Its health checks stop with it.
func (e *Edge) evict(id string) {
	e.compileMu.Lock()
	defer e.compileMu.Unlock()
	e.mu.Lock()
	ts := e.state[id]
	delete(e.state, id)
	delete(e.dirty, id)
	e.mu.Unlock()
	if ts != nil {
		if snap := ts.slot.Snap.Load(); snap != nil {
			e.m.Routes.Sub(float64(snap.routes.Len()))
		}
		e.unpublish(ts)
	}
}

// setResidentRoutes sets tollgate_edge_routes to the routes of the compiled tenants, the
// routes the edge serves without a load: those of its store are not counted anywhere.
// Its caller holds compileMu, as evict does.
func (e *Edge) setResidentRoutes() {
	n := 0
	e.mu.Lock()
	for _, ts := range e.state {
		if snap := ts.slot.Snap.Load(); snap != nil {
			n += snap.routes.Len()
		}
	}
	e.mu.Unlock()
	e.m.Routes.Set(float64(n))
}
