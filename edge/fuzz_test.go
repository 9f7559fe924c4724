package edge_test

import (
	"bufio"
	"bytes"
	"net"
	"path"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"tollgate/edge"
	"tollgate/tenants"
)

// Seeds live in testdata/fuzz/<FuzzName>/ as well; these add the table cases.

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "//a//b/", "/a/./b/../c", "/%2e%2E/x", "/a/%2F", "/a%3a%7e", "/a/..", "/..", "/a/b/.", "/%", "/%0", "/ä/x", "/a\\b", "/a#b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out, err := edge.NormalizePath(nil, []byte(raw))
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
		again, err := edge.NormalizePath(nil, out)
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
		p, q, auth := edge.SplitTarget([]byte(target))
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
		slug := edge.TenantSlug([]byte(host), domain)
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
var fuzzRoutes = []*tenants.Route{
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
		fuzzRoutes = append(fuzzRoutes, &tenants.Route{ID: "m" + string(rune('a'+i)), Paths: []string{"/m/" + string(rune('a'+i))}})
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
	table := edge.NewTestRouteTable(fuzzRoutes)
	for _, s := range []string{"/", "/a", "/a/", "/a/b", "/a/b/", "/a/b/c/d", "/ab", "/x", "/x/y/z", "/m/q", "/m/a/1", "//a/./b/../b"} {
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "BREW"} {
			f.Add(m, s)
		}
	}
	f.Fuzz(func(t *testing.T, method, raw string) {
		p, err := edge.NormalizePath(nil, []byte(raw))
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

// FuzzRequestHeaders sends an arbitrary header block through the edge's request-header
// steps and checks what would go upstream.
func FuzzRequestHeaders(f *testing.F) {
	for _, s := range []string{
		"Connection: keep-alive, X-A\r\nX-A: 1\r\n",
		"Connection: Content-Length, Host, close\r\nContent-Length: 3\r\n",
		"X-Tollgate-X: 1\r\nx-consumer-id: a\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 5.6.7.8\r\n",
		"TE: trailers\r\nUpgrade: h2c\r\nKeep-Alive: 1\r\nProxy-Authorization: x\r\nX-Api-Key: k\r\n",
		"X-Request-Id: a\r\nX-Request-Id: b\r\n",
		"X_Consumer_Id: forged\r\nx_consumer_name: forged\r\n_: x\r\nX-Ok_: y\r\nConnection: X_A\r\nX_A: 1\r\n",
	} {
		f.Add(s, true)
	}
	e, err := edge.New(edge.Config{Domain: domain})
	if err != nil {
		f.Fatal(err)
	}
	hop := []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade", "Expect"}
	f.Fuzz(func(t *testing.T, block string, keyed bool) {
		var req fasthttp.Request
		raw := "GET / HTTP/1.1\r\nHost: acme." + domain + "\r\n" + block + "\r\n"
		if err := req.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			return
		}
		var named []string
		for k, v := range req.Header.All() {
			if strings.EqualFold(string(k), "Connection") {
				named = append(named, edge.ConnectionTokens(v)...)
			}
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
		consumer := ""
		if keyed {
			consumer = "c-1"
		}
		e.PrepareHeaders(&ctx, consumer, "name", keyed)
		h := &ctx.Request.Header
		for _, k := range hop {
			if v := h.Peek(k); v != nil {
				t.Fatalf("hop-by-hop %s went upstream: %q", k, v)
			}
		}
		for _, k := range named {
			if h.Peek(k) != nil {
				t.Fatalf("%s, named in Connection, went upstream", k)
			}
		}
		xff, ids := 0, 0
		for k, v := range h.All() {
			key := strings.ToLower(string(k))
			switch {
			case strings.Contains(key, "_"):
				t.Fatalf("%s, a name with '_', went upstream", k)
			case strings.HasPrefix(key, "x-tollgate-"):
				t.Fatalf("%s went upstream", k)
			case key == "x-consumer-id" || key == "x-consumer-name":
				ids++
				if !keyed {
					t.Fatalf("client identity header %s: %q went upstream", k, v)
				}
			case key == "x-forwarded-for":
				xff++
				if string(v) != "192.0.2.1" {
					t.Fatalf("X-Forwarded-For from an untrusted peer: %q", v)
				}
			case key == "x-api-key" && keyed:
				t.Fatalf("consumed key went upstream")
			}
		}
		if xff != 1 || (keyed && ids != 2) {
			t.Fatalf("X-Forwarded-For ×%d, identity ×%d", xff, ids)
		}
		if string(h.Peek("X-Consumer-Id")) != consumer {
			t.Fatalf("X-Consumer-Id %q", h.Peek("X-Consumer-Id"))
		}
	})
}
