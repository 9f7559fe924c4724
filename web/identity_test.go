package web_test

// Sign-up, address verification, password reset, password change and sign-in throttling
// through the console's real handlers, on a real Postgres and a real SMTP server, without
// a browser: each client keeps its cookies and sends its own client address.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

const publicURL = "https://console.tollgate.test"

type idEnv struct {
	t    *testing.T
	app  *fiber.App
	db   *postgres.DB
	mail *smtptest.Server
}

func newIDEnv(t *testing.T, limits web.Limits) *idEnv {
	t.Helper()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	c := web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db,
		Mailer: mail.Mailer(t), PublicURL: publicURL, Limits: limits,
		// In-process requests come from 0.0.0.0: trusting it lets each client name its
		// address in X-Forwarded-For, as a load balancer would.
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32")}})
	app := fiber.New(fiber.Config{Immutable: true})
	c.Mount(app)
	return &idEnv{t: t, app: app, db: db, mail: mail}
}

// idClient is one browser: its cookies, the CSRF token of the last page and its address.
type idClient struct {
	e       *idEnv
	ip      string
	mu      sync.Mutex
	cookies map[string]string
	csrf    string
}

func (e *idEnv) client(ip string) *idClient {
	return &idClient{e: e, ip: ip, cookies: map[string]string{}}
}

