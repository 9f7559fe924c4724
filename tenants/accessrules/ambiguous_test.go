package accessrules_test

import (
	"errors"
	"strings"
	"testing"

	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

// TestAmbiguousPathsNeverDodgeDeny: spellings some upstreams read as /admin — a segment
// ending in "." or whitespace, full-width and other compatibility letters — neither
// dodge a deny rule nor reach an allow rule, whatever the allow rules say; CheckPath
// names why, for the edge's 400. Each path is in the edge's normal form (what
// routing.NormalizePath leaves of the request).
func TestAmbiguousPathsNeverDodgeDeny(t *testing.T) {
	e := mustCompile(t, [][]string{
		{"*", "/*", "*"},
		{"*", "/admin/*", "*", "deny"},
	}, nil)
	for _, c := range []struct {
		path string
		want error
	}{
		{"/admin.", accessrules.ErrPathSegmentEnd},
		{"/admin..", accessrules.ErrPathSegmentEnd},
		{"/admin./x", accessrules.ErrPathSegmentEnd},
		{"/admin%20", accessrules.ErrPathSegmentEnd},
		{"/admin%20/x", accessrules.ErrPathSegmentEnd},
		{"/admin%09", accessrules.ErrPathSegmentEnd},
		{"/admin%0B", accessrules.ErrPathSegmentEnd},
		{"/admin.%20", accessrules.ErrPathSegmentEnd},
		{"/x/admin%20.", accessrules.ErrPathSegmentEnd},
		{"/admin%C2%85", accessrules.ErrPathSegmentEnd},                               // NEL
		{"/admin%E1%9A%80", accessrules.ErrPathSegmentEnd},                            // Ogham space mark
		{"/admin%E2%80%A8", accessrules.ErrPathSegmentEnd},                            // line separator
		{"/admin%E2%80%8B", accessrules.ErrPathSegmentEnd},                            // zero-width space
		{"/admin%A0", accessrules.ErrPathSegmentEnd},                                  // Latin-1 no-break space
		{"/admin\u3000", accessrules.ErrPathSegmentEnd},                               // ideographic space, raw
		{"/admin%C2%A0", accessrules.ErrPathSegmentEnd},                               // no-break space
		{"/ａｄｍｉｎ", accessrules.ErrPathCompat},                                         // full-width, raw UTF-8
		{"/%EF%BD%81%EF%BD%84%EF%BD%8D%EF%BD%89%EF%BD%8E", accessrules.ErrPathCompat}, // the same, escaped
		{"/ＡＤＭＩＮ/x", accessrules.ErrPathCompat},
		{"/adm\u0131n", nil},                            // dotless i: NFKC keeps it, and it is not "admin"
		{"/\u212Admin", accessrules.ErrPathCompat},      // Kelvin sign
		{"/caf\u0065\u0301", accessrules.ErrPathCompat}, // decomposed é
		{"/public/．．/admin", accessrules.ErrPathCompat}, // full-width dots
		{"/public／admin", accessrules.ErrPathCompat},    // full-width solidus
	} {
		err := accessrules.CheckPath([]byte(c.path))
		if !errors.Is(err, c.want) {
			t.Errorf("CheckPath(%q) = %v, want %v", c.path, err, c.want)
		}
		if c.want != nil && allow(e, "GET", c.path, "alice") {
			t.Errorf("%q: allowed past the deny rule on /admin/*", c.path)
		}
	}
}

// Paths CheckPath lets through: dots and spaces inside a segment, a dot at a segment's
// start, NFKC-stable letters of any script, and a trailing slash.
func TestCheckPathAccepts(t *testing.T) {
	e := mustCompile(t, [][]string{{"*", "/*", "*"}, {"*", "/admin/*", "*", "deny"}}, nil)
	for _, p := range []string{
		"/", "/a/", "/.well-known/x", "/v1.0/x", "/a%20b", "/a.b", "/caf%C3%A9", "/café", "/商品/一覧",
		"/%F0%9F%98%80", "/a%25", "/a..b", "/~user/", "/x/y.json",
	} {
		if err := accessrules.CheckPath([]byte(p)); err != nil {
			t.Errorf("CheckPath(%q) = %v", p, err)
		}
		if !allow(e, "GET", p, "alice") {
			t.Errorf("%q denied", p)
		}
	}
}

// A pattern whose literal CheckPath refuses could never match: Compile says so.
func TestCompileRefusesAmbiguousPatterns(t *testing.T) {
	for _, c := range []struct{ pattern, msg string }{
		{"/admin.", "ends in '.' or whitespace"},
		{"/a/admin%20/x", "ends in '.' or whitespace"},
		{"/ａｄｍｉｎ", "compatibility characters"},
		{"/x/caf\u0065\u0301", "compatibility characters"},
	} {
		_, err := accessrules.Compile([][]string{{"*", c.pattern, "GET", "deny"}}, nil)
		var te *tenants.Error
		if !errors.As(err, &te) || te.Field != "rules[0][1]" || !strings.Contains(te.Message, c.msg) {
			t.Errorf("%q: %v, want rules[0][1] %q", c.pattern, err, c.msg)
		}
	}
}

// BenchmarkCheckPath is the check the edge makes on every request to a route under
// access rules, before the decision cache.
func BenchmarkCheckPath(b *testing.B) {
	for _, p := range []string{"/orders/42/items", "/caf%C3%A9/orders/42"} {
		b.Run(p, func(b *testing.B) {
			path := []byte(p)
			b.ReportAllocs()
			for b.Loop() {
				if accessrules.CheckPath(path) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
