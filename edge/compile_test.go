package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/balancer"
	"tollgate/tenants"
)

// newCompileEdge is an edge for compile tests: entries go in with put and del, and the
// test compiles with compileDirty (the compiler goroutine waits an hour).
func newCompileEdge(t testing.TB) *Edge {
	t.Helper()
	e, err := New(Config{
		Domain:       "edge.test",
		AddressRule:  &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registry:     prometheus.NewRegistry(),
		EdgeID:       "test",
		CompileDelay: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var compileRev int64

func putEntry(t testing.TB, e *Edge, ent tenants.Entry) {
	t.Helper()
	compileRev++
	ent.Rev = compileRev
	key, err := ent.EntryKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&ent)
	if err != nil {
		t.Fatal(err)
	}
	e.Apply(key, b, uint64(compileRev))
}

func compileTestRoute(tenantID, id string, paths, methods []string, port int) *tenants.Route {
	return &tenants.Route{ID: id, TenantID: tenantID, Name: id, Paths: paths, Methods: methods,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Weight: 1}}}}
}

// dumpSnapshot lists every slot of the snapshot's route table with the route's id and
// the entry it was compiled from, and checks that each route reads the snapshot's config.
func dumpSnapshot(t *testing.T, s *Snapshot) string {
	lines := []string{fmt.Sprintf("len %d", s.routes.Len())}
	s.routes.Each(func(path, method string, rt *route) {
		lines = append(lines, fmt.Sprintf("%s %s %s %p", path, method, rt.id, rt.src))
		if rt.snapshot != s.tenantConfig {
			t.Errorf("route %s reads another snapshot's config", rt.id)
		}
	})
	slices.Sort(lines[1:])
	return strings.Join(lines, "\n")
}

