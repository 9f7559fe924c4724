package edge

import (
	"context"
	"sync"
	"time"

	"tollgate/edge/fnchain"
	"tollgate/tenants"
)

// Tenants' functions in a route's chain (package edge/fnchain runs them). With "auth":
// "function" the first one authenticates: it runs where key auth would and names the
// caller, so access rules, limits and metering apply to that consumer. The others run
// after the limits, before the cache, body limit and transforms, and see the response on
// the way back. A function that fails answers 500 function_failed; nothing is let through.

var (
	replyFunctionFailed      = newReply(tenants.EFunctionFailed, "a function of this API failed; its owner finds why in the function log")
	replyFunctionBusy        = newReply(tenants.EFunctionBusy, "this API's functions are all busy; retry shortly")
	replyFunctionUnavailable = newReply(tenants.EFunctionUnavailable, "a function of this API is not loaded on this edge yet; retry shortly")
	replyFunctionNoCaller    = newReply(tenants.EInvalidCredential, "this API's authentication did not accept the request's credentials")

	fnReplies = [...]*reply{fnchain.Failed: replyFunctionFailed, fnchain.Busy: replyFunctionBusy,
		fnchain.Unavailable: replyFunctionUnavailable, fnchain.NoConsumer: replyFunctionNoCaller}
)

func (e *Edge) newFunctionHost() (*fnchain.Host, error) {
	c := e.cfg.Functions
	c.Registry, c.Logger, c.OnReady = e.cfg.Registry, e.log, e.recompileTenants
	if c.Callout == nil {
		c.Callout = fnchain.NewCallout(e.dialer.Dial(2 * time.Second))
	}
	return fnchain.New(context.Background(), c)
}

// recompileTenants recompiles tenants whole: modules their routes waited for arrived.
func (e *Edge) recompileTenants(ids []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if ts := e.state[id]; ts != nil {
			ts.pending.all = true
			e.markDirtyLocked(id)
		}
	}
}

// functionDigests returns the digests of the modules the edge's routes name, as its
// config has them (which a compile may not have reached yet).
func (e *Edge) functionDigests() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	used := map[string]bool{}
	for _, ts := range e.state {
		for _, r := range ts.routes {
			for _, f := range r.Functions {
				used[f.SHA256] = true
			}
		}
	}
	return used
}

// buildFunctions builds rt's functions, or keeps prev's when built from the same spec.
func (e *Edge) buildFunctions(rt, prev *route) {
	r := rt.src
	if len(r.Functions) == 0 && r.Auth != tenants.AuthFunction {
		return
	}
	spec := fnchain.RouteSpec{TenantID: rt.snapshot.TenantID, TenantLabel: rt.metrics.Tenant(), RouteID: r.ID,
		Functions: r.Functions, Auth: r.Auth == tenants.AuthFunction, Plan: rt.snapshot.resources}
	if prev != nil && prev.functions.SameSpec(spec) {
		rt.functions = prev.functions
		return
	}
	rt.functions = e.fn.Build(spec)
}

// releaseFunctions closes old's filters once the requests still on them are done.
func releaseFunctions(old, next *route) {
	if f := old.functions; f != nil && (next == nil || next.functions != f) {
		time.AfterFunc(old.timeout+10*time.Second, f.Close)
	}
}

func (x *exchange) fnRun() *fnchain.Run {
	if x.fn == nil {
		x.fn = fnchain.Start(x.route.functions, x.ctx, fnchain.Props{RouteID: x.route.id, RequestID: x.reqID, Host: x.host, TLS: x.ctx.IsTLS()})
	}
	return x.fn
}

// endFunctions ends the request's function calls and counts their guest time.
func (x *exchange) endFunctions() {
	if x.fn != nil {
		x.functionTime += x.fn.Finish()
		x.fn = nil
	}
}

func (x *exchange) fnFailed(o fnchain.Outcome) {
	if o == fnchain.Replied {
		return // the function's answer is in the response
	}
	if x.e.debug {
		x.e.log.Debug("edge: function refused", "tenant", x.route.snapshot.Slug, "route", x.route.name, "request_id", string(x.reqID), "err", x.fn.Err())
	}
	x.fail(fnReplies[o])
	x.why = x.fn.Why()
}

func (e *Edge) functionAuthStep(rt *route, next handler) handler {
	c := rt.functions
	return func(x *exchange) {
		if c.AuthReqBody && !x.fnRequestBody(rt) {
			return
		}
		name, o := x.fnRun().Authenticate(len(x.ctx.Request.Body()) > 0)
		if o != fnchain.Continue {
			x.fnFailed(o)
			return
		}
		x.consumer = rt.snapshot.consumerNamed(name)
		if x.consumer == nil {
			x.fail(replyFunctionNoCaller)
			return
		}
		x.fn.SetConsumer(x.consumer.ID)
		next(x)
		if !c.After {
			x.fnResponse(c)
		}
	}
}

func (e *Edge) functionStep(rt *route, next handler) handler {
	c := rt.functions
	return func(x *exchange) {
		r := x.fnRun()
		if x.consumer != nil {
			r.SetConsumer(x.consumer.ID)
		}
		if c.ReqBody && !x.fnRequestBody(rt) {
			return
		}
		if o := r.Request(len(x.ctx.Request.Body()) > 0); o != fnchain.Continue {
			x.fnFailed(o)
			return
		}
		next(x)
		x.fnResponse(c)
	}
}

// fnResponse runs the response callbacks on an answer the edge did not make itself.
func (x *exchange) fnResponse(c *fnchain.Chain) {
	if x.reply == nil && c.RespHeaders {
		if o := x.fn.Response(); o != fnchain.Continue {
			x.fnFailed(o)
		}
	}
}

// fnRequestBody reads the request body for a function, within the route's limit (the
// body limit step, later in the chain, would have refused it too).
func (x *exchange) fnRequestBody(rt *route) bool {
	req := &x.ctx.Request
	if req.Header.ContentLength() > rt.maxBody {
		x.fail(replyBodyTooLarge)
		return false
	}
	if s := x.ctx.RequestBodyStream(); s != nil {
		b, ok := x.readBody(s, rt.maxBody)
		if !ok {
			return false
		}
		req.SetBody(b)
		req.Header.SetContentLength(len(b))
	}
	return true
}

// consumerNamed finds the consumer an authenticating function named: by id, else by name.
func (s *tenantConfig) consumerNamed(name []byte) *Consumer {
	if c := s.consumers[string(name)]; c != nil {
		return c
	}
	s.byNameOnce.Do(func() {
		s.byName = make(map[string]*Consumer, len(s.consumers))
		for _, c := range s.consumers {
			s.byName[c.Name] = c
		}
	})
	return s.byName[string(name)]
}

// consumerIndex is a tenant's consumers by name, built when a function first names one.
type consumerIndex struct {
	byNameOnce sync.Once
	byName     map[string]*Consumer
}
