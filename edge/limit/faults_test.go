package limit_test

import (
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/edge/limit"
	"tollgate/infra/testenv"
)

// slack is what a decision may take beyond the Redis timeout: scheduling on a busy shared
// machine under the race detector has been seen to add 50 ms. The failures these bounds
// catch are waits for Redis itself (its injected 500 ms delay, a dial timeout of
// seconds), so the bound stays well under those while leaving the scheduler room.
const slack = 150 * time.Millisecond

// requestMix is one request's checks in every mode that talks to Redis.
func requestMix(tb testing.TB) []limit.Check {
	return []limit.Check{
		{Rule: rate(tb, "t1", "tenant", limit.ModeExact, 1_000_000, time.Second, 1_000_000)},
		{Rule: rate(tb, "t1", "consumer", limit.ModeApproximate, 1_000_000, time.Second, 1_000_000), Key: []byte("c1")},
		{Rule: quota(tb, "t1", "consumer", limit.ModeExact, 1_000_000), Key: []byte("c1")},
	}
}

// timed runs n decisions and returns the slowest.
func timed(tb testing.TB, l *limit.Limiter, checks []limit.Check, n int, pause time.Duration) (slowest time.Duration, degraded int) {
	for i := 0; i < n; i++ {
		start := time.Now()
		d := l.Allow(bg, checks)
		slowest = max(slowest, time.Since(start))
		if !d.Allowed {
			tb.Fatalf("refused under generous limits: %+v", d)
		}
		if d.Degraded {
			degraded++
		}
		time.Sleep(pause)
	}
	return slowest, degraded
}

func wantTransitions(tb testing.TB, rec *logRecorder, l *limit.Limiter) {
	tb.Helper()
	msgs := rec.messages()
	for i, m := range msgs {
		down := strings.Contains(m, "unavailable")
		if down != (i%2 == 0) {
			tb.Fatalf("log lines do not alternate degraded/recovered: %q", msgs)
		}
	}
	if s := l.State(); uint64(len(msgs)) != s.Transitions {
		tb.Fatalf("%d log lines for %d transitions: %q", len(msgs), s.Transitions, msgs)
	}
}

// Redis down (nothing listens on its port): New and every decision return at once,
// limits hold at the local share, the state says degraded, logged once.
func TestRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rec := &logRecorder{}
	start := time.Now()
	l := newLimiter(t, limit.Config{Redis: redisAt(t, addr, ""), Prefix: testenv.RedisPrefix(t), Logger: slog.New(rec)})
	if d := time.Since(start); d > limit.DefaultTimeout+slack {
		t.Fatalf("New took %s with Redis down", d)
	}
	s := l.State()
	if s.Mode != "degraded" || !s.Degraded || s.LiveEdges != 1 || s.LastError == "" {
		t.Fatalf("state %+v, want degraded with one live edge", s)
	}
	slowest, degraded := timed(t, l, requestMix(t), 200, 0)
	t.Logf("slowest decision with Redis down: %s", slowest)
	if slowest > 5*time.Millisecond {
		t.Fatalf("a decision took %s with the breaker open", slowest)
	}
	if degraded != 200 {
		t.Fatalf("%d of 200 decisions marked degraded", degraded)
	}
	// The local share of one edge is the whole limit.
	p := rate(t, "t1", "route:r1", limit.ModeExact, 100, time.Minute, 20)
	n := 0
	for l.Allow(bg, one(p, "")).Allowed {
		n++
	}
	if n != 20 {
		t.Fatalf("admitted %d, want the whole burst of 20 on the only edge known", n)
	}
	wantTransitions(t, rec, l)
	if len(rec.messages()) != 1 {
		t.Fatalf("logged %q, want one line", rec.messages())
	}
}

