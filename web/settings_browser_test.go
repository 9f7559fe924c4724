package web_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// adminPut calls the management API with the admin token and a JSON body.
func (s *stack) adminPut(t *testing.T, path, body string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", s.api+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("PUT %s: %d %s", path, res.StatusCode, b)
	}
}

func (b *browser) submit() {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(`form.form button[type=submit].primary`)))
}

// TestConsoleSettings walks the settings pages: a plan (after an inline error), a JWT
// issuer whose secret is never shown again, a policy with a bad line marked at that line,
// an invitation accepted from its mailed link (the invited viewer sees no write controls), and
// the finance role's export page with its CSV.
func TestConsoleSettings(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	suffix := testenv.Name("")[:6]
	slug := "initech-" + suffix
	ownerEmail, lateEmail, finEmail := "boss-"+suffix+"@example.com", "late-"+suffix+"@example.com", "fin-"+suffix+"@example.com"
	owner := newBrowser(t, s.api)
	owner.signUp(ownerEmail, slug)
	base := "/console/t/" + slug

	// Plans: empty state, a value the API refuses shown at the field, then a good plan.
	owner.open(base + "/plans")
	owner.contains("No plans yet", "Your platform plan", "Create a plan")
	owner.screenshot("13-plans-empty")
	owner.do(chromedp.Click(chromedp.CSS(`a[href$="/plans/new"]`)))
	owner.waitPath(base + "/plans/new")
	owner.fill(map[string]string{"#name": "basic", "#rate": "10", "#burst": "999999999", "#quota": "10000", "#concurrency": "5"})
	owner.submit()
	owner.do(chromedp.WaitVisible(chromedp.CSS(`#rate_limit-error`)))
	if msg := owner.eval(`document.querySelector("#rate_limit-error").innerText`); !strings.Contains(msg, "burst") {
		t.Errorf("plan error says %q, want the API's rule on burst", msg)
	}
	if owner.count(`#burst[aria-invalid="true"]`) != 1 {
		t.Error("the burst field is not marked invalid")
	}
	owner.screenshot("14-plan-form-error")
	owner.fill(map[string]string{"#burst": "20"})
	owner.submit()
	owner.waitPath(base + "/plans?done=plan-created")
	owner.contains("basic", "10/s", "10,000", "Plan created")
	owner.screenshot("15-plans")

	// A consumer put on the plan from its page.
	owner.open(base + "/consumers")
	owner.fill(map[string]string{"#name": "partner"})
	owner.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)))
	owner.waitPath(base + "/consumers/")
	consumerPath := strings.TrimPrefix(strings.SplitN(owner.location(), "?", 2)[0], s.api+"/console/t/"+slug)
	owner.fill(map[string]string{"#plan": "basic"})
	owner.do(chromedp.Click(chromedp.CSS(`form.plan-pick button[type=submit]`)))
	owner.waitPath(base + consumerPath + "?done=consumer-updated")
	owner.contains("Plan saved")
	if got := s.admin(t, "GET", "/v1/tenants/"+slug+consumerPath)["plan"]; got != "basic" {
		t.Errorf("after choosing a plan on the consumer's page, its plan is %v, want basic", got)
	}
	owner.screenshot("15b-consumer-plan")

	// A JWT issuer with an HS256 secret; the secret is write-only.
	const secret = "s3cret-shared-by-the-idp-0123456789abcdef"
	owner.open(base + "/jwt-issuers")
	owner.contains("No JWT issuers yet")
	owner.do(chromedp.Click(chromedp.CSS(`a[href$="/jwt-issuers/new"]`)))
	owner.waitPath(base + "/jwt-issuers/new")
	owner.do(chromedp.Click(chromedp.CSS(`input[name=source][value=hs256]`)))
	owner.fill(map[string]string{"#issuer": "https://login.initech.example/", "#audiences": "https://api.initech.example", "#hs256_secret": "too-short"})
	owner.submit()
	owner.do(chromedp.WaitVisible(chromedp.CSS(`#hs256_secret-error`)))
	owner.contains("at least 32 bytes")
	owner.do(chromedp.Click(chromedp.CSS(`input[name=source][value=hs256]`)))
	owner.fill(map[string]string{"#hs256_secret": secret})
	owner.screenshot("16-jwt-issuer-form")
	owner.submit()
	owner.waitPath(base + "/jwt-issuers?done=issuer-created")
	owner.contains("https://login.initech.example/", "HS256 secret", "HS256")
	owner.screenshot("17-jwt-issuers")
	owner.do(chromedp.Click(chromedp.CSS(`td.actions a`)))
	owner.waitPath(base + "/jwt-issuers/")
	if html := owner.eval(`document.documentElement.outerHTML`); strings.Contains(html, secret) {
		t.Error("the issuer page shows the HS256 secret")
	}
	owner.fill(map[string]string{"#audiences": "https://api.initech.example\nhttps://m.initech.example"})
	owner.submit()
	owner.waitPath(base + "/jwt-issuers?done=issuer-updated")
	owner.contains("https://m.initech.example")

	// The policy: a bad effect on line 3 (after a blank line) is shown on line 3.
	owner.open(base + "/policy")
	owner.contains("No policy yet")
	owner.fill(map[string]string{"#rules": "mobile-app, /orders/*, GET\n\nsupport, /orders/:id, GET|PATCH, maybe\n", "#roles": "partner-acme, support"})
	owner.submit()
	owner.do(chromedp.WaitVisible(chromedp.CSS(`#rules-error`)))
	if msg := owner.eval(`document.querySelector("#rules-error").innerText`); !strings.HasPrefix(msg, "Line 3 (effect)") {
		t.Errorf("policy error says %q, want it on line 3's effect", msg)
	}
	if got := owner.eval(`(document.querySelector('.lines li.bad[data-line="3"] .line-error') || {innerText: ""}).innerText`); !strings.Contains(got, "allow") {
		t.Errorf("line 3 is not marked with its error: %q\n%s", got, owner.text())
	}
	owner.screenshot("18-policy-error")
	owner.fill(map[string]string{"#rules": "mobile-app, /orders/*, GET\n\nsupport, /orders/:id, GET|PATCH, allow\n*, /admin/*, *, deny\n"})
	owner.submit()
	owner.waitPath(base + "/policy?done=policy-saved")
	if v := owner.eval(`document.querySelector("#rules").value`); !strings.Contains(v, "support, /orders/:id, GET|PATCH, allow") {
		t.Errorf("saved rules: %q", v)
	}
	owner.screenshot("19-policy")

	// An invitation for an address without an account: it signs up, proves the address and
	// accepts from the mailed link.
	owner.open(base + "/members")
	owner.fill(map[string]string{"#email": lateEmail, "#role": "viewer"})
	owner.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)))
	owner.waitPath(base + "/members?done=member-invited")
	owner.contains(lateEmail, "Withdraw", "last owner")
	owner.screenshot("20-members-invited")
	invitation := s.inviteLink(t, lateEmail)
	late := newBrowser(t, s.api)
	late.signUp(lateEmail, "late-"+suffix)
	s.verifyEmail(t, lateEmail)
	late.open(invitation)
	late.do(chromedp.Click(chromedp.CSS(`[data-testid=accept]`)))
	late.waitPath(base + "/routes?done=invite-accepted")
	late.open(base + "/plans")
	late.contains("basic", "viewer")
	for _, p := range []string{"/plans", "/jwt-issuers", "/policy"} {
		late.open(base + p)
		// The page's own controls: the header's "New tenant…" makes a tenant of the viewer's own.
		for _, css := range []string{`main a[href$="/new"]`, `main form[action$="/delete"]`, `main button[type=submit].primary`} {
			if n := late.count(css); n != 0 {
				t.Errorf("the invited viewer sees %d write controls %s on %s", n, css, p)
			}
		}
	}
	late.screenshot("21-viewer-policy")
	owner.open(base + "/members")
	if owner.count(`table[data-testid=members] tr`) != 3 || owner.count(`table[data-testid=invites]`) != 0 {
		t.Errorf("after sign-up the members page shows:\n%s", owner.text())
	}
	// The owner changes the viewer's role, then removes them.
	owner.do(chromedp.SetValue(chromedp.CSS(`table[data-testid=members] tr:nth-child(2) select`), "developer"),
		chromedp.Click(chromedp.CSS(`table[data-testid=members] tr:nth-child(2) .role-form button`)))
	owner.waitPath(base + "/members?done=member-updated")
	owner.contains("Role changed")
	if got := owner.eval(`document.querySelector("table[data-testid=members] tr:nth-child(2) select").value`); got != "developer" {
		t.Errorf("role after the change: %q", got)
	}
	if owner.count(`table[data-testid=members] tr:nth-child(1) form`) != 0 {
		t.Error("the last owner's row has controls to demote or remove them")
	}
	owner.screenshot("23-members-roles")
	owner.eval(`window.confirm = () => true; "ok"`)
	owner.do(chromedp.Click(chromedp.CSS(`table[data-testid=members] tr:nth-child(2) td.actions button`)))
	owner.waitPath(base + "/members?done=member-removed")
	if strings.Contains(owner.text(), lateEmail) {
		t.Errorf("the removed member is still listed:\n%s", owner.text())
	}
	late.open(base + "/routes")
	if late.count(`[data-status="404"]`) != 1 {
		t.Errorf("the removed member still sees the tenant:\n%s", late.text())
	}

	// The finance role: the export page previews the month and downloads the CSV.
	tenant := s.admin(t, "GET", "/v1/tenants/"+slug)
	store, err := billingpg.Open(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	_, err = store.Fold(context.Background(), &usage.Batch{ID: usage.BatchID("web-fin", suffix, 1), EdgeID: "web-fin", BootID: suffix, Seq: 1,
		Created: time.Now().UTC(), Records: []usage.Record{{TenantID: tenant["id"].(string), Hour: billing.Hour(time.Now()), Class: 2,
			Counts: usage.Counts{Requests: 1234, Billable: 1234}}}})
	if err != nil {
		t.Fatal(err)
	}
	owner.open("/console/finance")
	if owner.count(`[data-status="404"]`) != 1 {
		t.Errorf("a tenant owner sees the finance page:\n%s", owner.text())
	}
	fin := newBrowser(t, s.api)
	fin.signUp(finEmail, "fin-"+suffix)
	// A platform role granted to an unverified address waits for the address's proof.
	s.adminPut(t, "/v1/platform/roles", `{"email":"`+finEmail+`","role":"finance"}`)
	fin.open("/console/finance")
	if fin.count(`[data-status="404"]`) != 1 {
		t.Errorf("an unverified address took the finance role:\n%s", fin.text())
	}
	fin.open(s.verifyLink(t, finEmail))
	fin.contains("Address verified")
	fin.open("/console/t/fin-" + suffix + "/routes")
	fin.do(chromedp.Click(chromedp.CSS(`a.nav-finance`)))
	fin.waitPath("/console/finance")
	fin.contains("Billing export", slug, "1,234", "Download CSV")
	fin.screenshot("22-finance-export")
	csv := fin.eval(`fetch(document.querySelector("#download-csv").href, {credentials: "same-origin"}).then(r => r.text().then(t => r.status + "\n" + t))`)
	lines := strings.Split(csv, "\n")
	if len(lines) < 3 || lines[0] != "200" {
		t.Fatalf("CSV download: %q", csv)
	}
	for _, col := range []string{"tenant", "requests", "billable", "amount", "currency"} {
		if !strings.Contains(","+lines[1]+",", ","+col+",") {
			t.Errorf("CSV header %q has no %s column", lines[1], col)
		}
	}
	if !strings.Contains(csv, slug+",") {
		t.Errorf("CSV has no row for %s:\n%s", slug, csv)
	}
	if st := fin.eval(`fetch(document.querySelector("#download-json").href, {credentials: "same-origin"}).then(r => String(r.status))`); st != "200" {
		t.Errorf("JSON download: %s", st)
	}
}