type idPage struct {
	status   int
	location string
	body     string
	header   http.Header
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

func (c *idClient) do(method, target string, form url.Values) idPage {
	c.e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		target = u.RequestURI() // a mailed link: the same console, by path
	}
	req := httptest.NewRequest(method, target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("X-Forwarded-For", c.ip)
	c.mu.Lock()
	for k, v := range c.cookies {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	c.mu.Unlock()
	// Generous: concurrent sign-ins queue for the password hasher, which a race build on
	// a busy machine slows tenfold; the tests assert answers, not their speed.
	res, err := c.e.app.Test(req, 180_000)
	if err != nil {
		c.e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	c.mu.Lock()
	for _, ck := range res.Cookies() {
		if ck.Value == "" || (!ck.Expires.IsZero() && ck.Expires.Before(time.Now())) {
			delete(c.cookies, ck.Name)
		} else {
			c.cookies[ck.Name] = ck.Value
		}
	}
	if m := csrfRE.FindSubmatch(b); m != nil {
		c.csrf = string(m[1])
	}
	c.mu.Unlock()
	if loc := res.Header.Get("Location"); method == http.MethodPost && res.StatusCode == http.StatusSeeOther && isReplay(target, loc) {
		return c.do(http.MethodGet, loc, nil) // the form shown again, as a browser follows
	}
	return idPage{status: res.StatusCode, location: res.Header.Get("Location"), body: string(b), header: res.Header}
}

func (c *idClient) get(path string) idPage { c.e.t.Helper(); return c.do(http.MethodGet, path, nil) }

// post sends a form from the page at from (loaded first for its CSRF token).
func (c *idClient) post(from, path string, form url.Values) idPage {
	c.e.t.Helper()
	c.get(from)
	c.mu.Lock()
	form.Set("_csrf", c.csrf)
	c.mu.Unlock()
	return c.do(http.MethodPost, path, form)
}

const idPassword = "correct horse battery"

func (c *idClient) signUp(email, slug string) idPage {
	c.e.t.Helper()
	return c.post("/console/signup", "/console/signup", url.Values{"email": {email}, "password": {idPassword}, "slug": {slug}, "name": {"T " + slug}})
}

func (c *idClient) signIn(email, pw string) idPage {
	c.e.t.Helper()
	return c.post("/console/login", "/console/login", url.Values{"email": {email}, "password": {pw}})
}

// signedIn reports whether the client's session still opens the account page.
func (c *idClient) signedIn() bool {
	c.e.t.Helper()
	p := c.get("/console/account")
	return p.status == http.StatusOK && strings.Contains(p.body, "Change your password")
}

func TestSignUpVerifiesTheAddressByMail(t *testing.T) {
	e := newIDEnv(t, web.Limits{})
	ann := e.client("198.51.100.1")
	p := ann.signUp("ann@example.com", "ann")
	if p.status != http.StatusOK || !strings.Contains(p.body, "Check your inbox") {
		t.Fatalf("sign-up: %d %s", p.status, p.body)
	}
	if ann.signedIn() {
		t.Fatal("sign-up signed the browser in")
	}
	msg := e.mail.WaitFor(t, "ann@example.com")
	link := smtptest.Link(t, msg, publicURL+"/console/verify?token=")
	// Unverified, the account signs in and runs its tenant, with the banner.
	if p := ann.signIn("ann@example.com", idPassword); p.status != http.StatusSeeOther {
		t.Fatalf("sign-in before verification: %d", p.status)
	}
	if p := ann.get("/console/t/ann/routes"); p.status != http.StatusOK || !strings.Contains(p.body, "verify-banner") {
		t.Fatalf("unverified tenant page: %d, banner %v", p.status, strings.Contains(p.body, "verify-banner"))
	}
	// The mailed link verifies; a second use is refused.
	if p := ann.get(link); p.status != http.StatusOK || !strings.Contains(p.body, "Address verified") {
		t.Fatalf("verify: %d %s", p.status, p.body)
	}
	if p := ann.get("/console/t/ann/routes"); strings.Contains(p.body, "verify-banner") {
		t.Fatal("the banner stays after verification")
	}
	if p := ann.get(link); p.status != http.StatusNotFound {
		t.Fatalf("the link worked twice: %d", p.status)
	}
	u, err := e.db.FindUserByEmail(context.Background(), "ann@example.com")
	if err != nil || !u.EmailVerified {
		t.Fatalf("%+v %v", u, err)
	}

	// An expired link is refused, and resend mails a fresh one that works.
	bob := e.client("198.51.100.2")
	bob.signUp("bob@example.com", "bob")
	e.mail.WaitFor(t, "bob@example.com")
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE user_tokens SET expires_at = now() - interval '1 s'
		WHERE user_id = (SELECT id FROM users WHERE email = 'bob@example.com')`); err != nil {
		t.Fatal(err)
	}
	bob.signIn("bob@example.com", idPassword)
	first := e.mail.To("bob@example.com")[0]
	if p := bob.get(smtptest.Link(t, first, publicURL+"/console/verify?")); p.status != http.StatusNotFound {
		t.Fatalf("an expired link: %d", p.status)
	}
	if p := bob.post("/console/account", "/console/verify/resend", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("resend: %d %s", p.status, p.body)
	}
	fresh := e.mail.WaitFor(t, "bob@example.com")
	if p := bob.get(smtptest.Link(t, fresh, publicURL+"/console/verify?")); p.status != http.StatusOK {
		t.Fatalf("a fresh link: %d %s", p.status, p.body)
	}
	// The verification mail carries no secret but the link, and the link's token is not
	// what the database keeps.
	tok, _ := url.Parse(smtptest.Link(t, fresh, publicURL))
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM user_tokens WHERE hash = $1`, tok.Query().Get("token")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the plaintext token is stored (%d rows, %v)", n, err)
	}
}

func TestSignUpAnswersAlikeForATakenAddress(t *testing.T) {
	e := newIDEnv(t, web.Limits{})
	owner := e.client("198.51.100.10")
	owner.signUp("cy@example.com", "cy")
	e.mail.WaitFor(t, "cy@example.com")

	// A stranger signs up with the taken address and with a new one: same status, same
	// page but for the address it names.
	stranger := e.client("203.0.113.7")
	taken := stranger.signUp("cy@example.com", "cy-two")
	fresh := stranger.signUp("dee@example.com", "dee")
	if taken.status != fresh.status || strings.ReplaceAll(taken.body, "cy@example.com", "X") != strings.ReplaceAll(fresh.body, "dee@example.com", "X") {
		t.Fatalf("answers differ:\ntaken %d %s\nnew %d %s", taken.status, taken.body, fresh.status, fresh.body)
	}
	if taken.header.Get("Set-Cookie") != "" && strings.Contains(taken.header.Get("Set-Cookie"), tenants.SessionCookie) {
		t.Fatal("a sign-up set a session")
	}
	note := e.mail.WaitFor(t, "cy@example.com")
	if !strings.Contains(note.Subject, "tried to sign up") || len(smtptest.Links(note)) == 0 || strings.Contains(note.Text, "token=") {
		t.Fatalf("the owner's note: %q\n%s", note.Subject, note.Text)
	}
	if _, err := e.db.FindTenant(context.Background(), "cy-two"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("a sign-up with a taken address created a tenant: %v", err)
	}
	if u, _ := e.db.FindUserByEmail(context.Background(), "cy@example.com"); !tenants.CheckPassword(u.PasswordHash, idPassword) {
		t.Fatal("the taken account's password changed")
	}
	// A taken slug is refused alike for both.
	a := stranger.signUp("cy@example.com", "dee")
	b := stranger.signUp("eve@example.com", "dee")
	if a.status != http.StatusUnprocessableEntity || a.status != b.status || !strings.Contains(a.body, `slug &#34;dee&#34; is taken`) || !strings.Contains(b.body, `slug &#34;dee&#34; is taken`) {
		t.Fatalf("taken slug: %d / %d\n%s", a.status, b.status, a.body)
	}
	e.mail.NoMoreFor(t, "cy@example.com", 200*time.Millisecond)
}

func TestPasswordResetEndsEverySession(t *testing.T) {
	e := newIDEnv(t, web.Limits{})
	one, two := e.client("198.51.100.20"), e.client("198.51.100.21")
	one.signUp("fay@example.com", "fay")
	e.mail.WaitFor(t, "fay@example.com")
	one.signIn("fay@example.com", idPassword)
	two.signIn("fay@example.com", idPassword)
	if !one.signedIn() || !two.signedIn() {
		t.Fatal("not signed in")
	}
	// Known and unknown addresses get the same answer; only the known one gets mail.
	anon := e.client("198.51.100.22")
	known := anon.post("/console/forgot", "/console/forgot", url.Values{"email": {"fay@example.com"}})
	unknown := anon.post("/console/forgot", "/console/forgot", url.Values{"email": {"gus@example.com"}})
	if known.status != http.StatusOK || known.status != unknown.status ||
		strings.ReplaceAll(known.body, "fay@example.com", "X") != strings.ReplaceAll(unknown.body, "gus@example.com", "X") {
		t.Fatalf("reset answers differ:\n%d %s\n%d %s", known.status, known.body, unknown.status, unknown.body)
	}
	e.mail.NoMoreFor(t, "gus@example.com", 100*time.Millisecond)
	msg := e.mail.WaitFor(t, "fay@example.com")
	link := smtptest.Link(t, msg, publicURL+"/console/reset?token=")
	token, _ := url.Parse(link)

	// The form refuses a short password and changes nothing.
	if p := anon.post(link, "/console/reset", url.Values{"token": {token.Query().Get("token")}, "password": {"short"}}); p.status != http.StatusUnprocessableEntity {
		t.Fatalf("short password: %d", p.status)
	}
	p := anon.post(link, "/console/reset", url.Values{"token": {token.Query().Get("token")}, "password": {"a brand new passphrase"}})
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/console/login") {
		t.Fatalf("reset: %d %s", p.status, p.location)
	}
	if one.signedIn() || two.signedIn() {
		t.Fatal("an old session survived the reset")
	}
	if p := anon.post(link, "/console/reset", url.Values{"token": {token.Query().Get("token")}, "password": {"yet another passphrase"}}); p.status != http.StatusNotFound {
		t.Fatalf("the reset link worked twice: %d", p.status)
	}
	if p := one.signIn("fay@example.com", idPassword); p.status != http.StatusUnauthorized {
		t.Fatalf("the old password: %d", p.status)
	}
	if p := one.signIn("fay@example.com", "a brand new passphrase"); p.status != http.StatusSeeOther {
		t.Fatalf("the new password: %d", p.status)
	}
	// Following the reset link proved the address.
	if u, _ := e.db.FindUserByEmail(context.Background(), "fay@example.com"); !u.EmailVerified {
		t.Fatal("a reset did not verify the address")
	}
}

func TestPasswordChangeEndsTheOtherSessions(t *testing.T) {
	e := newIDEnv(t, web.Limits{})
	here, there := e.client("198.51.100.30"), e.client("198.51.100.31")
	here.signUp("hal@example.com", "hal")
	here.signIn("hal@example.com", idPassword)
	there.signIn("hal@example.com", idPassword)
	if p := here.post("/console/account", "/console/account/password", url.Values{"current": {"wrong password!"}, "password": {"a brand new passphrase"}}); p.status != http.StatusUnprocessableEntity {
		t.Fatalf("wrong current password: %d", p.status)
	}
	if !there.signedIn() {
		t.Fatal("a refused change ended a session")
	}
	p := here.post("/console/account", "/console/account/password", url.Values{"current": {idPassword}, "password": {"a brand new passphrase"}})
	if p.status != http.StatusSeeOther || p.location != "/console/account?done=password-changed" {
		t.Fatalf("change: %d %s %s", p.status, p.location, p.body)
	}
	if !here.signedIn() {
		t.Fatal("the change ended its own session")
	}
	if there.signedIn() {
		t.Fatal("another session survived the change")
	}
	if p := there.signIn("hal@example.com", "a brand new passphrase"); p.status != http.StatusSeeOther {
		t.Fatalf("the new password: %d", p.status)
	}
}

func TestSignInThrottleHoldsUnderConcurrency(t *testing.T) {
	limits := web.Limits{Account: tenants.ThrottleRule{Limit: 5, Window: time.Hour, Backoff: time.Minute, MaxBackoff: time.Hour}}
	e := newIDEnv(t, limits)
	owner := e.client("198.51.100.40")
	owner.signUp("ivy@example.com", "ivy")

	// 50 wrong passwords at once from one address: 5 are checked, the others wait.
	attacker := e.client("203.0.113.66")
	attacker.get("/console/login")
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := attacker.do(http.MethodPost, "/console/login", url.Values{"_csrf": {attacker.csrf}, "email": {"ivy@example.com"}, "password": {"guess guess guess"}})
			mu.Lock()
			counts[p.status]++
			mu.Unlock()
			if p.status == http.StatusTooManyRequests && p.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		}()
	}
	wg.Wait()
	if counts[http.StatusUnauthorized] != 5 || counts[http.StatusTooManyRequests] != 45 {
		t.Fatalf("50 concurrent wrong sign-ins: %v, want 5×401 and 45×429", counts)
	}
	// Even the right password waits, from the attacker's address…
	if p := attacker.signIn("ivy@example.com", idPassword); p.status != http.StatusTooManyRequests {
		t.Fatalf("the attacker's address is not throttled: %d", p.status)
	}
	// …but the owner, from their own address, is not locked out.
	if p := owner.signIn("ivy@example.com", idPassword); p.status != http.StatusSeeOther {
		t.Fatalf("the owner was locked out by a stranger: %d %s", p.status, p.body)
	}
}

