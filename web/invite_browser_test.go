package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"tollgate/infra/testenv"
	"tollgate/tenants/smtp/smtptest"
)

// verifyEmail marks an address as proven, as following its verification link does.
func (s *stack) verifyEmail(t *testing.T, email string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE users SET email_verified_at = now() WHERE email = $1`, email); err != nil {
		t.Fatal(err)
	}
}

// inviteLink waits for the next invitation mailed to the address (passing over other mail,
// such as its verification) and returns its link's path and query.
func (s *stack) inviteLink(t *testing.T, to string) string {
	t.Helper()
	prefix := s.api + "/console/invites/accept?token="
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m := s.mail.WaitFor(t, to)
		for _, l := range smtptest.Links(m) {
			if strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, s.api)
			}
		}
	}
	t.Fatalf("no invitation mailed to %s", to)
	return ""
}

// register signs up through the console's form, proves the address, and signs in: a
// verified user in their own tenant.
func (b *browser) register(s *stack, email, slug string) {
	b.t.Helper()
	b.open("/console/signup")
	b.fill(map[string]string{"#email": email, "#password": password, "#slug": slug, "#name": "Tenant " + slug})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitReady(chromedp.CSS("footer")))
	deadline := time.Now().Add(20 * time.Second)
	for b.count(`form[action="/console/signup"]`) != 0 && b.count(`[aria-invalid=true], p.error`) == 0 {
		if time.Now().After(deadline) {
			b.t.Fatalf("sign-up of %s did not leave the form:\n%s", email, b.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.verifyEmail(b.t, email)
	b.signIn(email, "/console/t/"+slug+"/routes")
}

// signIn signs in through the form and waits for the page it leads to.
func (b *browser) signIn(email, then string) {
	b.t.Helper()
	b.open("/console/login")
	b.fill(map[string]string{"#email": email, "#password": password})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	b.waitPath(then)
}

// signOut ends the browser's session.
func (b *browser) signOut() {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(`.who button[type=submit]`)))
	b.waitPath("/console/login")
}

// TestInviteConsentBrowser: an owner invites an address from the members page; the mailed
// link, opened by someone signed in with another address, tells them nothing; opened by
// the invitee signed out, it asks them to sign in, comes back after signing in, shows the
// tenant and the role, and the invitee accepts and is in the tenant. The used link is dead.
func TestInviteConsentBrowser(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	suffix := testenv.Name("")[:6]
	slug, inviteeSlug, otherSlug := "acme-"+suffix, "dev-"+suffix, "eve-"+suffix
	ownerEmail, inviteeEmail, otherEmail := "owner-"+suffix+"@example.com", "dev-"+suffix+"@example.com", "eve-"+suffix+"@example.com"

	// The invitee and a bystander have verified accounts of their own, and are signed out.
	invitee := newBrowser(t, s.api)
	invitee.register(s, inviteeEmail, inviteeSlug)
	invitee.signOut()
	other := newBrowser(t, s.api)
	other.register(s, otherEmail, otherSlug)

	// The owner invites the invitee as a developer: the page says the same as for anyone.
	owner := newBrowser(t, s.api)
	owner.register(s, ownerEmail, slug)
	owner.open("/console/t/" + slug + "/members")
	owner.fill(map[string]string{"#email": inviteeEmail, "#role": "developer"})
	owner.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)))
	owner.waitPath("/console/t/" + slug + "/members?done=member-invited")
	owner.contains("Invitation sent.", inviteeEmail, "developer", "Withdraw")
	if owner.count(`table[data-testid=invites] tbody tr`) != 1 || owner.count(`table[data-testid=members] tbody tr`) != 1 {
		t.Errorf("after inviting, the members page shows:\n%s", owner.text())
	}
	owner.screenshot("30-invite-sent")
	link := s.inviteLink(t, inviteeEmail)

	// Someone else with the link learns nothing and cannot take it.
	other.open(link)
	other.contains("This invitation is for another address")
	if txt := other.text(); strings.Contains(txt, slug) || strings.Contains(txt, "developer") || strings.Contains(txt, ownerEmail) {
		t.Errorf("the other address's page tells about the invitation:\n%s", txt)
	}
	if other.count(`[data-testid=accept]`) != 0 {
		t.Error("the other address sees an Accept button")
	}
	other.screenshot("31-invite-other-address")

	// The invitee, signed out, is asked to sign in and comes back to the invitation.
	invitee.open(link)
	invitee.contains("Sign in to answer this invitation")
	if strings.Contains(invitee.text(), slug) {
		t.Errorf("the signed-out page names the tenant:\n%s", invitee.text())
	}
	invitee.do(chromedp.Click(chromedp.CSS(`a.button.primary[href^="/console/login"]`)))
	invitee.waitPath("/console/login?next=")
	invitee.fill(map[string]string{"#email": inviteeEmail, "#password": password})
	invitee.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	invitee.waitPath(link)
	invitee.contains("You are invited", "Tenant "+slug, slug, "developer", ownerEmail)
	invitee.screenshot("32-invite-offer")
	invitee.do(chromedp.Click(chromedp.CSS(`[data-testid=accept]`)))
	invitee.waitPath("/console/t/" + slug + "/routes?done=invite-accepted")
	invitee.contains("Invitation accepted", "developer")
	if invitee.count(`.switcher a[href="/console/t/`+slug+`/routes"]`) != 1 {
		t.Errorf("the tenant switcher does not list %s:\n%s", slug, invitee.text())
	}
	invitee.screenshot("33-invite-accepted")

	// The link is used up; the owner sees a member and no pending invitation.
	invitee.open(link)
	invitee.contains("This invitation link is not valid")
	owner.open("/console/t/" + slug + "/members")
	owner.contains(inviteeEmail)
	if owner.count(`table[data-testid=invites]`) != 0 || owner.count(`table[data-testid=members] tbody tr`) != 2 {
		t.Errorf("after acceptance, the members page shows:\n%s", owner.text())
	}
	owner.open("/console/t/" + slug + "/audit")
	owner.contains("invites.create", "invites.accept", "members.create")
}
