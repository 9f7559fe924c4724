package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/infra/testcert"
	"tollgate/infra/testdns"
	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

// tenantPagesConsole is a console with the tokens, domains and settings pages, whose
// domain checks ask a DNS server of the test's own.
func tenantPagesConsole(t *testing.T) (*consoleEnv, *testdns.Server) {
	t.Helper()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	dns := testdns.Start(t)
	c := web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db, Tokens: db, Domains: db,
		Proofs: dnsproof.New(dns.Addr()), EdgeDomain: "edge.test",
		Mailer: mail.Mailer(t), PublicURL: "https://console.tollgate.test"})
	app := fiber.New(fiber.Config{Immutable: true})
	c.Mount(app)
	return &consoleEnv{t: t, app: app, db: db, mail: mail}, dns
}

// member gives p role in tenant slug.
func (e *consoleEnv) member(slug string, p person, role string) {
	e.t.Helper()
	tn, err := e.db.FindTenant(context.Background(), slug)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.Pool().Exec(context.Background(), `INSERT INTO memberships (tenant_id, user_id, role) VALUES ($1, $2, $3)`, tn.ID, p.id, role); err != nil {
		e.t.Fatal(err)
	}
}

func (e *consoleEnv) auditActions(slug string) string {
	e.t.Helper()
	tn, err := e.db.FindTenant(context.Background(), slug)
	if err != nil {
		e.t.Fatal(err)
	}
	items, _, err := e.db.ListAudit(context.Background(), tn.ID, tenants.AuditQuery{Page: tenants.Page{Limit: 100}})
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	for _, it := range items {
		b.WriteString(it.Actor + " " + it.Action + "\n")
	}
	return b.String()
}

// TestTokensPage: an owner creates a token, sees it once with its role, lists and revokes
// it; a bad name comes back at the field; a developer sees neither the list nor the form
// and its POST is refused; the writes are in the audit log.
func TestTokensPage(t *testing.T) {
	e, _ := tenantPagesConsole(t)
	owner := e.signUp("acme", true)
	dev := e.signUp("devco", true)
	e.member("acme", dev, tenants.RoleDeveloper)

	pg := e.post(owner, "/console/t/acme/tokens", url.Values{"name": {""}, "role": {"developer"}})
	if pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, `id="name-error"`) {
		t.Fatalf("bad name: %d\n%s", pg.status, pg.body)
	}
	pg = e.post(owner, "/console/t/acme/tokens", url.Values{"name": {"ci"}, "role": {"developer"}})
	plain := regexp.MustCompile(`<code id="new-token">([^<]+)</code>`).FindStringSubmatch(pg.body)
	if pg.status != http.StatusOK || plain == nil || !strings.HasPrefix(plain[1], tenants.TokenPrefix) {
		t.Fatalf("create: %d\n%s", pg.status, pg.body)
	}
	if !strings.Contains(pg.body, "role-developer") || !strings.Contains(pg.body, "tollgate config apply") {
		t.Errorf("the new token's page does not show its role and how to use it:\n%s", pg.body)
	}
	tok, err := e.db.FindTokenByHash(context.Background(), tenants.HashSecret(plain[1]))
	if err != nil || tok.Name != "ci" || tok.Role != tenants.RoleDeveloper {
		t.Fatalf("stored %+v %v", tok, err)
	}
	list := e.get(owner, "/console/t/acme/tokens")
	if strings.Contains(list.body, plain[1]) || !strings.Contains(list.body, `data-token="ci"`) {
		t.Errorf("the list shows the plaintext again, or not the token:\n%s", list.body)
	}

	devPage := e.get(dev, "/console/t/acme/tokens")
	if devPage.status != http.StatusOK || strings.Contains(devPage.body, `data-token="ci"`) || strings.Contains(devPage.body, "token-form") {
		t.Errorf("a developer sees the tokens or the form:\n%s", devPage.body)
	}
	if pg := e.post(dev, "/console/t/acme/tokens", url.Values{"name": {"sneaky"}}); pg.status != http.StatusForbidden {
		t.Errorf("a developer's create: %d", pg.status)
	}
	if pg := e.post(dev, "/console/t/acme/tokens/"+tok.ID+"/delete", url.Values{}); pg.status != http.StatusForbidden {
		t.Errorf("a developer's revoke: %d", pg.status)
	}
	if pg := e.raw(owner, "/console/t/acme/tokens/"+tok.ID+"/delete", url.Values{"_csrf": {"forged"}}); pg.status != http.StatusForbidden {
		t.Errorf("a forged revoke: %d", pg.status)
	}

	pg = e.post(owner, "/console/t/acme/tokens/"+tok.ID+"/delete", url.Values{})
	if pg.status != http.StatusSeeOther || pg.location != "/console/t/acme/tokens?done=token-revoked" {
		t.Fatalf("revoke: %d %s", pg.status, pg.location)
	}
	if _, err := e.db.FindTokenByHash(context.Background(), tenants.HashSecret(plain[1])); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("the revoked token is still stored: %v", err)
	}
	if a := e.auditActions("acme"); !strings.Contains(a, "acme@example.com tokens.create") || !strings.Contains(a, "acme@example.com tokens.delete") {
		t.Errorf("audit:\n%s", a)
	}
}

