package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/limit"
	"tollgate/tenants"
)

// Flow control at the edge.
//
// A tenant's compile turns its limits into limit rules (limit.Rule, see package limit): the
// tenant's platform plan (Tenant.Limits) into the "tenant" rate, quota and concurrency
// cap, checked with no key; each consumer plan into the "consumer" ones, checked with the
// consumer's id as key; a route's rate_limit into "route:<id>" (no key), "route-ip:<id>"
// (the client address) or "route-consumer:<id>" (the consumer id). Each route gets a
// template of the checks that do not depend on the request, so the request path only
// copies it into the exchange's fixed array and adds the client address and the
// consumer's checks: no allocation, and a route without limits gets no step at all.
//
// The step runs after authentication (the consumer is known) and before the body is read
// and proxied. It takes the concurrency caps first (AcquireAll: over a cap, 503
// overloaded at once, nothing queues), then the rates and quotas (AllowAt: 429
// rate_limited or quota_exceeded with Retry-After). A refused request consumes nothing.
// A request holds its places under the caps until the proxy step returns, that is until
// the upstream's response headers are in (a streamed body is not counted).
// Every answer of a route with a rate or quota carries RateLimit-Limit, -Remaining and
// -Reset of the tightest limit, written last because failing and proxying reset the
// response headers.

// Scope names of limit rules. The names stay the same across recompiles, so a
// config change keeps the counts.
const (
	scopeTenant        = "tenant"
	scopeConsumer      = "consumer"
	scopeRoute         = "route:"
	scopeRouteIP       = "route-ip:"
	scopeRouteConsumer = "route-consumer:"
)

// The edge's answers when a limit refuses.
var (
	replyRateLimited    = newReply(tenants.ERateLimited, "a rate limit of this API was reached; retry after the Retry-After seconds")
	replyQuotaExceeded  = newReply(tenants.EQuotaExceeded, "the request quota of this API's plan for this month is used up")
	replyTooManyPending = newReply(tenants.EOverloaded, "too many requests of this API are in progress; retry shortly")
)

// flowMetrics counts refusals by code.
type flowMetrics struct {
	rateLimited, quotaExceeded, overloaded prometheus.Counter
}

func newFlowMetrics(reg prometheus.Registerer) (*flowMetrics, error) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_edge_limited_total",
		Help: "Requests refused by flow control, by error code (rate_limited, quota_exceeded, overloaded).",
	}, []string{"code"})
	if err := reg.Register(v); err != nil {
		return nil, err
	}
	return &flowMetrics{
		rateLimited:   v.WithLabelValues(tenants.ERateLimited),
		quotaExceeded: v.WithLabelValues(tenants.EQuotaExceeded),
		overloaded:    v.WithLabelValues(tenants.EOverloaded),
	}, nil
}

// planRules are the rate, quota and concurrency cap of one plan (each may be nil).
type planRules [3]*limit.Rule

func (p *planRules) any() bool { return p[0] != nil || p[1] != nil || p[2] != nil }

// compilePlan compiles a plan of tenant tenantID under scope name; a plan that does not
// compile (validated input, so a bug) is logged and enforces nothing.
func (e *Edge) compilePlan(tenantID, slug, name string, p *tenants.ConsumerPlan) planRules {
	var out planRules
	if p == nil {
		return out
	}
	mode, _ := limit.ParseMode(p.Mode, limit.ModeApproximate)
	r, q, c, err := limit.PlanRules(limit.Scope{Tenant: tenantID, Name: name, Mode: mode}, p)
	if err != nil {
		e.log.Error("edge: plan limits skipped", "tenant", slug, "plan", p.Name, "err", err)
		return out
	}
	return planRules{r, q, c}
}

// compileLimits compiles the tenant's platform plan and its consumers' plans. It runs
// before the routes compile: their limit steps use both.
func (e *Edge) compileLimits(s *Snapshot, t *tenants.Tenant) {
	if t.Limits != nil {
		s.limits = e.compilePlan(s.TenantID, s.Slug, scopeTenant, t.Limits.AsConsumerPlan())
	}
	for _, c := range s.consumers {
		if c.Plan != nil {
			c.limits = e.compilePlan(s.TenantID, s.Slug, scopeConsumer, c.Plan)
			s.consumerLimits = s.consumerLimits || c.limits.any()
		}
	}
}

// routeLimits is a route's compiled limits.
type routeLimits struct {
	template      []limit.Check // the tenant's limits and the route-wide one
	perIP         *limit.Rule
	perConsumer   *limit.Rule
	consumerPlans bool // the route authenticates and some consumer has a plan
}

func (e *Edge) compileRouteLimits(rt *route, rl *tenants.RateLimit) routeLimits {
	s := rt.snapshot
	var out routeLimits
	for _, p := range s.limits {
		if p != nil {
			out.template = append(out.template, limit.Check{Rule: p})
		}
	}
	if rl != nil {
		def := limit.ModeApproximate
		if rl.Per == tenants.PerIP {
			def = limit.ModeLocal
		}
		mode, _ := limit.ParseMode(rl.Mode, def)
		name := scopeRoute
		switch rl.Per {
		case tenants.PerIP:
			name = scopeRouteIP
		case tenants.PerConsumer:
			name = scopeRouteConsumer
		}
		p, err := limit.NewRate(limit.Scope{Tenant: s.TenantID, Name: name + rt.id, Mode: mode}, limit.RateOf(rl))
		switch {
		case err != nil:
			e.log.Error("edge: route limit skipped", "tenant", s.Slug, "route", rt.id, "err", err)
		case rl.Per == tenants.PerIP:
			out.perIP = p
		case rl.Per == tenants.PerConsumer:
			out.perConsumer = p
		default:
			out.template = append(out.template, limit.Check{Rule: p})
		}
	}
	out.consumerPlans = rt.auth != tenants.AuthNone && s.consumerLimits
	return out
}

