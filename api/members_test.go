package api_test

import (
	"context"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"tollgate/api"
	"tollgate/tenants"
	"tollgate/tenants/smtp/smtptest"
)

// peopleEnv is an api with console users, the audit log and a real SMTP server for the
// invitation mail.
func peopleEnv(t *testing.T, opts ...smtptest.Options) (*env, *smtptest.Server) {
	t.Helper()
	o := smtptest.Options{}
	if len(opts) > 0 {
		o = opts[0]
	}
	mail := smtptest.StartWith(t, o)
	e := newEnv(t, func(c *api.Config) {
		c.People = c.Tenants.(tenants.PeopleService)
		c.Audit = c.Tenants.(tenants.AuditService)
		c.Mailer = mail.Mailer(t)
		c.PublicURL = "https://console.tollgate.test"
	})
	return e, mail
}

// inviteLink reads the next invitation mailed to email and returns its link's token.
func inviteLink(t *testing.T, mail *smtptest.Server, email string) string {
	t.Helper()
	m := mail.WaitFor(t, email)
	link := smtptest.Link(t, m, "https://console.tollgate.test"+tenants.InviteAcceptPath+"?token=")
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("token")
}

// unverified signs a user up (with a tenant of its own) without proving its address, and
// returns a caller with a live session.
func (e *env) unverified(name string) caller {
	e.t.Helper()
	c := e.session(name, "", "", "")
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE users SET email_verified_at = NULL WHERE email = $1`, name+"@example.com"); err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) memberID(slug, email string) string {
	e.t.Helper()
	for _, it := range e.do("GET", "/v1/tenants/"+slug+"/members", adminToken, nil).want(200).items() {
		if m := it.(map[string]any); m["email"] == email {
			return m["user_id"].(string)
		}
	}
	return ""
}

// TestNoDirectMembers: no endpoint puts a user in a tenant; POST on the members collection
// is not a method the API serves.
func TestNoDirectMembers(t *testing.T) {
	e, _ := peopleEnv(t)
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	e.session("victim", "", "", "")
	e.do("POST", "/v1/tenants/acme/members", "", map[string]any{"email": "victim@example.com", "role": "owner"}, owner.hdr...).wantErr(405, "method_not_allowed", "")
	e.do("POST", "/v1/tenants/acme/members", adminToken, map[string]any{"email": "victim@example.com", "role": "owner"}).wantErr(405, "method_not_allowed", "")
	e.do("PUT", "/v1/tenants/acme/members", adminToken, map[string]any{"email": "victim@example.com", "role": "owner"}).wantErr(405, "method_not_allowed", "")
	if id := e.memberID("acme", "victim@example.com"); id != "" {
		t.Fatalf("victim is a member of acme")
	}
	if _, ok := e.doc["paths"].(map[string]any)["/v1/tenants/{slug}/members"].(map[string]any)["post"]; ok {
		t.Errorf("the OpenAPI document still has POST /v1/tenants/{slug}/members")
	}
}

// TestMemberOwnerGuard: an admin may not change an owner's role, and the last owner may
// not be demoted; an owner changes an admin's role.
func TestMemberOwnerGuard(t *testing.T) {
	e, _ := peopleEnv(t)
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	admin := e.session("admin", acme, tenants.RoleAdmin, "")
	ownerID, adminID := e.memberID("acme", "owner@example.com"), e.memberID("acme", "admin@example.com")

	e.do("PUT", "/v1/tenants/acme/members/"+ownerID, "", map[string]any{"role": "viewer"}, admin.hdr...).wantErr(403, "forbidden", "role")
	e.do("PUT", "/v1/tenants/acme/members/"+adminID, "", map[string]any{"role": "owner"}, admin.hdr...).wantErr(403, "forbidden", "role")
	e.do("DELETE", "/v1/tenants/acme/members/"+ownerID, "", nil, admin.hdr...).wantErr(403, "forbidden", "role")
	e.do("PUT", "/v1/tenants/acme/members/"+ownerID, "", map[string]any{"role": "viewer"}, owner.hdr...).wantErr(409, "conflict", "role")
	e.do("PUT", "/v1/tenants/acme/members/"+adminID, "", map[string]any{"role": "astronaut"}, owner.hdr...).want(400)
	if r := e.do("PUT", "/v1/tenants/acme/members/"+adminID, "", map[string]any{"role": "developer"}, owner.hdr...).want(200); r.str("role") != "developer" {
		t.Errorf("role after PUT: %s", r.body)
	}
	e.do("PUT", "/v1/tenants/acme/members/00000000-0000-0000-0000-000000000000", "", map[string]any{"role": "viewer"}, owner.hdr...).wantErr(404, "not_found", "")

	e.do("DELETE", "/v1/tenants/acme/members/"+ownerID, "", nil, owner.hdr...).want(409) // the last owner
	e.do("DELETE", "/v1/tenants/acme/members/"+adminID, "", nil, owner.hdr...).want(204)
	e.do("DELETE", "/v1/tenants/acme/members/"+adminID, "", nil, owner.hdr...).wantErr(404, "not_found", "")

	var actions []string
	for _, it := range e.do("GET", "/v1/tenants/acme/audit", adminToken, nil).want(200).items() {
		a := it.(map[string]any)
		actions = append(actions, a["action"].(string)+" "+a["object"].(string))
	}
	for _, want := range []string{"members.update " + adminID, "members.delete " + adminID} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit log lacks %q: %q", want, actions)
		}
	}
}

var timestampRE = regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z| UTC)?`)

