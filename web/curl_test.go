package web_test

// The commands the console shows for copying, rendered through the real handlers on a
// real Postgres for a tenant whose route path and consumer name are hostile, then run by
// real shells (sh, bash, zsh, fish): the values reach the command as single arguments and nothing else runs.

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/web"
	"tollgate/web/shellword/shelltest"
)

// hostilePath is a valid route path (every byte is an RFC 3986 pchar) that is shell code
// when pasted unquoted: it creates directories named pwnd.
const hostilePath = "/a;mkdir$IFS'pwnd1';$(mkdir$IFS'pwnd2')&&x=*"

func TestCopiedCommandsAreShellQuoted(t *testing.T) {
	path := hostilePath
	if err := tenants.ValidatePath(path); err != nil {
		t.Fatalf("the hostile path must be one a tenant can save: %v", err)
	}
	ctx := context.Background()
	db, _ := pgtest.Open(t)
	app := fiber.New(fiber.Config{Immutable: true})
	web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db, EdgeDomain: "edge.test", EdgePort: "8000"}).Mount(app)

	hash, _ := tenants.HashPassword("correct horse battery")
	u := &tenants.User{Email: "owner@example.com", PasswordHash: hash}
	tn := &tenants.Tenant{Slug: "acme"}
	if err := db.SignUp(ctx, u, tn); err != nil {
		t.Fatal(err)
	}
	raw := "session-quote-0123456789abcdef0123456789"
	if err := db.CreateSession(ctx, &tenants.Session{Hash: tenants.HashSecret(raw), UserID: u.ID, CSRF: "csrf-quote", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	r := &tenants.Route{TenantID: tn.ID, Name: "x'; mkdir pwnd3 #", Paths: []string{path}, Auth: tenants.AuthKey,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "https://api.example.com"}}}}
	if err := db.CreateRoute(ctx, r); err != nil {
		t.Fatal(err)
	}
	c := &tenants.Consumer{TenantID: tn.ID, Name: "$(mkdir pwnd4) `mkdir pwnd5` 'q"}
	if err := db.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}

	var call func(method, target string, form url.Values) string
	call = func(method, target string, form url.Values) string {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req := httptest.NewRequest(method, target, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("Cookie", tenants.SessionCookie+"="+raw)
		res, err := app.Test(req, 30_000)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if loc := res.Header.Get("Location"); method == http.MethodPost && res.StatusCode == http.StatusSeeOther && isReplay(target, loc) {
			return call(http.MethodGet, loc, nil) // the page after the form, as a browser follows
		}
		if res.StatusCode >= 300 {
			t.Fatalf("%s %s: %d\n%s", method, target, res.StatusCode, b)
		}
		return string(b)
	}
	command := regexp.MustCompile(`curl -i[^<]*`)
	routes := call(http.MethodGet, "/console/t/acme/routes", nil)
	keyPage := call(http.MethodPost, "/console/t/acme/consumers/"+c.ID+"/keys", url.Values{"_csrf": {"csrf-quote"}})
	key := regexp.MustCompile(`<code id="new-key">([^<]+)</code>`).FindStringSubmatch(keyPage)
	if key == nil {
		t.Fatalf("the key page shows no new key:\n%s", keyPage)
	}
	url := "http://acme.edge.test:8000" + path
	for _, tc := range []struct {
		page string
		want []string
	}{
		{routes, []string{"-i", url}},
		{keyPage, []string{"-i", "-H", "X-API-Key: " + key[1], url}},
	} {
		m := command.FindString(tc.page)
		if m == "" {
			t.Fatalf("no curl command on the page:\n%s", tc.page)
		}
		cmd := html.UnescapeString(m)
		for _, sh := range shelltest.Shells {
			if got, want := shelltest.Curl(t, sh, cmd), shelltest.Want(tc.want...); got != want {
				t.Errorf("%s runs %s as curl %s, want %s", sh, cmd, got, want)
			}
		}
	}
}
