package limit_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"tollgate/edge/limit"
	"tollgate/infra/testenv"
	"tollgate/tenants"
)

// relaxed is the Redis timeout of tests about counting, not latency: generous, so a
// busy machine (the race detector, other tests) does not turn them degraded.
const relaxed = time.Second

// edges makes n limiters sharing one Redis prefix and clock, as n edges of a fleet.
// They run no background loop: tests Flush at the moments they choose.
func edges(t *testing.T, n int, c *clock, prefix string) []*limit.Limiter {
	t.Helper()
	rdb := redisClient(t, prefix)
	ls := make([]*limit.Limiter, n)
	for i := range ls {
		ls[i] = newLimiter(t, limit.Config{Redis: rdb, Prefix: prefix, Clock: c.Now, SyncInterval: -1, EdgeID: "edge" + strconv.Itoa(i), Timeout: relaxed})
		if s := ls[i].State(); s.Mode != "cluster" {
			t.Fatalf("edge %d: %+v, want cluster mode", i, s)
		}
	}
	return ls
}

// Two edges, one exact limit of 100/s (burst 50) driven at 300/s for 10 s of the shared
// clock: exactly rate × duration + burst are admitted, wherever the requests land.
func TestExactLimitHoldsAcrossEdges(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	ls := edges(t, 2, c, prefix)
	p := rate(t, "t1", "tenant", limit.ModeExact, 100, time.Second, 50)
	admitted := 0
	const rps, secs = 300, 10
	start := c.Now()
	for i := 0; i < rps*secs; i++ {
		d := ls[i%2].Allow(bg, one(p, ""))
		if d.Allowed {
			admitted++
		} else if d.Code != tenants.ERateLimited || d.RetryAfter <= 0 || d.RetryAfter > 10*time.Millisecond {
			t.Fatalf("refusal %+v: want rate_limited, retry within one interval", d)
		}
		if d.Degraded {
			t.Fatalf("request %d decided locally: %+v (%s)", i, d, ls[i%2].State().LastError)
		}
		c.Advance(time.Second / rps)
	}
	want := 100*c.Since(start) + 50
	t.Logf("admitted %d of %d over %.2fs, want %.0f", admitted, rps*secs, c.Since(start), want)
	if float64(admitted) < want*0.98 || float64(admitted) > want*1.02 {
		t.Fatalf("admitted %d, want %.0f ± 2%%", admitted, want)
	}
	// The second edge was counted by the first: per edge, half.
	if s := ls[0].State(); s.RedisCommands < rps*secs/2 {
		t.Fatalf("edge 0 sent %d commands for %d requests", s.RedisCommands, rps*secs/2)
	}
}

// A refused exact check consumes neither the other exact checks (the script is
// all-or-nothing) nor the local ones (refunded).
func TestExactAllOrNothing(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	l := edges(t, 1, c, prefix)[0]
	wide := rate(t, "t1", "wide", limit.ModeExact, 10, time.Second, 10)
	narrow := rate(t, "t1", "narrow", limit.ModeExact, 1, time.Second, 1)
	q := quota(t, "t1", "q", limit.ModeExact, 100)
	local := rate(t, "t1", "local", limit.ModeLocal, 10, time.Second, 10)
	all := []limit.Check{{Rule: local}, {Rule: wide}, {Rule: q, Key: []byte("c1")}, {Rule: narrow}}
	if d := l.Allow(bg, all); !d.Allowed || d.Rule != narrow || d.Remaining != 0 {
		t.Fatalf("first: %+v, want allowed, narrow tightest", d)
	}
	for i := 0; i < 5; i++ {
		if d := l.Allow(bg, all); d.Allowed || d.Rule != narrow || d.RetryAfter != time.Second {
			t.Fatalf("call %d: %+v, want refused by narrow for 1s", i, d)
		}
	}
	if d := l.Allow(bg, []limit.Check{{Rule: wide}}); d.Remaining != 8 {
		t.Fatalf("wide: %+v, want 8 left after 2 uses", d)
	}
	if d := l.Allow(bg, []limit.Check{{Rule: q, Key: []byte("c1")}}); d.Remaining != 98 {
		t.Fatalf("quota: %+v, want 98 left after 2 uses", d)
	}
	if d := l.Allow(bg, []limit.Check{{Rule: local}}); d.Remaining != 8 {
		t.Fatalf("local: %+v, want 8 left after 2 uses", d)
	}
}