func TestSignUpAndResetRequestsAreThrottledPerAddress(t *testing.T) {
	e := newIDEnv(t, web.Limits{SignUp: tenants.ThrottleRule{Limit: 2, Window: time.Hour}, Mail: tenants.ThrottleRule{Limit: 2, Window: time.Hour}})
	c := e.client("203.0.113.80")
	for i, slug := range []string{"s-one", "s-two"} {
		if p := c.signUp(slug+"@example.com", slug); p.status != http.StatusOK {
			t.Fatalf("sign-up %d: %d", i+1, p.status)
		}
	}
	p := c.signUp("s-three@example.com", "s-three")
	if p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") == "" {
		t.Fatalf("third sign-up: %d %q", p.status, p.header.Get("Retry-After"))
	}
	if _, err := e.db.FindTenant(context.Background(), "s-three"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatal("a throttled sign-up created its tenant")
	}
	if p := e.client("203.0.113.81").signUp("s-three@example.com", "s-three"); p.status != http.StatusOK {
		t.Fatalf("another address: %d", p.status)
	}
	for range 2 {
		c.post("/console/forgot", "/console/forgot", url.Values{"email": {"s-one@example.com"}})
	}
	if p := c.post("/console/forgot", "/console/forgot", url.Values{"email": {"s-one@example.com"}}); p.status != http.StatusTooManyRequests {
		t.Fatalf("third reset request: %d", p.status)
	}
}

