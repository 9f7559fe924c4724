package edge

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// BenchmarkRouteChange is one route change in a tenant of 50,000 routes, from its entry's
// arrival to the new snapshot: incremental (the default) against the whole tenant's
// recompile (TOLLGATE_EDGE_INCREMENTAL=off).
//
//	go test -run '^$' -bench RouteChange -benchmem ./edge/
func BenchmarkRouteChange(b *testing.B) {
	const tid, n = "t-acme", 50_000
	for _, mode := range []struct {
		name string
		on   bool
	}{{"incremental", true}, {"full", false}} {
		b.Run(mode.name, func(b *testing.B) {
			e := newCompileEdge(b)
			putEntry(b, e, tenants.Entry{Tenant: &tenants.Tenant{ID: tid, Slug: "acme", Name: "acme"}})
			for i := range n {
				putEntry(b, e, tenants.Entry{Route: compileTestRoute(tid, fmt.Sprint("r", i), []string{fmt.Sprintf("/r%d/x", i)}, nil, 9)})
			}
			e.Loaded()
			SetIncrementalCompiles(mode.on)
			defer SetIncrementalCompiles(true)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				id := i % n
				putEntry(b, e, tenants.Entry{Route: compileTestRoute(tid, fmt.Sprint("r", id), []string{fmt.Sprintf("/r%d/x", id), fmt.Sprintf("/v%d", i)}, nil, 10+i%2)})
				e.compileDirty()
			}
			if got := e.Snapshot("acme").Routes(); got < n {
				b.Fatalf("%d routes", got)
			}
		})
	}
}

// BenchmarkRoutesHeap loads 10,000 routes (in 1 tenant and across 100) and reports the
// live heap they take, per route: what an edge's RSS grows by with its config.
//
//	go test -run '^$' -bench RoutesHeap -benchtime 1x ./edge/
func BenchmarkRoutesHeap(b *testing.B) {
	const n = 10_000
	for _, nt := range []int{1, 100} {
		b.Run(fmt.Sprintf("tenants=%d", nt), func(b *testing.B) {
			for b.Loop() {
				e := newCompileEdge(b)
				before := liveHeap()
				for t := range nt {
					tid := fmt.Sprint("t-", t)
					putEntry(b, e, tenants.Entry{Tenant: &tenants.Tenant{ID: tid, Slug: fmt.Sprint("s", t), Name: tid}})
				}
				for i := range n {
					tid := fmt.Sprint("t-", i%nt)
					putEntry(b, e, tenants.Entry{Route: compileTestRoute(tid, fmt.Sprint("route-", i), []string{fmt.Sprintf("/api/v1/r%d", i)}, []string{"GET", "POST"}, 9000+i%50)})
				}
				e.Loaded()
				b.ReportMetric(float64(liveHeap()-before)/n, "B/route")
				runtime.KeepAlive(e)
			}
		})
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRoutesRSS is an edge that serves one route and then gets 10,000 more one by
// one, as a config-as-code load delivers them, compiling as they come (the compiler
// goroutine, CompileDelay 2ms): the process's RSS once they are all served. Run one mode
// per process, RSS only grows:
//
//	go test -run '^$' -bench 'RoutesRSS/incremental' -benchtime 1x ./edge/
func BenchmarkRoutesRSS(b *testing.B) {
	const tid, n = "t-acme", 10_000
	for _, mode := range []struct {
		name string
		on   bool
	}{{"incremental", true}, {"full", false}} {
		b.Run(mode.name, func(b *testing.B) {
			SetIncrementalCompiles(mode.on)
			defer SetIncrementalCompiles(true)
			for b.Loop() {
				e := newCompileEdge(b)
				e.cfg.CompileDelay = 2 * time.Millisecond
				putEntry(b, e, tenants.Entry{Tenant: &tenants.Tenant{ID: tid, Slug: "acme", Name: "acme"}})
				putEntry(b, e, tenants.Entry{Route: compileTestRoute(tid, "route-0", []string{"/api/v1/r0"}, nil, 9000)})
				e.Loaded()
				rss0 := rssKiB()
				for i := 1; i <= n; i++ {
					putEntry(b, e, tenants.Entry{Route: compileTestRoute(tid, fmt.Sprint("route-", i), []string{fmt.Sprintf("/api/v1/r%d", i)}, []string{"GET", "POST"}, 9000+i%50)})
				}
				for e.Snapshot("acme") == nil || e.Snapshot("acme").Routes() < n+1 {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(100 * time.Millisecond)
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				b.ReportMetric(float64(rssKiB())/1024, "MiB-RSS")
				b.ReportMetric(float64(rssKiB()-rss0)/n*1024, "B-RSS/route")
				b.ReportMetric(float64(m.HeapInuse)/(1<<20), "MiB-heap-inuse")
			}
		})
	}
}

func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

// BenchmarkColdStart is an edge's start from a bucket of 100,000 routes over 2 tenants:
// every entry applied (its JSON decoded and checked), then Loaded's compile, until the
// edge is ready, with the tenants compiled side by side (the default) and one after the
// other (TOLLGATE_EDGE_PARALLEL_COMPILES=off). The entries' JSON is made beforehand.
//
//	go test -run '^$' -bench ColdStart -benchtime 2x -cpu 2 ./edge/
func BenchmarkColdStart(b *testing.B) {
	const n, nt = 100_000, 2
	type kv struct {
		key   string
		value []byte
	}
	var entries []kv
	add := func(ent tenants.Entry) {
		ent.Rev = int64(len(entries) + 1)
		key, err := ent.EntryKey()
		if err != nil {
			b.Fatal(err)
		}
		v, err := json.Marshal(&ent)
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, kv{key, v})
	}
	for t := range nt {
		tid := fmt.Sprint("t-", t)
		add(tenants.Entry{Tenant: &tenants.Tenant{ID: tid, Slug: fmt.Sprint("s", t), Name: tid}})
	}
	for i := range n {
		add(tenants.Entry{Route: compileTestRoute(fmt.Sprint("t-", i%nt), fmt.Sprint("route-", i), []string{fmt.Sprintf("/api/v1/r%d", i)}, []string{"GET", "POST"}, 9000+i%50)})
	}
	for _, mode := range []struct {
		name string
		on   bool
	}{{"parallel", true}, {"serial", false}} {
		b.Run(mode.name, func(b *testing.B) {
			SetParallelCompiles(mode.on)
			defer SetParallelCompiles(true)
			for b.Loop() {
				e := newCompileEdge(b)
				start := time.Now()
				for i, ent := range entries {
					e.Apply(ent.key, ent.value, uint64(i+1))
				}
				applied := time.Since(start)
				e.Loaded()
				b.ReportMetric(applied.Seconds(), "s-apply")
				b.ReportMetric(time.Since(start).Seconds()-applied.Seconds(), "s-compile")
				if !e.ready.Load() {
					b.Fatal("not ready")
				}
			}
		})
	}
}