// TestDomainsPage: a claim shows the TXT record to publish; a check before the record is
// published says why it failed; after, the domain is verified; a viewer sees no form and
// its writes are refused; a bad host name is shown at its field.
func TestDomainsPage(t *testing.T) {
	e, dns := tenantPagesConsole(t)
	owner := e.signUp("acme", true)
	viewer := e.signUp("looker", true)
	e.member("acme", viewer, tenants.RoleViewer)
	leaf := testcert.NewCA(t).Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})

	pg := e.post(owner, "/console/t/acme/domains", url.Values{"hostname": {"api.edge.test"}, "certificate_pem": {leaf.CertPEM}, "private_key_pem": {leaf.KeyPEM}})
	if pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, `id="hostname-error"`) {
		t.Fatalf("a name under the edge domain: %d\n%s", pg.status, pg.body)
	}
	if strings.Contains(pg.body, "PRIVATE KEY") {
		t.Error("the refused form shows the private key again")
	}
	pg = e.post(owner, "/console/t/acme/domains", url.Values{"hostname": {"api.acme.example"}, "certificate_pem": {leaf.CertPEM}, "private_key_pem": {leaf.KeyPEM}})
	if pg.status != http.StatusSeeOther || !strings.HasPrefix(pg.location, "/console/t/acme/domains?done=domain-claimed") {
		t.Fatalf("claim: %d %s\n%s", pg.status, pg.location, pg.body)
	}
	list := e.get(owner, "/console/t/acme/domains")
	name := regexp.MustCompile(`data-testid="record-name">([^<]+)<`).FindStringSubmatch(list.body)
	value := regexp.MustCompile(`data-testid="record-value">([^<]+)<`).FindStringSubmatch(list.body)
	if name == nil || value == nil || name[1] != "_tollgate-challenge.api.acme.example" || len(value[1]) < 16 {
		t.Fatalf("the TXT record is not shown:\n%s", list.body)
	}
	if !strings.Contains(list.body, `status-pending`) || strings.Contains(list.body, "PRIVATE KEY") {
		t.Errorf("a new claim's page:\n%s", list.body)
	}

	pg = e.post(owner, "/console/t/acme/domains/"+domainID(t, list.body)+"/verify", url.Values{})
	if pg.status != http.StatusSeeOther || !strings.Contains(pg.location, "done=domain-pending") {
		t.Fatalf("check without the record: %d %s", pg.status, pg.location)
	}
	list = e.get(owner, "/console/t/acme/domains")
	if !strings.Contains(list.body, "status-failed") || !strings.Contains(list.body, `data-testid="last-error"`) || !strings.Contains(list.body, "no TXT record") {
		t.Errorf("a failed check's page does not say why:\n%s", list.body)
	}

	dns.SetTXT(name[1], value[1])
	pg = e.post(owner, "/console/t/acme/domains/"+domainID(t, list.body)+"/verify", url.Values{})
	if pg.status != http.StatusSeeOther || !strings.Contains(pg.location, "done=domain-verified") {
		t.Fatalf("check with the record: %d %s", pg.status, pg.location)
	}
	list = e.get(viewer, "/console/t/acme/domains")
	if !strings.Contains(list.body, "status-verified") || strings.Contains(list.body, "domain-form") || strings.Contains(list.body, "/verify") {
		t.Errorf("the viewer's page:\n%s", list.body)
	}
	id := domainID(t, list.body)
	if pg := e.post(viewer, "/console/t/acme/domains/"+id+"/delete", url.Values{}); pg.status != http.StatusForbidden {
		t.Errorf("the viewer's remove: %d", pg.status)
	}
	pg = e.post(owner, "/console/t/acme/domains/"+id+"/delete", url.Values{})
	if pg.status != http.StatusSeeOther || pg.location != "/console/t/acme/domains?done=domain-removed" {
		t.Fatalf("remove: %d %s", pg.status, pg.location)
	}
	if a := e.auditActions("acme"); !strings.Contains(a, "domains.create") || !strings.Contains(a, "domains.verify") || !strings.Contains(a, "domains.delete") {
		t.Errorf("audit:\n%s", a)
	}
}

