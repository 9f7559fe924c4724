package edge_test

import (
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// BenchmarkCache is one whole request over loopback on a cached route: "hit" is served
// from the edge's cache (the upstream is not called), "miss-store" asks a new key every
// time, so each request goes to the upstream and its answer is kept — with the cache
// full, every store also evicts. allocs/op counts the client and the upstream too.
func BenchmarkCache(b *testing.B) {
	upURL := benchUpstream(b)

	h := newHarness(b)
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", upURL, tenants.Cache{TTLMS: 3_600_000, MaxEntries: 1000}))
	h.e.Loaded()

	client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.Header.SetHost("acme." + domain)
	req.Header.Set("User-Agent", "wrk/4.2")
	do := func(b *testing.B, want string) {
		if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
		}
		if want != "" && string(resp.Header.Peek("X-Cache")) != want {
			b.Fatalf("X-Cache %q, want %s", resp.Header.Peek("X-Cache"), want)
		}
	}
	b.Run("hit", func(b *testing.B) {
		req.SetRequestURI("/c/items/42")
		do(b, "")
		b.ReportAllocs()
		for b.Loop() {
			do(b, "HIT")
		}
	})
	b.Run("miss-store", func(b *testing.B) {
		uri := []byte("/c/items?n=")
		n := 0
		b.ReportAllocs()
		for b.Loop() {
			n++
			req.SetRequestURIBytes(strconv.AppendInt(uri[:len("/c/items?n=")], int64(n), 10))
			do(b, "MISS")
		}
	})
}
