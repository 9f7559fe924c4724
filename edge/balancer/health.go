package balancer

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/edge/upstreamclient"

	"github.com/valyala/fasthttp"
)

// Target health: active checks, passive health (outlier ejection) and circuit breakers.
//
// The request path reads a target's state with atomic loads only (inRotation); the locks
// below are taken by the health checkers, by the reports of exchanges on routes that
// have a breaker, and on state changes, never on a plain round-robin route.

// targetHealth is what takes a target out of rotation and brings it back.
type targetHealth struct {
	// down: the active check counts the target unhealthy, or passive health ejected it
	// on an upstream with an active check, which then has to see it healthy again.
	down atomic.Bool
	// ejectedUntil is the conn.MonoNow time passive health's ejection ends (no active check);
	// 0 when never ejected.
	ejectedUntil atomic.Int64
	// fails counts the live exchanges that failed in a row (passive health).
	fails atomic.Int32

	mu      sync.Mutex // guards okRun, failRun and down's transitions
	okRun   int        // active checks passed in a row
	failRun int        // active checks failed in a row

	br *breaker // nil: the upstream has no circuit breaker
}

// inRotation reports whether t may be chosen now: healthy, not ejected, and its circuit
// closed or ready for (or free of) its half-open trial.
func (t *Target) inRotation(now int64) bool {
	h := &t.health
	if h.down.Load() || now < h.ejectedUntil.Load() {
		return false
	}
	return h.br == nil || h.br.passable(now)
}

// admit lets one attempt go to t: always unless t's circuit is not closed, when the
// attempt must be its half-open trial (trial says the caller will report the outcome).
// isTrial tells the caller to report the outcome as the trial's.
func (t *Target) admit(now int64, trial bool) (ok, isTrial bool) {
	if t.health.br == nil {
		return true, false
	}
	return t.health.br.admit(now, trial)
}

// outcome is what an exchange says about its target.
type outcome uint8

const (
	outcomeOK outcome = iota
	outcomeFailed
	// outcomeNeutral: the exchange says nothing about the target (the edge's own pool
	// was full, or the operator's address rule refused the address).
	outcomeNeutral
)

// outcomeOf sorts an exchange into an outcome: connect errors, timeouts, resets and
// garbage, and 502/503/504 answers fail the target.
func outcomeOf(err error, status int) outcome {
	if err == nil {
		if failedStatus(status) {
			return outcomeFailed
		}
		return outcomeOK
	}
	var de *upstreamclient.DialError
	if errors.As(err, &de) && de.AddressRule || errors.Is(err, fasthttp.ErrNoFreeConns) {
		return outcomeNeutral
	}
	return outcomeFailed
}

func failedStatus(s int) bool {
	return s == fasthttp.StatusBadGateway || s == fasthttp.StatusServiceUnavailable || s == fasthttp.StatusGatewayTimeout
}

// report feeds the outcome of one exchange with t to passive health and t's breaker.
func (u *Upstream) report(t *Target, o outcome, isTrial bool, now int64) {
	h := &t.health
	if p := u.passive; p != nil {
		switch o {
		case outcomeOK:
			if h.fails.Load() != 0 { // no write (and no cache-line bouncing) while all is well
				h.fails.Store(0)
			}
		case outcomeFailed:
			if int(h.fails.Add(1)) >= p.Failures {
				u.eject(t, now)
			}
		}
	}
	if h.br != nil && h.br.record(o, isTrial, now) {
		u.ev().BreakerOpened()
	}
}

// eject takes t out of rotation after too many failures in a row: for EjectMS, or, with
// an active check, until the check has seen it healthy HealthyThreshold times in a row.
func (u *Upstream) eject(t *Target, now int64) {
	h := &t.health
	h.fails.Store(0)
	if u.check != nil {
		h.mu.Lock()
		was := h.down.Load()
		h.down.Store(true)
		h.okRun, h.failRun = 0, 0
		h.mu.Unlock()
		if was {
			return
		}
	} else {
		if now < h.ejectedUntil.Load() {
			return // failures of requests sent before the ejection
		}
		h.ejectedUntil.Store(now + int64(u.passive.EjectMS)*int64(time.Millisecond))
	}
	u.ev().Ejected()
}

// checked records the result of an active check of t.
func (u *Upstream) checked(t *Target, healthy bool) {
	h := &t.health
	changed := false
	h.mu.Lock()
	if healthy {
		h.failRun = 0
		h.okRun++
		if h.down.Load() && h.okRun >= u.check.HealthyThreshold {
			h.down.Store(false)
			h.fails.Store(0)
			changed = true
		}
	} else {
		h.okRun = 0
		h.failRun++
		if !h.down.Load() && h.failRun >= u.check.UnhealthyThreshold {
			h.down.Store(true)
			changed = true
		}
	}
	h.mu.Unlock()
	if changed {
		u.ev().HealthChanged(healthy)
	}
}

// Circuit breaker states.
const (
	circuitClosed = iota
	circuitOpen
	circuitHalfOpen
)

// breakerBuckets is the number of buckets the breaker's rolling window is counted in.
const breakerBuckets = 10

// breaker is a target's circuit breaker (CircuitBreaker's doc is the contract).
type breaker struct {
	errorPercent, minRequests int
	bucketLen, open           int64 // ns

	state     atomic.Int32
	openUntil atomic.Int64 // conn.MonoNow time an open circuit may go half-open
	trial     atomic.Bool  // half-open: the trial request is in flight

	mu      sync.Mutex
	buckets [breakerBuckets]struct {
		n             int64 // bucket number (conn.MonoNow / bucketLen)
		total, failed int
	}
}