// Approximate mode: two edges admit against their views and sync every 100 ms. The
// admitted count stays within the documented bound r·w + b + (E−1)·(b + 2·r·I'),
// and Redis sees a few commands per hundred requests.
func TestApproximateLimitWithinBound(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	ls := edges(t, 2, c, prefix)
	const r, b, rps = 100, 50, 300
	p := rate(t, "t1", "tenant", limit.ModeApproximate, r, time.Second, b)
	interval := 100 * time.Millisecond
	admitted, refused := 0, 0
	start := c.Now()
	before := ls[0].State().RedisCommands + ls[1].State().RedisCommands
	for i := 0; i < rps*10; i++ {
		d := ls[i%2].Allow(bg, one(p, ""))
		if d.Allowed {
			admitted++
		} else {
			refused++
		}
		if d.Degraded {
			t.Fatalf("decided degraded: %s", ls[i%2].State().LastError)
		}
		c.Advance(time.Second / rps)
		if c.Now().Sub(start)%interval < time.Second/rps {
			for _, l := range ls {
				if err := l.Flush(bg); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	w := c.Since(start)
	exact := r*w + b
	bound := exact + (2-1)*(b+2*r*interval.Seconds())
	cmds := ls[0].State().RedisCommands + ls[1].State().RedisCommands - before
	t.Logf("admitted %d (exact would be %.0f, bound %.0f), %d Redis commands for %d requests (%.4f per request)",
		admitted, exact, bound, cmds, admitted+refused, float64(cmds)/float64(admitted+refused))
	if float64(admitted) > bound {
		t.Fatalf("admitted %d, over the worst-case bound %.0f", admitted, bound)
	}
	// The README's figure for this steady flood: within 1% of ModeExact, either way.
	if math.Abs(float64(admitted)-exact) > exact/100 {
		t.Fatalf("admitted %d, want %.0f ± 1%%", admitted, exact)
	}
	if per := float64(cmds) / float64(admitted+refused); per > 0.1 {
		t.Fatalf("%.3f Redis commands per request", per)
	}
}

// Below the rate nothing is refused in approximate mode when the burst covers a sync
// interval of refill, even with the load split over edges.
func TestApproximateAdmitsTrafficBelowTheRate(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	ls := edges(t, 3, c, prefix)
	p := rate(t, "t1", "tenant", limit.ModeApproximate, 100, time.Second, 25)
	start := c.Now()
	for i := 0; i < 900; i++ { // 90/s for 10 s over three edges
		if d := ls[i%3].Allow(bg, one(p, "")); !d.Allowed {
			t.Fatalf("request %d at %.2fs refused below the rate: %+v", i, c.Since(start), d)
		}
		c.Advance(time.Second / 90)
		if i%9 == 8 {
			for _, l := range ls {
				l.Flush(bg)
			}
		}
	}
}

// An exact quota of N admits exactly N across two edges and a restart of one of them.
func TestExactQuotaAcrossEdgesAndRestart(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	ls := edges(t, 2, c, prefix)
	q := quota(t, "t1", "consumer", limit.ModeExact, 50)
	admitted := 0
	for i := 0; i < 80; i++ {
		d := ls[i%2].Allow(bg, one(q, "c1"))
		if d.Allowed {
			admitted++
			if d.Remaining != int64(50-admitted) {
				t.Fatalf("remaining %d after %d", d.Remaining, admitted)
			}
		} else if d.Code != tenants.EQuotaExceeded {
			t.Fatalf("%+v", d)
		}
	}
	if admitted != 50 {
		t.Fatalf("admitted %d, want exactly 50", admitted)
	}
	ls[1].Close()
	restarted := newLimiter(t, limit.Config{Redis: redisClient(t, ""), Prefix: prefix, Clock: c.Now, SyncInterval: -1, Timeout: relaxed})
	if d := restarted.Allow(bg, one(q, "c1")); d.Allowed {
		t.Fatalf("a restarted edge admitted past the quota: %+v", d)
	}
	if d := restarted.Allow(bg, one(q, "c2")); !d.Allowed || d.Remaining != 49 {
		t.Fatalf("another consumer: %+v", d)
	}
}

// An approximate quota pushes its counts in batches and overshoots by at most what the
// other edges admitted in the last two sync intervals; every admission reaches Redis
// (Close pushes the rest), and a new edge starts from the cluster's count.
func TestApproximateQuotaSurvivesRestart(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	ls := edges(t, 2, c, prefix)
	q := quota(t, "t1", "consumer", limit.ModeApproximate, 40)
	admitted := 0
	for i := 0; i < 60; i++ {
		if ls[i%2].Allow(bg, one(q, "c1")).Allowed {
			admitted++
		}
		if i%10 == 9 {
			ls[0].Flush(bg)
			ls[1].Flush(bg)
		}
	}
	// Each edge may not yet have seen the other's last two batches (5 requests each).
	if admitted < 40 || admitted > 40+10 {
		t.Fatalf("admitted %d, want 40 plus at most the other edge's 2 batches (10)", admitted)
	}
	ls[0].Close()
	ls[1].Close()
	n, err := rawRedis(t).Get(bg, prefix+":q:{t1}:consumer:c1:"+t0.Format("200601")).Int64()
	if err != nil || n != int64(admitted) {
		t.Fatalf("count in Redis %d (%v), want every admitted request (%d)", n, err, admitted)
	}
	restarted := newLimiter(t, limit.Config{Redis: redisClient(t, ""), Prefix: prefix, Clock: c.Now, SyncInterval: -1, Timeout: relaxed})
	if d := restarted.Allow(bg, one(q, "c1")); d.Allowed {
		t.Fatalf("restarted edge admitted past the quota: %+v", d)
	}
}

// The month changes at UTC midnight: a new key, a fresh count.
func TestQuotaMonthBoundary(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(time.Date(2030, 1, 31, 23, 59, 59, 900_000_000, time.UTC))
	l := edges(t, 1, c, prefix)[0]
	q := quota(t, "t1", "tenant", limit.ModeExact, 3)
	for i := 0; i < 3; i++ {
		if !l.Allow(bg, one(q, "")).Allowed {
			t.Fatal("refused within the quota")
		}
	}
	d := l.Allow(bg, one(q, ""))
	if d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("%+v, want refused until midnight", d)
	}
	c.Set(time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC))
	if d := l.Allow(bg, one(q, "")); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("February: %+v", d)
	}
	r := rawRedis(t)
	jan, _ := r.Get(bg, prefix+":q:{t1}:tenant::203001").Int64()
	feb, _ := r.Get(bg, prefix+":q:{t1}:tenant::203002").Int64()
	if jan != 3 || feb != 1 {
		t.Fatalf("January %d, February %d; want 3 and 1", jan, feb)
	}
	ttl, _ := r.TTL(bg, prefix+":q:{t1}:tenant::203002").Result()
	if ttl < 24*time.Hour {
		t.Fatalf("February's key expires in %s", ttl)
	}
}

