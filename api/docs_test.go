package api_test

import (
	"regexp"
	"strings"
	"testing"

	"tollgate/api/apidocs"
)

var (
	attrURL   = regexp.MustCompile(`\s(?:src|href)="([^"]*)"`)
	scriptTag = regexp.MustCompile(`<script[^>]*>`)
)

// TestDocsPage: /v1/docs is HTML under the console's policy, loads only same-origin files
// (and the document), every one of which is served with its media type; no inline script
// or style needs the policy loosened.
func TestDocsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("GET", "/v1/docs", "", nil).want(200)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("Content-Type %q", ct)
	}
	csp := r.header.Get("Content-Security-Policy")
	if csp != apidocs.CSP {
		t.Fatalf("Content-Security-Policy %q, want the console's %q", csp, apidocs.CSP)
	}
	for _, loose := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(csp, loose) {
			t.Errorf("the policy allows %s", loose)
		}
	}
	if r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no X-Content-Type-Options: nosniff")
	}
	page := string(r.body)
	for _, tag := range scriptTag.FindAllString(page, -1) {
		if !strings.Contains(tag, ` src="`) {
			t.Errorf("inline script: %s", tag)
		}
	}
	if strings.Contains(page, "<style") || strings.Contains(page, " style=") {
		t.Error("inline style in the page")
	}
	want := map[string]string{
		"/v1/docs/elements.js":     "text/javascript",
		"/v1/docs/elements.css":    "text/css",
		"/v1/docs/fontawesome.css": "text/css",
	}
	seen := map[string]bool{}
	for _, m := range attrURL.FindAllStringSubmatch(page, -1) {
		u := m[1]
		if u == "data:," { // the empty favicon: no request at all
			continue
		}
		if !strings.HasPrefix(u, "/") || strings.HasPrefix(u, "//") {
			t.Errorf("the page loads %q: not a same-origin path", u)
			continue
		}
		seen[u] = true
	}
	if !strings.Contains(page, `apiDescriptionUrl="/v1/openapi.json"`) {
		t.Error("the page does not render /v1/openapi.json")
	}
	for u, mt := range want {
		if !seen[u] {
			t.Errorf("the page does not load %s", u)
			continue
		}
		a := e.do("GET", u, "", nil).want(200)
		if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, mt+";") {
			t.Errorf("%s: Content-Type %q, want %s", u, ct, mt)
		}
		if a.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no X-Content-Type-Options: nosniff", u)
		}
		if len(a.body) < 1000 {
			t.Errorf("%s: %d bytes", u, len(a.body))
		}
		e.do("HEAD", u, "", nil).want(200)
	}
	for u := range seen {
		if _, ok := want[u]; !ok {
			t.Errorf("the page loads %s, which this test does not check", u)
		}
	}
	e.do("GET", "/v1/docs/nope.js", "", nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/docs/..%2fopenapi.json", "", nil).wantErr(404, "not_found", "")
}
