package edge

import (
	"fmt"
	"testing"

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
