package edge_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"tollgate/edge"
	"tollgate/tenants"
)

// pageFor reports whether r is the page the echo upstream made for a request carrying
// hdr ("Name: value"): the upstream echoes the request's headers in its body.
func pageFor(r result, hdr string) bool {
	name, value, _ := strings.Cut(hdr, ": ")
	if r.echo == nil {
		return false
	}
	return r.echo.get(name) == value
}

// An upstream that answers "public" but says its page varies by Cookie gets one kept
// page per cookie: two callers with different cookies each get their own, and a repeat
// of either is a hit of that caller's page.
func TestCacheVariesByUpstreamVary(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 60_000}))
	h.e.Loaded()
	host := "acme." + domain
	up.setHook(func(w http.ResponseWriter) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Vary", "Accept-Encoding, Cookie")
	})
	alice, bob := "Cookie: session=alice", "Cookie: session=bob"
	for i, c := range []struct {
		hdr  []string
		want string
	}{
		{[]string{alice}, "MISS"},
		{[]string{bob}, "MISS"},
		{[]string{alice}, "HIT"},
		{[]string{bob}, "HIT"},
		{nil, "MISS"},
		{nil, "HIT"},
		{[]string{alice, "Accept-Encoding: br"}, "MISS"},
		{[]string{alice}, "HIT"},
	} {
		r := h.get(host, "/c/page", c.hdr...)
		if r.status != 200 || r.header.Get("X-Cache") != c.want {
			t.Errorf("%d %v: %s X-Cache %q, want %s", i, c.hdr, r, r.header.Get("X-Cache"), c.want)
		}
		for _, hdr := range c.hdr {
			if !pageFor(r, hdr) {
				t.Errorf("%d %v: got the page made for %v", i, c.hdr, r.echo.Header["Cookie"])
			}
		}
		if len(c.hdr) == 0 && r.echo != nil && r.echo.get("Cookie") != "" {
			t.Errorf("%d: a caller without a cookie got the page made for %q", i, r.echo.get("Cookie"))
		}
		if r.header.Get("Vary") != "Accept-Encoding, Cookie" {
			t.Errorf("%d: Vary %q not passed on", i, r.header.Get("Vary"))
		}
	}

	// The route's own vary and the upstream's add up; Vary spread over several lines
	// counts every line.
	h.put(cacheRoute(acme, "l", "/l", "", up.URL, tenants.Cache{TTLMS: 60_000, Vary: []string{"Accept"}}))
	up.setHook(func(w http.ResponseWriter) {
		w.Header().Add("Vary", "Accept-Language")
		w.Header().Add("Vary", "X-Tier")
	})
	waitFor(t, 2e9, func() string {
		if r := h.get(host, "/l/warm"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	for i, c := range []struct {
		hdr  []string
		want string
	}{
		{[]string{"Accept-Language: fr", "X-Tier: gold"}, "MISS"},
		{[]string{"Accept-Language: de", "X-Tier: gold"}, "MISS"},
		{[]string{"Accept-Language: fr", "X-Tier: free"}, "MISS"},
		{[]string{"Accept-Language: fr", "X-Tier: gold", "Accept: text/html"}, "MISS"},
		{[]string{"Accept-Language: fr", "X-Tier: gold"}, "HIT"},
		{[]string{"Accept-Language: de", "X-Tier: gold"}, "HIT"},
		{[]string{"Accept-Language: fr", "X-Tier: free"}, "HIT"},
	} {
		r := h.get(host, "/l/page", c.hdr...)
		if r.header.Get("X-Cache") != c.want {
			t.Errorf("vary lines %d %v: X-Cache %q, want %s", i, c.hdr, r.header.Get("X-Cache"), c.want)
		}
		for _, hdr := range c.hdr {
			if !pageFor(r, hdr) {
				t.Errorf("vary lines %d %v: got the page made for %v", i, c.hdr, r.echo.Header)
			}
		}
	}
}

// "Vary: *" (alone or in a list) and a Vary naming a header the edge itself sets towards
// the upstream (the caller's address, the request id) cannot be matched by a later
// request: nothing is kept.
func TestCacheVaryUnmatchableNotStored(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 60_000, Shared: true}))
	h.e.Loaded()
	host := "acme." + domain
	for i, vary := range []string{"*", "Accept, *", "X-Forwarded-For", "x-request-id", "Traceparent", "Accept, Bad Name"} {
		up.setHook(func(w http.ResponseWriter) {
			w.Header().Set("Cache-Control", "public, max-age=600")
			w.Header().Set("Vary", vary)
		})
		path := fmt.Sprintf("/c/%d", i)
		before := up.hits.Load()
		h.get(host, path)
		if r := h.get(host, path); r.header.Get("X-Cache") != "MISS" || up.hits.Load()-before != 2 {
			t.Errorf("Vary %q: kept (%v)", vary, r.header)
		}
		if n := edge.CacheEntries(h.e, "acme", path); n != 0 {
			t.Errorf("Vary %q: %d answers kept", vary, n)
		}
	}
}

