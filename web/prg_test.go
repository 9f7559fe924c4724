package web_test

// Post/redirect/get: every form of the console answers 303 to a page, and what the page
// must show once (a refused form's values and messages, a new key) comes with the next
// GET only.

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	billingpg "tollgate/billing/postgres"
	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

// replayBacks are the pages a POST's refused form is shown again on, when it is not the
// POST's own path (web/flash.go's backs).
var replayBacks = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^(/console/t/[^/]+)/(members/[^/]+/(role|delete)|invites(/delete)?)$`), "$1/members"},
	{regexp.MustCompile(`^(/console/t/[^/]+/consumers/[^/]+)/(keys|plan)$`), "$1"},
	{regexp.MustCompile(`^/console/account/password$`), "/console/account"},
	{regexp.MustCompile(`^/console/verify/resend$`), "/console/account"},
	{regexp.MustCompile(`^(/console/t/[^/]+)/settings/delete$`), "$1/settings"},
	{regexp.MustCompile(`^(/console/t/[^/]+)/domains/[^/]+/verify$`), "$1/domains"},
	{regexp.MustCompile(`^/console/tenants$`), "/console/tenants/new"},
}

// isReplay reports whether a POST's 303 to location sends the browser to the page that
// shows the form again (rather than on, after a success).
func isReplay(postPath, location string) bool {
	if u, err := url.Parse(postPath); err == nil {
		postPath = u.Path
	}
	if location == postPath {
		return true
	}
	if strings.HasPrefix(postPath, "/console/invites/") && strings.HasPrefix(location, "/console/invites/accept?token=") {
		return true
	}
	for _, b := range replayBacks {
		if b.re.MatchString(postPath) && location == b.re.ReplaceAllString(postPath, b.repl) {
			return true
		}
	}
	return false
}

// fullConsole is a console with every service, as `tollgate serve` mounts it.
func fullConsole(t *testing.T) *consoleEnv {
	t.Helper()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	c := web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db, Plans: db, JWTIssuers: db, AccessRules: db,
		Tokens: db, Domains: db, Usage: billingpg.New(db.Pool()), Mailer: mail.Mailer(t), PublicURL: "https://console.tollgate.test"})
	app := fiber.New(fiber.Config{Immutable: true})
	c.Mount(app)
	return &consoleEnv{t: t, app: app, db: db, mail: mail}
}

// raw posts without following anything.
func (e *consoleEnv) raw(p person, path string, form url.Values) page {
	e.t.Helper()
	return e.call(p, http.MethodPost, path, form)
}

// TestEveryFormRedirects walks every POST route of the console, with a form it refuses
// (empty fields) and one without its CSRF token: the first answers 303 to a page of the
// console, the second 403, and neither draws a page in answer to the POST.
func TestEveryFormRedirects(t *testing.T) {
	e := fullConsole(t)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	tn, err := e.db.FindTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	r := &tenants.Route{TenantID: tn.ID, Name: "hello", Paths: []string{"/hello"}, Auth: tenants.AuthKey,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "https://api.example.com", Weight: 1}}}}
	cs := &tenants.Consumer{TenantID: tn.ID, Name: "app"}
	pl := &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold"}
	is := &tenants.Issuer{TenantID: tn.ID, Issuer: "https://idp.example.com", Audiences: []string{"api"}, HS256Secret: strings.Repeat("s", 32)}
	for _, err := range []error{e.db.CreateRoute(ctx, r), e.db.CreateConsumer(ctx, cs), e.db.CreatePlan(ctx, pl), e.db.CreateJWTIssuer(ctx, is)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	_, hash, display := tenants.NewSecret(tenants.KeyPrefix)
	k := &tenants.Key{TenantID: tn.ID, ConsumerID: cs.ID, Prefix: display, Hash: hash}
	if err := e.db.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	params := map[string]string{":slug": "acme", ":key_id": k.ID, ":user_id": owner.id}
	idOf := map[string]string{"routes": r.ID, "consumers": cs.ID, "plans": pl.ID, "jwt-issuers": is.ID}

	var paths []string
	for _, rt := range e.app.GetRoutes(true) {
		if rt.Method == fiber.MethodPost && strings.HasPrefix(rt.Path, web.Prefix+"/") && !strings.Contains(rt.Path, "*") {
			paths = append(paths, rt.Path)
		}
	}
	// Deletions and signing out last: they take away what the others use.
	sort.SliceStable(paths, func(i, j int) bool { return weight(paths[i]) < weight(paths[j]) })
	if len(paths) < 30 {
		t.Fatalf("only %d POST routes found: %v", len(paths), paths)
	}
	for _, pattern := range paths {
		segs := strings.Split(pattern, "/")
		known := true
		for i, s := range segs {
			switch {
			case s == ":id" && i > 0:
				if id, ok := idOf[segs[i-1]]; ok {
					segs[i] = id
				} else {
					known = false
				}
			case strings.HasPrefix(s, ":"):
				if v, ok := params[s]; ok {
					segs[i] = v
				} else {
					known = false
				}
			}
		}
		path := strings.Join(segs, "/")
		forged := e.raw(owner, path, url.Values{"_csrf": {"forged"}})
		if forged.status != http.StatusForbidden {
			t.Errorf("POST %s with a forged CSRF token: %d, want 403", path, forged.status)
		}
		pg := e.raw(owner, path, url.Values{"_csrf": {owner.csrf}})
		if pg.status == http.StatusNotFound && strings.Contains(pg.body, "There is nothing here") {
			// An error page is drawn at once (there is no form to keep): here a parameter
			// this test cannot fill, or a feature this console is not given.
			t.Logf("POST %s: 404 (known parameters: %v)", path, known)
			continue
		}
		if pg.status != http.StatusSeeOther || !strings.HasPrefix(pg.location, web.Prefix+"/") {
			t.Errorf("POST %s: %d (Location %q), want 303 to a console page\n%s", path, pg.status, pg.location, pg.body)
		}
	}
}

func weight(path string) int {
	switch {
	case strings.HasSuffix(path, "/logout"):
		return 3
	case strings.HasSuffix(path, "/delete") && !strings.Contains(path, "/keys/"):
		return 2
	case strings.Contains(path, "/delete"):
		return 1
	}
	return 0
}

// TestNewKeyShownOnce: the key's plaintext comes with the GET after the POST, once, and
// never in a URL; a refused key form comes back with its values and messages.
func TestNewKeyShownOnce(t *testing.T) {
	e := fullConsole(t)
	owner := e.signUp("acme", true)
	tn, _ := e.db.FindTenant(context.Background(), "acme")
	cs := &tenants.Consumer{TenantID: tn.ID, Name: "app"}
	if err := e.db.CreateConsumer(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	base := "/console/t/acme/consumers/" + cs.ID
	expires := time.Now().UTC().AddDate(0, 1, 0).Format(time.DateOnly)
	pg := e.raw(owner, base+"/keys", url.Values{"_csrf": {owner.csrf}, "label": {"ci"}, "expires": {expires}})
	if pg.status != http.StatusSeeOther || pg.location != base || strings.Contains(pg.body, "tg_") {
		t.Fatalf("create key: %d %q\n%s", pg.status, pg.location, pg.body)
	}
	shown := e.get(owner, base)
	m := regexp.MustCompile(`id="new-key">(tg_[^<]+)<`).FindStringSubmatch(shown.body)
	if shown.status != http.StatusOK || m == nil {
		t.Fatalf("the page after creating a key: %d\n%s", shown.status, shown.body)
	}
	keys, _, _ := e.db.ListKeys(context.Background(), tn.ID, cs.ID, tenants.Page{})
	if len(keys) != 1 || keys[0].Label != "ci" || keys[0].ExpiresAt == nil || keys[0].ExpiresAt.Format(time.DateOnly) != expires || keys[0].Hash != tenants.HashSecret(m[1]) {
		t.Fatalf("stored keys: %+v", keys)
	}
	if !strings.Contains(shown.body, ">ci<") || !strings.Contains(shown.body, expires+" 00:00 UTC") {
		t.Errorf("the key list does not show the label and expiry:\n%s", shown.body)
	}
	if again := e.get(owner, base); strings.Contains(again.body, m[1]) || again.status != http.StatusOK {
		t.Fatalf("the key is shown again on reload (%d)", again.status)
	}

	// Refused: a day already past. Nothing is created; the form comes back once, with its
	// values and the message at the field.
	pg = e.raw(owner, base+"/keys", url.Values{"_csrf": {owner.csrf}, "label": {"bad"}, "expires": {"2001-01-01"}})
	if pg.status != http.StatusSeeOther || pg.location != base {
		t.Fatalf("refused key: %d %q", pg.status, pg.location)
	}
	back := e.get(owner, base)
	if back.status != http.StatusUnprocessableEntity || !strings.Contains(back.body, `id="expires-error"`) || !strings.Contains(back.body, `value="bad"`) || !strings.Contains(back.body, `value="2001-01-01"`) {
		t.Fatalf("the refused form: %d\n%s", back.status, back.body)
	}
	if pg := e.post(owner, base+"/keys", url.Values{"expires": {"next week"}}); pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, "YYYY-MM-DD") {
		t.Errorf("an unreadable day: %d", pg.status)
	}
	if keys, _, _ := e.db.ListKeys(context.Background(), tn.ID, cs.ID, tenants.Page{}); len(keys) != 1 {
		t.Fatalf("refused forms created keys: %d", len(keys))
	}
	if fresh := e.get(owner, base); fresh.status != http.StatusOK || strings.Contains(fresh.body, `id="expires-error"`) {
		t.Fatalf("the refused form is shown twice: %d", fresh.status)
	}
}

// TestSignedOutPageAsksToSignIn: a console page asked for signed out leads to the sign-in
// page with next=, and signing in there goes back to it.
func TestSignedOutPageAsksToSignIn(t *testing.T) {
	e := newIDEnv(t, web.Limits{})
	c := e.client("198.51.100.77")
	c.signUp("nia@example.com", "nia")
	want := "/console/t/nia/usage?from=2026-01-01&to=2026-01-31"
	p := c.get(want)
	if p.status != http.StatusSeeOther || p.location != "/console/login?next="+url.QueryEscape(want) {
		t.Fatalf("signed out: %d %q", p.status, p.location)
	}
	login := c.get(p.location)
	if !strings.Contains(login.body, `name="next" value="`+strings.ReplaceAll(want, "&", "&amp;")+`"`) {
		t.Fatalf("the sign-in form does not carry next:\n%s", login.body)
	}
	// A wrong password shows the form again, next kept; the right one goes there.
	if p := c.do(http.MethodPost, "/console/login", url.Values{"_csrf": {c.csrf}, "email": {"nia@example.com"}, "password": {"wrong wrong wrong"}, "next": {want}}); p.status != http.StatusUnauthorized ||
		!strings.Contains(p.body, `name="next" value="`+strings.ReplaceAll(want, "&", "&amp;")+`"`) {
		t.Fatalf("wrong password: %d\n%s", p.status, p.body)
	}
	if p := c.do(http.MethodPost, "/console/login", url.Values{"_csrf": {c.csrf}, "email": {"nia@example.com"}, "password": {idPassword}, "next": {want}}); p.status != http.StatusSeeOther || p.location != want {
		t.Fatalf("sign-in: %d %q", p.status, p.location)
	}
	// Somewhere else is refused: the console's home instead.
	for _, next := range []string{"//evil.example/", "/\\evil.example", "https://evil.example/console/", "/console/%2e%2e/v1", "%2F%2Fevil.example"} {
		c2 := e.client("198.51.100.78")
		c2.get("/console/login")
		p := c2.do(http.MethodPost, "/console/login", url.Values{"_csrf": {c2.csrf}, "email": {"nia@example.com"}, "password": {idPassword}, "next": {next}})
		if p.status != http.StatusSeeOther || p.location != "/console/" {
			t.Errorf("next=%q: %d %q", next, p.status, p.location)
		}
	}
}
