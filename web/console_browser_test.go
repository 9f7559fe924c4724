package web_test

// The console as a new tenant meets it, in real Chromium against `tollgate dev`: sign-in
// that returns to the page asked for, forms that answer with a redirect (a reload posts
// nothing), the key shown once, copy buttons, the usage range, and every main page at a
// phone's 390 px. Screenshots go with the others (browser_test.go), prefixed "console-".

import (
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tollgate/infra/testenv"
)

func TestConsoleFormsRedirectAndFitAPhone(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	up := upstream(t)
	suffix := testenv.Name("")[:6]
	slug, email := "phone-"+suffix, "phone-"+suffix+"@example.com"
	_, edgePort, _ := net.SplitHostPort(s.edgeAddr)
	b := newBrowser(t, s.api)
	base := "/console/t/" + slug

	// The sign-up page names the edge's real address.
	b.open("/console/signup")
	if got, want := b.eval(`document.querySelector("[data-testid=edge-pattern]").innerText`), "http://<slug>.localhost:"+edgePort+"/"; got != want {
		t.Errorf("sign-up page names the edge %q, want %q", got, want)
	}
	b.signUp(email, slug)
	if got := b.eval(`document.querySelector("[data-testid=edge-url]").innerText`); got != "http://"+slug+".localhost:"+edgePort {
		t.Errorf("routes page names the edge %q", got)
	}

	// Signed out, a page asked for leads to sign-in, and back to it.
	b.signOut()
	b.open(base + "/consumers")
	b.waitPath("/console/login?next=" + url.QueryEscape(base+"/consumers"))
	b.fill(map[string]string{"#email": email, "#password": "not the password"})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`.error`)))
	b.fill(map[string]string{"#email": email, "#password": password})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	b.waitPath(base + "/consumers")

	// A route, refused once: the refused form comes back by a GET, with its values.
	b.open(base + "/routes/new")
	b.fill(map[string]string{"#name": "hello", "#paths": "/hello", "#upstream": "ftp://files.example.com"})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`#upstream-error`)))
	if nav := b.eval(`performance.getEntriesByType("navigation")[0].name`); !strings.HasSuffix(nav, base+"/routes/new") {
		t.Errorf("the refused form was drawn for %s", nav)
	}
	if got := b.eval(`document.querySelector("#name").value`); got != "hello" {
		t.Errorf("the refused form lost its values: name %q", got)
	}
	b.do(chromedp.Reload())
	b.waitPath(base + "/routes/new")
	if n := b.count("#upstream-error"); n != 0 {
		t.Error("a reload shows the refused form's message again")
	}
	b.fill(map[string]string{"#name": "hello", "#paths": "/hello", "#upstream": up.URL})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	b.waitPath(base + "/routes?done=route-created")

	// A consumer and a key with a label: shown once, after a redirect; a reload posts
	// nothing and shows it no more.
	b.open(base + "/consumers")
	b.fill(map[string]string{"#name": "mobile-app"})
	b.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)))
	b.waitPath(base + "/consumers/")
	consumerURL := strings.TrimPrefix(strings.SplitN(b.location(), "?", 2)[0], s.api)
	b.fill(map[string]string{"#key-label": "ci", "#key-expires": time.Now().UTC().AddDate(0, 2, 0).Format(time.DateOnly)})
	b.do(chromedp.Click(chromedp.CSS(`form.key-form button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`#new-key`)))
	key := b.eval(`document.querySelector("#new-key").innerText`)
	if loc := strings.TrimPrefix(b.location(), s.api); loc != consumerURL || strings.Contains(loc, key) {
		t.Errorf("after creating the key the browser is on %s, want %s", loc, consumerURL)
	}
	if nav := b.eval(`performance.getEntriesByType("navigation")[0].type`); nav != "navigate" {
		t.Errorf("the key page came by %q", nav)
	}
	// Copy: the button copies, or (no clipboard here) selects the text for Ctrl+C.
	if n := b.count(".snippet button.copy"); n < 1 {
		t.Errorf("the curl snippet has no copy button")
	}
	b.do(chromedp.Click(chromedp.CSS(`.snippet button.copy`)))
	time.Sleep(300 * time.Millisecond) // the clipboard answers asynchronously
	if got := b.eval(`document.querySelector(".snippet button.copy").innerText`); got != "Copied" && got != "Selected: press Ctrl+C" {
		t.Errorf("the copy button says %q after a click", got)
	}
	b.screenshot("console-01-key-shown-once")
	b.do(chromedp.Reload())
	b.waitPath(consumerURL)
	if strings.Contains(b.text(), key) {
		t.Error("a reload shows the key again")
	}
	if n := b.count("table tbody tr"); n != 1 {
		t.Errorf("after a reload the consumer has %d keys, want 1", n)
	}
	b.contains("ci", "never")

	// Usage: a bad range gets its message; names link to the objects.
	b.open(base + "/usage?from=2026-02-10&to=2026-02-01")
	b.do(chromedp.WaitVisible(chromedp.CSS(`#to-error`)))
	b.screenshot("console-02-usage-bad-range")
	for i := 0; i < 3; i++ {
		s.callEdge(t, slug, "/hello", key)
	}

	// Every main page at 390 px: no sideways scroll of the page itself.
	b.do(chromedp.EmulateViewport(390, 844))
	pages := map[string]string{
		"routes": base + "/routes", "route-new": base + "/routes/new", "import": base + "/routes/import",
		"consumers": base + "/consumers", "consumer": consumerURL, "plans": base + "/plans", "plan-new": base + "/plans/new",
		"jwt-issuers": base + "/jwt-issuers", "jwt-issuer-new": base + "/jwt-issuers/new", "policy": base + "/policy",
		"usage": base + "/usage", "audit": base + "/audit", "members": base + "/members", "account": "/console/account",
		"tokens": base + "/tokens", "domains": base + "/domains", "settings": base + "/settings", "tenant-new": "/console/tenants/new",
	}
	for name, path := range pages {
		b.open(path)
		b.do(chromedp.WaitReady(chromedp.CSS("footer")))
		if w := b.eval(fits); w != "ok" {
			t.Errorf("%s (%s) is %s px wide at 390 px: %s", name, path, w, b.eval(widest))
		}
		b.screenshot("console-390-" + name)
	}
	b.signOut()
	for name, path := range map[string]string{"login": "/console/login", "signup": "/console/signup", "forgot": "/console/forgot"} {
		b.open(path)
		if w := b.eval(fits); w != "ok" {
			t.Errorf("%s is %s px wide at 390 px: %s", name, w, b.eval(widest))
		}
		b.screenshot("console-390-" + name)
	}
}

// widest names the elements that reach past the viewport and are not clipped by a box
// that scrolls or hides its overflow, to say what overflows.
const widest = `Array.from(document.querySelectorAll("body *")).filter(e => {
	if (e.getBoundingClientRect().right <= document.documentElement.clientWidth + 0.5) return false;
	for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
		if (getComputedStyle(p).overflowX !== "visible") return false;
	}
	return getComputedStyle(e).display !== "none";
}).sort((a, b) => b.getBoundingClientRect().right - a.getBoundingClientRect().right)
	.slice(0, 6).map(e => e.tagName.toLowerCase() + (e.className ? "." + String(e.className).replace(/ /g, ".") : "") + " " + Math.round(e.getBoundingClientRect().right)).join(", ") || "nothing"`

// fits is "ok" when the page does not scroll sideways at the viewport's width, else its width.
const fits = `(document.documentElement.scrollWidth <= Math.min(390, document.documentElement.clientWidth)) ? "ok" : String(document.documentElement.scrollWidth)`
