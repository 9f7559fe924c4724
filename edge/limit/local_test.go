package limit_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/limit"
	"tollgate/tenants"
)

var bg = context.Background()

func localLimiter(tb testing.TB, c *clock) *limit.Limiter {
	return newLimiter(tb, limit.Config{Clock: c.Now})
}

func TestBurstThenRefill(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	p := rate(t, "t1", "consumer", limit.ModeLocal, 10, time.Second, 5) // T = 100ms
	for i := 0; i < 5; i++ {
		d := l.Allow(bg, one(p, "c1"))
		if !d.Allowed || d.Limit != 5 || d.Remaining != int64(4-i) {
			t.Fatalf("request %d: %+v, want allowed with %d remaining of 5", i, d, 4-i)
		}
	}
	d := l.Allow(bg, one(p, "c1"))
	if d.Allowed || d.Code != tenants.ERateLimited || d.RetryAfter != 100*time.Millisecond || d.Remaining != 0 {
		t.Fatalf("6th request: %+v, want refused, retry after 100ms", d)
	}
	if d.Reset != 500*time.Millisecond {
		t.Fatalf("reset %s, want 500ms until the bucket is full", d.Reset)
	}
	// One emission interval later exactly one more.
	c.Advance(100 * time.Millisecond)
	if d := l.Allow(bg, one(p, "c1")); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after 100ms: %+v, want one allowed", d)
	}
	if d := l.Allow(bg, one(p, "c1")); d.Allowed {
		t.Fatalf("second after 100ms: %+v, want refused", d)
	}
	// A long idle period refills the bucket to its size, not more.
	c.Advance(time.Hour)
	n := 0
	for l.Allow(bg, one(p, "c1")).Allowed {
		n++
	}
	if n != 5 {
		t.Fatalf("after an hour %d admitted, want the burst of 5", n)
	}
	// Keys are independent.
	if d := l.Allow(bg, one(p, "c2")); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("other key: %+v", d)
	}
}

func TestBoundaryToTheNanosecond(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	p := rate(t, "t1", "r", limit.ModeLocal, 4, time.Second, 1) // T = 250ms, no burst
	if !l.Allow(bg, one(p, "k")).Allowed {
		t.Fatal("first refused")
	}
	c.Advance(250*time.Millisecond - 1)
	d := l.Allow(bg, one(p, "k"))
	if d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("1ns early: %+v, want refused with 1ns to wait", d)
	}
	c.Advance(1)
	if !l.Allow(bg, one(p, "k")).Allowed {
		t.Fatal("on time: refused")
	}
}

func TestRefusedCallsAreNotCounted(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	p := rate(t, "t1", "r", limit.ModeLocal, 10, time.Second, 2)
	l.Allow(bg, one(p, "k"))
	l.Allow(bg, one(p, "k"))
	// A flood of refused calls while the bucket refills...
	for i := 0; i < 1000; i++ {
		c.Advance(50 * time.Microsecond)
		if l.Allow(bg, one(p, "k")).Allowed {
			t.Fatalf("call %d admitted inside the emission interval", i)
		}
	}
	// ...does not push the next admission back.
	c.Set(t0.Add(100 * time.Millisecond))
	if d := l.Allow(bg, one(p, "k")); !d.Allowed {
		t.Fatalf("after one interval: %+v, refused calls were counted", d)
	}
}

func TestPerMinuteRate(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	p := rate(t, "t1", "r", limit.ModeLocal, 30, time.Minute, 3) // one per 2s
	admitted := 0
	for i := 0; i < 600; i++ { // 10 minutes, one call per second
		if l.Allow(bg, one(p, "k")).Allowed {
			admitted++
		}
		c.Advance(time.Second)
	}
	if want := 3 + 300 - 1; admitted < want || admitted > want+2 {
		t.Fatalf("%d admitted in 10 minutes at 30/min with burst 3, want about %d", admitted, want)
	}
	d := l.Allow(bg, one(p, "k"))
	if !d.Allowed && d.RetryAfter > 2*time.Second {
		t.Fatalf("retry after %s, want at most one interval (2s)", d.RetryAfter)
	}
}

