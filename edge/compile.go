package edge

import (
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"tollgate/edge/balancer"
	"tollgate/edge/cache"
	"tollgate/edge/cors"
	"tollgate/edge/edgemetrics"
	"tollgate/edge/meter"
	"tollgate/edge/transform"
	"tollgate/tenants"
)

// tenantView is what a compile needs of a tenant's entries, copied under the config lock
// so the compile itself runs without it. The objects are never modified once stored.
type tenantView struct {
	tenant      *tenants.Tenant
	rev         int64
	routes      []*tenants.Route
	consumers   []*tenants.Consumer
	keys        []keyEntry
	plans       []*tenants.ConsumerPlan
	issuers     []*tenants.Issuer
	accessRules *tenants.AccessRules
	// changed, when not nil, says only routes changed since the last compile: these ids,
	// each to its entry (nil: deleted). routes and the rest are then not filled in.
	changed map[string]*tenants.Route
}

// keyEntry is a key entry with its hash decoded at apply time.
type keyEntry struct {
	id, consumerID string
	sum            [32]byte
	expires        int64
	use            *meter.Key // kept by every later entry of the key (apiKey.use)
}

// incremental is whether a compile that only has route changes to make reuses the
// previous snapshot's compiled routes and edits its route table (compileRoutes), rather
// than rebuilding the whole tenant (SetIncrementalCompiles).
var incremental atomic.Bool

func init() { incremental.Store(true) }

// SetIncrementalCompiles chooses whether route changes recompile only the routes they
// touch (true, the default) or their whole tenant (TOLLGATE_EDGE_INCREMENTAL=off). Both
// give the same snapshot.
func SetIncrementalCompiles(on bool) { incremental.Store(on) }

// compiled is what a tenant's compiles carry over from one to the next (owned by the
// compiling goroutine): its connection pools, and every compiled route with the entry it
// was compiled from, so an unchanged route keeps its upstream (and its place in the
// weighted rotation), its canary and its cached answers, and a compile that only changes
// routes reuses the rest of the tenant (compileRoutes).
type compiled struct {
	pools    map[string]balancer.Transport
	poolRefs map[string]int // pool key → upstreams (primaries and canaries) using it
	auth     compiledAuth
	snap     *Snapshot         // the last snapshot compiled; nil before the first
	routes   map[string]*route // by id, those of snap
	cached   int               // routes with a response cache
	shared   map[string]*sharedUpstream
	// shadowed lists, by route path (pathKey), the routes that lost a slot of that path
	// to a route with a smaller id: when the winner goes, they are filed again.
	shadowed map[string][]*route
	// authzEntries counts the tenant's cached authorizer answers (authenticate_external.go).
	authzEntries *atomic.Int64
}

// sharedUpstream is a plain upstream routes share (sharedKey) and how many do.
type sharedUpstream struct {
	u *upstream
	n int
}

// share counts rt in or out (n: 1 or -1) of the users of its shared upstream.
func (c *compiled) share(rt *route, n int) {
	if k := rt.upstream.shareKey; k != "" {
		if su := c.shared[k]; su != nil && su.u == rt.upstream {
			if su.n += n; su.n <= 0 {
				delete(c.shared, k)
			}
		}
	}
}

// pathKey is a route path as the route table sees it: parameter names do not count.
func pathKey(p string) string {
	if !strings.Contains(p, "{") {
		return p
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if strings.HasPrefix(seg, "{") {
			segs[i] = "{}"
		}
	}
	return strings.Join(segs, "/")
}

// compile builds a tenant's snapshot: only the routes that changed when v says so and
// there is a previous snapshot, else the whole tenant. The pools the snapshot no longer
// uses are removed from c and returned for closing.
func (e *Edge) compile(v *tenantView, labels *edgemetrics.TenantLabels, c *compiled) (*Snapshot, []balancer.Transport) {
	if v.changed != nil && c.snap != nil && c.snap.labels == labels {
		return e.compileRoutes(v, c)
	}
	return e.compileFull(v, labels, c)
}

