package routing_test

import (
	"fmt"
	"strings"
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

// BenchmarkRouteLookupParams: a parameter beside a literal at every level the path
// walks, the literal's subtree dead-ending so the walk comes back for the parameter.
func BenchmarkRouteLookupParams(b *testing.B) {
	for _, n := range []int{1, 50_000} {
		routes := []*testRoute{{ID: "item", Paths: []string{"=/api/{version}/users/{id}/items/{item}"}, Methods: []string{"GET"}}}
		for i := 1; i < n; i++ {
			routes = append(routes, &testRoute{ID: fmt.Sprint("r", i), Paths: []string{fmt.Sprintf("/api/v1/users/u%d", i)}, Methods: []string{"GET"}})
		}
		table := newTestTable(routes)
		path := []byte(fmt.Sprintf("/api/v1/users/u%d/items/42", n-1))
		get, post := []byte("GET"), []byte("POST")
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if id, _ := table.Lookup(get, path); id != "item" {
					b.Fatal("no match")
				}
			}
		})
		b.Run(fmt.Sprintf("routes=%d/allowed", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if id, _ := table.Lookup(post, path); id != "" || table.t.Allowed(path) == 0 {
					b.Fatal("want a 405")
				}
			}
		})
	}
}

// BenchmarkRouteLookupCrafted: a path no route of a crafted table matches, whose walk
// would visit 2^15 nodes without its bound.
func BenchmarkRouteLookupCrafted(b *testing.B) {
	const depth = 14
	table := crafted(depth)
	miss := []byte(strings.Repeat("/a", depth) + "/z")
	get := []byte("GET")
	b.ReportAllocs()
	for b.Loop() {
		if id, _ := table.Lookup(get, miss); id != "" || table.t.Allowed(miss) != 0 {
			b.Fatal("matched")
		}
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
