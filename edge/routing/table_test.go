package routing_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRouteLookupParams(t *testing.T) {
	table := newTestTable([]*testRoute{
		{ID: "user", Paths: []string{"=/users/{id}"}, Methods: []string{"GET"}},
		{ID: "user-tree", Paths: []string{"/users/{id}"}, Methods: []string{"DELETE"}},
		{ID: "me", Paths: []string{"/users/me"}, Methods: []string{"GET", "POST"}},
		{ID: "orders", Paths: []string{"/users/{id}/orders"}},
		{ID: "me-settings", Paths: []string{"=/users/me/settings"}, Methods: []string{"GET"}},
		{ID: "item", Paths: []string{"/shops/{shop}/items/{item}"}, Methods: []string{"GET"}},
		{ID: "shop-slash", Paths: []string{"/shops/{shop}/"}, Methods: []string{"GET"}},
		{ID: "exact-param", Paths: []string{"=/me/{x}"}},
		{ID: "prefix-literal", Paths: []string{"/me/lit"}},
	})
	for _, c := range []struct {
		method, path string
		want         string
		rest         string // what strip_prefix leaves
	}{
		{"GET", "/users/42", "user", "/"},
		{"GET", "/users", "", ""},      // a parameter needs a segment
		{"GET", "/users/", "", ""},     // and a non-empty one
		{"GET", "/users/42/x", "", ""}, // =/users/{id} is exact
		{"DELETE", "/users/42/x", "user-tree", "/x"},
		{"GET", "/users/me", "me", "/"},           // a literal beats a parameter at the same depth
		{"GET", "/users/me/x", "me", "/x"},        // longest match: /users/{id} does not take /x with GET
		{"DELETE", "/users/me", "user-tree", "/"}, // me does not take DELETE: the parameter does
		{"PUT", "/users/7/orders/9", "orders", "/9"},
		{"PUT", "/users/me/orders", "orders", "/"}, // the literal branch ends short: back to the parameter
		{"GET", "/users/me/settings", "me-settings", "/"},
		{"POST", "/users/me/settings", "me", "/settings"},
		{"GET", "/shops/s1/items/i2", "item", "/"},
		{"GET", "/shops/s1/items/i2/more", "item", "/more"},
		{"GET", "/shops/s1/items", "shop-slash", "/items"},
		{"GET", "/shops/s1", "", ""},              // "/shops/{shop}/" needs the slash
		{"GET", "/me/lit", "prefix-literal", "/"}, // literal before exact: exact only beats prefix at the same path
		{"GET", "/me/other", "exact-param", "/"},
	} {
		id, n := table.Lookup([]byte(c.method), []byte(c.path))
		if id != c.want {
			t.Errorf("%s %s: route %q, want %q", c.method, c.path, id, c.want)
			continue
		}
		if id == "" {
			continue
		}
		rest := c.path[n:]
		if rest == "" {
			rest = "/"
		}
		if rest != c.rest {
			t.Errorf("%s %s → %s: strip_prefix leaves %q, want %q", c.method, c.path, id, rest, c.rest)
		}
	}
}

func TestRouteParamNamesShareSlots(t *testing.T) {
	var table testTable
	first := &testRoute{ID: "first"}
	if other := table.t.Add("/users/{id}", []string{"GET"}, first); other != nil {
		t.Fatalf("first add conflicts with %q", other.ID)
	}
	if other := table.t.Add("/users/{uid}", []string{"GET", "POST"}, &testRoute{ID: "second"}); other != first {
		t.Fatalf("a path differing only in a parameter's name: conflict %v, want the first route", other)
	}
	if id, _ := table.Lookup([]byte("GET"), []byte("/users/1")); id != "first" {
		t.Fatalf("GET /users/1: %q, want the first route to keep its slot", id)
	}
	if id, _ := table.Lookup([]byte("POST"), []byte("/users/1")); id != "second" {
		t.Fatalf("POST /users/1: %q, want the second route in the free slot", id)
	}
}

func TestRouteAllowed(t *testing.T) {
	table := newTestTable([]*testRoute{
		{ID: "user", Paths: []string{"=/users/{id}"}, Methods: []string{"GET", "HEAD"}},
		{ID: "users", Paths: []string{"/users"}, Methods: []string{"OPTIONS"}},
		{ID: "user-del", Paths: []string{"/users/{id}"}, Methods: []string{"DELETE"}},
		{ID: "me", Paths: []string{"=/users/me"}, Methods: []string{"PUT", "POST"}},
		{ID: "any", Paths: []string{"/open"}},
	})
	for _, c := range []struct{ path, want string }{
		{"/users/7", "GET, HEAD, DELETE, OPTIONS"}, // every route matching the path, shorter ones too
		{"/users/7/x", "DELETE, OPTIONS"},
		{"/users/me", "GET, HEAD, POST, PUT, DELETE, OPTIONS"},
		{"/users", "OPTIONS"},
		{"/open", ""}, // a route taking every method lists none: it never answers 405
		{"/nope", ""},
		{"/", ""},
	} {
		if got := table.t.Allowed([]byte(c.path)).String(); got != c.want {
			t.Errorf("Allowed(%s) = %q, want %q", c.path, got, c.want)
		}
	}
	// A method Allowed lists finds a route; one it does not list finds none.
	for _, p := range []string{"/users/7", "/users/7/x", "/users/me", "/users"} {
		allowed := table.t.Allowed([]byte(p)).String()
		for _, m := range routeMethods {
			id, _ := table.Lookup([]byte(m), []byte(p))
			if listed := slices.Contains(strings.Split(allowed, ", "), m); listed != (id != "") {
				t.Errorf("%s %s: route %q, but Allow is %q", m, p, id, allowed)
			}
		}
	}
}

// crafted is a table whose parameters multiply the alternatives at every segment: every
// path of depth segments, each "a" or "{p}", as its own exact GET route.
func crafted(depth int) *testTable {
	var routes []*testRoute
	for m := 0; m < 1<<depth; m++ {
		p := ""
		for i := 0; i < depth; i++ {
			if m&(1<<i) != 0 {
				p += "/{p}"
			} else {
				p += "/a"
			}
		}
		routes = append(routes, &testRoute{ID: fmt.Sprint(m), Paths: []string{"=" + p}, Methods: []string{"GET"}})
	}
	return newTestTable(routes)
}

// A crafted table still answers: the literal route where it matches, a parameter where
// only one does, nothing (and quickly: the walk's visits are bounded) where none does.
func TestRouteLookupCrafted(t *testing.T) {
	const depth = 14
	table := crafted(depth)
	all := strings.Repeat("/a", depth)
	if id, _ := table.Lookup([]byte("GET"), []byte(all)); id != "0" {
		t.Errorf("GET %s: %q, want the all-literal route", all, id)
	}
	if id, _ := table.Lookup([]byte("GET"), []byte("/b"+all[2:])); id != "1" {
		t.Errorf("GET /b…: %q, want the route with a parameter first", id)
	}
	miss := []byte(all + "/z")
	start := time.Now()
	for range 100 {
		if id, _ := table.Lookup([]byte("GET"), miss); id != "" {
			t.Fatalf("GET %s: %q, want none", miss, id)
		}
		if got := table.t.Allowed(miss); got != 0 {
			t.Fatalf("Allowed(%s) = %v, want none", miss, got)
		}
	}
	t.Logf("100 misses in %v", time.Since(start))
}