func TestTightestLimitWins(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	tenant := rate(t, "t1", "tenant", limit.ModeLocal, 100, time.Second, 100)
	consumer := rate(t, "t1", "consumer", limit.ModeLocal, 10, time.Second, 10)
	route := rate(t, "t1", "route-ip:r1", limit.ModeLocal, 3, time.Second, 3)
	checks := func(ip string) []limit.Check {
		return []limit.Check{{Rule: tenant}, {Rule: consumer, Key: []byte("c1")}, {Rule: route, Key: []byte(ip)}}
	}
	// The per-IP route limit is tightest for one IP.
	for i := 0; i < 3; i++ {
		d := l.Allow(bg, checks("10.0.0.1"))
		if !d.Allowed || d.Rule != route || d.Limit != 3 || d.Remaining != int64(2-i) {
			t.Fatalf("request %d: %+v, want the route limit reported", i, d)
		}
	}
	if d := l.Allow(bg, checks("10.0.0.1")); d.Allowed || d.Rule != route {
		t.Fatalf("4th from one IP: %+v, want refused by the route limit", d)
	}
	// Over many IPs the consumer's 10 is tightest: 3 already taken, 7 left.
	admitted := 0
	for i := 2; i < 30; i++ {
		d := l.Allow(bg, checks("10.0.0."+strconv.Itoa(i)))
		if d.Allowed {
			admitted++
			continue
		}
		if d.Rule != consumer {
			t.Fatalf("refused by %v, want the consumer limit", d.Rule)
		}
	}
	if admitted != 7 {
		t.Fatalf("%d admitted past the consumer's 10, want 7", admitted)
	}
	// The tenant limit saw exactly the 10 admitted requests.
	d := l.Allow(bg, []limit.Check{{Rule: tenant}})
	if !d.Allowed || d.Remaining != 100-11 {
		t.Fatalf("tenant after 10 admitted and many refused: %+v, want 89 remaining", d)
	}
}

func TestRefusalByALaterLimitConsumesNothing(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	wide := rate(t, "t1", "wide", limit.ModeLocal, 5, time.Second, 5)
	narrow := rate(t, "t1", "narrow", limit.ModeLocal, 1, time.Second, 1)
	q := quota(t, "t1", "q", limit.ModeLocal, 100)
	both := []limit.Check{{Rule: wide}, {Rule: q}, {Rule: narrow}}
	if !l.Allow(bg, both).Allowed {
		t.Fatal("first refused")
	}
	for i := 0; i < 10; i++ {
		if d := l.Allow(bg, both); d.Allowed || d.Rule != narrow {
			t.Fatalf("call %d: %+v, want refused by narrow", i, d)
		}
	}
	// wide and q were refunded each time: one use each.
	if d := l.Allow(bg, []limit.Check{{Rule: wide}}); d.Remaining != 3 {
		t.Fatalf("wide: %+v, want 3 remaining after 2 uses", d)
	}
	if d := l.Allow(bg, []limit.Check{{Rule: q}}); d.Remaining != 98 {
		t.Fatalf("quota: %+v, want 98 remaining after 2 uses", d)
	}
	// Refused by the first: the later ones are not touched at all.
	for i := 0; i < 3; i++ {
		l.Allow(bg, []limit.Check{{Rule: wide}})
	}
	c.Advance(time.Second) // narrow full again; wide got 5 back too
	for i := 0; i < 5; i++ {
		l.Allow(bg, []limit.Check{{Rule: wide}})
	}
	if d := l.Allow(bg, both); d.Allowed || d.Rule != wide {
		t.Fatalf("%+v, want refused by wide", d)
	}
	if d := l.Allow(bg, []limit.Check{{Rule: narrow}}); !d.Allowed {
		t.Fatalf("narrow was consumed by a call wide refused: %+v", d)
	}
}

