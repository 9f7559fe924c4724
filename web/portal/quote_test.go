package portal_test

import (
	"context"
	"html"
	"regexp"
	"testing"

	"tollgate/tenants"
	"tollgate/web/shellword/shelltest"
)

// TestPortalDocsCurlQuoted: the docs page's curl line, for a document whose path is shell
// code in every quoting style a shell has that the edge serves (it refuses spaces, so the
// commands are bare redirections that make a file: $() and backquotes run in POSIX shells,
// % is a job or %self in fish, ! expands in interactive bash and zsh, quotes end quoting),
// pasted into sh, bash, zsh and fish, calls curl with the header and the URL as they are
// and runs nothing else. A backslash, which breaks fish's single quotes, is a path the
// edge refuses with 400, so no example carries one (shellword's own tests cover it).
func TestPortalDocsCurlQuoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.tenant("acme", true)
	c := e.client("api.test")
	path := `/o';>pwned1;'/$(>pwned2)/` + "`>pwned3`" + `/'x';>pwned4;'/%25self/!!`
	doc := `{"openapi":"3.0.3","info":{"title":"T","version":"1"},"paths":{"` + path +
		`":{"get":{"responses":{"200":{"description":"ok"}}}}}}`
	if err := e.db.SaveAPIDoc(context.Background(), a.ID, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	r := &tenants.Route{TenantID: a.ID, Name: "all", Paths: []string{"/"}, Auth: tenants.AuthKey,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "https://up.example.com"}}}}
	if err := e.db.CreateRoute(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	page := c.do("GET", "/portal/acme/", nil)
	m := regexp.MustCompile(`data-testid="curl">([^<]*)<`).FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no curl line on the docs page:\n%s", page.body)
	}
	line := html.UnescapeString(m[1])
	want := shelltest.Want("-i", "-H", "X-API-Key: YOUR_KEY", "http://acme.localhost:8000"+path)
	for _, sh := range shelltest.Shells {
		if got := shelltest.Curl(t, sh, line); got != want {
			t.Errorf("%s runs %s as curl %s, want %s", sh, line, got, want)
		}
	}
}
