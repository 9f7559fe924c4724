package cache

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/tenants"
)

// testBudget is a cache budget of limit bytes with its own metrics registry.
func testBudget(t testing.TB, limit int64) *Budget {
	t.Helper()
	b, err := NewBudget(limit, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testTenant is tenant id's share of b, its plan allowing cacheBytes (0: no plan
// resources, the whole budget).
func testTenant(b *Budget, id string, cacheBytes int64) *Tenant {
	tn := &tenants.Tenant{ID: id, Slug: id}
	if cacheBytes > 0 {
		tn.Limits = &tenants.PlatformPlan{Name: "p", Resources: &tenants.ResourceLimits{CacheBytes: cacheBytes}}
	}
	return b.Tenant(tn)
}

// testRoute is a route cache of tc large enough that only the budget bounds it.
func testRoute(tc *Tenant) *Cache {
	return New(&tenants.Cache{TTLMS: 3_600_000, MaxEntries: tenants.MaxCacheEntries, MaxBodyBytes: 64 << 10}, "", tc)
}

var farFuture = time.Now().Add(time.Hour)

// keep stores an answer of body bytes under key, as the edge's cache step would.
func keep(rc *Cache, key string, body int) *Entry {
	e := &Entry{status: 200, body: make([]byte, body), stored: time.Now(), expires: farFuture, key: key, tenant: rc.tenant}
	e.size = cap(e.body) + len(key) + cacheEntryOverhead
	rc.Put(e)
	return e
}

func (rc *Cache) has(key string) bool {
	e, _ := rc.Get([]byte(key), len(key), time.Now(), nil, nil)
	return e != nil
}

// checkBooks checks, at rest, that every byte is counted once: the edge's total is the
// sum of the tenants', each tenant's the sum of its listed entries, and those are the
// entries the shards hold.
func checkBooks(t *testing.T, b *Budget, caches ...*Cache) {
	t.Helper()
	var tenantsSum int64
	listed := map[*Entry]bool{}
	b.mu.Lock()
	for id, tc := range b.tenants {
		var sum int64
		for e := tc.head; e != nil; e = e.tnext {
			sum += int64(e.size)
			listed[e] = true
		}
		if sum != tc.used.Load() {
			t.Errorf("tenant %s: entries of %d bytes, counted %d", id, sum, tc.used.Load())
		}
		tenantsSum += tc.used.Load()
	}
	b.mu.Unlock()
	if tenantsSum != b.used.Load() {
		t.Errorf("tenants hold %d bytes, the edge counts %d", tenantsSum, b.used.Load())
	}
	if b.used.Load() > b.limit {
		t.Errorf("the edge holds %d bytes, over its budget of %d", b.used.Load(), b.limit)
	}
	held := 0
	for _, rc := range caches {
		for i := range rc.shards {
			s := &rc.shards[i]
			bytes := 0
			for k, ck := range s.m {
				if len(ck.variants) == 0 || len(ck.variants) > MaxVariants {
					t.Errorf("key %q holds %d answers", k, len(ck.variants))
				}
				for _, e := range ck.variants {
					bytes += e.size
					held++
					if !listed[e] || e.ck != ck || e.key != k {
						t.Errorf("entry %q kept but not on its tenant's list, or not its key's", e.key)
					}
				}
			}
			if bytes != s.bytes {
				t.Errorf("shard holds %d bytes, counts %d", bytes, s.bytes)
			}
			n := 0
			for e := s.head; e != nil; e = e.snext {
				n++
			}
			if n != s.count {
				t.Errorf("shard lists %d answers, counts %d", n, s.count)
			}
		}
	}
	if held != len(listed) {
		t.Errorf("%d entries kept, %d listed", held, len(listed))
	}
}

// A tenant flooding the cache with distinct answers evicts its own: another tenant
// holding less than its fair share keeps every answer, and the total never passes the
// budget.
func TestCacheBudgetFloodKeepsOthersFairShare(t *testing.T) {
	const budget = 1 << 20
	b := testBudget(t, budget)
	a, bb := testTenant(b, "a", 0), testTenant(b, "b", 0)
	ra, rb := testRoute(a), testRoute(bb)
	for i := range 200 { // ~250 KiB: under B's fair share of 512 KiB
		keep(rb, fmt.Sprint("/b/", i), 1000)
	}
	held := bb.used.Load()
	for i := range 20_000 { // ~25 MiB offered
		keep(ra, fmt.Sprint("/a/", i), 1000)
		if u := b.used.Load(); u > budget {
			t.Fatalf("after %d stores the edge holds %d bytes, budget %d", i, u, budget)
		}
	}
	for i := range 200 {
		if !rb.has(fmt.Sprint("/b/", i)) {
			t.Fatalf("B's answer %d was evicted by A's flood", i)
		}
	}
	if bb.used.Load() != held {
		t.Errorf("B holds %d bytes, had %d", bb.used.Load(), held)
	}
	// A uses the rest of the budget, less at most one entry of slack.
	if free := budget - b.used.Load(); free > 2000 {
		t.Errorf("%d bytes of the budget left unused under the flood", free)
	}
	if !ra.has("/a/19999") || ra.has("/a/0") {
		t.Errorf("A's newest answer should be kept and its oldest evicted")
	}
	checkBooks(t, b, ra, rb)
}

// A tenant over its fair share when another starts flooding is brought down to about its
// fair share, not below it; three tenants share the budget in thirds.
func TestCacheBudgetEvictsMostOverFairShare(t *testing.T) {
	const budget = 900_000
	b := testBudget(t, budget)
	x, y, z := testTenant(b, "x", 0), testTenant(b, "y", 0), testTenant(b, "z", 0)
	rx, ry, rz := testRoute(x), testRoute(y), testRoute(z)
	for i := range 600 { // ~750 KiB: most of the budget
		keep(rx, fmt.Sprint("/x/", i), 1000)
	}
	for i := range 2000 {
		keep(ry, fmt.Sprint("/y/", i), 1000)
		keep(rz, fmt.Sprint("/z/", i), 1000)
	}
	const entry = 1000 + 8 + cacheEntryOverhead // body size class 1024, key ≈ 7
	for _, tc := range []*Tenant{x, y, z} {
		if u := tc.used.Load(); u < budget/3-2*entry || u > budget/3+2*entry {
			t.Errorf("a tenant holds %d bytes, fair share %d", u, budget/3)
		}
	}
	checkBooks(t, b, rx, ry, rz)
}

// A tenant's plan caps its share even when the budget has room; a lowered plan evicts
// down to it at once; a dropped route gives its bytes back.
func TestCacheBudgetTenantLimit(t *testing.T) {
	b := testBudget(t, 1<<20)
	small := testTenant(b, "small", 100_000)
	rs := testRoute(small)
	r2 := testRoute(small)
	for i := range 500 {
		keep(rs, fmt.Sprint("/s/", i), 1000)
		keep(r2, fmt.Sprint("/t/", i), 1000)
		if u := small.used.Load(); u > 100_000 {
			t.Fatalf("the tenant holds %d bytes over its 100000", u)
		}
	}
	if !r2.has("/t/499") || rs.has("/s/0") {
		t.Errorf("the tenant's newest answers should be kept, its oldest evicted, across its routes")
	}
	if e := keep(rs, "/huge", 200_000); rs.has(e.key) {
		t.Errorf("an answer larger than the tenant's share was kept")
	}
	checkBooks(t, b, rs, r2)

	testTenant(b, "small", 10_000) // the plan lowered
	if u := small.used.Load(); u > 10_000 {
		t.Errorf("after the plan was lowered the tenant holds %d bytes", u)
	}
	checkBooks(t, b, rs, r2)

	rs.Drop()
	r2.Drop()
	if small.used.Load() != 0 || b.used.Load() != 0 {
		t.Errorf("dropped routes still count %d / %d bytes", small.used.Load(), b.used.Load())
	}
	keep(rs, "/after", 10) // a request still on the dropped route keeps nothing
	if rs.has("/after") || b.used.Load() != 0 {
		t.Errorf("a dropped route kept an answer")
	}
}

// Many goroutines storing for several tenants at once, one of them flooding: the total
// never passes the budget at any moment, and the books balance at the end.
func TestCacheBudgetConcurrent(t *testing.T) {
	const budget = 512 << 10
	b := testBudget(t, budget)
	var caches []*Cache
	for i := range 4 {
		caches = append(caches, testRoute(testTenant(b, fmt.Sprint("t", i), 0)))
	}
	var over atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
				if u := b.used.Load(); u > budget {
					over.Store(u)
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := caches[g%len(caches)]
			n := 300
			if g%len(caches) == 0 {
				n = 5000 // the flooder
			}
			for i := range n {
				keep(rc, fmt.Sprintf("/%d/%d", g, i), 500+i%1500)
				if i%7 == 0 {
					rc.has(fmt.Sprintf("/%d/%d", g, i/2))
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	if u := over.Load(); u != 0 {
		t.Errorf("the edge held %d bytes at one point, budget %d", u, budget)
	}
	checkBooks(t, b, caches...)
}

// BenchmarkCacheGet is the lookup of a kept answer, from every core at once (the hit
// path's cost inside the cache: hash, shard lock, map).
func BenchmarkCacheGet(b *testing.B) {
	rc := testRoute(testTenant(testBudget(b, 256<<20), "t", 0))
	now := time.Now()
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = []byte("/c/items/" + strconv.Itoa(i) + "\x00")
		keep(rc, string(keys[i]), 100)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if e, _ := rc.Get(keys[i&63], len(keys[i&63]), now, nil, nil); e == nil {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// BenchmarkCachePut stores a new answer in a full cache: each store evicts one (the
// budget's fair share here, the route's entry bound in the version without a budget).
func BenchmarkCachePut(b *testing.B) {
	budget := testBudget(b, 1000*(128+16+cacheEntryOverhead))
	rc := testRoute(testTenant(budget, "t", 0))
	other := testRoute(testTenant(budget, "u", 0))
	keep(other, "/other", 100)
	now := time.Now()
	body := make([]byte, 100)
	key := []byte("/c/items/")
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n++
		k := string(strconv.AppendInt(key[:len("/c/items/")], int64(n), 10))
		e := &Entry{status: 200, body: body, stored: now, expires: now.Add(time.Hour), key: k, tenant: rc.tenant}
		e.size = 128 + len(k) + cacheEntryOverhead
		rc.Put(e)
	}
}

// keepVariant stores an answer of body bytes under key, varying on X-V with value v.
func keepVariant(rc *Cache, key, v string, body int) {
	names := [][]byte{[]byte("x-v")}
	e := &Entry{status: 200, body: make([]byte, body), stored: time.Now(), expires: farFuture, key: key, tenant: rc.tenant,
		varyNames: names, varyVals: appendVaryValues(nil, names, []byte("X-V: "+v+"\r\n"), nil)}
	e.size = cap(e.body) + len(key) + len(e.varyVals) + cacheEntryOverhead
	rc.Put(e)
}

// A Vary storm on one key keeps at most MaxVariants answers, evicted by the
// budget like any other, and every byte stays counted once.
func TestCacheVariantsBooks(t *testing.T) {
	b := testBudget(t, 64<<10)
	tc := testTenant(b, "t", 0)
	rc := testRoute(tc)
	for i := range 1000 {
		keepVariant(rc, "/k", strconv.Itoa(i), 1000)
		keep(rc, fmt.Sprint("/o/", i%40), 1000)
		if b.used.Load() > b.limit {
			t.Fatalf("over the budget after %d stores", i)
		}
	}
	checkBooks(t, b, rc)
	s := rc.shard([]byte("/k"))
	s.mu.Lock()
	n := len(s.m["/k"].variants)
	s.mu.Unlock()
	if n < 1 || n > MaxVariants {
		t.Errorf("%d variants kept", n)
	}
	keep(rc, "/k", 10) // no Vary now: the variants go
	checkBooks(t, b, rc)
	rc.Drop()
	if b.used.Load() != 0 {
		t.Errorf("%d bytes held after drop", b.used.Load())
	}
}
