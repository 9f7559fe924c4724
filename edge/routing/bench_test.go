package routing_test

import (
	"fmt"
	"testing"

	"tollgate/edge/routing"
)

// Benchmarks: go test -run '^$' -bench . -benchmem ./edge/routing

func BenchmarkRouteLookup(b *testing.B) {
	for _, n := range []int{1, 50_000} {
		routes := make([]*testRoute, n)
		for i := range routes {
			routes[i] = &testRoute{ID: fmt.Sprint("r", i), Paths: []string{fmt.Sprintf("/api/v1/r%d", i)}, Methods: []string{"GET"}}
		}
		table := newTestTable(routes)
		path := []byte(fmt.Sprintf("/api/v1/r%d/items/42", n-1))
		get := []byte("GET")
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if id, _ := table.Lookup(get, path); id == "" {
					b.Fatal("no match")
				}
			}
		})
	}
}

func BenchmarkNormalizePath(b *testing.B) {
	for _, p := range []string{"/api/v1/users/12345/orders", "//api/./v1/x/../users/%7Ebob/%3a"} {
		raw := []byte(p)
		dst := make([]byte, 0, 256)
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = routing.NormalizePath(dst, raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
