package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tollgate/infra/testenv"
)

// TestConsoleLogs: calls to a route whose upstream port is closed appear on the Logs
// page filtered to status 502, with the refused host:port as the reason, and a call made
// while the page is open appears on it without a reload.
func TestConsoleLogs(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	up := upstream(t)
	suffix := testenv.Name("")[:6]
	slug := "logs-" + suffix
	owner := newBrowser(t, s.api)
	owner.signUp("logs-"+suffix+"@example.com", slug)
	down := freeAddr(t) // nothing listens there
	for _, r := range []string{
		`{"name":"orders","paths":["/orders"],"upstream":{"targets":[{"url":"http://` + down + `","weight":1}]}}`,
		`{"name":"hello","paths":["/hello"],"upstream":{"targets":[{"url":"` + up.URL + `","weight":1}]}}`,
	} {
		if st := owner.apiFetch("POST", "/v1/tenants/"+slug+"/routes", r); st != "201" {
			t.Fatalf("create route: %s", st)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.callEdge(t, slug, "/orders?key=secret", "") != 502 || s.callEdge(t, slug, "/hello", "") != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the edge did not take the routes")
		}
		time.Sleep(200 * time.Millisecond)
	}

	base := "/console/t/" + slug + "/logs"
	owner.open(base + "?status=502")
	if owner.count(`nav a[href$="/logs"][aria-current="page"]`) != 1 {
		t.Error("the tenant nav does not mark Logs")
	}
	waitRows := func(n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for owner.count(`#log-rows tr`) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d rows, want %d:\n%s", owner.count(`#log-rows tr`), n, owner.text())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	waitRows(1) // the tail brings it in without a reload
	s.callEdge(t, slug, "/orders", "")
	s.callEdge(t, slug, "/orders", "")
	waitRows(3)
	owner.contains("orders", "refused the connection", down, "upstream_failed", "Live: new calls appear")
	if txt := owner.text(); strings.Contains(txt, "secret") || strings.Contains(txt, "/hello") {
		t.Errorf("the 502 filter shows other calls or a query string:\n%s", txt)
	}
	if owner.count(`#log-rows tr.fresh`) < 2 {
		t.Error("the tailed rows are not marked new")
	}
	owner.screenshot("logs-filtered")

	// A bad filter is said at the form.
	owner.open(base + "?status=abc")
	owner.contains("status must be a status")
	if owner.count(`#status[aria-invalid="true"]`) != 1 {
		t.Error("the status field is not marked invalid")
	}
	// The form applies its filters.
	owner.open(base)
	owner.fill(map[string]string{"#status": "5xx", "#route": "orders"})
	owner.do(chromedp.Click(chromedp.CSS(`form.logs-form button[type=submit]`)))
	owner.waitPath(base + "?status=5xx")
	waitRows(3)
}
