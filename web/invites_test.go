package web_test

// The invitation pages through the console's real handlers, on a real Postgres and a real
// SMTP server, without a browser: every way of opening or answering a link.

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
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

type consoleEnv struct {
	t    *testing.T
	app  *fiber.App
	db   *postgres.DB
	mail *smtptest.Server
}

func newConsole(t *testing.T) *consoleEnv {
	t.Helper()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	c := web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db,
		Mailer: mail.Mailer(t), PublicURL: "https://console.tollgate.test"})
	app := fiber.New(fiber.Config{Immutable: true})
	c.Mount(app)
	return &consoleEnv{t: t, app: app, db: db, mail: mail}
}

// person is a signed-in user of the console: its session cookie and CSRF token.
type person struct {
	email, id, cookie, csrf string
}

// signUp makes a user with a tenant of its own and a live session; verified marks its
// address as proven.
func (e *consoleEnv) signUp(name string, verified bool) person {
	e.t.Helper()
	ctx := context.Background()
	hash, _ := tenants.HashPassword("correct horse battery")
	u := &tenants.User{Email: name + "@example.com", PasswordHash: hash}
	if err := e.db.SignUp(ctx, u, &tenants.Tenant{Slug: name}); err != nil {
		e.t.Fatal(err)
	}
	if verified {
		e.verify(u.Email)
	}
	raw := "session-" + name + "-0123456789abcdef0123456789"
	s := &tenants.Session{Hash: tenants.HashSecret(raw), UserID: u.ID, CSRF: "csrf-" + name, ExpiresAt: time.Now().Add(time.Hour)}
	if err := e.db.CreateSession(ctx, s); err != nil {
		e.t.Fatal(err)
	}
	return person{email: u.Email, id: u.ID, cookie: tenants.SessionCookie + "=" + raw, csrf: s.CSRF}
}

