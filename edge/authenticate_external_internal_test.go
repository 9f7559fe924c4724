package edge

import (
	"bufio"
	"crypto/sha256"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"tollgate/edge/extauth"
	"tollgate/tenants"
)

// externalHit is an external-auth step whose cache holds an allowing answer for the
// request of ctx, naming consumer c and adding one header.
func externalHit(tb testing.TB) (handler, *exchange) {
	tb.Helper()
	e := &Edge{cfg: Config{Registry: prometheus.NewRegistry()}}
	if err := e.initExternalAuth(); err != nil {
		tb.Fatal(err)
	}
	// Read from the wire, as the server does: a Cookie header set through the API would
	// be parsed into cookies, which the server's request is not.
	var req fasthttp.Request
	raw := "GET /api/orders HTTP/1.1\r\nHost: acme.edge.test\r\nUser-Agent: wrk/4.2\r\n" +
		"Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl\r\nCookie: session=abc; theme=dark\r\n\r\n"
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		tb.Fatal(err)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	ttl := 60
	a := &authorizer{Authorizer: extauth.New(&tenants.ExternalAuth{Headers: tenants.DefaultAuthHeaders, CacheTTLS: &ttl}, nil, "", "", "", "", ownedHeader)}
	a.Cache = extauth.NewCache(extauth.Budget{Tenant: new(atomic.Int64), Total: &e.authz.Cached, MaxTenant: 10, MaxTotal: 10})
	s := &tenantConfig{consumers: map[string]*Consumer{"c": {ID: "c", Name: "alice"}}}
	x := &exchange{ctx: ctx}
	key, _ := a.Key(&req.Header, nil)
	a.Cache.Put(&extauth.Verdict{Key: key, Allow: true, Rendered: "c", Expires: ctx.Time().UnixNano() + int64(time.Minute),
		Headers: []extauth.Header{{Name: []byte("X-User"), Value: []byte("u-1")}}}, ctx.Time().UnixNano())
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