func newBreaker(errorPercent, minRequests, windowMS, openMS int) *breaker {
	return &breaker{
		errorPercent: errorPercent, minRequests: minRequests,
		bucketLen: max(1, int64(windowMS)*int64(time.Millisecond)/breakerBuckets),
		open:      int64(openMS) * int64(time.Millisecond),
	}
}

// passable reports whether the breaker could admit a request now.
func (b *breaker) passable(now int64) bool {
	switch b.state.Load() {
	case circuitClosed:
		return true
	case circuitOpen:
		return now >= b.openUntil.Load()
	default:
		return !b.trial.Load()
	}
}

// admit lets a request through: any while closed; when the open time is over or the
// circuit is half-open, exactly one (the trial), and only to a caller that reports.
func (b *breaker) admit(now int64, trial bool) (ok, isTrial bool) {
	if b.state.Load() == circuitClosed {
		return true, false
	}
	if !trial {
		return false, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state.Load() {
	case circuitClosed:
		return true, false
	case circuitOpen:
		if now < b.openUntil.Load() {
			return false, false
		}
		b.state.Store(circuitHalfOpen)
	default:
		if b.trial.Load() {
			return false, false
		}
	}
	b.trial.Store(true)
	return true, true
}

// record counts one outcome; it reports whether the circuit opened.
func (b *breaker) record(o outcome, isTrial bool, now int64) (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if isTrial {
		b.trial.Store(false)
		switch o {
		case outcomeOK:
			b.reset()
			b.state.Store(circuitClosed)
		case outcomeFailed:
			b.openLocked(now)
			return true
		}
		return false // neutral: the next request gets the trial
	}
	if b.state.Load() != circuitClosed || o == outcomeNeutral {
		return false // a request admitted before the circuit opened
	}
	n := now / b.bucketLen
	bk := &b.buckets[n%breakerBuckets]
	if bk.n != n {
		bk.n, bk.total, bk.failed = n, 0, 0
	}
	bk.total++
	if o != outcomeFailed {
		return false
	}
	bk.failed++
	total, failed := 0, 0
	for i := range b.buckets {
		if c := &b.buckets[i]; n-c.n < breakerBuckets {
			total += c.total
			failed += c.failed
		}
	}
	if total >= b.minRequests && failed*100 >= b.errorPercent*total {
		b.openLocked(now)
		return true
	}
	return false
}

func (b *breaker) openLocked(now int64) {
	b.reset()
	b.openUntil.Store(now + b.open)
	b.state.Store(circuitOpen)
}

func (b *breaker) reset() {
	for i := range b.buckets {
		b.buckets[i].total, b.buckets[i].failed = 0, 0
	}
}

// Checkers tracks the active health checkers of an edge's upstreams, so its shutdown
// can wait for them and tests can see none is left behind.
type Checkers struct {
	wg   sync.WaitGroup
	live atomic.Int64
}

// Live is the number of checker goroutines running.
func (c *Checkers) Live() int64 { return c.live.Load() }

// Wait waits until every checker has stopped, or ctx ends. A checker stops at its next
// step after its upstream is closed: at once, or when its check in flight ends.
func (c *Checkers) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startChecks starts u's active checker, one goroutine per target so a target that
// hangs until the check's timeout does not delay the checks of the others.
func (u *Upstream) startChecks() {
	u.stop = make(chan struct{})
	for _, t := range u.targets {
		u.checkers.wg.Add(1)
		u.checkers.live.Add(1)
		go u.checkLoop(t)
	}
}

// Close stops u's active checker, if it has one. Requests still running on an old
// snapshot may go on using u; its targets' state just stops changing with checks.
func (u *Upstream) Close() {
	if u.stop != nil {
		u.stopOnce.Do(func() { close(u.stop) })
	}
}

func (u *Upstream) checkLoop(t *Target) {
	defer u.checkers.wg.Done()
	defer u.checkers.live.Add(-1)
	interval := time.Duration(u.check.IntervalMS) * time.Millisecond
	// The first check comes at a random point of the first interval, so the routes a
	// compile builds together do not check in lockstep.
	timer := time.NewTimer(rand.N(interval) + time.Millisecond)
	defer timer.Stop()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for {
		select {
		case <-u.stop:
			return
		case <-timer.C:
		}
		if ok, counts := u.probe(t, req, resp); counts {
			select {
			case <-u.stop:
				return // the upstream was dropped during the check: its state no longer matters
			default:
			}
			u.checked(t, ok)
		}
		timer.Reset(interval)
	}
}

// probe sends one check to t through its pool (so the operator's address rule, the dialer and
// the target's TLS apply as to traffic). counts is false when the edge's own pool had no
// free connection, which says nothing about the target.
func (u *Upstream) probe(t *Target, req *fasthttp.Request, resp *fasthttp.Response) (ok, counts bool) {
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.SetRequestURI(u.check.Path)
	req.Header.SetHostBytes(t.Host)
	req.Header.SetUserAgent("tollgate-health-check")
	err := t.Client.DoTimeout(req, resp, time.Duration(u.check.TimeoutMS)*time.Millisecond)
	status := resp.StatusCode()
	_ = resp.CloseBodyStream() // a streamed body is not read: its connection closes
	resp.Reset()
	if err != nil {
		if errors.Is(err, fasthttp.ErrNoFreeConns) {
			return false, false
		}
		if u.log != nil {
			u.log.Debug("edge: health check failed", "upstream", t.URL, "err", err)
		}
		return false, true
	}
	return status >= 200 && status <= 399, true
}