func domainID(t *testing.T, body string) string {
	t.Helper()
	m := regexp.MustCompile(`id="domain-([0-9a-f-]{36})"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no domain on the page:\n%s", body)
	}
	return m[1]
}

// TestSettingsPage: an admin renames the tenant (a stale version is refused with a
// message) but may not delete it; the owner deletes it only with its slug typed; a
// verified user creates a further tenant and owns it, an unverified one may not.
func TestSettingsPage(t *testing.T) {
	e, _ := tenantPagesConsole(t)
	owner := e.signUp("acme", true)
	admin := e.signUp("helper", true)
	e.member("acme", admin, tenants.RoleAdmin)

	pg := e.post(admin, "/console/t/acme/settings", url.Values{"name": {"Acme Corp"}, "version": {"1"}})
	if pg.status != http.StatusSeeOther || pg.location != "/console/t/acme/settings?done=tenant-renamed" {
		t.Fatalf("rename: %d %s\n%s", pg.status, pg.location, pg.body)
	}
	if tn, _ := e.db.FindTenant(context.Background(), "acme"); tn.Name != "Acme Corp" {
		t.Errorf("name %q", tn.Name)
	}
	pg = e.post(admin, "/console/t/acme/settings", url.Values{"name": {"Stale"}, "version": {"1"}})
	if pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, "Someone changed this tenant") {
		t.Errorf("stale rename: %d\n%s", pg.status, pg.body)
	}
	pg = e.post(admin, "/console/t/acme/settings", url.Values{"name": {""}, "version": {"2"}})
	if pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, `id="name-error"`) {
		t.Errorf("empty name: %d\n%s", pg.status, pg.body)
	}
	if a := e.auditActions("acme"); !strings.Contains(a, "helper@example.com tenants.update") {
		t.Errorf("audit:\n%s", a)
	}

	if pg := e.get(admin, "/console/t/acme/settings"); strings.Contains(pg.body, "delete-tenant") {
		t.Error("an admin sees the delete form")
	}
	if pg := e.post(admin, "/console/t/acme/settings/delete", url.Values{"confirm": {"acme"}}); pg.status != http.StatusForbidden {
		t.Errorf("an admin's delete: %d", pg.status)
	}
	pg = e.post(owner, "/console/t/acme/settings/delete", url.Values{"confirm": {"acme-typo"}})
	if pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, `id="confirm-error"`) {
		t.Errorf("delete with a wrong slug: %d\n%s", pg.status, pg.body)
	}
	if _, err := e.db.FindTenant(context.Background(), "acme"); err != nil {
		t.Fatalf("the tenant is gone after a wrong confirmation: %v", err)
	}

	// A further tenant: refused to an unverified address, then made and owned.
	late := e.signUp("late", false)
	if pg := e.post(late, "/console/tenants", url.Values{"slug": {"late-two"}}); pg.status != http.StatusForbidden || !strings.Contains(pg.body, "Verify your address") {
		t.Errorf("an unverified user's new tenant: %d\n%s", pg.status, pg.body)
	}
	pg = e.post(owner, "/console/tenants", url.Values{"slug": {"helper"}, "name": {"Taken"}})
	if pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, `id="slug-error"`) || !strings.Contains(pg.body, "taken") {
		t.Errorf("a taken slug: %d\n%s", pg.status, pg.body)
	}
	pg = e.post(owner, "/console/tenants", url.Values{"slug": {"acme-labs"}, "name": {"Acme Labs"}})
	if pg.status != http.StatusSeeOther || pg.location != "/console/t/acme-labs/routes?done=tenant-created" {
		t.Fatalf("new tenant: %d %s\n%s", pg.status, pg.location, pg.body)
	}
	routes := e.get(owner, "/console/t/acme-labs/routes")
	if routes.status != http.StatusOK || !strings.Contains(routes.body, `href="/console/t/acme/routes"`) || !strings.Contains(routes.body, "acme-labs · owner") {
		t.Errorf("the new tenant's page does not switch between the user's tenants:\n%s", routes.body)
	}

	pg = e.post(owner, "/console/t/acme/settings/delete", url.Values{"confirm": {"acme"}})
	if pg.status != http.StatusSeeOther || pg.location != "/console/t/acme-labs/routes?done=tenant-deleted" {
		t.Fatalf("delete: %d %s\n%s", pg.status, pg.location, pg.body)
	}
	if _, err := e.db.FindTenant(context.Background(), "acme"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("the tenant is still there: %v", err)
	}
	if pg := e.get(admin, "/console/t/acme/routes"); pg.status != http.StatusNotFound {
		t.Errorf("the deleted tenant's page: %d", pg.status)
	}
}
