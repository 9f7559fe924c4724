package limit_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/edge/limit"
)

// clock is a settable clock for limits: tests move time instead of sleeping.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) Now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration)   { c.ns.Add(int64(d)) }
func (c *clock) Set(t time.Time)           { c.ns.Store(t.UnixNano()) }
func (c *clock) Since(t time.Time) float64 { return c.Now().Sub(t).Seconds() }

var t0 = time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)

const redisAddr = "127.0.0.1:6379"

// redisClient connects to the machine's Redis the way the edge would, and deletes the
// prefix's keys when the test ends.
func redisClient(tb testing.TB, prefix string) *redis.Client {
	tb.Helper()
	return dial(tb, redisAddr, prefix, relaxed)
}

// redisAt is a client with the production timeouts, for the fault tests.
func redisAt(tb testing.TB, addr, prefix string) *redis.Client {
	tb.Helper()
	return dial(tb, addr, prefix, 0)
}

func dial(tb testing.TB, addr, prefix string, timeout time.Duration) *redis.Client {
	tb.Helper()
	u, err := limit.NewRedisClient("redis://"+addr+"/0", timeout)
	if err != nil {
		tb.Fatal(err)
	}
	c := u.(*redis.Client)
	tb.Cleanup(func() { c.Close() })
	if prefix != "" {
		if err := c.Ping(context.Background()).Err(); err != nil {
			tb.Fatalf("redis at %s is not reachable (start it: bash .ci/services): %v", addr, err)
		}
		tb.Cleanup(func() { deleteKeys(tb, prefix) })
	}
	return c
}

// deleteKeys removes every key under prefix, on a client of its own.
func deleteKeys(tb testing.TB, prefix string) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+":*").Result()
	if err != nil {
		tb.Logf("cleanup %s: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}

func rawRedis(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// newLimiter makes a Limiter closed at the end of the test.
func newLimiter(tb testing.TB, cfg limit.Config) *limit.Limiter {
	tb.Helper()
	l, err := limit.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

func rate(tb testing.TB, tenant, name string, mode limit.Mode, n int64, per time.Duration, burst int64) *limit.Rule {
	tb.Helper()
	p, err := limit.NewRate(limit.Scope{Tenant: tenant, Name: name, Mode: mode}, limit.Rate{Limit: n, Per: per, Burst: burst})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func quota(tb testing.TB, tenant, name string, mode limit.Mode, n int64) *limit.Rule {
	tb.Helper()
	p, err := limit.NewQuota(limit.Scope{Tenant: tenant, Name: name, Mode: mode}, n)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func one(p *limit.Rule, key string) []limit.Check {
	return []limit.Check{{Rule: p, Key: []byte(key)}}
}

// logRecorder keeps the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }
func (r *logRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// proxy is a TCP proxy in front of Redis that can delay answers, refuse connections
// and drop the ones it has: Redis slow, down and flapping on demand.
type proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64
	down   atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func startProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]bool)}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(func() {
		ln.Close()
		p.dropAll()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(u, c, false)
		go p.pipe(c, u, true)
	}
}

// pipe copies src to dst; answers (from Redis) wait the current delay first.
func (p *proxy) pipe(dst, src net.Conn, answers bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); answers && d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

func (p *proxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

// setDown refuses new connections and drops the open ones (down), or accepts again.
func (p *proxy) setDown(down bool) {
	p.down.Store(down)
	if down {
		p.dropAll()
	}
}

func (p *proxy) dropAll() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
}

// waitFor polls cond until it holds or total passes.
func waitFor(tb testing.TB, total time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(total)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited %s for %s", total, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
