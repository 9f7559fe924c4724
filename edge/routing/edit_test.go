package routing_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"tollgate/edge/routing"
)

type editRoute struct {
	id      string
	paths   []string
	methods []string
}

func dump(t *routing.Table[editRoute]) string {
	var lines []string
	t.Each(func(path, method string, r *editRoute) {
		lines = append(lines, path+" "+method+" "+r.id)
	})
	slices.Sort(lines)
	return fmt.Sprintf("len %d\n%s", t.Len(), strings.Join(lines, "\n"))
}

func build(routes []*editRoute) *routing.Table[editRoute] {
	var t routing.Table[editRoute]
	for _, r := range routes {
		for _, p := range r.paths {
			t.Add(p, r.methods, r)
		}
	}
	return &t
}

// TestEditorMatchesBuild clears paths of a table (big enough that its root's children
// are sharded) and files them again without one route: the result is the table built
// without it, and the table edited is unchanged.
func TestEditorMatchesBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []string{"/", "/a", "=/a", "/a/", "/a/{x}", "=/a/{y}", "/a/{x}/b", "/a/b", "/a/b/c", "/{x}", "/r5", "/r7/x"}
	methods := [][]string{nil, {"GET"}, {"POST", "GET"}, {"DELETE"}}
	var routes []*editRoute
	for i := range 2000 {
		routes = append(routes, &editRoute{id: fmt.Sprintf("f%04d", i), paths: []string{fmt.Sprintf("/r%d", i)}})
	}
	for i := range 40 {
		r := &editRoute{id: fmt.Sprintf("r%02d", i), methods: methods[rng.IntN(len(methods))]}
		for range 1 + rng.IntN(2) {
			r.paths = append(r.paths, pool[rng.IntN(len(pool))])
		}
		routes = append(routes, r)
	}
	slices.SortFunc(routes, func(a, b *editRoute) int { return strings.Compare(a.id, b.id) })
	for step := range 100 {
		table := build(routes)
		before := dump(table)
		gone := routes[rng.IntN(len(routes))]
		rest := slices.DeleteFunc(slices.Clone(routes), func(r *editRoute) bool { return r == gone })
		ed := table.Edit()
		for _, p := range gone.paths {
			ed.Clear(p)
			for _, r := range rest {
				for _, q := range r.paths {
					if q == p {
						ed.Add(q, r.methods, r)
					}
				}
			}
		}
		edited, rebuilt := ed.Table(), build(rest)
		if got, want := dump(&edited), dump(rebuilt); got != want {
			t.Fatalf("step %d, without %s: edited\n%s\nbuilt\n%s", step, gone.id, got, want)
		}
		if after := dump(table); after != before {
			t.Fatalf("step %d: the edited table changed", step)
		}
		for _, path := range []string{"/", "/a", "/a/b", "/a/7/b", "/r5", "/r7/x/y", "/zz"} {
			for _, m := range []string{"GET", "POST", "PUT"} {
				got, _ := edited.Lookup([]byte(m), []byte(path))
				want, _ := rebuilt.Lookup([]byte(m), []byte(path))
				if got != want {
					t.Fatalf("step %d: %s %s: %v, want %v", step, m, path, got, want)
				}
			}
			if got, want := edited.Allowed([]byte(path)), rebuilt.Allowed([]byte(path)); got != want {
				t.Fatalf("step %d: Allowed(%s) %v, want %v", step, path, got, want)
			}
		}
		// Next step from the edited set, with the route filed again half the time.
		if rng.IntN(2) == 0 {
			routes = rest
		}
	}
}