// limitStep enforces the route's limits, or is next itself when none can apply.
func (e *Edge) limitStep(rt *route, next handler) handler {
	l := e.compileRouteLimits(rt, rt.rateLimit)
	if len(l.template) == 0 && l.perIP == nil && l.perConsumer == nil && !l.consumerPlans {
		return next
	}
	lim, fm := e.lim, e.flow
	tmpl := l.template
	perIP, perConsumer, consumerPlans := l.perIP, l.perConsumer, l.consumerPlans
	return func(x *exchange) {
		n := copy(x.checks[:], tmpl)
		if perIP != nil {
			x.checks[n] = limit.Check{Rule: perIP, Key: x.clientIP()}
			n++
		}
		if c := x.consumer; c != nil {
			if perConsumer != nil {
				x.checks[n] = limit.Check{Rule: perConsumer, Key: c.id}
				n++
			}
			if consumerPlans {
				for _, p := range c.limits {
					if p != nil {
						x.checks[n] = limit.Check{Rule: p, Key: c.id}
						n++
					}
				}
			}
		}
		x.nchecks = n
		cs := x.checks[:n]
		tickets, d := lim.AcquireAll(cs)
		if !d.Allowed {
			fm.overloaded.Inc()
			x.fail(replyTooManyPending)
			x.why = d.Rule.Reason()
			d.WriteHeaders(&x.ctx.Response.Header)
			return
		}
		// A plain context: a *fasthttp.RequestCtx as parent would cost a goroutine per
		// Redis call, and the limiter bounds the call by its own timeout.
		d = lim.AllowAt(context.Background(), cs, x.ctx.Time())
		if !d.Allowed {
			tickets.Release()
			x.why = d.Rule.Reason() // made when the rule compiled
			if d.Code == tenants.EQuotaExceeded {
				fm.quotaExceeded.Inc()
				x.fail(replyQuotaExceeded)
			} else {
				fm.rateLimited.Inc()
				x.fail(replyRateLimited)
			}
			d.WriteHeaders(&x.ctx.Response.Header)
			return
		}
		next(x)
		tickets.Release()
		d.WriteHeaders(&x.ctx.Response.Header)
	}
}

// clientIP is the client's address for per-IP limits, as 16 bytes in the exchange: the
// peer's, or, when the peer is a trusted proxy, the rightmost X-Forwarded-For address
// that is not itself a trusted proxy (what a client cannot forge).
func (x *exchange) clientIP() []byte {
	peer, _ := netip.AddrFromSlice(peerIP(x.ctx))
	addr := peer.Unmap()
	if x.hs.has&hXFF != 0 && x.e.trusted(addr) {
		xff := x.xff // the request's X-Forwarded-For values, as the header scan joined them
		for len(xff) > 0 {
			i := bytes.LastIndexByte(xff, ',')
			part := bytes.TrimSpace(xff[i+1:])
			xff = xff[:max(i, 0)]
			a, err := netip.ParseAddr(string(part))
			if err != nil {
				break
			}
			addr = a.Unmap()
			if !x.e.trusted(addr) {
				break
			}
		}
	}
	x.ipKey = addr.As16()
	return x.ipKey[:]
}

// Limiter is the edge's flow-control limiter (the one it was given, or its own).
func (e *Edge) Limiter() *limit.Limiter { return e.lim }

// initLimits sets the edge's limiter up: the one in Config, or a local one of its own
// (closed by Shutdown).
func (e *Edge) initLimits() error {
	fm, err := newFlowMetrics(e.cfg.Registry)
	if err != nil {
		return err
	}
	e.flow = fm
	if e.cfg.Limiter != nil {
		e.lim = e.cfg.Limiter
		return nil
	}
	lim, err := limit.New(limit.Config{Logger: e.log, Registerer: e.cfg.Registry, EdgeID: e.cfg.EdgeID})
	if err != nil {
		return err
	}
	e.lim, e.ownLim = lim, true
	return nil
}

// limiterState is the limiter's part of /readyz.
type limiterState struct {
	Mode        string    `json:"mode"` // local, cluster or degraded
	Degraded    bool      `json:"degraded"`
	LiveEdges   int64     `json:"live_edges"`
	Since       time.Time `json:"since"`
	LastError   string    `json:"last_error,omitempty"`
	Transitions uint64    `json:"transitions"`
	RedisErrors uint64    `json:"redis_errors"`
}

// readyBody is /readyz's answer while ready: flow control may be degraded (Redis
// unavailable, limits enforced at this edge's share), which is not a reason to take the
// edge out of rotation.
func (e *Edge) readyBody() []byte {
	st := e.lim.State()
	b, _ := json.Marshal(struct {
		Status  string       `json:"status"`
		Limiter limiterState `json:"limiter"`
	}{"ready", limiterState{
		Mode: st.Mode, Degraded: st.Degraded, LiveEdges: st.LiveEdges, Since: st.Since.UTC(),
		LastError: st.LastError, Transitions: st.Transitions, RedisErrors: st.RedisErrors,
	}})
	return b
}