// compileFull compiles the whole tenant, reusing the upstreams, canaries and caches of
// the routes whose entries did not change.
func (e *Edge) compileFull(v *tenantView, labels *edgemetrics.TenantLabels, c *compiled) (*Snapshot, []balancer.Transport) {
	conf := &tenantConfig{
		TenantID:  v.tenant.ID,
		Slug:      v.tenant.Slug,
		keys:      make(map[[32]byte]apiKey, len(v.keys)),
		consumers: make(map[string]*Consumer, len(v.consumers)),
		plans:     make(map[string]*tenants.ConsumerPlan, len(v.plans)),
	}
	s := &Snapshot{
		TenantID:     v.tenant.ID,
		Slug:         v.tenant.Slug,
		Rev:          v.rev,
		labels:       labels,
		meter:        e.meterRoute(v.tenant.ID, ""),
		tenantConfig: conf,
	}
	plansByName := make(map[string]*tenants.ConsumerPlan, len(v.plans))
	for _, p := range v.plans {
		s.plans[p.ID] = p
		plansByName[p.Name] = p
	}
	for _, c := range v.consumers {
		s.consumers[c.ID] = &Consumer{ID: c.ID, Name: c.Name, Plan: plansByName[c.Plan], id: []byte(c.ID), name: []byte(c.Name),
			subjects: []string{c.ID, c.Name}, meter: e.meterConsumer(v.tenant.ID, c.ID)}
	}
	for _, k := range v.keys {
		if c := s.consumers[k.consumerID]; c != nil {
			s.keys[k.sum] = apiKey{consumer: c, expires: k.expires, use: k.use}
		}
	}
	e.compileLimits(s, v.tenant)
	if v.tenant.Limits != nil {
		conf.resources = v.tenant.Limits.Resources
	}
	conf.logs = e.cfg.Logs.TenantOf(v.tenant) // nil without a request log
	e.compileAuth(s, v, &c.auth)

	// Routes in id order, so which of two conflicting routes wins does not depend on
	// the order entries arrived in.
	routes := append([]*tenants.Route(nil), v.routes...)
	sort.Slice(routes, func(i, j int) bool { return routes[i].ID < routes[j].ID })
	ids := make([]string, len(routes))
	names := make([]string, len(routes))
	for i, r := range routes {
		ids[i], names[i] = r.ID, r.Name
	}
	rms := e.labels.Routes(labels, ids, names)
	tc := e.tenantCacheFor(v)
	built := make(map[string]*route, len(routes))
	refs := make(map[string]int, len(c.pools))
	shadowed := make(map[string][]*route)
	cached := 0
	if c.shared == nil {
		c.shared = map[string]*sharedUpstream{}
	}
	for _, su := range c.shared {
		su.n = 0
	}
	for i, r := range routes {
		prev := c.routes[r.ID]
		if prev != nil && prev.src != r {
			prev = nil
		}
		rt := e.compileRoute(conf, r, rms[i], prev, tc, c)
		if rt == nil {
			continue
		}
		rt.usePools(refs, 1)
		c.share(rt, 1)
		if rt.cache != nil {
			cached++
		}
		built[r.ID] = rt
		for _, p := range r.Paths {
			if other := s.routes.Add(p, r.Methods, rt); other != nil {
				e.conflict(s.Slug, rt, p, other)
				shadowed[pathKey(p)] = appendOnce(shadowed[pathKey(p)], rt)
			}
		}
	}
	// The upstreams of changed and removed routes are dropped: stop their checkers.
	for id, prev := range c.routes {
		e.releaseRoute(prev, built[id])
	}
	if cached == 0 && e.cache != nil {
		e.cache.Forget(v.tenant.ID)
	}
	for k, su := range c.shared {
		if su.n <= 0 {
			delete(c.shared, k)
		}
	}
	var unused []balancer.Transport
	for k, hc := range c.pools {
		if refs[k] == 0 {
			unused = append(unused, hc)
			delete(c.pools, k)
		}
	}
	c.poolRefs, c.routes, c.shadowed, c.cached, c.snap = refs, built, shadowed, cached, s
	return s, unused
}