func (e *consoleEnv) verify(email string) {
	e.t.Helper()
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE users SET email_verified_at = now() WHERE email = $1`, email); err != nil {
		e.t.Fatal(err)
	}
}

type page struct {
	status   int
	location string
	body     string
}

// get and post call the console as p (zero person: signed out).
func (e *consoleEnv) get(p person, path string) page {
	e.t.Helper()
	return e.call(p, http.MethodGet, path, nil)
}

func (e *consoleEnv) post(p person, path string, form url.Values) page {
	e.t.Helper()
	if _, ok := form["_csrf"]; !ok {
		form.Set("_csrf", p.csrf)
	}
	pg := e.call(p, http.MethodPost, path, form)
	if pg.status == http.StatusSeeOther && isReplay(path, pg.location) {
		return e.call(p, http.MethodGet, pg.location, nil) // the form shown again, as a browser follows
	}
	return pg
}

func (e *consoleEnv) call(p person, method, path string, form url.Values) page {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if p.cookie != "" {
		req.Header.Set("Cookie", p.cookie)
	}
	res, err := e.app.Test(req, 30_000)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{status: res.StatusCode, location: res.Header.Get("Location"), body: string(b)}
}

// state is the invitation page's data-state.
func (pg page) state() string {
	m := regexp.MustCompile(`data-state="([a-z]+)"`).FindStringSubmatch(pg.body)
	if m == nil {
		return ""
	}
	return m[1]
}

// invite sends the invitation from the members page as p and returns the mailed link's
// path and query.
func (e *consoleEnv) invite(p person, slug, email, role string) string {
	e.t.Helper()
	pg := e.post(p, "/console/t/"+slug+"/invites", url.Values{"email": {email}, "role": {role}})
	if pg.status != http.StatusSeeOther || pg.location != "/console/t/"+slug+"/members?done=member-invited" {
		e.t.Fatalf("invite %s: %d %s\n%s", email, pg.status, pg.location, pg.body)
	}
	m := e.mail.WaitFor(e.t, email)
	link := smtptest.Link(e.t, m, "https://console.tollgate.test/console/invites/accept?token=")
	return strings.TrimPrefix(link, "https://console.tollgate.test")
}

func token(link string) string {
	u, _ := url.Parse(link)
	return u.Query().Get("token")
}

func (e *consoleEnv) isMember(slug, userID string) bool {
	e.t.Helper()
	t, err := e.db.FindTenant(context.Background(), slug)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = e.db.FindMembership(context.Background(), t.ID, userID)
	return err == nil
}

// TestInvitePages: only the signed-in, verified invited address sees the tenant and may
// answer; everyone else gets a page that tells them what to do and nothing about the
// invitation; a link works once.
func TestInvitePages(t *testing.T) {
	e := newConsole(t)
	owner := e.signUp("acme", true)
	dev := e.signUp("dev", false)
	other := e.signUp("other", true)
	link := e.invite(owner, "acme", "dev@example.com", "developer")
	tok := token(link)
	secret := func(pg page) {
		t.Helper()
		for _, leak := range []string{"acme", "developer", owner.email} {
			if strings.Contains(pg.body, leak) {
				t.Errorf("the %q page tells %q:\n%s", pg.state(), leak, pg.body)
			}
		}
	}

	// Signed out: sign in or sign up, and come back.
	pg := e.get(person{}, link)
	if pg.status != 200 || pg.state() != "signin" || !strings.Contains(strings.ToLower(pg.body), strings.ToLower("/console/login?next="+url.QueryEscape(link))) ||
		!strings.Contains(pg.body, "/console/signup?next=") {
		t.Errorf("signed out: %d %q\n%s", pg.status, pg.state(), pg.body)
	}
	secret(pg)

	// The invited address, not yet verified: verify first; accepting is refused too.
	pg = e.get(dev, link)
	if pg.status != 403 || pg.state() != "verify" || !strings.Contains(pg.body, "Verify your address first") {
		t.Errorf("unverified: %d %q\n%s", pg.status, pg.state(), pg.body)
	}
	secret(pg)
	if pg = e.post(dev, "/console/invites/accept", url.Values{"token": {tok}}); pg.status != 403 || pg.state() != "verify" {
		t.Errorf("unverified accepts: %d %q", pg.status, pg.state())
	}
	// Its button has the verification mail sent again.
	form := regexp.MustCompile(`<form method="post" action="([^"]+)">[^<]*<input type="hidden" name="_csrf" value="[^"]*">[^<]*<input type="hidden" name="next" value="([^"]*)">[^<]*<button type="submit" class="primary">Send the verification mail again`).FindStringSubmatch(e.get(dev, link).body)
	if form == nil {
		t.Fatal("the verify page has no resend form")
	}
	if pg = e.post(dev, form[1], url.Values{"next": {html.UnescapeString(form[2])}}); pg.status != 303 {
		t.Errorf("resend from the invitation page: %d\n%s", pg.status, pg.body)
	}
	verifyLink := smtptest.Link(t, e.mail.WaitFor(t, dev.email), "https://console.tollgate.test/console/verify?")
	if u, _ := url.Parse(verifyLink); u.Query().Get("next") != link {
		t.Errorf("the verification link %s does not lead back to the invitation %s", verifyLink, link)
	}

	// Another verified address: refused, told nothing, and the invite stays.
	pg = e.get(other, link)
	if pg.status != 403 || pg.state() != "other" || !strings.Contains(pg.body, "another address") {
		t.Errorf("another address: %d %q\n%s", pg.status, pg.state(), pg.body)
	}
	secret(pg)
	for _, action := range []string{"accept", "decline"} {
		if pg = e.post(other, "/console/invites/"+action, url.Values{"token": {tok}}); pg.status != 403 || pg.state() != "other" {
			t.Errorf("another address posts %s: %d %q", action, pg.status, pg.state())
		}
		secret(pg)
	}
	if e.isMember("acme", dev.id) || e.isMember("acme", other.id) {
		t.Fatal("a refusal made a member")
	}

	// Verified now: the offer, with Accept and Decline.
	e.verify(dev.email)
	pg = e.get(dev, link)
	if pg.status != 200 || pg.state() != "offer" || !strings.Contains(pg.body, "acme") || !strings.Contains(pg.body, "developer") ||
		!strings.Contains(pg.body, `action="/console/invites/accept"`) || !strings.Contains(pg.body, `action="/console/invites/decline"`) {
		t.Errorf("offer: %d %q\n%s", pg.status, pg.state(), pg.body)
	}
	// A forged form (no CSRF token, or another session's) does nothing.
	if pg = e.post(dev, "/console/invites/accept", url.Values{"token": {tok}, "_csrf": {""}}); pg.status != 403 {
		t.Errorf("accept without CSRF: %d", pg.status)
	}
	if pg = e.post(dev, "/console/invites/accept", url.Values{"token": {tok}, "_csrf": {other.csrf}}); pg.status != 403 {
		t.Errorf("accept with another session's CSRF: %d", pg.status)
	}
	if e.isMember("acme", dev.id) {
		t.Fatal("a forged form made a member")
	}
	pg = e.post(dev, "/console/invites/accept", url.Values{"token": {tok}})
	if pg.status != 303 || pg.location != "/console/t/acme/routes?done=invite-accepted" {
		t.Fatalf("accept: %d %s\n%s", pg.status, pg.location, pg.body)
	}
	if !e.isMember("acme", dev.id) {
		t.Fatal("accepting made no member")
	}
	if pg = e.get(dev, "/console/t/acme/routes?done=invite-accepted"); pg.status != 200 || !strings.Contains(pg.body, "Invitation accepted") {
		t.Errorf("the tenant after accepting: %d\n%s", pg.status, pg.body)
	}

	// Once.
	if pg = e.get(dev, link); pg.status != 404 || pg.state() != "gone" {
		t.Errorf("the used link: %d %q", pg.status, pg.state())
	}
	if pg = e.post(dev, "/console/invites/accept", url.Values{"token": {tok}}); pg.status != 404 || pg.state() != "gone" {
		t.Errorf("accepting twice: %d %q", pg.status, pg.state())
	}
	if pg = e.get(dev, "/console/invites/accept?token=tgi_guessed"); pg.status != 404 || pg.state() != "gone" {
		t.Errorf("a guessed link: %d %q", pg.status, pg.state())
	}

	audit, _, err := e.db.ListAudit(context.Background(), mustTenant(t, e, "acme"), tenants.AuditQuery{Page: tenants.Page{Limit: 50}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range audit {
		got = append(got, a.Actor+" "+a.Action+" "+a.Object)
	}
	for _, want := range []string{"acme@example.com invites.create dev@example.com", "dev@example.com invites.accept dev@example.com", "dev@example.com members.create " + dev.id} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("audit lacks %q: %q", want, got)
		}
	}
}