// TestSignInThrottleIsSharedByReplicas: two consoles (two api replicas) over one database;
// concurrent wrong sign-ins spread over both pass the account's limit no more often than
// on one.
func TestSignInThrottleIsSharedByReplicas(t *testing.T) {
	e := newIDEnv(t, web.Limits{Account: tenants.ThrottleRule{Limit: 4, Window: time.Hour, Backoff: time.Minute, MaxBackoff: time.Hour}})
	e.client("198.51.100.50").signUp("joy@example.com", "joy")
	second := web.New(web.Config{Tenants: e.db, Routes: e.db, Consumers: e.db, People: e.db, Audit: e.db,
		Mailer: e.mail.Mailer(t), PublicURL: publicURL,
		Limits:         web.Limits{Account: tenants.ThrottleRule{Limit: 4, Window: time.Hour, Backoff: time.Minute, MaxBackoff: time.Hour}},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32")}})
	app2 := fiber.New(fiber.Config{Immutable: true})
	second.Mount(app2)
	replicas := []*idEnv{e, {t: t, app: app2, db: e.db, mail: e.mail}}

	attackers := []*idClient{replicas[0].client("203.0.113.90"), replicas[1].client("203.0.113.90")}
	for _, a := range attackers {
		a.get("/console/login")
	}
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := attackers[i%2]
			p := a.do(http.MethodPost, "/console/login", url.Values{"_csrf": {a.csrf}, "email": {"joy@example.com"}, "password": {"guess guess guess"}})
			mu.Lock()
			counts[p.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[http.StatusUnauthorized] != 4 || counts[http.StatusTooManyRequests] != 36 {
		t.Fatalf("40 wrong sign-ins over two replicas: %v, want 4×401 and 36×429", counts)
	}
}

// TestThrottleCountsTheAddressTheProxySaw: a client that writes its own X-Forwarded-For
// entries in front of the one the trusted proxy appended still counts as that address.
func TestThrottleCountsTheAddressTheProxySaw(t *testing.T) {
	e := newIDEnv(t, web.Limits{SignIn: tenants.ThrottleRule{Limit: 3, Window: time.Hour}})
	statuses := []int{}
	for i := range 5 {
		c := e.client("10.9.8." + itoa(i) + ", 192.0.2." + itoa(i) + ", 203.0.113.99")
		statuses = append(statuses, c.signIn("nobody@example.com", "whatever whatever").status)
	}
	if want := []int{401, 401, 401, 429, 429}; !slices.Equal(statuses, want) {
		t.Fatalf("forged X-Forwarded-For prefixes: %v, want %v", statuses, want)
	}
	if p := e.client("203.0.113.100").signIn("nobody@example.com", "whatever whatever"); p.status != http.StatusUnauthorized {
		t.Fatalf("another address: %d", p.status)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