// compileRoutes compiles the routes v.changed names (nil: deleted) into a new snapshot
// that shares everything else with c.snap: its tenantConfig, so every other route and its
// chain, and all of its route table but the nodes along the changed routes' paths. The
// result is the snapshot compileFull would build from the same entries.
func (e *Edge) compileRoutes(v *tenantView, c *compiled) (*Snapshot, []balancer.Transport) {
	prev := c.snap
	s := &Snapshot{
		TenantID: prev.TenantID, Slug: prev.Slug, Rev: v.rev,
		labels: prev.labels, meter: prev.meter, tenantConfig: prev.tenantConfig,
	}
	ids := make([]string, 0, len(v.changed))
	for id := range v.changed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var unused []balancer.Transport
	removed := make(map[*route]bool)
	added := make(map[string][]*route) // by pathKey
	affected := make(map[string]bool)
	cacheDropped := false
	for _, id := range ids {
		r := v.changed[id]
		old := c.routes[id]
		if old != nil && old.src == r {
			continue
		}
		if old != nil {
			removed[old] = true
			for _, p := range old.src.Paths {
				affected[pathKey(p)] = true
			}
			delete(c.routes, id)
			if old.cache != nil {
				c.cached--
				cacheDropped = true
			}
			old.usePools(c.poolRefs, -1)
			c.share(old, -1)
			e.releaseRoute(old, nil)
		}
		if r == nil {
			e.labels.DropRoute(prev.labels, id)
			continue
		}
		var tc *cache.Tenant
		if r.Cache != nil && e.cache != nil {
			tc = e.cache.Tenant(v.tenant)
		}
		rt := e.compileRoute(s.tenantConfig, r, e.labels.Route(prev.labels, id, r.Name), nil, tc, c)
		if rt == nil {
			continue
		}
		rt.usePools(c.poolRefs, 1)
		c.share(rt, 1)
		if rt.cache != nil {
			c.cached++
		}
		c.routes[id] = rt
		for _, p := range r.Paths {
			k := pathKey(p)
			affected[k] = true
			added[k] = appendOnce(added[k], rt)
		}
	}
	for k, n := range c.poolRefs {
		if n <= 0 {
			delete(c.poolRefs, k)
			if hc := c.pools[k]; hc != nil {
				unused = append(unused, hc)
				delete(c.pools, k)
			}
		}
	}
	if cacheDropped && c.cached == 0 && e.cache != nil {
		e.cache.Forget(v.tenant.ID)
	}

	// Each path the changes touch is filed again from scratch, by every route that
	// claims it, in id order: what compileFull's Adds leave there.
	keys := make([]string, 0, len(affected))
	for k := range affected {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ed := prev.routes.Edit()
	for _, k := range keys {
		var claim []*route
		for _, rt := range append(ed.Clear(k), c.shadowed[k]...) {
			if !removed[rt] {
				claim = appendOnce(claim, rt)
			}
		}
		for _, rt := range added[k] {
			claim = appendOnce(claim, rt)
		}
		sort.Slice(claim, func(i, j int) bool { return claim[i].id < claim[j].id })
		delete(c.shadowed, k)
		for _, rt := range claim {
			for _, p := range rt.src.Paths {
				if pathKey(p) != k {
					continue
				}
				if other := ed.Add(p, rt.src.Methods, rt); other != nil {
					e.conflict(s.Slug, rt, p, other)
					c.shadowed[k] = appendOnce(c.shadowed[k], rt)
				}
			}
		}
	}
	s.routes = ed.Table()
	c.snap = s
	return s, unused
}

func appendOnce(rs []*route, rt *route) []*route {
	if slices.Contains(rs, rt) {
		return rs
	}
	return append(rs, rt)
}

func (e *Edge) conflict(slug string, rt *route, path string, other *route) {
	e.log.Warn("edge: route path taken by another route; the other keeps it",
		"tenant", slug, "route", rt.id, "path", path, "kept", other.id)
}

// compileRoute builds one route and its chain, reusing prev's upstream, canary and cache
// (prev: the route compiled from the same entry, or nil). It returns nil when the route
// cannot be built, which validation at apply time rules out.
// A plain upstream (sharedKey) comes from c.shared, or goes there; the caller counts
// the route in (compiled.share).
func (e *Edge) compileRoute(conf *tenantConfig, r *tenants.Route, rm *edgemetrics.RouteMetrics, prev *route, tc *cache.Tenant, c *compiled) *route {
	var up *upstream
	var cn *canary
	var err error
	ct := time.Duration(r.ConnectTimeoutMS) * time.Millisecond
	if prev != nil {
		up, cn = prev.upstream, prev.canary
	} else {
		key := sharedKey(&r.Upstream, ct)
		if su := c.shared[key]; su != nil && key != "" {
			up = su.u
		} else if up, err = e.newUpstream(&r.Upstream, ct, c.pools, make(map[string]bool, 1)); err == nil && up.plain && key != "" {
			up.shareKey = key
			c.shared[key] = &sharedUpstream{u: up}
		}
		if err == nil && r.Canary != nil {
			if cn, err = e.newCanary(r, c.pools, make(map[string]bool, 1)); err != nil && up.shareKey == "" {
				up.close()
			}
		}
		if err != nil {
			// Validated at apply time; a failure here is a bug, not bad input.
			e.log.Error("edge: route skipped", "tenant", conf.Slug, "route", r.ID, "err", err)
			return nil
		}
	}
	if up.shareKey == "" {
		up.bind(rm) // a shared upstream has no events to label
	}
	if cn != nil {
		cn.upstream.bind(rm)
	}
	var az *authorizer
	if prev != nil {
		az = prev.authz
	} else if r.Auth == tenants.AuthExternal {
		if az, err = e.newAuthorizer(conf, r, c); err != nil {
			e.log.Error("edge: route skipped", "tenant", conf.Slug, "route", r.ID, "err", err)
			return nil
		}
	}
	rt := &route{
		id: r.ID, name: r.Name, auth: r.Auth, strip: r.StripPrefix,
		authz:          az,
		maxBody:        int(r.MaxBodyBytes),
		timeout:        time.Duration(r.TimeoutMS) * time.Millisecond,
		connectTimeout: ct,
		websocket:      r.WebSocket,
		upstream:       up,
		canary:         cn,
		metrics:        rm,
		snapshot:       conf,
		src:            r,
		rateLimit:      r.RateLimit,
		checkAccess:    r.CheckAccess,
		meter:          e.meterRoute(conf.TenantID, r.ID),
		transform:      transform.Compile(r.Transform),
		cors:           cors.Compile(r.CORS, r.Methods),
	}
	if r.Cache != nil && tc != nil {
		if prev != nil {
			rt.cache = prev.cache
		}
		if rt.cache == nil {
			rt.cache = cache.New(r.Cache, r.Auth, tc)
		}
	}
	e.buildFunctions(rt, prev)
	rt.serve = e.chain(rt)
	return rt
}

// usePools adds n to the count of each pool rt's upstreams use.
func (rt *route) usePools(refs map[string]int, n int) {
	for _, k := range rt.upstream.pools {
		refs[k] += n
	}
	if rt.canary != nil {
		for _, k := range rt.canary.upstream.pools {
			refs[k] += n
		}
	}
	if rt.authz != nil {
		refs[rt.authz.poolKey] += n
	}
}

// releaseRoute stops what old holds that its successor next (nil: none) does not keep:
// its upstreams' health checkers and its cached answers.
func (e *Edge) releaseRoute(old, next *route) {
	if next == nil || next.upstream != old.upstream {
		old.upstream.close()
	}
	if old.canary != nil && (next == nil || next.canary != old.canary) {
		old.canary.upstream.close()
	}
	if old.cache != nil && (next == nil || next.cache != old.cache) {
		old.cache.Drop()
	}
	releaseFunctions(old, next)
	if next == nil || next.authz != old.authz {
		old.authz.release()
	}
}

// closeUpstreams stops the health checkers of every upstream c holds (its tenant is gone,
// or the edge is shutting down).
func (c *compiled) closeUpstreams() {
	for _, rt := range c.routes {
		rt.upstream.close()
		if rt.canary != nil {
			rt.canary.upstream.close()
		}
		rt.authz.release()
	}
}