// An answer to a request carrying a credential the edge did not consume (Authorization,
// Cookie, the API key header on a route without key auth) goes to another caller only
// when the route is shared and the answer public or s-maxage.
func TestCacheCredentialedNotShared(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "own", "/own", "", up.URL, tenants.Cache{TTLMS: 60_000}))
	h.put(cacheRoute(acme, "shared", "/shared", "", up.URL, tenants.Cache{TTLMS: 60_000, Shared: true}))
	h.e.Loaded()
	host := "acme." + domain
	creds := []struct{ a, b string }{
		{"Authorization: Basic YTpi", "Authorization: Basic Yzpk"},
		{"Authorization: Bearer tok-a", "Authorization: Bearer tok-b"},
		{"Cookie: session=a", "Cookie: session=b"},
		{"X-API-Key: key-a", "X-API-Key: key-b"},
	}
	n := 0
	for _, route := range []string{"/own", "/shared"} {
		for _, cc := range []string{"", "max-age=600", "public, max-age=600", "s-maxage=600", "must-revalidate, max-age=600"} {
			up.setHook(func(w http.ResponseWriter) {
				if cc != "" {
					w.Header().Set("Cache-Control", cc)
				}
			})
			shareable := route == "/shared" && (strings.Contains(cc, "public") || strings.Contains(cc, "s-maxage"))
			want := map[bool]string{true: "HIT", false: "MISS"}[shareable]
			for _, c := range creds {
				n++
				path := fmt.Sprintf("%s/%d", route, n)
				first := h.get(host, path, c.a)
				if first.status != 200 || !pageFor(first, c.a) {
					t.Fatalf("%s %q %s: %s", route, cc, c.a, first)
				}
				if r := h.get(host, path, c.b); r.header.Get("X-Cache") != want || (want == "MISS" && !pageFor(r, c.b)) {
					t.Errorf("%s %q: %s after %s: X-Cache %q, want %s", route, cc, c.b, c.a, r.header.Get("X-Cache"), want)
				}
				if r := h.get(host, path); r.header.Get("X-Cache") != want {
					t.Errorf("%s %q: no credential after %s: X-Cache %q, want %s", route, cc, c.a, r.header.Get("X-Cache"), want)
				}
			}
		}
	}
}

