package edge

import "tollgate/tenants"

// A route's request chain.
//
// Each route gets its own chain of steps, built once when the tenant's config is
// compiled (compile.go) and then only called: at request time the route table's lookup
// (route.go) ends in one call of rt.serve, and each step calls the next directly. A
// step does its expensive work (compiling limits, picking what it needs from the
// snapshot) when it is built, and leaves itself out when the route has nothing for it
// to do.

// handler serves an exchange: a whole route's chain, or the rest of it after a step.
type handler func(*exchange)

// step is one stage of a route's chain: given the route and the rest of the chain, it
// returns the handler that does its part of a request and calls next to go on (or
// answers the request itself and does not).
type step func(rt *route, next handler) handler

// chain builds a route's handler from its steps, in the order a request meets them.
// The steps the route does not need are left out; the upstream exchange (proxyStep)
// ends every chain.
func (e *Edge) chain(rt *route) handler {
	tr := rt.transform
	steps := [...]struct {
		when bool
		step step
	}{
		{rt.auth == tenants.AuthFunction, e.functionAuthStep},                         // function.go
		{rt.auth == tenants.AuthKey, keyAuthStep},                                     // authenticate_key.go
		{rt.auth == tenants.AuthJWT, e.jwtAuthStep},                                   // authenticate_jwt.go
		{rt.auth == tenants.AuthKeyOrJWT, e.keyOrJWTAuthStep},                         // authenticate_jwt.go
		{rt.authz != nil, e.externalAuthStep},                                         // authenticate_external.go
		{rt.checkAccess, e.accessStep},                                                // authorize.go
		{true, e.limitStep},                                                           // limit.go; itself when no limit applies
		{rt.functions != nil && rt.functions.After, e.functionStep},                   // function.go
		{rt.cache != nil, cacheStep},                                                  // cache.go
		{true, bodyLimitStep},                                                         // limit_body.go
		{tr != nil && (tr.ReqHeaders != nil || tr.JSON != nil), requestTransformStep}, // transform.go
		{rt.websocket, e.wsStep},                                                      // websocket.go
		{tr != nil && tr.RespHeaders != nil, responseTransformStep},                   // transform.go
	}
	h := e.proxyStep(rt) // proxy.go
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].when {
			h = steps[i].step(rt, h)
		}
	}
	return h
}
