package edge

import (
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// canary is a route's second set of targets and the rule that sends requests to it.
type canary struct {
	upstream *upstream
	weight   int // percent of the unmatched requests
}

// newCanary builds r's canary (r.Canary validated), taking pools as newUpstream does.
func (e *Edge) newCanary(r *tenants.Route, pools map[string]*fasthttp.HostClient, used map[string]bool) (*canary, error) {
	up, err := e.newUpstream(&r.Canary.Upstream, time.Duration(r.ConnectTimeoutMS)*time.Millisecond, pools, used)
	if err != nil {
		return nil, err
	}
	return &canary{upstream: up, weight: r.Canary.Weight}, nil
}

// pickUpstream is the upstream x goes to: the canary's or the route's own.
func (rt *route) pickUpstream(x *exchange) *upstream {
	if rt.canary != nil && rt.canary.choose(x) {
		return rt.canary.upstream
	}
	return rt.upstream
}

// choose reports whether x goes to the canary.
// TODO(canary): match, exact weighted schedule, sticky hashing.
func (c *canary) choose(x *exchange) bool {
	return false
}
