package balancer

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// events counts what an upstream reports, as the edge's metrics would.
type events struct {
	mu                       sync.Mutex
	ejected, opened, changed int
	results                  []RetryResult
}

func (ev *events) Ejected()             { ev.mu.Lock(); ev.ejected++; ev.mu.Unlock() }
func (ev *events) BreakerOpened()       { ev.mu.Lock(); ev.opened++; ev.mu.Unlock() }
func (ev *events) HealthChanged(_ bool) { ev.mu.Lock(); ev.changed++; ev.mu.Unlock() }
func (ev *events) Retried(r RetryResult) {
	ev.mu.Lock()
	ev.results = append(ev.results, r)
	ev.mu.Unlock()
}

// testUpstream builds an upstream over targets named t0, t1… with the weights, without
// pools, checkers or an edge: enough for the balancing and health logic.
func testUpstream(t testing.TB, weights []int, spec tenants.Upstream) (*Upstream, *events) {
	t.Helper()
	for i, w := range weights {
		spec.Targets = append(spec.Targets, tenants.Target{URL: fmt.Sprintf("http://t%d.test", i), Weight: w})
	}
	u := &Upstream{}
	ev := &events{}
	u.Bind(ev)
	for i, tt := range spec.Targets {
		u.targets = append(u.targets, &Target{URL: tt.URL, weight: tt.Weight, index: uint8(i)})
	}
	u.seq = SmoothWRR(weights)
	u.compileBalance(&spec)
	u.check, u.passive, u.retries = spec.HealthCheck, spec.Passive, spec.Retries
	if u.retries != nil {
		u.budget = newRetryBudget(u.retries)
	}
	if b := spec.CircuitBreaker; b != nil {
		for _, tg := range u.targets {
			tg.health.br = newBreaker(b.ErrorPercent, b.MinRequests, b.WindowMS, b.OpenMS)
		}
	}
	return u, ev
}

func mustChoose(t *testing.T, u *Upstream, now int64, tried uint64, key uint64, hasKey bool) *Target {
	t.Helper()
	tg, _ := u.choose(now, tried, key, hasKey, true)
	if tg == nil {
		t.Fatal("choose: no target")
	}
	return tg
}

func TestRoundRobinSkipsTargetsOutOfRotation(t *testing.T) {
	u, _ := testUpstream(t, []int{1, 2, 1}, tenants.Upstream{})
	counts := map[int]int{}
	for range 400 {
		counts[int(mustChoose(t, u, 0, 0, 0, false).index)]++
	}
	if counts[0] != 100 || counts[1] != 200 || counts[2] != 100 {
		t.Fatalf("weighted split: %v, want 100/200/100", counts)
	}
	u.targets[1].health.down.Store(true)
	clear(counts)
	for range 400 {
		counts[int(mustChoose(t, u, 0, 0, 0, false).index)]++
	}
	if counts[1] != 0 || counts[0] != 200 || counts[2] != 200 {
		t.Fatalf("with t1 down: %v, want 200/0/200", counts)
	}
	// tried excludes a target for a retry.
	for range 10 {
		if tg := mustChoose(t, u, 0, 1<<0, 0, false); tg.index != 2 {
			t.Fatalf("retry avoiding t0 went to t%d", tg.index)
		}
	}
	u.targets[0].health.down.Store(true)
	u.targets[2].health.down.Store(true)
	if tg, _ := u.choose(0, 0, 0, false, true); tg != nil {
		t.Fatalf("all down: chose t%d, want none", tg.index)
	}
}

func TestLeastConn(t *testing.T) {
	u, _ := testUpstream(t, []int{1, 1, 2}, tenants.Upstream{Balance: tenants.BalanceLeastConn})
	// Idle: ties spread round-robin, not all to the first target.
	counts := map[int]int{}
	for range 300 {
		counts[int(mustChoose(t, u, 0, 0, 0, false).index)]++
	}
	for i := range 3 {
		if counts[i] != 100 {
			t.Fatalf("idle split: %v, want 100 each", counts)
		}
	}
	// Loaded: the lowest in-flight per weight wins.
	u.targets[0].inflight.Store(3)
	u.targets[1].inflight.Store(1)
	u.targets[2].inflight.Store(4) // 4/2 = 2 > 1/1
	for range 20 {
		if tg := mustChoose(t, u, 0, 0, 0, false); tg.index != 1 {
			t.Fatalf("least loaded is t1, chose t%d", tg.index)
		}
	}
	u.targets[2].inflight.Store(1) // 1/2 < 1/1
	if tg := mustChoose(t, u, 0, 0, 0, false); tg.index != 2 {
		t.Fatalf("least loaded by weight is t2, chose t%d", tg.index)
	}
	u.targets[2].health.down.Store(true)
	if tg := mustChoose(t, u, 0, 0, 0, false); tg.index != 1 {
		t.Fatalf("t2 down: least loaded is t1, chose t%d", tg.index)
	}
	// Filling the in-flight counts in the order least_conn picks keeps them level.
	v, _ := testUpstream(t, []int{1, 1, 1, 1}, tenants.Upstream{Balance: tenants.BalanceLeastConn})
	for range 40 {
		mustChoose(t, v, 0, 0, 0, false).inflight.Add(1)
	}
	for _, tg := range v.targets {
		if n := tg.inflight.Load(); n != 10 {
			t.Fatalf("t%d has %d in flight, want 10 each", tg.index, n)
		}
	}
}

