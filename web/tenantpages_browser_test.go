package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tollgate/infra/testcert"
	"tollgate/infra/testdns"
	"tollgate/infra/testenv"
)

// TestConsoleTenantPages walks the pages a tenant runs itself with: an API token created
// (shown once, working against the API) and revoked (refused from then on), a custom
// domain claimed with its TXT record shown and verified once the record is published,
// the tenant renamed, a second tenant created and switched to, and the routes table at
// 1280 px with long cells and its Delete buttons in view.
func TestConsoleTenantPages(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	dns := testdns.Start(t)
	t.Setenv("TOLLGATE_DNS_RESOLVER", dns.Addr()) // startDev passes its environment on
	s := startDev(t)
	up := upstream(t)
	suffix := testenv.Name("")[:6]
	slug, second := "umbrella-"+suffix, "umbrella-labs-"+suffix
	email := "boss-" + suffix + "@example.com"
	owner := newBrowser(t, s.api)
	owner.signUp(email, slug)
	s.verifyEmail(t, email)
	base := "/console/t/" + slug

	// An API token, shown once, that the API takes until it is revoked.
	owner.open(base + "/tokens")
	owner.contains("API tokens", "No tokens yet")
	owner.fill(map[string]string{"#token-name": "ci", "#token-role": "developer"})
	owner.do(chromedp.Click(chromedp.CSS(`form.token-form button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`#new-token`)))
	token := owner.eval(`document.querySelector("#new-token").innerText`)
	if !strings.HasPrefix(token, "tgt_") {
		t.Fatalf("new token %q", token)
	}
	owner.contains("shown only this once", "developer", "tollgate config apply")
	owner.screenshot("tokens")
	apiStatus := func() int {
		req, _ := http.NewRequest("GET", s.api+"/v1/tenants/"+slug+"/routes", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := apiStatus(); st != 200 {
		t.Errorf("the new token's API call: %d", st)
	}
	owner.open(base + "/tokens")
	if strings.Contains(owner.text(), token) {
		t.Error("the token's plaintext is shown again")
	}
	owner.eval(`window.confirm = () => true; "ok"`)
	owner.do(chromedp.Click(chromedp.CSS(`tr[data-token="ci"] button[type=submit]`)))
	owner.waitPath(base + "/tokens?done=token-revoked")
	owner.contains("Token revoked", "No tokens yet")
	if st := apiStatus(); st != 401 {
		t.Errorf("the revoked token's API call: %d, want 401", st)
	}

	// A custom domain: claimed, its TXT record shown, verified once it is published.
	host := "api." + suffix + ".example"
	leaf := testcert.NewCA(t).Issue(t, []string{host}, time.Time{}, time.Time{})
	owner.open(base + "/domains")
	owner.contains("No custom domains yet", "Claim a domain")
	owner.fill(map[string]string{"#hostname": host, "#certificate_pem": leaf.CertPEM, "#private_key_pem": leaf.KeyPEM})
	owner.do(chromedp.Click(chromedp.CSS(`form.domain-form button[type=submit]`)))
	owner.waitPath(base + "/domains?done=domain-claimed")
	name := owner.eval(`document.querySelector("[data-testid=record-name]").innerText`)
	value := owner.eval(`document.querySelector("[data-testid=record-value]").innerText`)
	if name != "_tollgate-challenge."+host || len(value) < 16 {
		t.Fatalf("the record shown: %q %q", name, value)
	}
	owner.contains("pending", "TXT", "Check now")
	owner.do(chromedp.Click(chromedp.CSS(`button.recheck`)))
	owner.waitPath(base + "/domains?done=domain-pending")
	owner.contains("last check failed", "no TXT record")
	owner.screenshot("domains")
	dns.SetTXT(name, value)
	owner.do(chromedp.Click(chromedp.CSS(`button.recheck`)))
	owner.waitPath(base + "/domains?done=domain-verified")
	if st := owner.eval(`document.querySelector("[data-testid=status]").innerText`); st != "verified" {
		t.Errorf("status after publishing the record: %q", st)
	}

	// Settings: a new name, then a second tenant the owner switches between.
	owner.open(base + "/settings")
	owner.fill(map[string]string{"#name": "Umbrella Corporation"})
	owner.do(chromedp.Click(chromedp.CSS(`form.rename-form button[type=submit]`)))
	owner.waitPath(base + "/settings?done=tenant-renamed")
	owner.contains("Name saved", "Umbrella Corporation", "Delete this tenant", "Type the slug")
	owner.screenshot("settings")
	owner.do(chromedp.Click(chromedp.CSS(`main a.button[href="/console/tenants/new"]`)))
	owner.waitPath("/console/tenants/new")
	owner.fill(map[string]string{"#slug": second, "#name": "Umbrella Labs"})
	owner.do(chromedp.Click(chromedp.CSS(`form.tenant-form button[type=submit]`)))
	owner.waitPath("/console/t/" + second + "/routes?done=tenant-created")
	owner.contains("Tenant created", "Umbrella Labs")
	owner.do(chromedp.Click(chromedp.CSS(`.switcher summary`)), chromedp.Click(chromedp.CSS(`.switcher a[href="`+base+`/routes"]`)))
	owner.waitPath(base + "/routes")
	owner.contains("Umbrella Corporation")

	// The routes table at 1280 px: long paths, every method and long upstream URLs, and
	// still every Delete button inside the page, nothing scrolled out of view.
	long := up.URL + "/services/orders/internal/api/v2/fulfilment-and-shipping/regional-endpoints"
	for i, n := range []string{"orders-fulfilment-and-shipping-regional", "inventory", "payments-webhooks"} {
		s.adminSend(t, "POST", "/v1/tenants/"+slug+"/routes", `{"name":"`+n+`",
			"paths":["/`+n+`/v1/orders/by-customer","/`+n+`/v1/orders/by-region","=/`+n+`/healthz"],
			"methods":["GET","POST","PUT","PATCH","DELETE","HEAD","OPTIONS"],
			"rate_limit":{"rps":`+string(rune('1'+i))+`00,"burst":200},
			"upstream":{"targets":[{"url":"`+long+`","weight":1},{"url":"`+long+`-b","weight":1}]}}`)
	}
	owner.open(base + "/routes")
	if w := owner.eval(`String(window.innerWidth)`); w != "1280" {
		t.Errorf("viewport %s px wide, want 1280", w)
	}
	if n := owner.count(`table.routes button.danger`); n != 3 {
		t.Fatalf("%d Delete buttons", n)
	}
	if out := owner.eval(`(() => { const bad = [];
		document.querySelectorAll("table.routes button.danger").forEach(b => { const r = b.getBoundingClientRect();
			if (r.right > document.documentElement.clientWidth || r.width === 0) bad.push(Math.round(r.right)); });
		const w = document.querySelector(".table-wrap"); if (w.scrollWidth > w.clientWidth) bad.push("wrap " + w.scrollWidth + ">" + w.clientWidth);
		if (document.documentElement.scrollWidth > document.documentElement.clientWidth) bad.push("page " + document.documentElement.scrollWidth);
		return bad.join(","); })()`); out != "" {
		t.Errorf("the routes table overflows at 1280 px: %s", out)
	}
	owner.contains(long, "/orders-fulfilment-and-shipping-regional/v1/orders/by-customer", "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS")
	owner.screenshot("routes-1280")
}
