package edge_test

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"tollgate/edge"
	"tollgate/edge/routing"
	"tollgate/tenants/accessrules"
)

// FuzzBearer: the token is the header's value after "Bearer " (any case), trimmed, and
// nothing else is ever taken for one.
func FuzzBearer(f *testing.F) {
	for _, s := range []string{"Bearer a.b.c", "bearer  x ", "Basic abc", "Bearer", "Bearer ", "BEARER\ta", "Bearerx.y.z", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok := edge.Bearer([]byte(h))
		if tok == nil {
			if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
				t.Fatalf("%q: no token", h)
			}
			return
		}
		if !strings.EqualFold(h[:7], "bearer ") {
			t.Fatalf("%q: token %q without the scheme", h, tok)
		}
		if !strings.Contains(h[7:], string(tok)) {
			t.Fatalf("%q: token %q", h, tok)
		}
		if len(tok) > 0 && (tok[0] == ' ' || tok[0] == '\t' || tok[len(tok)-1] == ' ' || tok[len(tok)-1] == '\t') {
			t.Fatalf("%q: token %q not trimmed", h, tok)
		}
	})
}

// FuzzAccessRulesPath: whatever the raw request path, once the edge has normalized it (what
// the upstream receives), a deny rule on /admin/* holds for every spelling an upstream
// could read as /admin — any letter case, percent-decoded, with or without a trailing
// slash — and a path with ";" is never allowed.
func FuzzAccessRulesPath(f *testing.F) {
	enf, err := accessrules.Compile([][]string{
		{"*", "/*", "*"},
		{"*", "/admin/*", "*", "deny"},
	}, nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"/admin", "/Admin/x", "/x/../admin/", "/%61dmin", "/%2e%2e/admin", "//admin//x", "/admin;x", "/ADMIN%2Fx", "/adm%69n/", "/public/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := routing.NormalizePath(nil, []byte(raw))
		if err != nil {
			return
		}
		allowed := enf.Allow([]string{"c"}, []byte("GET"), p)
		if allowed && bytes.ContainsAny(p, ";") {
			t.Fatalf("%q → %q: a path with ; allowed", raw, p)
		}
		dec, err := url.PathUnescape(strings.ToLower(string(p)))
		if err != nil {
			return
		}
		dec = strings.TrimSuffix(dec, "/")
		if allowed && (dec == "/admin" || strings.HasPrefix(dec, "/admin/")) {
			t.Fatalf("%q → %q (%q): allowed past the deny rule", raw, p, dec)
		}
		if strings.Contains(dec, ";") && allowed {
			t.Fatalf("%q → %q: an encoded ; allowed", raw, p)
		}
	})
}
