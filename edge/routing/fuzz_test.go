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
}

func init() {
	for i := 0; i < 20; i++ { // enough children to turn a node into a map
		fuzzRoutes = append(fuzzRoutes, &testRoute{ID: "m" + string(rune('a'+i)), Paths: []string{"/m/" + string(rune('a'+i))}})
	}
}

// refMatch is the matching rule written out plainly: of the route paths that match
// (prefix on a segment boundary, or exact), the longest wins; at equal length exact beats
// prefix, then a route listing the method beats one taking every method.
func refMatch(method, p string) (id, rest string) {
	bestRank := -1
	for _, r := range fuzzRoutes {
		listed := false
		for _, m := range r.Methods {
			listed = listed || m == method
		}
		if len(r.Methods) > 0 && !listed {
			continue
		}
		for _, rp := range r.Paths {
			exact := strings.HasPrefix(rp, "=")
			rp = strings.TrimPrefix(rp, "=")
			ok := p == rp
			if !exact && !ok {
				ok = rp == "/" || strings.HasPrefix(p, rp) && (strings.HasSuffix(rp, "/") || p[len(rp)] == '/')
			}
			if !ok {
				continue
			}
			rank := len(rp) * 4
			if exact {
				rank += 2
			}
			if listed {
				rank++
			}
			if rank > bestRank {
				bestRank, id = rank, r.ID
				rest = p
				if !exact && rp != "/" {
					rest = p[len(strings.TrimSuffix(rp, "/")):]
				} else if exact && rp != "/" {
					rest = ""
				}
			}
		}
	}
	if rest == "" {
		rest = "/"
	}
	return id, rest
}

func FuzzRouteMatch(f *testing.F) {
	table := newTestTable(fuzzRoutes)
	for _, s := range []string{"/", "/a", "/a/", "/a/b", "/a/b/", "/a/b/c/d", "/ab", "/x", "/x/y/z", "/m/q", "/m/a/1", "//a/./b/../b"} {
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "BREW"} {
			f.Add(m, s)
		}
	}
	f.Fuzz(func(t *testing.T, method, raw string) {
		p, err := routing.NormalizePath(nil, []byte(raw))
		if err != nil {
			return
		}
		id, n := table.Lookup([]byte(method), p)
		wantID, wantRest := refMatch(method, string(p))
		if id != wantID {
			t.Fatalf("%s %q: route %q, want %q", method, p, id, wantID)
		}
		if id == "" {
			return
		}
		rest := string(p[n:])
		if rest == "" {
			rest = "/"
		}
		if rest != wantRest {
			t.Fatalf("%s %q → %s: stripped to %q, want %q", method, p, id, rest, wantRest)
		}
	})
}
