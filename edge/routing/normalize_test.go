package routing_test

import (
	"testing"

	"tollgate/edge/routing"
)

// TestNormalizeLeavesAmbiguousSpellings pins what the normal form leaves of spellings
// some upstreams read as another path: a segment ending in "." or whitespace keeps it
// (escaped as the client sent it), and full-width letters pass as raw UTF-8. The path
// is proxied as it is here; access rules refuse these forms (accessrules.CheckPath), so
// what a rule decided on is still what the upstream receives.
func TestNormalizeLeavesAmbiguousSpellings(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"/admin.", "/admin."},
		{"/admin%2e", "/admin."},
		{"/admin./x", "/admin./x"},
		{"/admin%20", "/admin%20"},
		{"/admin%09", "/admin%09"},
		{"/admin%e3%80%80", "/admin%E3%80%80"},
		{"/ａｄｍｉｎ", "/ａｄｍｉｎ"},
		{"/%ef%bd%81dmin", "/%EF%BD%81dmin"},
		{"/public/．．/admin", "/public/．．/admin"},
		{"/a/.../b", "/a/.../b"},
	} {
		got, err := routing.NormalizePath(nil, []byte(c.raw))
		if err != nil || string(got) != c.want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
	// Raw whitespace is refused before any of this.
	for _, raw := range []string{"/admin ", "/admin\t", "/admin \x00"} {
		if _, err := routing.NormalizePath(nil, []byte(raw)); err != routing.ErrPathBadByte {
			t.Errorf("NormalizePath(%q): %v, want %v", raw, err, routing.ErrPathBadByte)
		}
	}
}