// Redis going away after the edge counted its peers: the local share divides by the
// last count.
func TestRedisGoneKeepsTheLastEdgeCount(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	c := newClock(t0)
	others := edges(t, 2, c, prefix)
	px := startProxy(t, redisAddr)
	l := newLimiter(t, limit.Config{Redis: redisAt(t, px.addr(), ""), Prefix: prefix, Clock: c.Now, SyncInterval: -1, Timeout: relaxed})
	for _, e := range append(others, l) {
		if err := e.Heartbeat(bg); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.LiveEdges(); n != 3 {
		t.Fatalf("live edges %d, want 3", n)
	}
	q := quota(t, "t1", "consumer", limit.ModeExact, 100)
	for i := 0; i < 40; i++ {
		if d := l.Allow(bg, one(q, "c1")); !d.Allowed || d.Degraded {
			t.Fatalf("quota in Redis: %+v", d)
		}
	}
	px.setDown(true)
	// The quota's local share is what was left when Redis went, divided by the edges.
	admitted := 0
	for l.Allow(bg, one(q, "c1")).Allowed {
		admitted++
	}
	if admitted != 20 {
		t.Fatalf("quota admitted %d with Redis gone, want (100-40)/3 = 20", admitted)
	}
	p := rate(t, "t1", "tenant", limit.ModeExact, 90, time.Second, 90)
	n := 0
	for {
		d := l.Allow(bg, one(p, ""))
		if !d.Allowed {
			break
		}
		if !d.Degraded {
			t.Fatalf("decided in Redis behind a dead proxy: %+v", d)
		}
		n++
	}
	if n != 30 {
		t.Fatalf("admitted %d, want the local share 90/3 = 30", n)
	}
	if s := l.State(); s.Mode != "degraded" || s.LiveEdges != 3 {
		t.Fatalf("state %+v", s)
	}
	// Back: the quota admissions made meanwhile are pushed, so the cluster counts them.
	px.setDown(false)
	if err := l.Probe(bg); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(bg); err != nil {
		t.Fatal(err)
	}
	count, _ := rawRedis(t).Get(bg, prefix+":q:{t1}:consumer:c1:"+t0.Format("200601")).Int64()
	if count != 60 {
		t.Fatalf("count in Redis %d after recovery, want 40 + 20", count)
	}
}

// Redis answering after 500 ms: no decision waits more than the timeout, the breaker
// opens after a few, and the limiter returns to cluster mode by itself once Redis is
// quick again.
func TestRedisSlowThenRecovers(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	redisClient(t, prefix) // cleanup of the prefix
	px := startProxy(t, redisAddr)
	rec := &logRecorder{}
	l := newLimiter(t, limit.Config{Redis: redisAt(t, px.addr(), ""), Prefix: prefix, Logger: slog.New(rec), ProbeInterval: 200 * time.Millisecond})
	checks := requestMix(t)
	if _, degraded := timed(t, l, checks, 20, 0); degraded != 0 {
		t.Fatalf("%d decisions degraded with Redis healthy (%s)", degraded, l.State().LastError)
	}

	px.setDelay(500 * time.Millisecond)
	slowest, degraded := timed(t, l, checks, 100, 2*time.Millisecond)
	t.Logf("slowest decision with Redis slow: %s; %d of 100 degraded", slowest, degraded)
	if slowest > limit.DefaultTimeout+slack {
		t.Fatalf("a decision took %s with Redis slow", slowest)
	}
	if s := l.State(); s.Mode != "degraded" {
		t.Fatalf("state %+v after 100 slow calls", s)
	}
	if degraded != 100 {
		t.Fatalf("%d of 100 decisions marked degraded", degraded)
	}

	px.setDelay(0)
	waitFor(t, 3*time.Second, "cluster mode after Redis recovered", func() bool { return l.State().Mode == "cluster" })
	if _, degraded := timed(t, l, checks, 20, 0); degraded != 0 {
		t.Fatalf("%d decisions degraded after recovery", degraded)
	}
	wantTransitions(t, rec, l)
	if n := len(rec.messages()); n != 2 {
		t.Fatalf("logged %q, want degraded then recovered", rec.messages())
	}
}

// Redis flapping (down, up, slow, up, every 150 ms): decisions never fail or stall,
// each transition is logged once, and the limiter ends in cluster mode.
func TestRedisFlapping(t *testing.T) {
	prefix := testenv.RedisPrefix(t)
	redisClient(t, prefix)
	px := startProxy(t, redisAddr)
	rec := &logRecorder{}
	l := newLimiter(t, limit.Config{Redis: redisAt(t, px.addr(), ""), Prefix: prefix, Logger: slog.New(rec),
		ProbeInterval: 100 * time.Millisecond, SyncInterval: 50 * time.Millisecond})
	checks := requestMix(t)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				px.setDown(false)
				px.setDelay(0)
				return
			case <-time.After(150 * time.Millisecond):
			}
			switch i % 4 {
			case 0:
				px.setDown(true)
			case 1, 3:
				px.setDown(false)
				px.setDelay(0)
			case 2:
				px.setDelay(500 * time.Millisecond)
			}
		}
	}()
	var slowest atomic.Int64
	var calls atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				d := l.Allow(bg, checks)
				if el := int64(time.Since(start)); el > slowest.Load() {
					slowest.Store(el)
				}
				calls.Add(1)
				if !d.Allowed {
					t.Errorf("refused under generous limits: %+v", d)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d decisions while flapping, slowest %s, %d transitions", calls.Load(), time.Duration(slowest.Load()), l.State().Transitions)
	if time.Duration(slowest.Load()) > limit.DefaultTimeout+2*slack {
		t.Fatalf("a decision took %s while Redis flapped", time.Duration(slowest.Load()))
	}
	waitFor(t, 3*time.Second, "cluster mode once Redis is steady", func() bool { return l.State().Mode == "cluster" })
	wantTransitions(t, rec, l)
	if l.State().Transitions < 2 {
		t.Fatalf("only %d transitions while flapping", l.State().Transitions)
	}
}