func TestHashRing(t *testing.T) {
	u, _ := testUpstream(t, []int{1, 1, 2, 0}, tenants.Upstream{Balance: tenants.BalanceHash, HashOn: tenants.HashOnIP})
	const keys = 20000
	owner := make([]uint8, keys)
	counts := map[uint8]int{}
	for k := range keys {
		key := Key(([]byte(fmt.Sprintf("client-%d", k))))
		tg := mustChoose(t, u, 0, 0, key, true)
		owner[k] = tg.index
		counts[tg.index]++
		if again := mustChoose(t, u, 0, 0, key, true); again != tg {
			t.Fatalf("key %d: t%d then t%d", k, tg.index, again.index)
		}
	}
	if counts[3] != 0 {
		t.Fatalf("weight 0 target got %d keys", counts[3])
	}
	// Shares follow the weights (1:1:2) within 20%.
	for i, want := range []float64{0.25, 0.25, 0.5} {
		got := float64(counts[uint8(i)]) / keys
		if got < want*0.8 || got > want*1.2 {
			t.Fatalf("t%d has %.3f of the keys, want about %.2f (%v)", i, got, want, counts)
		}
	}
	// t1 out: only its keys move, spread over the others; back: they return.
	u.targets[1].health.down.Store(true)
	moved := map[uint8]int{}
	for k := range keys {
		key := Key(([]byte(fmt.Sprintf("client-%d", k))))
		tg := mustChoose(t, u, 0, 0, key, true)
		if owner[k] != 1 && tg.index != owner[k] {
			t.Fatalf("key %d of t%d moved to t%d when t1 went out", k, owner[k], tg.index)
		}
		if owner[k] == 1 {
			moved[tg.index]++
		}
	}
	if moved[0] == 0 || moved[2] == 0 {
		t.Fatalf("t1's keys went %v, want spread over t0 and t2", moved)
	}
	u.targets[1].health.down.Store(false)
	for k := range keys {
		key := Key(([]byte(fmt.Sprintf("client-%d", k))))
		if tg := mustChoose(t, u, 0, 0, key, true); tg.index != owner[k] {
			t.Fatalf("key %d did not return to t%d", k, owner[k])
		}
	}
	// Without a key (hash on a missing header): round-robin over the weighted cycle.
	seen := map[uint8]bool{}
	for range 8 {
		seen[mustChoose(t, u, 0, 0, 0, false).index] = true
	}
	if len(seen) != 3 {
		t.Fatalf("keyless requests went to %v, want all three weighted targets", seen)
	}
}

