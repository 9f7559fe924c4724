package edge_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"tollgate/edge"
	"tollgate/tenants"
)

// fakeClock is the response cache's clock for a test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func useFakeClock(t *testing.T) *fakeClock {
	c := &fakeClock{now: time.Now()}
	t.Cleanup(edge.SetCacheClock(c.Now))
	return c
}

func cacheRoute(acme, id, path, auth, upURL string, c tenants.Cache) *tenants.Route {
	return &tenants.Route{ID: id, TenantID: acme, Name: id, Paths: []string{path}, Auth: auth, Cache: &c,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upURL}}}}
}

func (u *upstream) setHook(f func(w http.ResponseWriter)) {
	u.mu.Lock()
	u.hook = f
	u.mu.Unlock()
}

func TestCacheServesRepeats(t *testing.T) {
	clock := useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 5000, Vary: []string{"Accept"}}))
	h.e.Loaded()
	host := "acme." + domain
	hits := func() int64 { return up.hits.Load() }

	first := h.get(host, "/c/a")
	if first.status != 200 || first.header.Get("X-Cache") != "MISS" || hits() != 1 {
		t.Fatalf("first: %s %v hits %d", first, first.header, hits())
	}
	clock.advance(2 * time.Second)
	second := h.get(host, "/c/a")
	if second.status != 200 || second.header.Get("X-Cache") != "HIT" || hits() != 1 {
		t.Fatalf("second: %s %v hits %d", second, second.header, hits())
	}
	if second.body != first.body || second.header.Get("Age") != "2" || second.header.Get("X-Echo") != "up" ||
		second.header.Get("Content-Type") != "application/json" {
		t.Errorf("hit differs: %v %q", second.header, second.body)
	}
	if second.header.Get("X-Request-Id") == first.header.Get("X-Request-Id") {
		t.Errorf("a hit carries its own request id")
	}

	// Query and Vary headers are part of the key; other methods are not cached.
	for i, c := range []struct {
		target string
		hdr    []string
		want   string
	}{
		{"/c/a?x=1", nil, "MISS"},
		{"/c/a?x=1", nil, "HIT"},
		{"/c/a", []string{"Accept: text/html"}, "MISS"},
		{"/c/a", []string{"Accept: text/html"}, "HIT"},
		{"/c/a", nil, "HIT"},
		{"/c/b", nil, "MISS"},
	} {
		if r := h.get(host, c.target, c.hdr...); r.header.Get("X-Cache") != c.want {
			t.Errorf("%d %s %v: X-Cache %q, want %s", i, c.target, c.hdr, r.header.Get("X-Cache"), c.want)
		}
	}
	before := hits()
	for range 2 {
		if r := send(t, h.public, "POST", host, "/c/a", nil, "x"); r.status != 200 || r.header.Get("X-Cache") != "" {
			t.Errorf("POST: %s %v", r, r.header)
		}
	}
	if hits()-before != 2 {
		t.Errorf("POSTs reached the upstream %d times, want 2", hits()-before)
	}
	if r := h.get(host, "/c/a"); r.header.Get("X-Cache") != "HIT" {
		t.Errorf("GET after the POSTs: %v", r.header)
	}

	// Another route's change keeps the cache; the route's own change empties it.
	h.route(acme, "other", []string{"/other"}, nil, "", up.URL)
	waitFor(t, 2*time.Second, func() string {
		if r := h.get(host, "/other"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	if r := h.get(host, "/c/a"); r.header.Get("X-Cache") != "HIT" {
		t.Errorf("after another route changed: %v", r.header)
	}

	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 5000, Vary: []string{"Accept"}}))
	waitFor(t, 2*time.Second, func() string {
		if r := h.get(host, "/c/a"); r.header.Get("X-Cache") != "MISS" {
			return "route change kept the cache: " + r.header.Get("X-Cache")
		}
		return ""
	})

	// Expiry (the entry was stored again just now).
	clock.advance(4 * time.Second)
	if r := h.get(host, "/c/a"); r.header.Get("X-Cache") != "HIT" {
		t.Errorf("before the TTL: %v", r.header)
	}
	clock.advance(time.Second)
	before = hits()
	if r := h.get(host, "/c/a"); r.header.Get("X-Cache") != "MISS" || hits() != before+1 {
		t.Errorf("after the TTL: %v hits %d", r.header, hits()-before)
	}
}

