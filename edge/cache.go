package edge

import (
	"tollgate/edge/cache"
	"tollgate/edge/websocket"
)

// cacheStep answers GET requests from the route's cache, and keeps what the rest of the
// chain answers when it may. It runs after authentication, access rules and limits, so a cached answer
// is still only given to callers that may have it and still counts.
func cacheStep(rt *route, next handler) handler {
	rc := rt.cache
	return func(x *exchange) {
		ctx := x.ctx
		if !ctx.IsGet() || rt.websocket && websocket.IsUpgrade(ctx.Request.Header.RawHeaders()) {
			next(x)
			return
		}
		k := x.scratch[:0]
		if rt.canary != nil && rt.pickUpstream(x) != rt.upstream {
			// The two sides may answer differently: each has its own entries (a primary
			// key starts with the path's "/").
			k = append(k, '!')
		}
		var consumerID string
		if x.consumer != nil {
			consumerID = x.consumer.ID
		}
		k = rc.AppendKey(k, x.path, x.query, &ctx.Request.Header, consumerID)
		n := len(k)
		now := rc.Now()
		raw := ctx.Request.Header.RawHeaders()
		var consumer []byte
		if x.consumer != nil {
			consumer = x.consumer.id
		}
		e, buf := rc.Get(k, n, now, raw, consumer)
		x.scratch = buf
		if e != nil {
			// The key in scratch is done with: it holds Age's digits.
			x.scratch = e.Write(&ctx.Response, now, x.scratch)
			return
		}
		key := string(x.scratch[:n]) // the chain reuses scratch
		c := cache.Caller{Raw: raw, Consumer: consumer, Creds: cache.Credentials(raw)}
		if x.consumer != nil {
			switch {
			case x.hideKey:
				c.Consumed = cache.CredAPIKey
			case rc.BearerAuth():
				c.Consumed = cache.CredAuthorization
			}
		}
		next(x)
		resp := &ctx.Response
		if x.reply != nil {
			return
		}
		cache.SetMiss(&resp.Header)
		if e := rc.EntryFor(resp, now, &c, key); e != nil {
			rc.Put(e)
		}
	}
}

// initCache makes the edge's cache budget from Config.CacheBytes (none when negative:
// routes then answer without caching).
func (e *Edge) initCache() error {
	if e.cfg.CacheBytes < 0 {
		return nil
	}
	b, err := cache.NewBudget(e.cfg.CacheBytes, e.cfg.Registry)
	if err != nil {
		return err
	}
	e.cache = b
	return nil
}

// tenantCacheFor returns the cache share of v's tenant, its limit set from the tenant's
// plan, when the edge caches and a route of the tenant has a cache; nil otherwise.
func (e *Edge) tenantCacheFor(v *tenantView) *cache.Tenant {
	if e.cache == nil {
		return nil
	}
	for _, r := range v.routes {
		if r.Cache != nil {
			return e.cache.Tenant(v.tenant)
		}
	}
	return nil
}