// TestInviteAnswersSame: inviting an address with a verified account, one with an
// unverified account and one with none gives the same status, the same fields and the
// same mail (but for the address, the link's token and the times).
func TestInviteAnswersSame(t *testing.T) {
	e, mail := peopleEnv(t)
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	e.session("known", "", "", "")
	e.unverified("fresh")

	var bodies, mails []string
	for _, who := range []string{"known", "fresh", "nobody"} {
		addr := who + "@example.com"
		r := e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": addr, "role": "developer"}, owner.hdr...).want(201)
		if r.header.Get("Location") != "/v1/tenants/acme/invites/"+url.PathEscape(addr) {
			t.Errorf("Location %q", r.header.Get("Location"))
		}
		bodies = append(bodies, timestampRE.ReplaceAllString(strings.ReplaceAll(string(r.body), addr, "ADDR"), "TIME"))
		m := mail.WaitFor(t, addr)
		text := strings.ReplaceAll(m.Subject+"\n"+m.Text, addr, "ADDR")
		text = regexp.MustCompile(`token=\S+`).ReplaceAllString(text, "token=TOKEN")
		mails = append(mails, timestampRE.ReplaceAllString(text, "TIME"))
	}
	for i := 1; i < len(bodies); i++ {
		if bodies[i] != bodies[0] {
			t.Errorf("answers differ:\n%s\n%s", bodies[0], bodies[i])
		}
		if mails[i] != mails[0] {
			t.Errorf("mails differ:\n%s\n---\n%s", mails[0], mails[i])
		}
	}
	if !strings.Contains(bodies[0], `"expires_at"`) || !strings.Contains(bodies[0], `"invited_by":"owner@example.com"`) || strings.Contains(bodies[0], "tgi_") {
		t.Errorf("invite body: %s", bodies[0])
	}
	if n := len(e.do("GET", "/v1/tenants/acme/invites", adminToken, nil).want(200).items()); n != 3 {
		t.Errorf("%d pending invites, want 3", n)
	}
	if id := e.memberID("acme", "known@example.com"); id != "" {
		t.Errorf("inviting made known@example.com a member")
	}
}

