package balancer

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// RetryResult is how a retry went, the label values of
// tollgate_edge_upstream_retries_total.
type RetryResult string

const (
	RetrySuccess         RetryResult = "success"          // the retry got an answer that is not a failure
	RetryFailure         RetryResult = "failure"          // the retry failed too
	RetryBudgetExhausted RetryResult = "budget_exhausted" // a retry was due and the budget refused it
)

// Attempts is one request's way through an upstream that is not Plain: the target of
// each attempt, the outcome of each reported to its target's health and breaker, and
// the retries the upstream's settings allow. The caller sends each attempt and keeps
// the Attempts on its stack; it allocates nothing.
type Attempts struct {
	u      *Upstream
	t      *Target
	trial  bool   // t is a half-open circuit's trial
	tried  uint64 // a bit per target index
	key    uint64
	hasKey bool
	n      int // retries sent
}

// Start picks the first attempt's target and counts the request in the retry budget.
// key is the request's hash key when hasKey (see HashOn). Target is nil when no target
// is in rotation: the request is not sent.
func (u *Upstream) Start(now int64, key uint64, hasKey bool) Attempts {
	a := Attempts{u: u, key: key, hasKey: hasKey}
	a.t, a.trial = u.choose(now, 0, key, hasKey, true)
	if a.t != nil && u.budget != nil {
		u.budget.request(now)
	}
	return a
}

// Target is where the current attempt goes.
func (a *Attempts) Target() *Target { return a.t }

// Sending marks the attempt in flight (least_conn counts it); Done must follow.
func (a *Attempts) Sending() { a.t.inflight.Add(1) }

// Done reports the attempt's result, its error or the upstream's status. ok: the answer
// goes to the client as it is; otherwise the caller may Retry.
func (a *Attempts) Done(err error, status int, now int64) (ok bool) {
	a.t.inflight.Add(-1)
	o := outcomeOf(err, status)
	a.u.report(a.t, o, a.trial, now)
	if a.n > 0 {
		if o == outcomeOK {
			a.u.ev().Retried(RetrySuccess)
		} else {
			a.u.ev().Retried(RetryFailure)
		}
	}
	return err == nil && o != outcomeFailed
}

// Abandon ends an attempt that was never sent because the request's time ran out: not
// the target's failure, and not its half-open trial.
func (a *Attempts) Abandon(now int64) { a.u.report(a.t, outcomeNeutral, a.trial, now) }

// Retry decides whether the failed attempt is tried again and where: a target in
// rotation that has not been tried yet, else any in rotation (the same one again). It
// returns nil when the request is not retried. A request is retried only while the
// route has attempts and time left (before deadline) and its body is in memory
// (bodyKept); one that reached the upstream only when its method is idempotent; and
// only within the retry budget.
func (a *Attempts) Retry(h *fasthttp.RequestHeader, bodyKept bool, err error, now, deadline int64) *Target {
	u := a.u
	if u.retries == nil || a.n >= u.retries.Attempts || now >= deadline || !bodyKept {
		return nil
	}
	if !idempotentMethod(h) && !neverConnected(err) {
		return nil
	}
	if !u.budget.take(now) {
		u.ev().Retried(RetryBudgetExhausted)
		return nil
	}
	tried := a.tried | 1<<a.t.index
	t, isTrial := u.choose(now, tried, a.key, a.hasKey, true)
	if t == nil {
		t, isTrial = u.choose(now, 0, a.key, a.hasKey, true)
	}
	if t == nil {
		u.budget.giveBack(now)
		return nil
	}
	a.tried, a.t, a.trial = tried, t, isTrial
	a.n++
	return t
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
