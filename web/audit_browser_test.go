package web_test

import (
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"

	"tollgate/infra/testenv"
)

// TestAuditPlanFinanceBrowser: a plan above the platform plan is saved and its page says
// where; the audit log shows what an update and a config apply changed; a finance user
// signs up with no tenant and, granted the role and verified, lands on the billing export.
func TestAuditPlanFinanceBrowser(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	suffix := testenv.Name("")[:6]
	slug, ownerEmail, finEmail := "audited-"+suffix, "owner-"+suffix+"@example.com", "books-"+suffix+"@example.com"
	owner := newBrowser(t, s.api)
	owner.signUp(ownerEmail, slug)
	base := "/console/t/" + slug

	// A tenant on the free platform plan: 10 requests/s, burst 20, 10,000 a month, 10 at once.
	owner.open(base + "/plans/new")
	owner.fill(map[string]string{"#name": "partner", "#rate": "50", "#burst": "50", "#quota": "50000", "#concurrency": "20"})
	owner.submit()
	owner.do(chromedp.WaitVisible(chromedp.CSS(`#plan-warnings`)))
	owner.contains("Plan saved.", "This plan allows more than the tenant's platform plan", "rate_limit.rps", "rate_limit.burst", "quota.requests", "concurrency",
		`The rate 50 requests/s is above the 10 requests/s of the tenant's platform plan "free"`)
	owner.screenshot("plan-warning")
	owner.open(base + "/plans")
	owner.contains("above platform plan")

	owner.open(base + "/plans")
	owner.do(chromedp.Click(chromedp.CSS(`table a[href^="` + base + `/plans/"]`)))
	owner.do(chromedp.WaitVisible(chromedp.CSS(`#plan-warnings`)))
	owner.fill(map[string]string{"#rate": "5", "#burst": "10", "#quota": "1000", "#concurrency": "0"})
	owner.submit()
	owner.waitPath(base + "/plans?done=plan-updated")
	if owner.count(`.badge.warn`) != 0 {
		t.Error("a plan within the platform plan is still marked")
	}
	s.adminPut(t, "/v1/tenants/"+slug+"/config", `{"version":1,"tenant":"`+slug+`","routes":[{"name":"hello","paths":["/hello"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]}}]}`)
	owner.open(base + "/audit")
	owner.contains("plans.update", "rate_limit.rps", "quota.requests", "config.apply", "created route hello")
	if owner.count(`td.changes del`) < 4 || owner.count(`td.changes ins`) < 3 {
		t.Errorf("the audit page shows no values before and after:\n%s", owner.text())
	}
	owner.screenshot("audit-diff")

	// Finance with no tenant: the address is granted the role, mailed the way in, signs up
	// with no tenant, verifies, and lands on the billing export.
	s.adminPut(t, "/v1/platform/roles", `{"email":"`+finEmail+`","role":"finance"}`)
	fin := newBrowser(t, s.api)
	fin.open("/console/signup?no_tenant=1&email=" + url.QueryEscape(finEmail))
	if fin.count(`#no_tenant:checked`) != 1 {
		t.Fatal("the link from the grant's mail does not tick no tenant")
	}
	fin.fill(map[string]string{"#password": password})
	fin.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`[data-notice]`)))
	fin.contains("Check your inbox", finEmail)
	fin.open(s.verifyLink(t, finEmail))
	fin.contains("Address verified")
	fin.signIn(finEmail, "/console/finance")
	fin.contains("Billing export", "Download CSV")
	if fin.count(`a.nav-finance`) != 1 {
		t.Errorf("no finance link in the header:\n%s", fin.text())
	}
	fin.screenshot("finance-no-tenant")
}
