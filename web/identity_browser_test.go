package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"tollgate/infra/testenv"
	"tollgate/tenants/smtp/smtptest"
)

// verifyLink waits for the next mail to the address that carries a verification link and
// returns the link's path and query.
func (s *stack) verifyLink(t *testing.T, to string) string {
	t.Helper()
	for {
		m := s.mail.WaitFor(t, to) // fails the test after 10 s without new mail
		for _, l := range smtptest.Links(m) {
			if strings.HasPrefix(l, s.api+"/console/verify?token=") {
				return strings.TrimPrefix(l, s.api)
			}
		}
	}
}

// TestIdentityBrowser: sign up through the form (nobody is signed in), sign in unverified
// (the banner), follow the link read from the SMTP server (verified; the link is spent),
// then forget the password: the reset link from the mail signs out every browser and the
// new password works; finally change it from the account page, which keeps this browser
// and signs out the other.
func TestIdentityBrowser(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	suffix := testenv.Name("")[:6]
	email, slug := "kim-"+suffix+"@example.com", "kim-"+suffix

	b := newBrowser(t, s.api)
	b.open("/console/signup")
	b.fill(map[string]string{"#email": email, "#password": password, "#slug": slug})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`[data-notice]`)))
	b.contains("Check your inbox", email)
	if b.count(`.who`) != 0 {
		t.Fatal("sign-up signed the browser in")
	}
	b.screenshot("30-signup-check-inbox")

	b.signIn(email, "/console/t/"+slug+"/routes")
	if b.count(`.verify-banner`) != 1 {
		t.Fatalf("no verification banner for an unverified user:\n%s", b.text())
	}
	b.screenshot("31-verify-banner")
	link := s.verifyLink(t, email)
	b.open(link)
	b.contains("Address verified", email)
	b.screenshot("32-verified")
	b.open("/console/t/" + slug + "/routes")
	if b.count(`.verify-banner`) != 0 {
		t.Fatal("the banner stays after verification")
	}
	b.open(link)
	b.contains("This link does not work")

	// A second browser is signed in too; the reset signs both out.
	other := newBrowser(t, s.api)
	other.signIn(email, "/console/t/"+slug+"/routes")
	b.do(chromedp.Click(chromedp.CSS(`.who button[type=submit]`)))
	b.waitPath("/console/login")
	b.do(chromedp.Click(chromedp.CSS(`a[href="/console/forgot"]`)))
	b.waitPath("/console/forgot")
	b.fill(map[string]string{"#email": email})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`[data-notice]`)))
	b.contains("If an account exists for " + email)
	reset := smtptest.Link(t, s.mail.WaitFor(t, email), s.api+"/console/reset?token=")
	b.open(strings.TrimPrefix(reset, s.api))
	b.screenshot("33-reset-form")
	b.fill(map[string]string{"#password": "a brand new passphrase"})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	b.waitPath("/console/login?done=password-reset")
	b.contains("every session signed out")
	other.open("/console/account")
	other.waitPath("/console/login")

	// Signed in with the new password, change it: this browser stays, the other goes.
	b.fill(map[string]string{"#email": email, "#password": "a brand new passphrase"})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	b.waitPath("/console/t/" + slug + "/routes")
	other.fill(map[string]string{"#email": email, "#password": "a brand new passphrase"})
	other.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	other.waitPath("/console/account") // where it was going when the reset signed it out
	b.do(chromedp.Click(chromedp.CSS(`a.nav-account`)))
	b.waitPath("/console/account")
	b.fill(map[string]string{"#current": "a brand new passphrase", "#password": password})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	b.waitPath("/console/account?done=password-changed")
	b.contains("Password changed")
	b.screenshot("34-account")
	b.open("/console/t/" + slug + "/routes")
	b.contains(slug)
	other.open("/console/account")
	other.waitPath("/console/login")
}
