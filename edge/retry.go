package edge

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

var replyNoHealthy = newReply(tenants.ENoHealthyUpstream, "every target of this route is out of rotation (failing health checks, ejected or circuit open); retry shortly")

// budgetWindow is the span, in one-second slots, over which retries are budgeted.
const budgetWindow = 10

// retryBudget bounds an upstream's retries: over the last budgetWindow seconds at most
// percent of its requests plus minPerSecond per second. The counts are per-second slots
// of atomics, reset by the first request of a new second; a request racing that reset
// may go uncounted, which only makes the budget a little approximate.
type retryBudget struct {
	percent, minPerSecond int64
	slots                 [budgetWindow]budgetSlot
}

type budgetSlot struct {
	sec               atomic.Int64
	requests, retries atomic.Int64
}

func newRetryBudget(r *tenants.Retries) *retryBudget {
	return &retryBudget{percent: int64(r.BudgetPercent), minPerSecond: int64(r.MinPerSecond)}
}

func (b *retryBudget) slot(sec int64) *budgetSlot {
	s := &b.slots[sec%budgetWindow]
	if cur := s.sec.Load(); cur != sec && s.sec.CompareAndSwap(cur, sec) {
		s.requests.Store(0)
		s.retries.Store(0)
	}
	return s
}

// request counts a request (its first attempt).
func (b *retryBudget) request(now int64) { b.slot(now / int64(time.Second)).requests.Add(1) }

// take spends one retry if the budget has room.
func (b *retryBudget) take(now int64) bool {
	sec := now / int64(time.Second)
	cur := b.slot(sec)
	var requests, retries int64
	for i := range b.slots {
		s := &b.slots[i]
		if sec-s.sec.Load() < budgetWindow {
			requests += s.requests.Load()
			retries += s.retries.Load()
		}
	}
	// retries+1 ≤ requests×percent/100 + minPerSecond×window, in integers.
	if (retries+1)*100 > requests*b.percent+b.minPerSecond*budgetWindow*100 {
		return false
	}
	cur.retries.Add(1)
	return true
}

// giveBack returns a retry taken but not sent (no target was left to send it to).
func (b *retryBudget) giveBack(now int64) { b.slot(now / int64(time.Second)).retries.Add(-1) }

// Results of a retry, the label values of tollgate_edge_upstream_retries_total.
const (
	retrySuccess         = "success"          // the retry got an answer that is not a failure
	retryFailure         = "failure"          // the retry failed too
	retryBudgetExhausted = "budget_exhausted" // a retry was due and the budget refused it
)