func TestPassiveEjection(t *testing.T) {
	u, ev := testUpstream(t, []int{1, 1}, tenants.Upstream{Passive: &tenants.PassiveHealth{Failures: 3, EjectMS: 1000}})
	t0 := u.targets[0]
	now := int64(time.Hour)
	u.report(t0, outcomeFailed, false, now)
	u.report(t0, outcomeFailed, false, now)
	u.report(t0, outcomeOK, false, now) // a success breaks the run
	u.report(t0, outcomeFailed, false, now)
	u.report(t0, outcomeFailed, false, now)
	u.report(t0, outcomeNeutral, false, now) // says nothing about the target
	if !t0.inRotation(now) {
		t.Fatal("ejected before 3 failures in a row")
	}
	u.report(t0, outcomeFailed, false, now)
	if t0.inRotation(now) {
		t.Fatal("not ejected after 3 failures in a row")
	}
	for range 10 {
		if tg := mustChoose(t, u, now, 0, 0, false); tg != u.targets[1] {
			t.Fatal("an ejected target was chosen")
		}
	}
	if !t0.inRotation(now + int64(time.Second)) {
		t.Fatal("still out after eject_ms")
	}
	if n := ev.ejected; n != 1 {
		t.Fatalf("ejections counted %v, want 1", n)
	}

	// With an active check, an ejected target waits for healthy_threshold passes.
	v, _ := testUpstream(t, []int{1, 1}, tenants.Upstream{
		Passive:     &tenants.PassiveHealth{Failures: 1, EjectMS: 1},
		HealthCheck: &tenants.HealthCheck{Path: "/", IntervalMS: 100, TimeoutMS: 100, HealthyThreshold: 2, UnhealthyThreshold: 3},
	})
	v0 := v.targets[0]
	v.report(v0, outcomeFailed, false, now)
	if v0.inRotation(now + int64(time.Hour)) {
		t.Fatal("ejected target came back on time, not on the check")
	}
	v.checked(v0, true)
	if v0.inRotation(now) {
		t.Fatal("back after one pass, want healthy_threshold 2")
	}
	v.checked(v0, true)
	if !v0.inRotation(now) {
		t.Fatal("not back after healthy_threshold passes")
	}
}

func TestActiveCheckThresholds(t *testing.T) {
	u, ev := testUpstream(t, []int{1}, tenants.Upstream{
		HealthCheck: &tenants.HealthCheck{Path: "/", IntervalMS: 100, TimeoutMS: 100, HealthyThreshold: 2, UnhealthyThreshold: 3},
	})
	t0 := u.targets[0]
	if !t0.inRotation(0) {
		t.Fatal("a new target starts healthy")
	}
	u.checked(t0, false)
	u.checked(t0, false)
	u.checked(t0, true)
	u.checked(t0, false)
	u.checked(t0, false)
	if !t0.inRotation(0) {
		t.Fatal("unhealthy without 3 failures in a row")
	}
	u.checked(t0, false)
	if t0.inRotation(0) {
		t.Fatal("healthy after 3 failures in a row")
	}
	if tg, _ := u.choose(0, 0, 0, false, true); tg != nil {
		t.Fatal("chose the only, unhealthy target")
	}
	u.checked(t0, true)
	u.checked(t0, false)
	u.checked(t0, true)
	if t0.inRotation(0) {
		t.Fatal("healthy without 2 passes in a row")
	}
	u.checked(t0, true)
	if !t0.inRotation(0) {
		t.Fatal("unhealthy after 2 passes in a row")
	}
	if n := ev.changed; n != 2 {
		t.Fatalf("health changes counted %v, want 2", n)
	}
}

func TestCircuitBreaker(t *testing.T) {
	u, ev := testUpstream(t, []int{1, 1}, tenants.Upstream{
		CircuitBreaker: &tenants.CircuitBreaker{ErrorPercent: 50, MinRequests: 4, WindowMS: 10_000, OpenMS: 1000},
	})
	t0, t1 := u.targets[0], u.targets[1]
	now := int64(time.Hour)
	// 3 failures of 3: under min_requests.
	for range 3 {
		u.report(t0, outcomeFailed, false, now)
	}
	if !t0.inRotation(now) {
		t.Fatal("opened under min_requests")
	}
	u.report(t0, outcomeOK, false, now) // 3 of 4 failed, but the open check runs on failures
	u.report(t0, outcomeFailed, false, now)
	if t0.inRotation(now) {
		t.Fatal("closed at 4 of 5 failed")
	}
	if tg := mustChoose(t, u, now, 0, 0, false); tg != t1 {
		t.Fatal("open circuit's target chosen")
	}
	// Old failures leave the window.
	v, _ := testUpstream(t, []int{1}, tenants.Upstream{
		CircuitBreaker: &tenants.CircuitBreaker{ErrorPercent: 50, MinRequests: 4, WindowMS: 1000, OpenMS: 1000},
	})
	for range 3 {
		v.report(v.targets[0], outcomeFailed, false, now)
	}
	v.report(v.targets[0], outcomeFailed, false, now+int64(2*time.Second))
	if !v.targets[0].inRotation(now + int64(2*time.Second)) {
		t.Fatal("failures older than the window opened the circuit")
	}

	// After open_ms: exactly one trial.
	later := now + int64(time.Second)
	if !t0.inRotation(later) {
		t.Fatal("not half-open after open_ms")
	}
	tg, trial := u.choose(later, 1<<1, 0, false, true)
	if tg != t0 || !trial {
		t.Fatalf("half-open: chose %v trial %v, want t0's trial", tg, trial)
	}
	if tg, _ := u.choose(later, 1<<1, 0, false, true); tg != nil {
		t.Fatal("a second request got through while the trial is in flight")
	}
	if tg := mustChoose(t, u, later, 0, 0, false); tg != t1 {
		t.Fatal("others go to t1 during the trial")
	}
	// Trial fails: open again.
	u.report(t0, outcomeFailed, true, later)
	if t0.inRotation(later + 1) {
		t.Fatal("failed trial did not reopen the circuit")
	}
	// Next trial succeeds: closed, all traffic again.
	later2 := later + int64(time.Second)
	tg, trial = u.choose(later2, 1<<1, 0, false, true)
	if tg != t0 || !trial {
		t.Fatal("no second trial")
	}
	u.report(t0, outcomeOK, true, later2)
	for range 5 {
		if tg, trial := u.choose(later2, 1<<1, 0, false, true); tg != t0 || trial {
			t.Fatal("circuit not closed after a successful trial")
		}
	}
	if n := ev.opened; n != 2 {
		t.Fatalf("breaker opens counted %v, want 2", n)
	}
	// A WebSocket pick (no outcome report) never takes the trial.
	w, _ := testUpstream(t, []int{1}, tenants.Upstream{
		CircuitBreaker: &tenants.CircuitBreaker{ErrorPercent: 50, MinRequests: 1, WindowMS: 1000, OpenMS: 1},
	})
	w.report(w.targets[0], outcomeFailed, false, now)
	if tg, _ := w.choose(now+int64(time.Second), 0, 0, false, false); tg != nil {
		t.Fatal("a pick without reporting took the half-open trial")
	}
}

