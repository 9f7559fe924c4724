package routing_test

import (
	"bytes"
	"path"
	"strings"
	"testing"

	"tollgate/edge/routing"
	"tollgate/tenants"
)

// domain is the edge's domain in these tests: tenants are {slug}.edge.test.
const domain = "edge.test"

// testRoute is what a route table holds in these tests: a route's id, paths and methods.
type testRoute struct {
	ID      string
	Paths   []string
	Methods []string
}

// testTable is a route table of testRoutes, looked up by id.
type testTable struct{ t routing.Table[testRoute] }

// newTestTable files the routes' paths and methods (they must be valid).
func newTestTable(routes []*testRoute) *testTable {
	t := &testTable{}
	for _, r := range routes {
		for _, p := range r.Paths {
			t.t.Add(p, r.Methods, r)
		}
	}
	return t
}

// Lookup returns the matched route's id ("" for none) and the strip length.
func (t *testTable) Lookup(method, path []byte) (string, int) {
	r, n := t.t.Lookup(method, path)
	if r == nil {
		return "", 0
	}
	return r.ID, n
}

// Seeds live in testdata/fuzz/<FuzzName>/ as well; these add the table cases.

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "//a//b/", "/a/./b/../c", "/%2e%2E/x", "/a/%2F", "/a%3a%7e", "/a/..", "/..", "/a/b/.", "/%", "/%0", "/ä/x", "/a\\b", "/a#b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out, err := routing.NormalizePath(nil, []byte(raw))
		if err != nil {
			return
		}
		s := string(out)
		if !strings.HasPrefix(s, "/") {
			t.Fatalf("%q → %q: not absolute", raw, s)
		}
		if strings.Contains(s, "//") {
			t.Fatalf("%q → %q: empty segment", raw, s)
		}
		for _, seg := range strings.Split(s, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q → %q: dot segment left", raw, s)
			}
		}
		ls := strings.ToLower(s)
		if strings.Contains(ls, "%2f") || strings.Contains(ls, "%5c") || strings.Contains(ls, "%00") || strings.ContainsAny(s, "\\# \x00\r\n\t") {
			t.Fatalf("%q → %q: refused byte or escape left", raw, s)
		}
		again, err := routing.NormalizePath(nil, out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", raw, s, again, err)
		}
		// Without escapes, the result is what path.Clean gives (which also drops a
		// trailing slash, so compare without it).
		if !strings.Contains(raw, "%") && !strings.ContainsAny(raw, "?") {
			if c := path.Clean(raw); c != strings.TrimSuffix(s, "/") && !(c == "/" && s == "/") {
				t.Fatalf("%q → %q, path.Clean says %q", raw, s, c)
			}
		}
	})
}

func FuzzSplitTarget(f *testing.F) {
	for _, s := range []string{"/a?b", "http://x.y/a?b", "HTTPS://X", "http://x?q", "*", "?x", "/a?b?c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		p, q, auth := routing.SplitTarget([]byte(target))
		if bytes.IndexByte(p, '?') >= 0 {
			t.Fatalf("%q: path %q holds the query", target, p)
		}
		if auth != nil && (bytes.IndexByte(auth, '/') >= 0 || bytes.IndexByte(auth, '?') >= 0) {
			t.Fatalf("%q: authority %q", target, auth)
		}
		if auth == nil && q != nil && string(p)+"?"+string(q) != target {
			t.Fatalf("%q: split into %q ? %q", target, p, q)
		}
	})
}

func FuzzTenantSlug(f *testing.F) {
	for _, s := range []string{"acme.edge.test", "ACME.edge.TEST:8000", "acme.edge.test.", "a.b.edge.test", "edge.test", "[::1]:80", "acme.edge.test:x", ".edge.test", "a_b.edge.test"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		var buf [routing.MaxHostLen]byte
		slug := routing.TenantSlug(&buf, []byte(host), domain)
		if slug == nil {
			return
		}
		if err := tenants.ValidateSlug(string(slug)); err != nil && !strings.Contains(err.Error(), "reserved") &&
			!strings.Contains(err.Error(), "start or end") {
			t.Fatalf("%q → slug %q: %v", host, slug, err)
		}
		h := strings.ToLower(host)
		if i := strings.LastIndexByte(h, ':'); i >= 0 {
			h = h[:i]
		}
		h = strings.TrimSuffix(h, ".")
		if h != string(slug)+"."+domain {
			t.Fatalf("%q → slug %q", host, slug)
		}
	})
}