// proxyResilient is proxyStep for an upstream that balances by load or hash, tracks
// its targets' health or retries: it picks a target in rotation, reports each
// exchange's outcome to the target's health and breaker, and retries as the route's
// Retries allow, all within the route's timeout.
func (e *Edge) proxyResilient(x *exchange, rt *route, u *upstream) {
	ctx := x.ctx
	req := &ctx.Request
	resp := &ctx.Response
	start := conn.MonoNow()
	deadline := start + int64(rt.timeout)
	// A retry needs the body in memory to send it again. fasthttp hands every body over
	// as a stream (only its first 8 KiB read); one within the edge's in-memory size
	// (MaxInMemoryBody) is read whole here, a larger one streams and is never retried.
	streamed := req.IsBodyStream()
	if streamed && u.retries != nil {
		if cl := req.Header.ContentLength(); cl >= 0 && cl <= e.cfg.MaxInMemoryBody {
			b, ok := x.readBody(x.ctx.RequestBodyStream(), cl)
			if !ok {
				return
			}
			req.SetBody(b)
			req.Header.SetContentLength(len(b))
			streamed = false
		}
	}
	var key uint64
	var hasKey bool
	if u.balance == balanceHash {
		key, hasKey = u.hashKey(x) // before forwardHeaders rewrites X-Forwarded-For
	}
	t, isTrial := u.choose(start, 0, key, hasKey, true)
	if t == nil {
		e.upstreamErrs[upNoHealthy].Inc()
		x.fail(replyNoHealthy)
		return
	}
	if u.budget != nil {
		u.budget.request(start)
	}
	x.target = t
	x.setUpstreamURI(rt, t)
	if !req.Header.IsHTTP11() {
		req.Header.SetProtocolBytes(strHTTP11) // keep the upstream connection alive
	}
	e.forwardHeaders(x) // before Host changes: x.host may point into it

	var tried uint64
	for attempt := 0; ; attempt++ {
		req.Header.SetHostBytes(t.host)
		remaining := time.Duration(deadline - conn.MonoNow())
		if remaining <= 0 {
			// The route's time ran out before this retry could go: not the target's
			// failure (and not its half-open trial).
			u.report(t, outcomeNeutral, isTrial, conn.MonoNow())
			e.upstreamFailed(x, fasthttp.ErrTimeout)
			return
		}
		t.inflight.Add(1)
		sent := conn.MonoNow()
		err := t.client.DoTimeout(req, resp, remaining)
		t.inflight.Add(-1)
		now := conn.MonoNow()
		x.upstream += time.Duration(now - sent)
		o := outcomeOf(err, resp.StatusCode())
		u.report(t, o, isTrial, now)
		if attempt > 0 {
			if o == outcomeOK {
				u.count(u.m.retries, retrySuccess)
			} else {
				u.count(u.m.retries, retryFailure)
			}
		}
		if err == nil && o != outcomeFailed {
			x.cleanResponseHeaders()
			return
		}

		next, nextTrial := e.retryTarget(u, req, streamed, err, attempt, now, deadline, tried|1<<t.index, key, hasKey)
		if next == nil {
			if err != nil {
				e.upstreamFailed(x, err)
			} else {
				x.cleanResponseHeaders() // the upstream's own 502/503/504 goes to the client
			}
			return
		}
		if e.debug {
			e.log.Debug("edge: retrying upstream request", "tenant", rt.snapshot.Slug, "route", rt.name,
				"upstream", t.url, "next", next.url, "request_id", string(x.reqID), "err", err, "status", resp.StatusCode())
		}
		// The failed attempt's answer goes nowhere: release its streamed body (closing
		// its connection, whose rest is unread) before the next attempt reuses resp.
		_ = resp.CloseBodyStream()
		resp.Reset()
		tried |= 1 << t.index
		t, isTrial = next, nextTrial
		x.target = t
		x.setUpstreamURI(rt, t)
	}
}

// retryTarget decides whether a failed attempt is tried again and where: a target in
// rotation that has not been tried yet, else any in rotation (the same one again). It
// returns nil when the request is not retried. A request is retried only while the
// route has attempts and time left and its body is in memory; one that reached the
// upstream only when its method is idempotent; and only within the retry budget.
func (e *Edge) retryTarget(u *upstream, req *fasthttp.Request, streamed bool, err error, attempt int, now, deadline int64,
	tried uint64, key uint64, hasKey bool) (*target, bool) {
	if u.retries == nil || attempt >= u.retries.Attempts || now >= deadline || streamed {
		return nil, false
	}
	if !idempotentMethod(&req.Header) && !neverConnected(err) {
		return nil, false
	}
	if !u.budget.take(now) {
		u.count(u.m.retries, retryBudgetExhausted)
		return nil, false
	}
	t, isTrial := u.choose(now, tried, key, hasKey, true)
	if t == nil {
		t, isTrial = u.choose(now, 0, key, hasKey, true)
	}
	if t == nil {
		u.budget.giveBack(now)
	}
	return t, isTrial
}

// idempotentMethod: the methods a retry may repeat after the upstream has seen them.
func idempotentMethod(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete()
}

// neverConnected reports an attempt that did not reach the upstream: the dial failed
// (or was refused by the address rule), or the edge's pool had no connection to give.
func neverConnected(err error) bool {
	var de *upstreamclient.DialError
	return errors.As(err, &de) || errors.Is(err, fasthttp.ErrNoFreeConns)
}

// setUpstreamURI points the request at t: its base path, the route's path, the query,
// and t's scheme.
func (x *exchange) setUpstreamURI(rt *route, t *target) {
	req := &x.ctx.Request
	x.setUpstreamTarget(rt, t)
	if t.tls != x.ctx.IsTLS() {
		if t.tls {
			req.URI().SetSchemeBytes(strHTTPS)
		} else {
			req.URI().SetSchemeBytes(strHTTP)
		}
	}
}

// setUpstreamTarget sets the request target sent to t: its base path, the route's path
// and the query.
func (x *exchange) setUpstreamTarget(rt *route, t *target) {
	p := x.upstreamPath(rt)
	uri := append(x.uri[:0], t.base...)
	uri = append(uri, p...)
	if x.query != nil {
		uri = append(uri, '?')
		uri = append(uri, x.query...)
	}
	x.uri = uri
	x.ctx.Request.SetRequestURIBytes(uri)
}