func TestLocalQuotaAndMonthBoundary(t *testing.T) {
	c := newClock(time.Date(2030, 1, 31, 23, 59, 59, 0, time.UTC))
	l := localLimiter(t, c)
	q := quota(t, "t1", "consumer", limit.ModeLocal, 3)
	for i := 0; i < 3; i++ {
		d := l.Allow(bg, one(q, "c1"))
		if !d.Allowed || d.Remaining != int64(2-i) || d.Reset != time.Second {
			t.Fatalf("request %d: %+v, want allowed, reset at midnight", i, d)
		}
	}
	d := l.Allow(bg, one(q, "c1"))
	if d.Allowed || d.Code != tenants.EQuotaExceeded || d.RetryAfter != time.Second {
		t.Fatalf("4th: %+v, want quota_exceeded until the month ends", d)
	}
	c.Set(time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC))
	if d := l.Allow(bg, one(q, "c1")); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("new month: %+v, want a fresh quota", d)
	}
	if d := l.Allow(bg, one(q, "c1")); d.Reset != 28*24*time.Hour {
		t.Fatalf("reset %s, want the 28 days of February", d.Reset)
	}
}

func TestNoChecksNoHeaders(t *testing.T) {
	l := localLimiter(t, newClock(t0))
	d := l.Allow(bg, nil)
	if !d.Allowed || d.Limit != 0 {
		t.Fatalf("%+v", d)
	}
	var h fasthttp.ResponseHeader
	d.WriteHeaders(&h)
	for _, name := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"} {
		if v := header(&h, name); v != "" {
			t.Fatalf("%s: %s written without a limit", name, v)
		}
	}
}