func TestRetryBudget(t *testing.T) {
	b := newRetryBudget(&tenants.Retries{Attempts: 1, BudgetPercent: 10, MinPerSecond: 2})
	now := int64(100 * time.Second)
	// No requests: min_per_second × 10 retries.
	n := 0
	for b.take(now) {
		n++
	}
	if n != 20 {
		t.Fatalf("%d retries without requests, want 20", n)
	}
	// 100 requests add 10.
	for range 100 {
		b.request(now)
	}
	n = 0
	for b.take(now) {
		n++
	}
	if n != 10 {
		t.Fatalf("%d more retries after 100 requests, want 10", n)
	}
	// Ten seconds later the window is empty again.
	later := now + int64(10*time.Second)
	n = 0
	for b.take(later) {
		n++
	}
	if n != 20 {
		t.Fatalf("%d retries in a fresh window, want 20", n)
	}
}

func TestOutcomeOf(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		want   outcome
	}{
		{nil, 200, outcomeOK},
		{nil, 500, outcomeOK},
		{nil, 502, outcomeFailed},
		{nil, 503, outcomeFailed},
		{nil, 504, outcomeFailed},
		{&upstreamclient.DialError{Addr: "x"}, 0, outcomeFailed},
		{&upstreamclient.DialError{Addr: "x", TimedOut: true}, 0, outcomeFailed},
		{&upstreamclient.DialError{Addr: "x", AddressRule: true}, 0, outcomeNeutral},
	} {
		if got := outcomeOf(c.err, c.status); got != c.want {
			t.Errorf("outcomeOf(%v, %d) = %d, want %d", c.err, c.status, got, c.want)
		}
	}
}

// BenchmarkChoose: the per-request cost of each balancing method over 8 targets, all in
// rotation (plain is the round-robin fast path proxyStep takes without any setting).
func BenchmarkChoose(b *testing.B) {
	weights := []int{1, 2, 1, 3, 1, 1, 2, 1}
	cb := &tenants.CircuitBreaker{ErrorPercent: 50, MinRequests: 20, WindowMS: 10_000, OpenMS: 30_000}
	for _, c := range []struct {
		name string
		spec tenants.Upstream
	}{
		{"round_robin", tenants.Upstream{}},
		{"round_robin+breaker", tenants.Upstream{CircuitBreaker: cb}},
		{"least_conn", tenants.Upstream{Balance: tenants.BalanceLeastConn}},
		{"hash", tenants.Upstream{Balance: tenants.BalanceHash, HashOn: tenants.HashOnIP}},
	} {
		u, _ := testUpstream(b, weights, c.spec)
		if c.name == "round_robin" {
			b.Run("plain", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					_ = u.Pick()
				}
			})
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			key := Key(([]byte("203.0.113.7")))
			for i := range b.N {
				tg, _ := u.choose(int64(i), 0, key+uint64(i), true, true)
				if tg == nil {
					b.Fatal("no target")
				}
			}
		})
	}
}