// Edges count each other through the heartbeat; the local share divides by them.
func TestLiveEdgesAndLocalShare(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	ls := edges(t, 3, c, prefix)
	for _, l := range ls {
		if err := l.Heartbeat(bg); err != nil {
			t.Fatal(err)
		}
	}
	if n := ls[0].LiveEdges(); n != 3 {
		t.Fatalf("live edges %d, want 3", n)
	}
	// A local-mode limit of 90/s, burst 90: this edge's share is 30.
	p := rate(t, "t1", "tenant", limit.ModeLocal, 90, time.Second, 90)
	n := 0
	for ls[0].Allow(bg, one(p, "")).Allowed {
		n++
	}
	if n != 30 {
		t.Fatalf("local share admitted %d, want 30", n)
	}
	// Edges whose heartbeat is older than the TTL are not counted.
	ls[1].Close()
	c.Advance(6 * time.Second)
	ls[0].Heartbeat(bg)
	if n := ls[0].LiveEdges(); n != 1 {
		t.Fatalf("live edges %d after 6s without the others' heartbeats, want 1", n)
	}
}

func TestRedisClientMustHonourDeadlines(t *testing.T) {
	_, err := limit.New(limit.Config{Redis: rawRedis(t)})
	if err == nil {
		t.Fatal("a client without ContextTimeoutEnabled was accepted")
	}
}

// A flood of distinct keys in approximate mode: the synced table evicts, evicted keys
// are pushed once and dropped, idle keys leave the sync list.
func TestSyncedKeysStayBounded(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	l := newLimiter(t, limit.Config{Redis: redisClient(t, prefix), Prefix: prefix, Clock: c.Now, SyncInterval: -1, MaxSyncedKeys: 1024, Timeout: relaxed})
	p := rate(t, "t1", "route-ip:r1", limit.ModeApproximate, 10, time.Second, 10)
	key := make([]byte, 0, 16)
	for i := 0; i < 20_000; i++ {
		key = strconv.AppendInt(key[:0], int64(i), 10)
		if !l.Allow(bg, []limit.Check{{Rule: p, Key: key}}).Allowed {
			t.Fatalf("new key %d refused", i)
		}
		if i%1000 == 999 {
			if err := l.Flush(bg); err != nil {
				t.Fatal(err)
			}
			if n := l.State().SyncedKeys; n > 1024 {
				t.Fatalf("%d keys on the sync list after a flush, table of 1024", n)
			}
			c.Advance(10 * time.Millisecond)
		}
	}
	c.Advance(3 * time.Second) // past KeepAlive
	l.Flush(bg)
	if n := l.State().SyncedKeys; n != 0 {
		t.Fatalf("%d idle keys still synced", n)
	}
}

func TestApproximatePathAllocatesNothing(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	l := edges(t, 1, c, prefix)[0]
	checks := []limit.Check{
		{Rule: rate(t, "t1", "tenant", limit.ModeApproximate, 1_000_000, time.Second, 1_000_000)},
		{Rule: quota(t, "t1", "tenant", limit.ModeApproximate, 1_000_000)},
	}
	l.Allow(bg, checks)
	if n := testing.AllocsPerRun(1000, func() { l.Allow(bg, checks) }); n != 0 {
		t.Fatalf("approximate Allow allocates %.1f times", n)
	}
}