// TestIncrementalCompileMatchesFull applies random sequences of route puts and deletes
// (conflicting paths, parameters, methods, shared upstreams) and, now and then, other
// entries, and checks after every compile that the snapshot is the one a full rebuild
// of the same entries gives, that the previous snapshot did not change, and that the
// tenant's pools are exactly those its routes use.
func TestIncrementalCompileMatchesFull(t *testing.T) {
	e := newCompileEdge(t)
	ref := newCompileEdge(t)
	const tid = "t-acme"
	putEntry(t, e, tenants.Entry{Tenant: &tenants.Tenant{ID: tid, Slug: "acme", Name: "acme"}})
	for i := range 1500 { // enough for the root's children to be sharded
		putEntry(t, e, tenants.Entry{Route: compileTestRoute(tid, fmt.Sprintf("f%04d", i), []string{fmt.Sprintf("/f%d", i)}, nil, 9)})
	}
	e.Loaded()
	rng := rand.New(rand.NewPCG(7, 11))
	pool := []string{"/", "/a", "=/a", "/a/", "/a/{x}", "=/a/{y}", "/a/{x}/b", "/a/b", "/{x}", "/f5", "/f7/x", "/f1499"}
	methods := [][]string{nil, {"GET"}, {"POST", "GET"}, {"DELETE"}}
	for step := range 150 {
		prev := e.Snapshot("acme")
		prevDump := dumpSnapshot(t, prev)
		onlyRoutes := true
		for range 1 + rng.IntN(3) {
			id := fmt.Sprintf("r%02d", rng.IntN(30))
			switch n := rng.IntN(20); {
			case n < 6:
				e.Apply(tenants.ObjectKey(tid, tenants.KindRoute, id), nil, 0)
			case n == 6:
				onlyRoutes = false
				c := fmt.Sprintf("c%d", rng.IntN(3))
				putEntry(t, e, tenants.Entry{Consumer: &tenants.Consumer{ID: c, TenantID: tid, Name: c}})
			case n == 7:
				e.Apply(tenants.ObjectKey(tid, tenants.KindRoute, fmt.Sprintf("f%04d", rng.IntN(1500))), nil, 0)
			default:
				var paths []string
				for range 1 + rng.IntN(2) {
					paths = append(paths, pool[rng.IntN(len(pool))])
				}
				putEntry(t, e, tenants.Entry{Route: compileTestRoute(tid, id, paths, methods[rng.IntN(len(methods))], 9+rng.IntN(3))})
			}
		}
		e.compileDirty()
		snap := e.Snapshot("acme")
		if got := dumpSnapshot(t, prev); got != prevDump {
			t.Fatalf("step %d: the previous snapshot changed", step)
		}
		if onlyRoutes != (snap.tenantConfig == prev.tenantConfig) {
			t.Fatalf("step %d: only routes changed: %v; the config was carried over: %v", step, onlyRoutes, snap.tenantConfig == prev.tenantConfig)
		}

		e.mu.Lock()
		ts := e.state[tid]
		pending := ts.pending
		v := ts.viewLocked(false)
		ts.pending = pending
		e.mu.Unlock()
		full, _ := ref.compileFull(v, ref.labels.Tenant(tid, "acme"), &compiled{pools: map[string]balancer.Transport{}})
		if got, want := dumpSnapshot(t, snap), dumpSnapshot(t, full); got != want {
			t.Fatalf("step %d: incremental\n%s\nfull\n%s", step, got, want)
		}
		for _, path := range []string{"/", "/a", "/a/b", "/a/7/b", "/f5", "/f7/x/y", "/zz"} {
			for _, m := range []string{"GET", "POST", "PUT"} {
				got, _ := snap.routes.Lookup([]byte(m), []byte(path))
				want, _ := full.routes.Lookup([]byte(m), []byte(path))
				if (got == nil) != (want == nil) || got != nil && got.src != want.src {
					t.Fatalf("step %d: %s %s: %v, want %v", step, m, path, got, want)
				}
			}
			if got, want := snap.routes.Allowed([]byte(path)), full.routes.Allowed([]byte(path)); got != want {
				t.Fatalf("step %d: Allowed(%s) %v, want %v", step, path, got, want)
			}
		}
		c := &ts.compiled
		used := map[string]int{}
		sharing := map[string]int{}
		for _, rt := range c.routes {
			rt.usePools(used, 1)
			if k := rt.upstream.shareKey; k != "" {
				sharing[k]++
				if c.shared[k] == nil || c.shared[k].u != rt.upstream {
					t.Fatalf("step %d: route %s shares an upstream the tenant does not hold", step, rt.id)
				}
			}
		}
		for k, su := range c.shared {
			if su.n != sharing[k] {
				t.Fatalf("step %d: upstream %q counts %d routes, %d use it", step, k, su.n, sharing[k])
			}
		}
		if len(used) != len(c.pools) || len(used) != len(c.poolRefs) {
			t.Fatalf("step %d: %d pools, %d counted, %d used", step, len(c.pools), len(c.poolRefs), len(used))
		}
		for k, n := range used {
			if c.poolRefs[k] != n || c.pools[k] == nil {
				t.Fatalf("step %d: pool %s: %d counted, %d used", step, k, c.poolRefs[k], n)
			}
		}
	}
}

// TestParallelCompiles loads tenants that compile side by side (run it with -race): each
// gets its own snapshot with its routes, consumers and keys.
func TestParallelCompiles(t *testing.T) {
	e := newCompileEdge(t)
	const nt, nr = 6, 300
	for i := range nt {
		tid := fmt.Sprint("t-", i)
		putEntry(t, e, tenants.Entry{Tenant: &tenants.Tenant{ID: tid, Slug: fmt.Sprint("s", i), Name: tid}})
		putEntry(t, e, tenants.Entry{Consumer: &tenants.Consumer{ID: "c", TenantID: tid, Name: "c"}})
		putEntry(t, e, tenants.Entry{Key: &tenants.KeyEntry{ID: "k", TenantID: tid, ConsumerID: "c", Hash: strings.Repeat("ab", 32)}})
		for r := range nr {
			rt := compileTestRoute(tid, fmt.Sprint("r", r), []string{fmt.Sprintf("/r%d", r)}, nil, 9000+r%7)
			if r%2 == 0 {
				rt.Auth = tenants.AuthKey
			}
			putEntry(t, e, tenants.Entry{Route: rt})
		}
	}
	e.Loaded()
	for i := range nt {
		s := e.Snapshot(fmt.Sprint("s", i))
		if s == nil || s.Routes() != nr || len(s.keys) != 1 {
			t.Fatalf("tenant %d: %v", i, s)
		}
		rt, _ := s.routes.Lookup([]byte("GET"), []byte("/r7"))
		if rt == nil || rt.snapshot != s.tenantConfig || rt.snapshot.TenantID != fmt.Sprint("t-", i) {
			t.Fatalf("tenant %d: /r7 found %v", i, rt)
		}
	}
}
