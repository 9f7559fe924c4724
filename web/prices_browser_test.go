package web_test

import (
	"context"
	"encoding/json"
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

// adminSend calls the management API with the admin token and a JSON body (a PUT
// overwriting whatever is current), and returns the answer's body.
func (s *stack) adminSend(t *testing.T, method, path, body string) string {
	t.Helper()
	req, _ := http.NewRequest(method, s.api+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	if method == http.MethodPut {
		req.Header.Set("If-Match", "*")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return string(b)
}

// TestPricesConsole: a tenant on a plan without a price is exported unpriced; the
// finance user gives the plan a price on the prices page (after an inline error, every
// answer a redirect) and the export prices the tenant with it; a consumer plan is priced
// on its page; an operator reaches the prices from the header.
func TestPricesConsole(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser)
	}
	s := startDev(t)
	suffix := strings.ReplaceAll(strings.ToLower(testenv.Name("")), "_", "")
	suffix = suffix[len(suffix)-6:]
	plan, slug, finEmail := "gold"+suffix, "priced-"+suffix, "fin-"+suffix+"@example.com"
	s.adminSend(t, "PUT", "/v1/platform/plans/"+plan, `{}`)
	tenantID := jsonField(s.adminSend(t, "POST", "/v1/tenants", `{"slug":"`+slug+`","name":"Priced","plan":"`+plan+`"}`), "id")
	store, err := billingpg.Open(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	_, err = store.Fold(context.Background(), &usage.Batch{ID: usage.BatchID("web-prices", suffix, 1), EdgeID: "web-prices", BootID: suffix, Seq: 1,
		Created: time.Now().UTC(), Records: []usage.Record{{TenantID: tenantID, Hour: billing.Hour(time.Now()), Class: 2,
			Counts: usage.Counts{Requests: 1234, Billable: 1234}}}})
	if err != nil {
		t.Fatal(err)
	}

	fin := newBrowser(t, s.api)
	fin.signUp(finEmail, "fin-"+suffix)
	s.adminPut(t, "/v1/platform/roles", `{"email":"`+finEmail+`","role":"finance"}`)
	fin.open(s.verifyLink(t, finEmail)) // the grant waits for the address's proof
	fin.contains("Address verified")
	fin.open("/console/finance")
	fin.contains(slug, "unpriced")

	fin.do(chromedp.Click(chromedp.CSS(`a[href="/console/finance/prices"]`)))
	fin.waitPath("/console/finance/prices")
	fin.do(chromedp.SetValue(chromedp.CSS(`#plan`), plan))
	fin.fill(map[string]string{"#currency": "US$", "#monthly_fee": "15.00", "#included_requests": "1000", "#unit_price": "0.05", "#unit_requests": "1000"})
	fin.submit()
	fin.waitPath("/console/finance/prices")
	fin.do(chromedp.WaitVisible(chromedp.CSS(`#currency-error`)))
	if v := fin.eval(`document.querySelector("#monthly_fee").value`); v != "15.00" {
		t.Errorf("the refused form lost its values: monthly fee %q", v)
	}
	fin.do(chromedp.SetValue(chromedp.CSS(`#plan`), plan))
	fin.fill(map[string]string{"#currency": "usd"})
	fin.submit()
	fin.waitPath("/console/finance/prices?done=price-saved")
	month := billing.PeriodOf(time.Now()).String()
	if fin.count(`tr[data-plan="`+plan+`"][data-from="`+month+`"]`) != 1 {
		t.Fatalf("the new version is not listed:\n%s", fin.text())
	}
	fin.contains("Price saved", "in effect")
	fin.screenshot("30-prices")

	fin.open("/console/finance")
	fin.contains(slug, "15.02 USD") // 1,500 fee + 234 over 1,000 at 5 per 1,000 (1.17 → 2)
	fin.screenshot("31-finance-priced")
	csv := fin.eval(`fetch(document.querySelector("#download-csv").href, {credentials: "same-origin"}).then(r => r.text())`)
	if !strings.Contains(csv, ","+slug+","+tenantID+",,"+plan+",1234,1234,1000,234,5,1000,1502,usd,priced,1500,0,0,0,0,1000,0\n") {
		t.Fatalf("the export does not price %s:\n%s", slug, csv)
	}

	// The same user owns a tenant: its consumer plan gets a public flag, a description and
	// a price on the plan's page (a past month refused next to the field).
	base := "/console/t/fin-" + suffix
	fin.open(base + "/plans/new")
	fin.fill(map[string]string{"#name": "basic", "#description": "For hobby projects"})
	fin.do(chromedp.Click(chromedp.CSS(`#public`)))
	fin.submit()
	fin.waitPath(base + "/plans?done=plan-created")
	fin.do(chromedp.Click(chromedp.CSS(`table a[href^="` + base + `/plans/"]`)))
	fin.do(chromedp.WaitVisible(chromedp.CSS(`#price-form`)))
	planURL := strings.TrimPrefix(fin.location(), fin.base)
	if fin.eval(`String(document.querySelector("#public").checked)`) != "true" || fin.eval(`document.querySelector("#description").value`) != "For hobby projects" {
		t.Errorf("the plan's public flag or description was not kept:\n%s", fin.text())
	}
	fin.fill(map[string]string{"#effective_from": "2020-01", "#monthly_fee": "9"})
	fin.do(chromedp.Click(chromedp.CSS(`#price-form button[type=submit]`)))
	fin.waitPath(planURL)
	fin.do(chromedp.WaitVisible(chromedp.CSS(`#effective_from-error`)))
	fin.fill(map[string]string{"#effective_from": month})
	fin.do(chromedp.Click(chromedp.CSS(`#price-form button[type=submit]`)))
	fin.waitPath(planURL + "?done=price-saved")
	if fin.count(`table[data-testid=plan-prices] tr[data-from="`+month+`"]`) != 1 {
		t.Fatalf("the consumer plan's price is not listed:\n%s", fin.text())
	}
	fin.contains("9.00 USD", "in effect")
	fin.screenshot("32-plan-prices")

	// An operator manages prices too (the header links them) but exports no bill.
	s.adminPut(t, "/v1/platform/roles", `{"email":"`+finEmail+`","role":"operator"}`)
	fin.open("/console/finance")
	if fin.count(`[data-status="404"]`) != 1 {
		t.Errorf("an operator sees the billing export:\n%s", fin.text())
	}
	fin.do(chromedp.Click(chromedp.CSS(`a.nav-finance[href="/console/finance/prices"]`)))
	fin.waitPath("/console/finance/prices")
	if fin.count(`tr[data-plan="`+plan+`"]`) != 1 {
		t.Errorf("the operator does not see the prices:\n%s", fin.text())
	}
}

// jsonField reads a top-level string field of a JSON object.
func jsonField(body, name string) string {
	var v map[string]any
	_ = json.Unmarshal([]byte(body), &v)
	s, _ := v[name].(string)
	return s
}
