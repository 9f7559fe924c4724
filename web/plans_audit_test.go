package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestPlanAbovePlatformPlanInConsole: a plan above the tenant's platform plan (free: 10
// rps, burst 20, 10,000 requests a month, 10 concurrent) is saved, the browser is sent
// to its page, which says where it exceeds it, and the list marks it; a plan within it
// goes back to the list as before. Its update is in the audit log with its fields.
func TestPlanAbovePlatformPlanInConsole(t *testing.T) {
	e := fullConsole(t)
	owner := e.signUp("acme", true)
	pg := e.raw(owner, "/console/t/acme/plans/new", url.Values{"_csrf": {owner.csrf}, "name": {"huge"}, "rate": {"50"}, "unit": {"rps"}, "burst": {"50"}, "quota": {"99999"}, "concurrency": {"3"}})
	if pg.status != http.StatusSeeOther || !strings.HasSuffix(pg.location, "?done=plan-above-platform") {
		t.Fatalf("create: %d → %q", pg.status, pg.location)
	}
	planPath := strings.TrimSuffix(pg.location, "?done=plan-above-platform")
	page := e.get(owner, pg.location)
	for _, want := range []string{`id="plan-warnings"`, "Plan saved.", "rate_limit.rps", "rate_limit.burst", "quota.requests",
		"The rate 50 requests/s is above the 10 requests/s of the tenant&#39;s platform plan &#34;free&#34;"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("plan page lacks %q", want)
		}
	}
	if strings.Contains(page.body, "<code>concurrency</code>") {
		t.Error("a concurrency within the platform plan's is warned of")
	}
	if list := e.get(owner, "/console/t/acme/plans"); !strings.Contains(list.body, "above platform plan") {
		t.Error("the plans list does not mark the plan")
	}

	version := "1"
	pg = e.raw(owner, planPath, url.Values{"_csrf": {owner.csrf}, "version": {version}, "name": {"huge"}, "rate": {"5"}, "unit": {"rps"}, "burst": {"10"}, "quota": {"1000"}})
	if pg.status != http.StatusSeeOther || !strings.HasSuffix(pg.location, "/plans?done=plan-updated") {
		t.Fatalf("update within the platform plan: %d → %q", pg.status, pg.location)
	}
	if page := e.get(owner, planPath); strings.Contains(page.body, `id="plan-warnings"`) {
		t.Error("a plan within the platform plan is warned of")
	}

	audit := e.get(owner, "/console/t/acme/audit").body
	for _, want := range []string{"plans.update", "<code>rate_limit.rps</code>", "<del>50</del>", "<ins>5</ins>", "<code>concurrency</code>", "<del>3</del>"} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit page lacks %q", want)
		}
	}
}
