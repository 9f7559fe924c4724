package web

import (
	"net/url"
	"strings"
	"testing"
)

// TestLocalNext: sign-in and sign-up go back only to a page of this console.
func TestLocalNext(t *testing.T) {
	for next, want := range map[string]string{
		"/console/invites/accept?token=tgi_abc": "/console/invites/accept?token=tgi_abc",
		"/console/t/acme/routes":                "/console/t/acme/routes",
		"":                                      "F",
		"/console":                              "F",
		"/v1/tenants":                           "F",
		"https://evil.example/console/":         "F",
		"//evil.example/console/":               "F",
		"/console/../v1/tenants":                "F",
		"/console/%2e%2e/v1":                    "F",
		"/\\evil.example":                       "F",
		"/console/\\evil.example":               "F",
		"/console/x\r\nSet-Cookie: a=b":         "F",
		"javascript:alert(1)":                   "F",
		" /console/x":                           "F",
	} {
		if got := localNext(next, "F"); got != want {
			t.Errorf("localNext(%q) = %q, want %q", next, got, want)
		}
	}
}

// FuzzLocalNext: whatever a form or query sends as next, the redirect stays on the
// console's origin, under /console/.
func FuzzLocalNext(f *testing.F) {
	for _, s := range []string{"/console/invites/accept?token=tgi_x", "//evil", "/console/../x", "https://a/console/", "/console/\t/x"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://console.example/console/login")
	f.Fuzz(func(t *testing.T, next string) {
		got := localNext(next, "F")
		if got == "F" {
			return
		}
		if got != next {
			t.Fatalf("localNext(%q) = %q: neither the input nor the fallback", next, got)
		}
		u, err := base.Parse(got)
		if err != nil {
			t.Fatalf("localNext(%q) kept an unparsable URL: %v", next, err)
		}
		if u.Host != "console.example" || u.Scheme != "https" || !strings.HasPrefix(u.Path, "/console/") || strings.Contains(u.Path, "..") {
			t.Fatalf("localNext(%q) leads to %s", next, u)
		}
	})
}