func TestHeaders(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	p := rate(t, "t1", "r", limit.ModeLocal, 2, time.Second, 2)
	var h fasthttp.ResponseHeader
	d := l.Allow(bg, one(p, "k"))
	d.WriteHeaders(&h)
	for name, want := range map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "1", "Retry-After": ""} {
		if got := header(&h, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if !containsExact(h.String(), "RateLimit-Remaining: 1") {
		t.Errorf("header names not as the contract spells them:\n%s", h.String())
	}
	l.Allow(bg, one(p, "k"))
	d = l.Allow(bg, one(p, "k"))
	h.Reset()
	d.WriteHeaders(&h)
	for name, want := range map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "1", "Retry-After": "1"} {
		if got := header(&h, name); got != want {
			t.Errorf("refused: %s: %q, want %q", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(1000, func() { d.WriteHeaders(&h) }); n != 0 {
		t.Errorf("WriteHeaders allocates %.1f times", n)
	}
}

func containsExact(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// header is the value of the header spelled exactly name.
func header(h *fasthttp.ResponseHeader, name string) string {
	for k, v := range h.All() {
		if string(k) == name {
			return string(v)
		}
	}
	return ""
}

func TestLocalPathAllocatesNothing(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	tenant := rate(t, "t1", "tenant", limit.ModeLocal, 1_000_000, time.Second, 1_000_000)
	consumer := rate(t, "t1", "consumer", limit.ModeLocal, 1_000_000, time.Second, 1_000_000)
	checks := []limit.Check{{Rule: tenant}, {Rule: consumer, Key: []byte("c1")}}
	var h fasthttp.ResponseHeader
	if n := testing.AllocsPerRun(1000, func() {
		d := l.Allow(bg, checks)
		d.WriteHeaders(&h)
	}); n != 0 {
		t.Fatalf("Allow allocates %.1f times per call", n)
	}
	// New keys too: the table is allocated once.
	i := 0
	key := make([]byte, 0, 16)
	if n := testing.AllocsPerRun(1000, func() {
		i++
		key = strconv.AppendInt(key[:0], int64(i), 10)
		l.Allow(bg, []limit.Check{{Rule: consumer, Key: key}})
	}); n != 0 {
		t.Fatalf("Allow of new keys allocates %.1f times per call", n)
	}
}

// A million distinct keys (a flood of client IPs) leave memory where it was: the table
// is allocated once and evicts.
func TestMemoryBoundUnderAMillionKeys(t *testing.T) {
	c := newClock(t0)
	l := newLimiter(t, limit.Config{Clock: c.Now, MaxKeys: 1 << 16})
	perIP := rate(t, "t1", "route-ip:r1", limit.ModeLocal, 10, time.Second, 10)
	hot := rate(t, "t1", "tenant", limit.ModeLocal, 10, time.Second, 10)
	l.Allow(bg, []limit.Check{{Rule: hot}}) // one request: 9 left

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	key := []byte{10, 0, 0, 0} // an IPv4 address
	checks := []limit.Check{{Rule: perIP, Key: key}}
	keys := 1_000_000
	if raceEnabled {
		keys = 200_000 // still three times the table
	}
	for i := 0; i < keys; i++ {
		key[1], key[2], key[3] = byte(i>>16), byte(i>>8), byte(i)
		if !l.Allow(bg, checks).Allowed {
			t.Fatalf("new key %d refused", i)
		}
		if i%1000 == 0 {
			c.Advance(time.Millisecond)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use grew by %d KiB over %d keys; evictions of live keys: %d", growth>>10, keys, l.State().Evictions)
	if growth > 1<<20 {
		t.Fatalf("heap grew by %d bytes over %d keys", growth, keys)
	}
	// The flood evicts keys (this one's TAT is long past, so it forgets nothing).
	if d := l.Allow(bg, []limit.Check{{Rule: hot}}); !d.Allowed {
		t.Fatalf("hot key after the flood: %+v", d)
	}
}

// Many goroutines on one key: exactly the burst is admitted (frozen clock), whatever
// the interleaving; on many keys each key gets its burst.
func TestConcurrentAllow(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	p := rate(t, "t1", "tenant", limit.ModeLocal, 500, time.Second, 500)
	per := rate(t, "t1", "consumer", limit.ModeLocal, 10, time.Second, 10)
	const workers, calls = 16, 400
	var admitted, perAdmitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			key := []byte("k" + strconv.Itoa(w%4))
			for i := 0; i < calls; i++ {
				if l.Allow(bg, []limit.Check{{Rule: p}}).Allowed {
					admitted.Add(1)
				}
				if l.Allow(bg, []limit.Check{{Rule: per, Key: key}}).Allowed {
					perAdmitted.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	if admitted.Load() != 500 {
		t.Fatalf("%d admitted on one key by %d goroutines, want exactly the burst of 500", admitted.Load(), workers)
	}
	if perAdmitted.Load() != 40 {
		t.Fatalf("%d admitted on 4 keys of burst 10, want 40", perAdmitted.Load())
	}
}

// Combined checks under contention: the refunds keep the counts exact.
func TestConcurrentCombinedRefunds(t *testing.T) {
	c := newClock(t0)
	l := localLimiter(t, c)
	wide := rate(t, "t1", "wide", limit.ModeLocal, 1000, time.Second, 1000)
	narrow := rate(t, "t1", "narrow", limit.ModeLocal, 100, time.Second, 100)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if l.Allow(bg, []limit.Check{{Rule: wide}, {Rule: narrow}}).Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 100 {
		t.Fatalf("%d admitted, want 100", admitted.Load())
	}
	if d := l.Allow(bg, []limit.Check{{Rule: wide}}); d.Remaining != 1000-101 {
		t.Fatalf("wide: %+v, want 899 left: refused calls were not refunded", d)
	}
}

func TestConcurrencyCap(t *testing.T) {
	l := localLimiter(t, newClock(t0))
	tenant, err := limit.NewConcurrency(limit.Scope{Tenant: "t1", Name: "tenant"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	consumer, _ := limit.NewConcurrency(limit.Scope{Tenant: "t1", Name: "consumer"}, 2)
	var held []limit.Ticket
	for i := 0; i < 3; i++ {
		tk, ok := l.Acquire(tenant, nil)
		if !ok {
			t.Fatalf("acquire %d refused under a cap of 3", i)
		}
		held = append(held, tk)
	}
	if _, ok := l.Acquire(tenant, nil); ok {
		t.Fatal("4th acquire admitted over a cap of 3")
	}
	held[0].Release()
	tk, ok := l.Acquire(tenant, nil)
	if !ok {
		t.Fatal("refused after a release")
	}
	tk.Release()
	held[1].Release()
	held[2].Release()

	// All or nothing: the consumer's cap refuses, the tenant's place is given back.
	checks := func(c string) []limit.Check {
		return []limit.Check{{Rule: tenant}, {Rule: consumer, Key: []byte(c)}}
	}
	a, d1 := l.AcquireAll(checks("c1"))
	b, d2 := l.AcquireAll(checks("c1"))
	if !d1.Allowed || !d2.Allowed {
		t.Fatal("two requests refused under caps of 3 and 2")
	}
	_, d := l.AcquireAll(checks("c1"))
	if d.Allowed || d.Code != tenants.EOverloaded || d.RetryAfter != time.Second {
		t.Fatalf("3rd for c1: %+v, want overloaded", d)
	}
	var h fasthttp.ResponseHeader
	d.WriteHeaders(&h)
	if header(&h, "Retry-After") != "1" || header(&h, "RateLimit-Limit") != "" {
		t.Fatalf("overloaded headers: %s", h.String())
	}
	c, d := l.AcquireAll(checks("c2")) // the tenant has 1 place left
	if !d.Allowed {
		t.Fatalf("c2 refused: the refused call kept the tenant's place: %+v", d)
	}
	a.Release()
	b.Release()
	c.Release()
	c1 := checks("c1")
	if n := testing.AllocsPerRun(1000, func() {
		ts, _ := l.AcquireAll(c1)
		ts.Release()
	}); n != 0 {
		t.Fatalf("AcquireAll allocates %.1f times", n)
	}
}

// A tenant flooding far over its cap neither blocks nor slows another tenant.
func TestConcurrencyIsolation(t *testing.T) {
	l := localLimiter(t, newClock(t0))
	noisy, _ := limit.NewConcurrency(limit.Scope{Tenant: "noisy", Name: "tenant"}, 4)
	quiet, _ := limit.NewConcurrency(limit.Scope{Tenant: "quiet", Name: "tenant"}, 4)
	stop := make(chan struct{})
	var refused atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 40; w++ { // 10× the cap
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if tk, ok := l.Acquire(noisy, nil); ok {
					time.Sleep(100 * time.Microsecond) // a slow upstream
					tk.Release()
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	for refused.Load() < 1000 {
		runtime.Gosched()
	}
	var slowest time.Duration
	for i := 0; i < 10000; i++ {
		start := time.Now()
		tk, ok := l.Acquire(quiet, nil)
		slowest = max(slowest, time.Since(start))
		if !ok {
			t.Fatalf("quiet tenant refused at %d with nothing in flight", i)
		}
		tk.Release()
	}
	t.Logf("slowest acquire of the quiet tenant while the noisy one floods: %s", slowest)
	close(stop)
	wg.Wait()
	if refused.Load() == 0 {
		t.Fatal("the noisy tenant was never over its cap")
	}
}

func TestRuleValidation(t *testing.T) {
	s := limit.Scope{Tenant: "t", Name: "n"}
	for _, r := range []limit.Rate{{Limit: 0, Per: time.Second}, {Limit: 1, Per: 0}, {Limit: 10, Per: time.Second, Burst: -1}, {Limit: 2_000_000_000, Per: time.Second}} {
		if _, err := limit.NewRate(s, r); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if _, err := limit.NewRate(limit.Scope{Tenant: "t"}, limit.Rate{Limit: 1, Per: time.Second}); err == nil {
		t.Error("a scope without a name accepted")
	}
	if _, err := limit.NewQuota(s, 0); err == nil {
		t.Error("quota 0 accepted")
	}
	p, err := limit.NewRate(s, limit.Rate{Limit: 10, Per: time.Second})
	if err != nil || p.String() != "t/n: 10 per 1s, burst 10 (local)" {
		t.Errorf("burst defaults to the rate: %v %v", p, err)
	}
	for in, want := range map[string]limit.Mode{"": limit.ModeApproximate, "exact": limit.ModeExact, "Local": limit.ModeLocal, "approximate": limit.ModeApproximate} {
		if m, err := limit.ParseMode(in, limit.ModeApproximate); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, m, err)
		}
	}
	if _, err := limit.ParseMode("fast", limit.ModeLocal); err == nil {
		t.Error("mode fast accepted")
	}
	rl, q, conc, err := limit.PlanRules(s, &tenants.ConsumerPlan{RateLimit: &tenants.RateLimit{RPS: 5, Burst: 8}, Quota: &tenants.Quota{Requests: 1000}, Concurrency: 3})
	if err != nil || rl == nil || q == nil || conc == nil {
		t.Fatalf("PlanRules: %v %v %v %v", rl, q, conc, err)
	}
	if rl.String() != "t/n: 5 per 1s, burst 8 (local)" || q.String() != "t/n: 1000 per month (local)" || conc.String() != "t/n: 3 in flight" {
		t.Errorf("plan rules: %s | %s | %s", rl, q, conc)
	}
}