// On a route that authenticates, the consumer is part of the key unless the route is
// shared; a shared route gives one consumer's answer to another only when it is public
// or s-maxage. An upstream's Vary naming the consumer headers the edge sets keys by the
// consumer even on a shared route.
func TestCacheSharedAuthNeedsPublic(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.put(&tenants.Consumer{ID: "c-bob", TenantID: acme, Name: "bob"})
	alice := "X-API-Key: " + h.key(acme, "c-alice", "k-alice")
	bob := "X-API-Key: " + h.key(acme, "c-bob", "k-bob")
	h.put(cacheRoute(acme, "shared", "/shared", tenants.AuthKey, up.URL, tenants.Cache{TTLMS: 60_000, Shared: true}))
	h.e.Loaded()
	host := "acme." + domain
	for i, c := range []struct {
		cc, vary string
		want     string // bob's answer after alice's
	}{
		{"", "", "MISS"},
		{"max-age=60", "", "MISS"},
		{"public, max-age=60", "", "HIT"},
		{"s-maxage=60", "", "HIT"},
		{"public, max-age=60", "X-Consumer-Id", "MISS"},
		{"public, max-age=60", "x-consumer-name", "MISS"},
	} {
		up.setHook(func(w http.ResponseWriter) {
			if c.cc != "" {
				w.Header().Set("Cache-Control", c.cc)
			}
			if c.vary != "" {
				w.Header().Set("Vary", c.vary)
			}
		})
		path := fmt.Sprintf("/shared/%d", i)
		if r := h.get(host, path, alice); r.echo == nil || r.echo.get("X-Consumer-Id") != "c-alice" {
			t.Fatalf("%d alice: %s", i, r)
		}
		r := h.get(host, path, bob)
		if r.header.Get("X-Cache") != c.want {
			t.Errorf("%d %q vary %q: bob X-Cache %q, want %s", i, c.cc, c.vary, r.header.Get("X-Cache"), c.want)
		}
		if c.want == "MISS" && (r.echo == nil || r.echo.get("X-Consumer-Id") != "c-bob") {
			t.Errorf("%d %q vary %q: bob got %s", i, c.cc, c.vary, r.body)
		}
		if c.vary != "" {
			if r := h.get(host, path, alice); r.header.Get("X-Cache") != "HIT" || r.echo.get("X-Consumer-Id") != "c-alice" {
				t.Errorf("%d vary %q: alice again: %v %s", i, c.vary, r.header, r.body)
			}
		}
	}
}

// A Vary storm (every request a new value of the header the upstream varies on) keeps
// at most edge.CacheMaxVariants answers per key, the newest, and stays within the
// tenant's bytes.
func TestCacheVaryStormBounded(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t, func(c *edge.Config) { c.CacheBytes = 1 << 20 })
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 60_000}))
	h.e.Loaded()
	host := "acme." + domain
	up.setHook(func(w http.ResponseWriter) { w.Header().Set("Vary", "X-Storm") })
	const storm = 500
	for i := range storm {
		h.get(host, "/c/page", fmt.Sprintf("X-Storm: %d", i))
	}
	if n := edge.CacheEntries(h.e, "acme", "/c"); n < 1 || n > edge.CacheMaxVariants {
		t.Errorf("%d answers kept for one key, bound %d", n, edge.CacheMaxVariants)
	}
	for i := storm - edge.CacheMaxVariants; i < storm; i++ {
		hdr := fmt.Sprintf("X-Storm: %d", i)
		if r := h.get(host, "/c/page", hdr); r.header.Get("X-Cache") != "HIT" || !pageFor(r, hdr) {
			t.Errorf("%s: X-Cache %q, page for %q", hdr, r.header.Get("X-Cache"), r.echo.get("X-Storm"))
		}
	}
	if r := h.get(host, "/c/page", "X-Storm: 0"); r.header.Get("X-Cache") != "MISS" {
		t.Errorf("the oldest variant was kept past the bound")
	}
	if held := h.metric("tollgate_edge_cache_bytes", nil); held <= 0 || held > float64(edge.CacheMaxVariants*4096) {
		t.Errorf("%v bytes held for %d variants", held, edge.CacheMaxVariants)
	}
	// An answer whose Vary names other headers replaces the key's variants.
	up.setHook(func(w http.ResponseWriter) { w.Header().Set("Vary", "X-Other") })
	h.get(host, "/c/page", "X-Storm: fresh")
	if n := edge.CacheEntries(h.e, "acme", "/c"); n != 1 {
		t.Errorf("%d answers kept after Vary changed, want 1", n)
	}
}
