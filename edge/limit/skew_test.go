package limit_test

import (
	"testing"
	"time"

	"tollgate/edge/limit"
	"tollgate/infra/testenv"
)

// skewedEdges makes two edges sharing one Redis prefix whose clocks differ by skew:
// edge 1 runs ahead of edge 0, as two NTP-disciplined hosts may.
func skewedEdges(t *testing.T, c *clock, skew time.Duration) []*limit.Limiter {
	t.Helper()
	prefix := testenv.RedisPrefix(t)
	rdb := redisClient(t, prefix)
	ahead := func() time.Time { return c.Now().Add(skew) }
	return []*limit.Limiter{
		newLimiter(t, limit.Config{Redis: rdb, Prefix: prefix, Clock: c.Now, SyncInterval: -1, EdgeID: "behind", Timeout: relaxed}),
		newLimiter(t, limit.Config{Redis: rdb, Prefix: prefix, Clock: ahead, SyncInterval: -1, EdgeID: "ahead", Timeout: relaxed}),
	}
}

// Edges whose clocks differ by s seconds: the README's bound for exact mode, a shift of
// at most s·r admissions, holds with a skew of 200 ms (and of 2 s), under a flood at
// three times a 100/s limit spread over both edges for 10 s; approximate mode stays
// under its own bound plus the same s·r.
func TestClockSkewBound(t *testing.T) {
	const r, b, rps, secs = 100, 10, 300, 10
	for _, skew := range []time.Duration{200 * time.Millisecond, 2 * time.Second} {
		for _, mode := range []limit.Mode{limit.ModeExact, limit.ModeApproximate} {
			c := newClock(t0)
			ls := skewedEdges(t, c, skew)
			burst := int64(b)
			if mode == limit.ModeApproximate {
				burst = 20 // approximate needs b ≥ r·I' + 1
			}
			p := rate(t, "t1", "tenant", mode, r, time.Second, burst)
			admitted := 0
			start := c.Now()
			for i := 0; i < rps*secs; i++ {
				l := ls[i%2]
				d := l.Allow(bg, one(p, ""))
				if d.Degraded {
					t.Fatalf("degraded: %s", l.State().LastError)
				}
				if d.Allowed {
					admitted++
				}
				c.Advance(time.Second / rps)
				if mode == limit.ModeApproximate && i%(rps/10) == rps/10-1 {
					for _, l := range ls {
						if err := l.Flush(bg); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			w := c.Since(start)
			exact := r*w + float64(burst)
			shift := skew.Seconds() * r
			var lo, hi float64
			if mode == limit.ModeExact {
				lo, hi = exact-shift-1, exact+shift+1
			} else {
				lo, hi = exact*0.98-shift, exact+float64(burst)+2*r*0.1+shift // (E−1)·(b + 2·r·I), E = 2, I = 100 ms
			}
			t.Logf("%s, skew %s: admitted %d (without skew %.0f; want %.0f..%.0f)", mode, skew, admitted, exact, lo, hi)
			if float64(admitted) < lo || float64(admitted) > hi {
				t.Errorf("%s, skew %s: admitted %d, want %.0f..%.0f", mode, skew, admitted, lo, hi)
			}
		}
	}
}

// The skew's worst case, and that it is one-off: the edge whose clock is behind spends
// the whole burst; the edge ahead, at the same instant, finds the bucket s·r requests
// fuller than it is (never more than full: min(s·r, b)) and admits exactly those, and
// after that nothing more than the rate allows.
func TestClockSkewWorstCase(t *testing.T) {
	const skew = 50 * time.Millisecond
	c := newClock(t0)
	ls := skewedEdges(t, c, skew)
	p := rate(t, "t1", "tenant", limit.ModeExact, 100, time.Second, 10)
	spend := func(l *limit.Limiter) int {
		n := 0
		for range 100 {
			if d := l.Allow(bg, one(p, "")); d.Allowed {
				n++
			}
		}
		return n
	}
	if n := spend(ls[0]); n != 10 {
		t.Fatalf("the edge behind admitted %d, want the burst of 10", n)
	}
	if n := spend(ls[1]); n != 5 {
		t.Fatalf("the edge ahead then admitted %d, want s·r = 5", n)
	}
	c.Advance(100 * time.Millisecond) // 10 requests' worth of refill, seen by both
	if n := spend(ls[0]) + spend(ls[1]); n != 10 {
		t.Fatalf("after 100 ms both edges admitted %d, want 10", n)
	}
}
