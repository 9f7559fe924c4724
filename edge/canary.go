package edge

import (
	"time"

	"tollgate/edge/balancer"
	"tollgate/edge/edgemetrics"
	"tollgate/edge/jwtauth"
	"tollgate/tenants"
)

// Canary routing: the rule (match, sticky bucket, schedule) is balancer.Split's; the
// edge reads the request for it, and keeps the canary's upstream.
//
// A claim is only known while the token is at hand: bearerStep asks the canary's ClaimMatch
// about the verified token and leaves the answer on the exchange (canaryClaim) for
// choose, rather than keeping the token's claims around.

// canary is a route's second set of targets and the rule that sends requests to it. It
// is built once per route entry and kept across recompiles while the entry is unchanged
// (compile.go), so the schedule keeps its place.
type canary struct {
	upstream *upstream
	claim    *jwtauth.ClaimMatch // Match.Claim; nil: no claim match
	balancer.Split
}

// newCanary builds r's canary (r.Canary validated), taking pools as newUpstream does.
func (e *Edge) newCanary(r *tenants.Route, pools map[string]balancer.Transport, used map[string]bool) (*canary, error) {
	up, err := e.newUpstream(&r.Canary.Upstream, time.Duration(r.ConnectTimeoutMS)*time.Millisecond, pools, used)
	if err != nil {
		return nil, err
	}
	c := &canary{upstream: up}
	c.Init(r.Canary)
	if m := r.Canary.Match; m != nil && m.Header == "" {
		c.claim = jwtauth.NewClaimMatch(m.Claim, m.Values)
	}
	return c, nil
}

// pickUpstream is the upstream x goes to: the canary's or the route's own. It decides
// once per request (the cache step may have asked first: the side is part of its key).
func (rt *route) pickUpstream(x *exchange) *upstream {
	c := rt.canary
	if c == nil {
		return rt.upstream
	}
	if x.up != nil {
		return x.up
	}
	x.up = rt.chooseSide(x)
	return x.up
}

func (rt *route) chooseSide(x *exchange) *upstream {
	c := rt.canary
	if c.choose(x) {
		rt.metrics.CanarySide(edgemetrics.SideCanary)
		return c.upstream
	}
	rt.metrics.CanarySide(edgemetrics.SidePrimary)
	return rt.upstream
}

// choose reports whether x goes to the canary.
func (c *canary) choose(x *exchange) bool {
	switch {
	case c.Header != nil:
		if c.MatchValue(x.ctx.Request.Header.PeekBytes(c.Header)) {
			return true
		}
	case c.claim != nil && x.canaryClaim:
		return true
	}
	var key []byte
	switch c.Sticky {
	case balancer.StickyOff:
		return c.Pick(nil, false)
	case balancer.StickyOnConsumer:
		if cn := x.consumer; cn != nil {
			key = cn.id
		} else {
			key = x.clientIP()
		}
	case balancer.StickyOnIP:
		key = x.clientIP()
	default:
		key = x.ctx.Request.Header.PeekBytes(c.StickyHeader)
	}
	return c.Pick(key, c.Sticky != balancer.StickyOnHeader || len(key) > 0)
}

// noteCanaryClaim records on x whether the claim of tok (a token bearerStep has just
// verified) selects the canary. The payload is decoded into the exchange's scratch
// buffer, which is free until a later step takes it.
func (x *exchange) noteCanaryClaim(m *jwtauth.ClaimMatch, tok []byte) {
	var ok bool
	ok, x.scratch = m.MatchToken(tok, x.scratch)
	if ok {
		x.canaryClaim = true
	}
}
