package limit_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/limit"
	"tollgate/infra/testenv"
)

// Limits that never refuse, so benchmarks measure the admitting path (S2's "rate limit
// never triggered").
func generous(b *testing.B, name string, mode limit.Mode) *limit.Rule {
	return rate(b, "t1", name, mode, 1_000_000, time.Millisecond, 1_000_000_000) // 10⁹/s
}

func BenchmarkAllowLocal(b *testing.B) {
	l := newLimiter(b, limit.Config{})
	checks := []limit.Check{{Rule: generous(b, "tenant", limit.ModeLocal)}}
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(bg, checks)
	}
}

// AllowAt with the request's timestamp (fasthttp's ctx.Time()): no clock read.
func BenchmarkAllowAtLocal(b *testing.B) {
	l := newLimiter(b, limit.Config{})
	checks := []limit.Check{{Rule: generous(b, "tenant", limit.ModeLocal)}}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		l.AllowAt(bg, checks, now)
	}
}

// The edge's usual set: tenant plan, consumer plan, route limit.
func BenchmarkAllowLocalThreeLimits(b *testing.B) {
	l := newLimiter(b, limit.Config{})
	checks := []limit.Check{
		{Rule: generous(b, "tenant", limit.ModeLocal)},
		{Rule: generous(b, "consumer", limit.ModeLocal), Key: []byte("consumer-0123456789")},
		{Rule: generous(b, "route:r1", limit.ModeLocal)},
	}
	var h fasthttp.ResponseHeader
	b.ReportAllocs()
	for b.Loop() {
		d := l.Allow(bg, checks)
		d.WriteHeaders(&h)
	}
}

// Many keys (client IPs) from all cores.
func BenchmarkAllowLocalParallelManyKeys(b *testing.B) {
	l := newLimiter(b, limit.Config{})
	p := generous(b, "route-ip:r1", limit.ModeLocal)
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := make([]byte, 4)
		checks := []limit.Check{{Rule: p, Key: key}}
		i := next.Add(1) << 24
		for pb.Next() {
			i++
			binary.BigEndian.PutUint32(key, i&0xff00ffff) // 64K keys per goroutine
			l.Allow(bg, checks)
		}
	})
}

// One hot key (a tenant's plan) from all cores: contention on one slot.
func BenchmarkAllowLocalParallelOneKey(b *testing.B) {
	l := newLimiter(b, limit.Config{})
	checks := []limit.Check{{Rule: generous(b, "tenant", limit.ModeLocal)}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow(bg, checks)
		}
	})
}

func BenchmarkAcquireRelease(b *testing.B) {
	l := newLimiter(b, limit.Config{})
	p, _ := limit.NewConcurrency(limit.Scope{Tenant: "t1", Name: "tenant"}, 1000)
	checks := []limit.Check{{Rule: p}}
	b.ReportAllocs()
	for b.Loop() {
		ts, _ := l.AcquireAll(checks)
		ts.Release()
	}
}

func BenchmarkWriteHeaders(b *testing.B) {
	d := limit.Decision{Allowed: true, Limit: 100, Remaining: 42, Reset: 1500 * time.Millisecond}
	var h fasthttp.ResponseHeader
	b.ReportAllocs()
	for b.Loop() {
		d.WriteHeaders(&h)
	}
}

func redisBench(b *testing.B) (*limit.Limiter, string) {
	prefix := testenv.RedisPrefix(b)
	rdb := dial(b, redisAddr, prefix, 0)
	l := newLimiter(b, limit.Config{Redis: rdb, Prefix: prefix})
	if s := l.State(); s.Mode != "cluster" {
		b.Fatalf("%+v", s)
	}
	return l, prefix
}

func reportCommands(b *testing.B, l *limit.Limiter, before uint64) {
	b.ReportMetric(float64(l.State().RedisCommands-before)/float64(b.N), "redis-cmds/op")
}

// One exact limit: one EVALSHA per request.
func BenchmarkAllowExact(b *testing.B) {
	l, _ := redisBench(b)
	checks := []limit.Check{{Rule: generous(b, "tenant", limit.ModeExact)}}
	before := l.State().RedisCommands
	b.ReportAllocs()
	for b.Loop() {
		if d := l.Allow(bg, checks); d.Degraded {
			b.Fatal(l.State().LastError)
		}
	}
	reportCommands(b, l, before)
}

// The edge's usual set, all exact: still one EVALSHA per request.
func BenchmarkAllowExactThreeLimitsAndQuota(b *testing.B) {
	l, _ := redisBench(b)
	checks := []limit.Check{
		{Rule: generous(b, "tenant", limit.ModeExact)},
		{Rule: generous(b, "consumer", limit.ModeExact), Key: []byte("c1")},
		{Rule: generous(b, "route:r1", limit.ModeExact)},
		{Rule: quota(b, "t1", "consumer", limit.ModeExact, 1<<40), Key: []byte("c1")},
	}
	before := l.State().RedisCommands
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(bg, checks)
	}
	reportCommands(b, l, before)
}

func BenchmarkAllowExactParallel(b *testing.B) {
	l, _ := redisBench(b)
	checks := []limit.Check{{Rule: generous(b, "tenant", limit.ModeExact)}}
	before := l.State().RedisCommands
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow(bg, checks)
		}
	})
	reportCommands(b, l, before)
}

// Approximate rate and quota, with the background sync every 100 ms: Redis traffic
// depends on the keys, not the requests.
func BenchmarkAllowApproximate(b *testing.B) {
	l, _ := redisBench(b)
	checks := []limit.Check{
		{Rule: generous(b, "tenant", limit.ModeApproximate)},
		{Rule: quota(b, "t1", "tenant", limit.ModeApproximate, 1<<40)},
	}
	l.Allow(bg, checks)
	before := l.State().RedisCommands
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow(bg, checks)
		}
	})
	reportCommands(b, l, before)
}
