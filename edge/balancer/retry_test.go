package balancer

import (
	"errors"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

func header(method string) *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	h.SetMethod(method)
	return &h
}

// TestAttempts walks a request through Start, Done and Retry as the edge's proxy does:
// a failed idempotent request moves to another target, up to Attempts retries, and each
// retry's result is reported.
func TestAttempts(t *testing.T) {
	u, ev := testUpstream(t, []int{1, 1, 1}, tenants.Upstream{
		Retries: &tenants.Retries{Attempts: 2, BudgetPercent: 100, MinPerSecond: 10},
	})
	now := int64(time.Hour)
	deadline := now + int64(time.Second)
	a := u.Start(now, 0, false)
	first := a.Target()
	if first == nil {
		t.Fatal("Start: no target")
	}
	seen := map[*Target]bool{first: true}
	for i := range 2 {
		a.Sending()
		if a.Done(nil, fasthttp.StatusBadGateway, now) {
			t.Fatalf("attempt %d: a 502 counted as an answer", i)
		}
		next := a.Retry(header("GET"), true, nil, now, deadline)
		if next == nil {
			t.Fatalf("attempt %d: not retried", i)
		}
		if seen[next] {
			t.Fatalf("attempt %d: retried on a target already tried", i)
		}
		seen[next] = true
	}
	a.Sending()
	if !a.Done(nil, fasthttp.StatusOK, now) {
		t.Fatal("a 200 did not end the request")
	}
	if len(ev.results) != 2 || ev.results[0] != RetryFailure || ev.results[1] != RetrySuccess {
		t.Fatalf("retries reported %v, want [failure success]", ev.results)
	}
	for _, tg := range u.Targets() {
		if n := tg.inflight.Load(); n != 0 {
			t.Fatalf("%s: %d in flight after the request", tg.URL, n)
		}
	}

	// Out of attempts, past the deadline, or with a streamed body: no retry.
	a = u.Start(now, 0, false)
	a.Sending()
	a.Done(nil, fasthttp.StatusBadGateway, now)
	if a.Retry(header("GET"), true, nil, deadline, deadline) != nil {
		t.Fatal("retried past the deadline")
	}
	if a.Retry(header("GET"), false, nil, now, deadline) != nil {
		t.Fatal("retried a body that was not kept")
	}
}

// TestRetryNonIdempotent: a POST is retried only when it never reached the upstream.
func TestRetryNonIdempotent(t *testing.T) {
	u, _ := testUpstream(t, []int{1, 1}, tenants.Upstream{
		Retries: &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 10},
	})
	now := int64(time.Hour)
	a := u.Start(now, 0, false)
	a.Sending()
	reset := errors.New("connection reset")
	a.Done(reset, 0, now)
	if a.Retry(header("POST"), true, reset, now, now+int64(time.Second)) != nil {
		t.Fatal("a POST the upstream may have seen was retried")
	}
	b := u.Start(now, 0, false)
	b.Sending()
	dial := &upstreamclient.DialError{Addr: "t0"}
	b.Done(dial, 0, now)
	if b.Retry(header("POST"), true, dial, now, now+int64(time.Second)) == nil {
		t.Fatal("a POST that never connected was not retried")
	}
}

// TestRetryBudgetExhaustedReported: a retry the budget refuses is reported as such.
func TestRetryBudgetExhaustedReported(t *testing.T) {
	u, ev := testUpstream(t, []int{1, 1}, tenants.Upstream{
		Retries: &tenants.Retries{Attempts: 1, BudgetPercent: 0, MinPerSecond: 0},
	})
	now := int64(time.Hour)
	a := u.Start(now, 0, false)
	a.Sending()
	a.Done(nil, fasthttp.StatusServiceUnavailable, now)
	if a.Retry(header("GET"), true, nil, now, now+int64(time.Second)) != nil {
		t.Fatal("retried with an empty budget")
	}
	if len(ev.results) != 1 || ev.results[0] != RetryBudgetExhausted {
		t.Fatalf("reported %v, want [budget_exhausted]", ev.results)
	}
}

// TestStartAllocatesNothing: the resilient path's bookkeeping stays on the caller's stack.
func TestStartAllocatesNothing(t *testing.T) {
	u, _ := testUpstream(t, []int{1, 2}, tenants.Upstream{
		Retries:        &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 10},
		CircuitBreaker: &tenants.CircuitBreaker{ErrorPercent: 50, MinRequests: 20, WindowMS: 10_000, OpenMS: 30_000},
	})
	now := int64(time.Hour)
	if n := testing.AllocsPerRun(100, func() {
		a := u.Start(now, 0, false)
		a.Sending()
		a.Done(nil, fasthttp.StatusOK, now)
	}); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}