// fuzzRoutes is the table FuzzRouteMatch checks against a brute-force matcher.
var fuzzRoutes = []*testRoute{
	{ID: "root", Paths: []string{"/"}, Methods: []string{"GET"}},
	{ID: "a", Paths: []string{"/a"}},
	{ID: "a-get", Paths: []string{"/a"}, Methods: []string{"GET", "HEAD"}},
	{ID: "a-slash", Paths: []string{"/a/"}, Methods: []string{"POST"}},
	{ID: "ab-exact", Paths: []string{"=/a/b"}},
	{ID: "ab", Paths: []string{"/a/b"}, Methods: []string{"PUT"}},
	{ID: "abc", Paths: []string{"/a/b/c", "/x/y"}},
	{ID: "x-exact", Paths: []string{"=/x"}, Methods: []string{"DELETE"}},
	{ID: "exact-root", Paths: []string{"=/"}},
	{ID: "deep", Paths: []string{"/a/b/c/d/e/f"}, Methods: []string{"PATCH"}},
	// Parameters: beside literals at the same depth, under them, trailing a slash, and
	// where the literal branch dead-ends so the walk must come back for the parameter.
	{ID: "a-p-z", Paths: []string{"/a/{p}/z"}, Methods: []string{"GET"}},
	{ID: "u-id", Paths: []string{"=/u/{id}"}, Methods: []string{"GET", "HEAD"}},
	{ID: "u-me", Paths: []string{"/u/me"}, Methods: []string{"POST"}},
	{ID: "u-me-x", Paths: []string{"=/u/me/x"}, Methods: []string{"GET"}},
	{ID: "u-id-y", Paths: []string{"=/u/{id}/y"}, Methods: []string{"GET"}},
	{ID: "u-id-o", Paths: []string{"/u/{id}/o"}},
	{ID: "u-x-slash", Paths: []string{"/u/{x}/"}, Methods: []string{"DELETE"}},
	{ID: "two-params", Paths: []string{"/{a}/{b}/c"}, Methods: []string{"PUT", "OPTIONS"}},
	{ID: "top-param", Paths: []string{"=/{a}"}, Methods: []string{"OPTIONS"}},
	{ID: "m-param", Paths: []string{"=/m/{k}"}, Methods: []string{"PATCH"}},
}

func init() {
	for i := 0; i < 20; i++ { // enough children to turn a node into a map
		fuzzRoutes = append(fuzzRoutes, &testRoute{ID: "m" + string(rune('a'+i)), Paths: []string{"/m/" + string(rune('a'+i))}})
	}
}

// routeMethods are the methods routes may list, in Allow's order.
var routeMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// refRank orders the route paths matching one request path, higher first: by the length
// of the request path they cover, then segment by segment a literal before a parameter,
// then exact before prefix, then a route listing the method before one taking every
// method.
type refRank struct {
	covered int
	literal []bool
	exact   bool
	listed  bool
}

func (a refRank) beats(b refRank) bool {
	if a.covered != b.covered {
		return a.covered > b.covered
	}
	for i := range a.literal {
		if a.literal[i] != b.literal[i] {
			return a.literal[i]
		}
	}
	if a.exact != b.exact {
		return a.exact
	}
	return a.listed && !b.listed
}

// refPathMatch matches one route path against a normalized request path, written out
// plainly on segments: whether it matches, how much of the path it covers, which of its
// segments are literal, and what strip_prefix leaves of the path.
func refPathMatch(rp, p string) (ok bool, covered int, literal []bool, rest string) {
	exact := strings.HasPrefix(rp, "=")
	rp = strings.TrimPrefix(rp, "=")
	if rp == "/" {
		if exact && p != "/" {
			return false, 0, nil, ""
		}
		return true, 0, nil, p
	}
	var psegs []string
	if p != "/" {
		psegs = strings.Split(p[1:], "/")
	}
	rsegs := strings.Split(rp[1:], "/")
	slash := !exact && rsegs[len(rsegs)-1] == "" // "/a/" matches "/a/" and "/a/b"
	if slash {
		rsegs = rsegs[:len(rsegs)-1]
	}
	switch {
	case exact && len(psegs) != len(rsegs):
		return false, 0, nil, ""
	case slash && len(psegs) <= len(rsegs), len(psegs) < len(rsegs):
		return false, 0, nil, ""
	}
	covered = 0
	for i, rs := range rsegs {
		param := strings.HasPrefix(rs, "{")
		if param && psegs[i] == "" || !param && rs != psegs[i] {
			return false, 0, nil, ""
		}
		literal = append(literal, !param)
		covered += 1 + len(psegs[i])
	}
	rest = p[covered:]
	if slash {
		literal = append(literal, true)
		covered++
	}
	if exact {
		rest = ""
	}
	if rest == "" {
		rest = "/"
	}
	return true, covered, literal, rest
}

