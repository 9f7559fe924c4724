package edge

import (
	"encoding/hex"
	"fmt"
	"sort"
	"time"

	"tollgate/edge/meter"
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
	plans       []*tenants.Plan
	issuers     []*tenants.Issuer
	accessRules *tenants.AccessRules
}

// keyEntry is a key entry with its hash decoded at apply time.
type keyEntry struct {
	id, consumerID string
	sum            [32]byte
	expires        int64
	use            *meter.Key // kept by every later entry of the key (apiKey.use)
}

func decodeKeyHash(h string) ([32]byte, error) {
	var sum [32]byte
	if len(h) != 64 {
		return sum, fmt.Errorf("hash must be 64 hex digits, got %d characters", len(h))
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return sum, fmt.Errorf("hash is not hex: %v", err)
	}
	return sum, nil
}

// compiled is what a tenant's compiles carry over from one to the next (owned by the
// compiling goroutine): its connection pools, and the upstream of every route entry, so
// an unchanged route keeps its upstream (and its place in the weighted rotation) and a
// recompile of a tenant with 50,000 routes does not rebuild 50,000 of them.
type compiled struct {
	pools     map[string]*upstreamClient
	upstreams map[*tenants.Route]*upstream
	canaries  map[*tenants.Route]*canary
	auth      compiledAuth
	caches    map[*tenants.Route]*responseCache // an unchanged route keeps its cached answers
}

// compile builds a tenant's snapshot. The pools the snapshot no longer uses are removed
// from c and returned for closing.
func (e *Edge) compile(v *tenantView, labels *tenantLabels, c *compiled) (*Snapshot, []*upstreamClient) {
	s := &Snapshot{
		TenantID:  v.tenant.ID,
		Slug:      v.tenant.Slug,
		Rev:       v.rev,
		keys:      make(map[[32]byte]apiKey, len(v.keys)),
		consumers: make(map[string]*Consumer, len(v.consumers)),
		plans:     make(map[string]*tenants.Plan, len(v.plans)),
		labels:    labels,
		meter:     e.meterRoute(v.tenant.ID, ""),
	}
	plansByName := make(map[string]*tenants.Plan, len(v.plans))
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
	rms := e.labels.routes(labels, ids, names)
	used := make(map[string]bool)
	upstreams := make(map[*tenants.Route]*upstream, len(routes))
	caches := make(map[*tenants.Route]*responseCache)
	tc := e.tenantCacheFor(v)
	canaries := make(map[*tenants.Route]*canary)
	for i, r := range routes {
		var err error
		up := c.upstreams[r]
		if up != nil {
			for _, k := range up.pools {
				used[k] = true
			}
		} else {
			if up, err = e.newUpstream(&r.Upstream, time.Duration(r.ConnectTimeoutMS)*time.Millisecond, c.pools, used); err != nil {
				// Validated at apply time; a failure here is a bug, not bad input.
				e.log.Error("edge: route skipped", "tenant", s.Slug, "route", r.ID, "err", err)
				continue
			}
		}
		up.bind(rms[i])
		upstreams[r] = up
		var cn *canary
		if r.Canary != nil {
			if cn = c.canaries[r]; cn != nil {
				for _, k := range cn.upstream.pools {
					used[k] = true
				}
			} else if cn, err = e.newCanary(r, c.pools, used); err != nil {
				e.log.Error("edge: route skipped", "tenant", s.Slug, "route", r.ID, "err", err)
				continue
			}
			cn.upstream.bind(rms[i])
			canaries[r] = cn
		}
		rt := &route{
			id: r.ID, name: r.Name, auth: r.Auth, strip: r.StripPrefix,
			maxBody:        int(r.MaxBodyBytes),
			timeout:        time.Duration(r.TimeoutMS) * time.Millisecond,
			connectTimeout: time.Duration(r.ConnectTimeoutMS) * time.Millisecond,
			websocket:      r.WebSocket,
			upstream:       up,
			canary:         cn,
			metrics:        rms[i],
			snapshot:       s,
			rateLimit:      r.RateLimit,
			checkAccess:    r.CheckAccess,
			meter:          e.meterRoute(v.tenant.ID, r.ID),
			transform:      compileTransform(r.Transform),
		}
		if r.Cache != nil && tc != nil {
			if rt.cache = c.caches[r]; rt.cache == nil {
				rt.cache = newResponseCache(r.Cache, r.Auth, tc)
			}
			caches[r] = rt.cache
		}
		rt.serve = e.chain(rt)
		for _, p := range r.Paths {
			if other := s.routes.Add(p, r.Methods, rt); other != nil {
				e.log.Warn("edge: route path taken by another route; the other keeps it",
					"tenant", s.Slug, "route", r.ID, "path", p, "kept", other.id)
			}
		}
	}
	// The upstreams of changed and removed routes are dropped: stop their checkers.
	for r, up := range c.upstreams {
		if upstreams[r] != up {
			up.close()
		}
	}
	for r, cn := range c.canaries {
		if canaries[r] != cn {
			cn.upstream.close()
		}
	}
	e.dropCaches(v.tenant.ID, c.caches, caches)
	c.upstreams = upstreams
	c.canaries = canaries
	c.caches = caches
	var unused []*upstreamClient
	for k, hc := range c.pools {
		if !used[k] {
			unused = append(unused, hc)
			delete(c.pools, k)
		}
	}
	return s, unused
}

// closeUpstreams stops the health checkers of every upstream c holds (its tenant is gone,
// or the edge is shutting down).
func (c *compiled) closeUpstreams() {
	for _, up := range c.upstreams {
		up.close()
	}
	for _, cn := range c.canaries {
		cn.upstream.close()
	}
}
