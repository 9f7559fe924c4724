package e2e

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"tollgate/infra/testenv"
	"tollgate/tenants/smtp/smtptest"
)

// person is someone using the console of a real api process with a browser's cookie jar.
type person struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newPerson(t *testing.T, base string) *person {
	jar, _ := cookiejar.New(nil)
	return &person{t: t, base: base, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// page fetches a console page (following redirects) and returns its final path, status
// and body.
func (p *person) page(path string) (string, int, string) {
	p.t.Helper()
	res, err := p.hc.Get(p.base + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.Request.URL.RequestURI(), res.StatusCode, string(b)
}

// submit posts a form the way the page at from does: with the CSRF token that page carries.
func (p *person) submit(from, action string, form url.Values) (string, int, string) {
	p.t.Helper()
	_, _, body := p.page(from)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		p.t.Fatalf("no CSRF token on %s:\n%s", from, body)
	}
	form.Set("_csrf", m[1])
	res, err := p.hc.PostForm(p.base+action, form)
	if err != nil {
		p.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.Request.URL.RequestURI(), res.StatusCode, string(b)
}

func (p *person) signIn(email, password string) {
	p.t.Helper()
	if at, st, body := p.submit("/console/login", "/console/login", url.Values{"email": {email}, "password": {password}}); st != 200 || strings.HasPrefix(at, "/console/login") {
		p.t.Fatalf("sign in %s: %d at %s\n%s", email, st, at, body)
	}
}

// mailedLink waits for mail to the address that carries a link under prefix (passing
// over other mail) and returns the link's path and query.
func mailedLink(t *testing.T, mail *smtptest.Server, to, base, prefix string) string {
	t.Helper()
	for {
		m := mail.WaitFor(t, to) // fails the test after 10 s without new mail
		for _, l := range smtptest.Links(m) {
			if strings.HasPrefix(l, base+prefix) {
				return strings.TrimPrefix(l, base)
			}
		}
	}
}

// TestInviteAddressSquatter: Eve signs up with the victim's address (she cannot read its
// mail, so it stays unverified) and, given the invitation link the tenant mails to that
// address, still cannot take the role. The address's owner proves it with a password reset
// (which ends Eve's session), signs in, and accepts; the link then works for nobody.
func TestInviteAddressSquatter(t *testing.T) {
	mail := smtptest.StartWith(t, smtptest.Options{NoTLS: true}) // the binary does not trust the test CA
	s := newStack(t)
	_, api := s.startAPI("TOLLGATE_SMTP_URL=" + mail.URL)
	suffix := testenv.Name("")[:6]
	slug, victim := "bank-"+suffix, "cfo-"+suffix+"@example.com"
	api.createTenant(slug)
	const evePassword, ownerPassword = "eve's own password", "the owner's new password"

	eve := newPerson(t, api.base)
	if _, st, body := eve.submit("/console/signup", "/console/signup", url.Values{"email": {victim}, "password": {evePassword}, "slug": {"eve-" + suffix}}); st != 200 || !strings.Contains(body, "Check your inbox") {
		t.Fatalf("Eve's sign-up: %d\n%s", st, body)
	}
	eve.signIn(victim, evePassword)

	api.must(201, "POST", "/v1/tenants/"+slug+"/invites", map[string]any{"email": victim, "role": "admin"})
	link := mailedLink(t, mail, victim, api.base, "/console/invites/accept?token=")
	tok, _ := url.Parse(link)

	// Eve has the link (say it leaked) and an account with the address: not enough.
	if _, st, body := eve.page(link); st != 403 || !strings.Contains(body, "Verify your address first") || strings.Contains(body, slug) {
		t.Errorf("Eve opens the link: %d\n%s", st, body)
	}
	if _, st, _ := eve.submit(link, "/console/invites/accept", url.Values{"token": {tok.Query().Get("token")}}); st != 403 {
		t.Errorf("Eve accepts: %d", st)
	}
	if r := api.call("GET", "/v1/tenants/"+slug+"/members", nil); r.Status != 200 || strings.Contains(string(r.Raw), victim) {
		t.Fatalf("members after Eve's attempts: %s", r)
	}

	// The owner of the mailbox resets the password: that proves the address.
	owner := newPerson(t, api.base)
	owner.submit("/console/forgot", "/console/forgot", url.Values{"email": {victim}})
	reset := mailedLink(t, mail, victim, api.base, "/console/reset?token=")
	resetURL, _ := url.Parse(reset)
	if at, st, body := owner.submit(reset, "/console/reset", url.Values{"token": {resetURL.Query().Get("token")}, "password": {ownerPassword}}); st != 200 || !strings.HasPrefix(at, "/console/login") {
		t.Fatalf("reset: %d at %s\n%s", st, at, body)
	}
	if at, _, _ := eve.page("/console/account"); !strings.HasPrefix(at, "/console/login") {
		t.Errorf("Eve is still signed in after the reset (at %s)", at)
	}
	owner.signIn(victim, ownerPassword)
	if _, st, body := owner.page(link); st != 200 || !strings.Contains(body, slug) || !strings.Contains(body, "admin") {
		t.Fatalf("the owner opens the link: %d\n%s", st, body)
	}
	if at, st, _ := owner.submit(link, "/console/invites/accept", url.Values{"token": {tok.Query().Get("token")}}); st != 200 || at != "/console/t/"+slug+"/routes?done=invite-accepted" {
		t.Fatalf("the owner accepts: %d at %s", st, at)
	}
	if r := api.call("GET", "/v1/tenants/"+slug+"/members", nil); r.Status != 200 || !strings.Contains(string(r.Raw), `"email":"`+victim+`","role":"admin"`) {
		t.Errorf("members after acceptance: %s", r)
	}
	if _, st, _ := owner.page(link); st != 404 {
		t.Errorf("the used link: %d", st)
	}
}