// TestInviteOwnerRule: only an owner or the admin token invites an owner; an address that
// is already a member is a conflict, as the member list shows anyway.
func TestInviteOwnerRule(t *testing.T) {
	e, mail := peopleEnv(t)
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	admin := e.session("admin", acme, tenants.RoleAdmin, "")
	adminTok := e.roleToken("acme", tenants.RoleAdmin)
	dev := e.roleToken("acme", tenants.RoleDeveloper)

	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "boss@example.com", "role": "owner"}, admin.hdr...).wantErr(403, "forbidden", "role")
	e.do("POST", "/v1/tenants/acme/invites", adminTok.token, map[string]any{"email": "boss@example.com", "role": "owner"}).wantErr(403, "forbidden", "role")
	e.do("POST", "/v1/tenants/acme/invites", dev.token, map[string]any{"email": "boss@example.com", "role": "viewer"}).wantErr(403, "forbidden", "")
	mail.NoMoreFor(t, "boss@example.com", 0)
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "boss@example.com", "role": "owner"}, owner.hdr...).want(201)
	e.do("POST", "/v1/tenants/acme/invites", adminToken, map[string]any{"email": "boss2@example.com", "role": "owner"}).want(201)
	if r := e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "helper@example.com", "role": "admin"}, admin.hdr...).want(201); r.str("invited_by") != "admin@example.com" {
		t.Errorf("invited_by: %s", r.body)
	}
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "Owner@Example.com", "role": "viewer"}, admin.hdr...).wantErr(409, "conflict", "email")
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "not-an-address", "role": "viewer"}, owner.hdr...).wantErr(400, "validation_failed", "email")
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "x@example.com", "role": "root"}, owner.hdr...).want(400)
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "x@example.com"}, owner.hdr...).want(400)
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "x@example.com", "role": "viewer", "user_id": "x"}, owner.hdr...).want(400)
	mail.NoMoreFor(t, "x@example.com", 0)

	// Sending to one address again and again is throttled.
	for range 5 {
		e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "spam@example.com", "role": "viewer"}, owner.hdr...).want(201)
		mail.WaitFor(t, "spam@example.com")
	}
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "spam@example.com", "role": "viewer"}, owner.hdr...).wantErr(429, "rate_limited", "")
	mail.NoMoreFor(t, "spam@example.com", 100*time.Millisecond)
}

