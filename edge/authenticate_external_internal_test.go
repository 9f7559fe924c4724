package edge

import (
	"crypto/sha256"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// externalHit is an external-auth step whose cache holds an allowing answer for the
// request of ctx, naming consumer c and adding one header.
func externalHit(tb testing.TB) (handler, *exchange) {
	tb.Helper()
	e := &Edge{cfg: Config{Registry: prometheus.NewRegistry()}}
	if err := e.initExternalAuth(); err != nil {
		tb.Fatal(err)
	}
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	req.SetRequestURI("/api/orders")
	req.Header.Set("Authorization", "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl")
	req.Header.Set("User-Agent", "wrk/4.2")
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	a := &authorizer{
		headers: [][]byte{[]byte("Authorization"), []byte("X-Api-Key"), []byte("Cookie")},
		ttl:     int64(time.Minute), m: e.authz, maxTotal: 10,
		cache: &authCache{tenant: new(atomic.Int64), maxTenant: 10},
	}
	s := &tenantConfig{consumers: map[string]*Consumer{"c": {ID: "c", Name: "alice"}}}
	x := &exchange{ctx: ctx}
	v := &authVerdict{key: a.key(x), allow: true, consumer: "c", expires: ctx.Time().UnixNano() + int64(time.Minute),
		headers: []authHeader{{name: []byte("X-User"), value: []byte("u-1")}}}
	a.cache.put(v, ctx.Time().UnixNano(), &e.authz.total, a.maxTotal)
	step := e.externalAuthStep(&route{snapshot: s, authz: a}, func(*exchange) {})
	return step, x
}

// TestExternalAuthCacheHitAllocatesNothing: a cached answer costs no allocation (run
// without the race detector, as CI's Allocs step does).
func TestExternalAuthCacheHitAllocatesNothing(t *testing.T) {
	step, x := externalHit(t)
	step(x)
	if x.consumer == nil || x.consumer.ID != "c" || x.reply != nil || string(x.ctx.Request.Header.Peek("X-User")) != "u-1" {
		t.Fatalf("hit not applied: consumer %v reply %v", x.consumer, x.reply)
	}
	if n := testing.AllocsPerRun(1000, func() {
		x.consumer = nil
		step(x)
	}); n != 0 {
		t.Fatalf("a cache hit allocates %v times", n)
	}
}

// BenchmarkExternalAuthHit is the external-auth step on a cached answer beside the key
// step on a found key (BenchmarkKeyAuth/plain does the same without the Authorization
// header's hash): go test -run '^$' -bench 'ExternalAuthHit|KeyAuth/plain' -benchmem ./edge/
func BenchmarkExternalAuthHit(b *testing.B) {
	b.Run("external_cached", func(b *testing.B) {
		step, x := externalHit(b)
		b.ReportAllocs()
		for b.Loop() {
			x.consumer = nil
			step(x)
			if x.consumer == nil {
				b.Fatal("not allowed")
			}
		}
	})
	b.Run("key", func(b *testing.B) {
		key := []byte("tg_0123456789abcdef0123456789abcdef")
		s := &tenantConfig{keys: map[[32]byte]apiKey{sha256.Sum256(key): {consumer: &Consumer{ID: "c"}}}}
		step := keyAuthStep(&route{snapshot: s}, func(*exchange) {})
		var req fasthttp.Request
		ctx := &fasthttp.RequestCtx{}
		ctx.Init(&req, nil, nil)
		x := &exchange{ctx: ctx}
		b.ReportAllocs()
		for b.Loop() {
			x.hs.apiKey = key
			x.consumer = nil
			step(x)
			if x.consumer == nil {
				b.Fatal("key refused")
			}
		}
	})
}

func TestAuthCacheBudgets(t *testing.T) {
	var total atomic.Int64
	tenant := new(atomic.Int64)
	c1 := &authCache{tenant: tenant, maxTenant: 3}
	c2 := &authCache{tenant: tenant, maxTenant: 3}
	now := time.Now().UnixNano()
	put := func(c *authCache, i byte, maxTotal int64) {
		var k [32]byte
		k[0], k[31] = i*2, i // distinct slots
		c.put(&authVerdict{key: k, expires: now + int64(time.Minute)}, now, &total, maxTotal)
	}
	for i := byte(0); i < 5; i++ {
		put(c1, i, 100)
	}
	put(c2, 9, 100)
	if tenant.Load() != 3 || total.Load() != 3 {
		t.Fatalf("per tenant budget 3: tenant %d total %d", tenant.Load(), total.Load())
	}
	c1.drop(&total)
	if tenant.Load() != 0 || total.Load() != 0 {
		t.Fatalf("after drop: tenant %d total %d", tenant.Load(), total.Load())
	}
	put(c1, 1, 100) // a dropped cache takes nothing
	put(c2, 1, 1)
	put(c2, 2, 1) // the edge's budget
	if tenant.Load() != 1 || total.Load() != 1 {
		t.Fatalf("edge budget 1: tenant %d total %d", tenant.Load(), total.Load())
	}
	// Same key again replaces, without counting twice; an expired entry is not served.
	var k [32]byte
	k[0], k[31] = 2, 1
	c2.put(&authVerdict{key: k, expires: now + 1}, now, &total, 1)
	if total.Load() != 1 || c2.get(&k, now) == nil || c2.get(&k, now+1) != nil {
		t.Fatalf("replace or expiry wrong: total %d", total.Load())
	}
}