func TestCacheHonoursCacheControl(t *testing.T) {
	clock := useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 60_000}))
	h.e.Loaded()
	host := "acme." + domain
	for i, cc := range []string{"no-store", "private", "no-cache", "max-age=0", "public, s-maxage=0, max-age=60", `private="Set-Cookie"`} {
		up.setHook(func(w http.ResponseWriter) { w.Header().Set("Cache-Control", cc) })
		before := up.hits.Load()
		path := fmt.Sprintf("/c/%d", i)
		h.get(host, path)
		if r := h.get(host, path); r.header.Get("X-Cache") != "MISS" || up.hits.Load()-before != 2 {
			t.Errorf("%s: kept (%v)", cc, r.header)
		}
	}
	up.setHook(func(w http.ResponseWriter) { w.WriteHeader(500) })
	h.get(host, "/c/err")
	if r := h.get(host, "/c/err"); r.header.Get("X-Cache") != "MISS" {
		t.Errorf("a 500 was kept")
	}

	// A caller's own credentials or cookies keep the answer theirs, unless it is public.
	up.setHook(nil)
	for i, hdr := range []string{"Authorization: Basic YTpi", "Cookie: session=1"} {
		path := fmt.Sprintf("/c/cred%d", i)
		h.get(host, path, hdr)
		if r := h.get(host, path); r.header.Get("X-Cache") != "MISS" {
			t.Errorf("%s: an answer to a credentialed request was kept", hdr)
		}
	}
	up.setHook(func(w http.ResponseWriter) { w.Header().Set("Cache-Control", "public, max-age=60") })
	// Public is not enough on a route that is not shared: the answer stays the caller's.
	h.get(host, "/c/pub", "Authorization: Basic YTpi")
	if r := h.get(host, "/c/pub"); r.header.Get("X-Cache") != "MISS" {
		t.Errorf("a public answer to a credentialed request went to another caller: %v", r.header)
	}

	// s-maxage is preferred over max-age and caps the route's TTL.
	up.setHook(func(w http.ResponseWriter) { w.Header().Set("Cache-Control", "max-age=600, s-maxage=2") })
	h.get(host, "/c/short")
	clock.advance(time.Second)
	if r := h.get(host, "/c/short"); r.header.Get("X-Cache") != "HIT" {
		t.Errorf("s-maxage=2 after 1s: %v", r.header)
	}
	clock.advance(time.Second)
	if r := h.get(host, "/c/short"); r.header.Get("X-Cache") != "MISS" {
		t.Errorf("s-maxage=2 after 2s: %v", r.header)
	}
}

func TestCacheKeyedByConsumer(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.put(&tenants.Consumer{ID: "c-bob", TenantID: acme, Name: "bob"})
	alice := h.key(acme, "c-alice", "k-alice")
	bob := h.key(acme, "c-bob", "k-bob")
	h.put(cacheRoute(acme, "own", "/own", tenants.AuthKey, up.URL, tenants.Cache{TTLMS: 5000}))
	h.put(cacheRoute(acme, "shared", "/shared", tenants.AuthKey, up.URL, tenants.Cache{TTLMS: 5000, Shared: true}))
	h.e.Loaded()
	host := "acme." + domain
	get := func(target, key string) result { return h.get(host, target, "X-API-Key: "+key) }

	a := get("/own", alice)
	if a.status != 200 || a.echo.get("X-Consumer-Id") != "c-alice" {
		t.Fatalf("alice: %s", a)
	}
	if r := get("/own", alice); r.header.Get("X-Cache") != "HIT" {
		t.Errorf("alice again: %v", r.header)
	}
	if r := get("/own", bob); r.header.Get("X-Cache") != "MISS" || r.echo.get("X-Consumer-Id") != "c-bob" {
		t.Errorf("bob got alice's answer: %v %s", r.header, r.body)
	}
	if r := h.get(host, "/own"); r.status != 401 {
		t.Errorf("no key on a cached route: %s", r)
	}

	// A shared route gives one consumer's answer to another only when it is public.
	get("/shared/a", alice)
	if r := get("/shared/a", bob); r.header.Get("X-Cache") != "MISS" || r.echo.get("X-Consumer-Id") != "c-bob" {
		t.Errorf("shared route, answer not public: %v %s", r.header, r.body)
	}
	up.setHook(func(w http.ResponseWriter) { w.Header().Set("Cache-Control", "public, max-age=60") })
	get("/shared/b", alice)
	if r := get("/shared/b", bob); r.header.Get("X-Cache") != "HIT" {
		t.Errorf("shared route, public answer: %v", r.header)
	}
}