// TestInviteAcceptance follows the mailed link through the API: only the session of a
// verified user with the invited address accepts it, once; withdrawn, replaced and expired
// links are dead; tokens cannot accept.
func TestInviteAcceptance(t *testing.T) {
	e, mail := peopleEnv(t)
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	dev := e.session("dev", "", "", "")
	other := e.session("other", "", "", "")
	fresh := e.unverified("fresh")
	ownerTok := e.roleToken("acme", tenants.RoleAdmin)

	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "dev@example.com", "role": "developer"}, owner.hdr...).want(201)
	token := inviteLink(t, mail, "dev@example.com")
	body := map[string]any{"token": token}

	// Who may not.
	e.do("POST", "/v1/invites/accept", "", body).wantErr(401, "unauthenticated", "")
	e.do("POST", "/v1/invites/accept", adminToken, body).wantErr(403, "forbidden", "")
	e.do("POST", "/v1/invites/accept", ownerTok.token, body).wantErr(403, "forbidden", "")
	e.do("POST", "/v1/invites/accept", "", body, append(slices.Clone(dev.hdr), "X-CSRF-Token", "")...).wantErr(403, "forbidden", "")
	if r := e.do("POST", "/v1/invites/accept", "", body, other.hdr...).wantErr(403, "forbidden", ""); strings.Contains(r.message(), "acme") || strings.Contains(r.message(), "dev@") {
		t.Errorf("the refusal of another address tells too much: %s", r.body)
	}
	e.do("POST", "/v1/invites/decline", "", body, other.hdr...).wantErr(403, "forbidden", "")
	e.do("POST", "/v1/invites/accept", "", body, fresh.hdr...).wantErr(403, "forbidden", "")
	e.do("POST", "/v1/invites/accept", "", map[string]any{"token": "tgi_guess"}, dev.hdr...).wantErr(404, "not_found", "")
	e.do("POST", "/v1/invites/accept", "", map[string]any{}, dev.hdr...).wantErr(400, "validation_failed", "token")
	e.do("POST", "/v1/invites/accept", "", `{"token":`, dev.hdr...).wantErr(400, "invalid_request", "")
	if id := e.memberID("acme", "dev@example.com"); id != "" {
		t.Fatal("dev is a member before accepting")
	}

	// The invitee accepts, once.
	r := e.do("POST", "/v1/invites/accept", "", body, dev.hdr...).want(200)
	if r.str("role") != "developer" || r.str("tenant_slug") != "acme" || r.str("email") != "dev@example.com" {
		t.Errorf("accepted: %s", r.body)
	}
	devID := r.str("user_id")
	e.do("POST", "/v1/invites/accept", "", body, dev.hdr...).wantErr(404, "not_found", "")
	e.do("GET", "/v1/tenants/acme/routes", "", nil, dev.hdr...).want(200)
	if n := len(e.do("GET", "/v1/tenants/acme/invites", adminToken, nil).want(200).items()); n != 0 {
		t.Errorf("%d pending invites after acceptance", n)
	}

	// Withdrawn.
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "other@example.com", "role": "viewer"}, owner.hdr...).want(201)
	tokW := inviteLink(t, mail, "other@example.com")
	e.do("DELETE", "/v1/tenants/acme/invites/other%40example.com", "", nil, owner.hdr...).want(204)
	e.do("DELETE", "/v1/tenants/acme/invites/other%40example.com", "", nil, owner.hdr...).wantErr(404, "not_found", "")
	e.do("POST", "/v1/invites/accept", "", map[string]any{"token": tokW}, other.hdr...).wantErr(404, "not_found", "")

	// Replaced: the first link dies, the second carries the new role.
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "other@example.com", "role": "admin"}, owner.hdr...).want(201)
	tok1 := inviteLink(t, mail, "other@example.com")
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "other@example.com", "role": "viewer"}, owner.hdr...).want(201)
	tok2 := inviteLink(t, mail, "other@example.com")
	e.do("POST", "/v1/invites/accept", "", map[string]any{"token": tok1}, other.hdr...).wantErr(404, "not_found", "")
	if r := e.do("POST", "/v1/invites/accept", "", map[string]any{"token": tok2}, other.hdr...).want(200); r.str("role") != "viewer" {
		t.Errorf("the re-invite's role: %s", r.body)
	}

	// Expired.
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "fresh@example.com", "role": "viewer"}, owner.hdr...).want(201)
	tokE := inviteLink(t, mail, "fresh@example.com")
	e.verify("fresh@example.com")
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE invites SET expires_at = now() - interval '1 minute' WHERE email = 'fresh@example.com'`); err != nil {
		t.Fatal(err)
	}
	if r := e.do("POST", "/v1/invites/accept", "", map[string]any{"token": tokE}, fresh.hdr...).wantErr(404, "not_found", ""); !strings.Contains(r.message(), "expired") {
		t.Errorf("expired: %s", r.body)
	}
	if n := len(e.do("GET", "/v1/tenants/acme/invites", adminToken, nil).want(200).items()); n != 1 {
		t.Errorf("%d invites listed, want the expired one", n)
	}

	// Declined.
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "fresh@example.com", "role": "viewer"}, owner.hdr...).want(201)
	tokD := inviteLink(t, mail, "fresh@example.com")
	e.do("POST", "/v1/invites/decline", "", map[string]any{"token": tokD}, fresh.hdr...).want(204)
	e.do("POST", "/v1/invites/accept", "", map[string]any{"token": tokD}, fresh.hdr...).wantErr(404, "not_found", "")
	if id := e.memberID("acme", "fresh@example.com"); id != "" {
		t.Error("declining made a member")
	}

	var actions []string
	for _, it := range e.do("GET", "/v1/tenants/acme/audit", adminToken, nil).want(200).items() {
		a := it.(map[string]any)
		actions = append(actions, a["actor"].(string)+" "+a["action"].(string)+" "+a["object"].(string))
	}
	for _, want := range []string{
		"owner@example.com invites.create dev@example.com",
		"dev@example.com invites.accept dev@example.com",
		"dev@example.com members.create " + devID,
		"owner@example.com invites.delete other@example.com",
		"fresh@example.com invites.decline fresh@example.com",
	} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit log lacks %q: %q", want, actions)
		}
	}
}

// TestInviteMailRefused: when the mail server refuses the invitation, the answer says the
// request failed and no invite stays pending.
func TestInviteMailRefused(t *testing.T) {
	e, _ := peopleEnv(t, smtptest.Options{Refuse: &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}})
	acme := e.tenant("acme")
	owner := e.session("owner", acme, tenants.RoleOwner, "")
	e.do("POST", "/v1/tenants/acme/invites", "", map[string]any{"email": "gone@example.com", "role": "viewer"}, owner.hdr...).wantErr(500, "internal", "")
	if n := len(e.do("GET", "/v1/tenants/acme/invites", adminToken, nil).want(200).items()); n != 0 {
		t.Errorf("%d invites pending after the mail failed", n)
	}
}
