package portal_test

import (
	"context"
	"html"
	"regexp"
	"testing"

	"tollgate/web/shellword/shelltest"
)

// TestPortalDocsCurlQuoted: the docs page's curl line, for a document whose path is shell
// code in every quoting style a shell has (\' breaks fish's single quotes, $() and backquotes run
// in POSIX shells, %self expands in fish, ! expands in interactive bash and zsh), pasted
// into sh, bash, zsh and fish, calls curl with the header and the URL as they are and runs
// nothing else.
func TestPortalDocsCurlQuoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.tenant("acme", true)
	c := e.client("api.test")
	path := `/o\';touch pwned1;\'/$(touch pwned2)/` + "`touch pwned3`" + `/'x';touch pwned4;'/%self/!!`
	doc := `{"openapi":"3.0.3","info":{"title":"T","version":"1"},"paths":{"` +
		`/o\\';touch pwned1;\\'/$(touch pwned2)/` + "`touch pwned3`" + `/'x';touch pwned4;'/%self/!!` +
		`":{"get":{"responses":{"200":{"description":"ok"}}}}}}`
	if err := e.db.SaveAPIDoc(context.Background(), a.ID, []byte(doc)); err != nil {
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