func mustTenant(t *testing.T, e *consoleEnv, slug string) string {
	t.Helper()
	tn, err := e.db.FindTenant(context.Background(), slug)
	if err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

// TestInviteLinkLifecycle: withdrawn, replaced and expired links are dead; declining ends
// the invitation without a membership; the members page lists pending invitations with
// their expiry and a withdraw button, and answers the same for addresses with and without
// an account.
func TestInviteLinkLifecycle(t *testing.T) {
	e := newConsole(t)
	owner := e.signUp("acme", true)
	admin := e.signUp("helper", true)
	guest := e.signUp("guest", true)
	e.signUp("known", true)

	// An admin (not an owner) may invite, but not an owner.
	e.post(admin, "/console/invites/accept", url.Values{"token": {token(e.invite(owner, "acme", "helper@example.com", "admin"))}})
	if !e.isMember("acme", admin.id) {
		t.Fatal("helper did not join")
	}
	pg := e.post(admin, "/console/t/acme/invites", url.Values{"email": {"boss@example.com"}, "role": {"owner"}})
	if pg.status != 403 || !strings.Contains(pg.body, "Only an owner may invite an owner") {
		t.Errorf("an admin invites an owner: %d\n%s", pg.status, pg.body)
	}
	e.mail.NoMoreFor(t, "boss@example.com", 0)
	if pg = e.get(admin, "/console/t/acme/members"); strings.Contains(pg.body, `<option value="owner"`) {
		t.Errorf("the admin's invite form offers the owner role")
	}
	if pg = e.post(owner, "/console/t/acme/invites", url.Values{"email": {"helper@example.com"}, "role": {"viewer"}}); pg.status != 409 || !strings.Contains(pg.body, "already a member") {
		t.Errorf("inviting a member: %d", pg.status)
	}

	// Known and unknown addresses: the same redirect, the same flash, the same row.
	for _, addr := range []string{"known@example.com", "nobody@example.com"} {
		e.invite(owner, "acme", addr, "viewer")
	}
	pg = e.get(owner, "/console/t/acme/members?done=member-invited")
	if !strings.Contains(pg.body, "Invitation sent.") || strings.Contains(pg.body, "account") && strings.Contains(pg.body, "has an account") {
		t.Errorf("the flash: %s", pg.body)
	}
	rows := regexp.MustCompile(`(?s)<tr>\s*<td>(known|nobody)@example.com</td>.*?</tr>`).FindAllString(pg.body, -1)
	if len(rows) != 2 || strings.ReplaceAll(rows[0], "known", "X") != strings.ReplaceAll(rows[1], "nobody", "X") {
		t.Errorf("invite rows differ:\n%q", rows)
	}

	// A viewer sees the members, not who is invited (the API's invites list is for
	// tenant admins too).
	viewer := e.signUp("viewer", true)
	e.post(viewer, "/console/invites/accept", url.Values{"token": {token(e.invite(owner, "acme", "viewer@example.com", "viewer"))}})
	if pg = e.get(viewer, "/console/t/acme/members"); pg.status != 200 || !strings.Contains(pg.body, "helper@example.com") || strings.Contains(pg.body, "nobody@example.com") {
		t.Errorf("the viewer's members page: %d\n%s", pg.status, pg.body)
	}

	// Withdrawn.
	link := e.invite(owner, "acme", "guest@example.com", "viewer")
	if pg = e.post(owner, "/console/t/acme/invites/delete", url.Values{"email": {"guest@example.com"}}); pg.status != 303 {
		t.Fatalf("withdraw: %d", pg.status)
	}
	if pg = e.get(guest, link); pg.status != 404 || pg.state() != "gone" {
		t.Errorf("withdrawn link: %d %q", pg.status, pg.state())
	}

	// Replaced: the first link is dead, the second works.
	first := e.invite(owner, "acme", "guest@example.com", "viewer")
	second := e.invite(owner, "acme", "guest@example.com", "developer")
	if pg = e.post(guest, "/console/invites/accept", url.Values{"token": {token(first)}}); pg.status != 404 {
		t.Errorf("the replaced link: %d %q", pg.status, pg.state())
	}

	// Expired: a clear page, refused, and listed as expired for the owner to send again.
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE invites SET expires_at = now() - interval '1 minute' WHERE email = 'guest@example.com'`); err != nil {
		t.Fatal(err)
	}
	if pg = e.get(guest, second); pg.status != 404 || pg.state() != "expired" {
		t.Errorf("expired link: %d %q", pg.status, pg.state())
	}
	if pg = e.post(guest, "/console/invites/accept", url.Values{"token": {token(second)}}); pg.status != 404 || pg.state() != "expired" {
		t.Errorf("accepting an expired link: %d %q", pg.status, pg.state())
	}
	if pg = e.get(owner, "/console/t/acme/members"); !strings.Contains(pg.body, "expired ") || !strings.Contains(pg.body, "Send again") {
		t.Errorf("the members page does not show the expired invitation:\n%s", pg.body)
	}

	// Declined.
	third := e.invite(owner, "acme", "guest@example.com", "viewer")
	if pg = e.post(guest, "/console/invites/decline", url.Values{"token": {token(third)}}); pg.status != 200 || pg.state() != "declined" {
		t.Errorf("decline: %d %q", pg.status, pg.state())
	}
	if pg = e.get(guest, third); pg.status != 404 {
		t.Errorf("the declined link: %d", pg.status)
	}
	if e.isMember("acme", guest.id) {
		t.Error("declining made a member")
	}
}

// TestSignInReturns: signing in or up from the invitation page comes back to it; a next
// that leaves the console is ignored.
func TestSignInReturns(t *testing.T) {
	e := newConsole(t)
	owner := e.signUp("acme", true)
	link := e.invite(owner, "acme", "dev@example.com", "developer")
	hash, _ := tenants.HashPassword("correct horse battery")
	if err := e.db.SignUp(context.Background(), &tenants.User{Email: "dev@example.com", PasswordHash: hash}, &tenants.Tenant{Slug: "dev"}); err != nil {
		t.Fatal(err)
	}
	login := func(next string) page {
		t.Helper()
		pg := e.get(person{}, "/console/login?next="+url.QueryEscape(next))
		csrf := regexp.MustCompile(`name="_csrf" value="([^"]+)"`).FindStringSubmatch(pg.body)
		if csrf == nil {
			t.Fatalf("login page: %s", pg.body)
		}
		p := person{cookie: "tollgate_csrf=" + csrf[1], csrf: csrf[1]}
		return e.post(p, "/console/login", url.Values{"email": {"dev@example.com"}, "password": {"correct horse battery"}, "next": {next}})
	}
	if pg := login(link); pg.status != 303 || pg.location != link {
		t.Errorf("sign in from the invitation: %d %q, want %q", pg.status, pg.location, link)
	}
	for _, next := range []string{"https://evil.example/console/", "//evil.example/console/", "/console/../evil", "/\\evil.example", "javascript:alert(1)"} {
		if pg := login(next); pg.status != 303 || pg.location != "/console/" {
			t.Errorf("next %q: %d %q, want /console/", next, pg.status, pg.location)
		}
	}
}