func TestCacheBounded(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 60_000, MaxEntries: 16, MaxBodyBytes: 300}))
	h.e.Loaded()
	host := "acme." + domain
	// Bodies over max_body_bytes are not kept.
	h.get(host, "/c/long?"+string(bytesOf('q', 400)))
	if r := h.get(host, "/c/long?"+string(bytesOf('q', 400))); r.header.Get("X-Cache") != "MISS" {
		t.Errorf("a body over max_body_bytes was kept")
	}
	// Far more distinct keys than entries: the cache stays bounded and keeps working.
	for i := range 200 {
		h.get(host, "/c/k?"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	before := up.hits.Load()
	h.get(host, "/c/last")
	if r := h.get(host, "/c/last"); r.header.Get("X-Cache") != "HIT" || up.hits.Load() != before+1 {
		t.Errorf("after many keys: %v", r.header)
	}
	if n := edge.CacheEntries(h.e, "acme", "/c"); n > 16+15 {
		t.Errorf("%d entries kept, bound 16 (+ per-shard rounding)", n)
	}
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestCacheConcurrent(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 60_000, MaxEntries: 8}))
	h.e.Loaded()
	host := "acme." + domain
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				if r := h.get(host, fmt.Sprintf("/c/%d", (g+i)%12)); r.status != 200 {
					t.Errorf("%s", r)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := up.hits.Load(); n >= 8*30 {
		t.Errorf("nothing was served from the cache: %d upstream hits", n)
	}
}

// A tenant's plan (cache_bytes, in its config entry) caps what its routes keep together
// on this edge, and a lowered plan applies at once; the edge's budget metrics say what
// is held.
func TestCacheTenantPlanLimit(t *testing.T) {
	useFakeClock(t)
	h := newHarness(t, func(c *edge.Config) { c.CacheBytes = 4 << 20 })
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	plan := func(cacheBytes int64) {
		h.put(&tenants.Tenant{ID: acme, Slug: "acme", Name: "acme", Limits: &tenants.PlatformPlan{Name: "small",
			Resources: &tenants.ResourceLimits{CacheBytes: cacheBytes}}})
	}
	plan(64 << 10)
	for i := range 4 {
		h.put(cacheRoute(acme, fmt.Sprint("c", i), fmt.Sprint("/c", i), "", up.URL, tenants.Cache{TTLMS: 60_000}))
	}
	h.e.Loaded()
	host := "acme." + domain
	entries := func() int {
		n := 0
		for i := range 4 {
			n += edge.CacheEntries(h.e, "acme", fmt.Sprint("/c", i))
		}
		return n
	}
	// Each answer holds its body (the echo, under 1 KiB), headers, key and 256 bytes of
	// overhead: 64 KiB keeps a few dozen, across the four routes together.
	for i := range 400 {
		h.get(host, fmt.Sprintf("/c%d/k%d", i%4, i))
	}
	held := h.metric("tollgate_edge_cache_bytes", nil)
	if n := entries(); n < 10 || n > 200 || held > 64<<10 || held <= 0 {
		t.Errorf("%d answers kept in %v bytes, plan allows 64 KiB", n, held)
	}
	if r := h.get(host, "/c3/k399"); r.header.Get("X-Cache") != "HIT" {
		t.Errorf("the newest answer was not kept: %v", r.header)
	}
	if ev := h.metric("tollgate_edge_cache_evictions_total", map[string]string{"reason": "tenant_limit"}); ev < 300 {
		t.Errorf("%v evictions for the tenant's limit", ev)
	}

	plan(8 << 10)
	waitFor(t, 2*time.Second, func() string {
		if held := h.metric("tollgate_edge_cache_bytes", nil); held > 8<<10 {
			return fmt.Sprintf("%v bytes held after the plan was lowered to 8 KiB", held)
		}
		return ""
	})
	// A route deleted gives its bytes back; the last cached route gone, nothing is held.
	for i := range 4 {
		h.del(tenants.ObjectKey(acme, tenants.KindRoute, fmt.Sprint("c", i)))
	}
	waitFor(t, 2*time.Second, func() string {
		if held := h.metric("tollgate_edge_cache_bytes", nil); held != 0 {
			return fmt.Sprintf("%v bytes held with no cached route", held)
		}
		return ""
	})
}

// CacheBytes < 0 turns the response cache off: routes with a cache are answered by the
// upstream every time, without X-Cache.
func TestCacheOff(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.CacheBytes = -1 })
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(cacheRoute(acme, "c", "/c", "", up.URL, tenants.Cache{TTLMS: 60_000}))
	h.e.Loaded()
	for range 3 {
		if r := h.get("acme."+domain, "/c/a"); r.status != 200 || r.header.Get("X-Cache") != "" {
			t.Fatalf("%s %v", r, r.header)
		}
	}
	if n := up.hits.Load(); n != 3 {
		t.Errorf("upstream hit %d times, want 3", n)
	}
}