// refMatch is the matching rule written out plainly: of the route paths that match and
// take the method, the one refRank puts first.
func refMatch(routes []*testRoute, method, p string) (id, rest string) {
	var best refRank
	found := false
	for _, r := range routes {
		listed := false
		for _, m := range r.Methods {
			listed = listed || m == method
		}
		if len(r.Methods) > 0 && !listed {
			continue
		}
		for _, rp := range r.Paths {
			ok, covered, literal, rst := refPathMatch(rp, p)
			if !ok {
				continue
			}
			rank := refRank{covered, literal, strings.HasPrefix(rp, "="), listed}
			if !found || rank.beats(best) {
				found, best, id, rest = true, rank, r.ID, rst
			}
		}
	}
	return id, rest
}

// refAllowed is the union of the methods the routes matching p list.
func refAllowed(routes []*testRoute, p string) string {
	set := map[string]bool{}
	for _, r := range routes {
		for _, rp := range r.Paths {
			if ok, _, _, _ := refPathMatch(rp, p); ok {
				for _, m := range r.Methods {
					set[m] = true
				}
			}
		}
	}
	var names []string
	for _, m := range routeMethods {
		if set[m] {
			names = append(names, m)
		}
	}
	return strings.Join(names, ", ")
}

// literalRoutes are fuzzRoutes without parameters: a table of them takes Lookup's path
// for nodes without a parameter child alone, which fuzzRoutes leaves at the root.
var literalRoutes = func() (rs []*testRoute) {
	for _, r := range fuzzRoutes {
		if !strings.Contains(strings.Join(r.Paths, ""), "{") {
			rs = append(rs, r)
		}
	}
	return rs
}()

// reAdded is the table of routes after an Editor cleared each path and filed again, in
// order, the routes that claim it: the same table.
func reAdded(routes []*testRoute) *testTable {
	built := newTestTable(routes)
	ed := built.t.Edit()
	for _, r := range routes {
		for _, p := range r.Paths {
			ed.Clear(p)
			for _, o := range routes {
				for _, q := range o.Paths {
					if q == p {
						ed.Add(q, o.Methods, o)
					}
				}
			}
		}
	}
	return &testTable{ed.Table()}
}

func FuzzRouteMatch(f *testing.F) {
	tables := []struct {
		routes []*testRoute
		table  *testTable
	}{{fuzzRoutes, newTestTable(fuzzRoutes)}, {literalRoutes, newTestTable(literalRoutes)}, {fuzzRoutes, reAdded(fuzzRoutes)}}
	for _, s := range []string{"/", "/a", "/a/", "/a/b", "/a/b/", "/a/b/c/d", "/ab", "/x", "/x/y/z", "/m/q", "/m/a/1", "//a/./b/../b",
		"/u/7", "/u/me", "/u/me/x", "/u/me/y", "/u/7/o/1", "/u/7/", "/u/me/", "/q/r/c", "/a/b/z", "/a/q/z/1", "/zz"} {
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"} {
			f.Add(m, s)
		}
	}
	f.Fuzz(func(t *testing.T, method, raw string) {
		p, err := routing.NormalizePath(nil, []byte(raw))
		if err != nil {
			return
		}
		for _, tt := range tables {
			if got, want := tt.table.t.Allowed(p).String(), refAllowed(tt.routes, string(p)); got != want {
				t.Fatalf("%q: allowed %q, want %q", p, got, want)
			}
			id, n := tt.table.Lookup([]byte(method), p)
			wantID, wantRest := refMatch(tt.routes, method, string(p))
			if id != wantID {
				t.Fatalf("%s %q: route %q, want %q", method, p, id, wantID)
			}
			if id == "" {
				continue
			}
			rest := string(p[n:])
			if rest == "" {
				rest = "/"
			}
			if rest != wantRest {
				t.Fatalf("%s %q → %s: stripped to %q, want %q", method, p, id, rest, wantRest)
			}
		}
	})
}
