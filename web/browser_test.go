package web_test

// Browser tests: the real binary (`tollgate dev`: api + console + edge + embedded NATS, on
// a fresh Postgres database) driven by real headless Chromium through chromedp.
//
// Screenshots of the main pages are written to $TOLLGATE_ARTIFACTS, or to
// web/testdata/screenshots (gitignored).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/aptget"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
	"tollgate/tenants/smtp/smtptest"
)

const chromium = "/usr/bin/chromium"

var (
	binary     string // the built tollgate binary
	noBrowser  string // why the browser tests cannot run; "" when Chromium is there
	artifacts  string
	adminToken = "tgadm_browser_test_0123456789"
)

// TestMain installs Chromium when it is missing (as root, or when CI=true, with apt-get:
// a fresh machine of the project's kind gets what the suite needs) and builds the binary.
func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	if _, err := os.Stat(chromium); err != nil {
		if err := aptget.Install("web", "chromium"); err != nil {
			noBrowser = chromium + " is missing: " + err.Error()
		}
	}
	artifacts = os.Getenv("TOLLGATE_ARTIFACTS")
	if artifacts == "" {
		artifacts = filepath.Join("testdata", "screenshots")
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "tollgate-web-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "tollgate")
	build := exec.Command("go", "build", "-o", binary, "tollgate")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "web: build tollgate:", err)
		return 1
	}
	return m.Run()
}

// ---- the stack

type stack struct {
	api, edge string // base URLs
	edgeAddr  string
	dbURL     string
	out       *syncBuffer
	mail      *smtptest.Server // where the console's mail goes
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDev runs `tollgate dev` on a fresh database and free ports, and waits until the api
// and the edge are ready.
func startDev(t *testing.T) *stack {
	t.Helper()
	// The binary does not trust the test server's CA, so this one offers no STARTTLS;
	// it listens on loopback, where the mailer allows that.
	s := &stack{dbURL: testenv.Postgres(t), out: &syncBuffer{}, mail: smtptest.StartWith(t, smtptest.Options{NoTLS: true})}
	apiAddr, adminAddr := freeAddr(t), freeAddr(t)
	s.edgeAddr = freeAddr(t)
	s.api, s.edge = "http://"+apiAddr, "http://"+s.edgeAddr
	cmd := exec.Command(binary, "dev")
	cmd.Env = append(os.Environ(),
		"TOLLGATE_DATABASE_URL="+s.dbURL,
		"TOLLGATE_API_ADDR="+apiAddr,
		"TOLLGATE_EDGE_ADDR="+s.edgeAddr,
		"TOLLGATE_EDGE_ADMIN_ADDR="+adminAddr,
		// The api's and billing's admin ports default to fixed ones: stacks of tests
		// running at once would fight over them.
		"TOLLGATE_API_ADMIN_ADDR=127.0.0.1:0",
		"TOLLGATE_BILLING_ADMIN_ADDR=127.0.0.1:0",
		"TOLLGATE_DEV_UPSTREAM_ADDR=127.0.0.1:0",
		"TOLLGATE_DEV_STATE=off",
		"TOLLGATE_ADMIN_TOKEN="+adminToken,
		"TOLLGATE_SMTP_URL="+s.mail.URL,
		"TOLLGATE_PUBLIC_URL="+s.api,
		"TOLLGATE_EDGE_DOMAIN=localhost",
		"TOLLGATE_NATS_URL=",
		"TOLLGATE_REDIS_URL=",
		"TOLLGATE_NATS_PREFIX="+testenv.Name("web_"),
	)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("tollgate dev output:\n%s", s.out.String())
		}
	})
	for _, u := range []string{s.api + "/readyz", "http://" + adminAddr + "/readyz"} {
		deadline := time.Now().Add(90 * time.Second)
		for {
			res, err := http.Get(u)
			if err == nil {
				res.Body.Close()
				if res.StatusCode == 200 {
					break
				}
			}
			select {
			case <-done:
				t.Fatalf("tollgate dev exited:\n%s", s.out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready:\n%s", u, s.out.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s
}

// admin calls the management API with the admin token and decodes the JSON answer.
func (s *stack) admin(t *testing.T, method, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, s.api+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v map[string]any
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 || json.Unmarshal(b, &v) != nil {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return v
}

// callEdge calls the edge as a client of tenant slug would.
func (s *stack) callEdge(t *testing.T, slug, path, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.edge+path, nil)
	req.Host = slug + ".localhost"
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// ---- the browser

type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
}

// newBrowser starts a Chromium of its own (fresh profile, so fresh cookies) with exactly
// the flags the suite allows.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	b := &browser{t: t, ctx: ctx, base: base}
	// The first action starts the browser, which lives as long as that action's context:
	// no timeout on it.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v\npage: %s", err, b.text())
	}
}

func (b *browser) open(path string) { b.t.Helper(); b.do(chromedp.Navigate(b.base + path)) }

// text is the visible text of the page.
func (b *browser) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
	return s
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return s
}

func (b *browser) location() string {
	s, _ := chromedp.Run(b.ctx, chromedp.Location())
	return s
}

// waitPath waits until the browser is on a URL whose path and query start with prefix.
func (b *browser) waitPath(prefix string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.HasPrefix(strings.TrimPrefix(b.location(), b.base), prefix) {
		if time.Now().After(deadline) {
			b.t.Fatalf("browser is on %s, want %s…\npage: %s", b.location(), prefix, b.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.do(chromedp.WaitReady(chromedp.CSS("footer")))
}

func (b *browser) fill(fields map[string]string) {
	b.t.Helper()
	for sel, v := range fields {
		b.do(chromedp.SetValue(chromedp.CSS(sel), v))
	}
}

func (b *browser) contains(want ...string) {
	b.t.Helper()
	txt := b.text()
	for _, w := range want {
		if !strings.Contains(txt, w) {
			b.t.Errorf("page %s does not show %q; it shows:\n%s", b.location(), w, txt)
		}
	}
}

func (b *browser) count(css string) int {
	b.t.Helper()
	n := b.eval(`String(document.querySelectorAll(` + jsString(css) + `).length)`)
	var i int
	fmt.Sscan(n, &i)
	return i
}

func jsString(s string) string { j, _ := json.Marshal(s); return string(j) }

func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(artifacts, name+".png"), png, 0o644); err != nil {
		b.t.Error(err)
	}
}

const password = "correct horse battery"

// signUp creates the account and its tenant, and signs in with the password (sign-up
// itself signs nobody in; the address stays unverified until its mailed link is followed).
func (b *browser) signUp(email, slug string) {
	b.t.Helper()
	b.open("/console/signup")
	b.fill(map[string]string{"#email": email, "#password": password, "#slug": slug, "#name": "Tenant " + slug})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`[data-notice]`)))
	b.contains("Check your inbox", email)
	b.signIn(email, "/console/t/"+slug+"/routes")
}

// apiFetch calls the management API from the page, with the session cookie and the
// page's CSRF token, and returns the status.
func (b *browser) apiFetch(method, path, body string) string {
	return b.eval(`fetch(` + jsString(path) + `, {method: ` + jsString(method) + `, credentials: "same-origin",
		headers: {"Content-Type": "application/json", "X-CSRF-Token": document.querySelector("input[name=_csrf]").value},
		body: ` + map[bool]string{true: jsString(body), false: "undefined"}[body != ""] + `}).then(r => String(r.status))`)
}

func upstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"hello":"world","path":%q}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// ---- the tests

// TestConsole walks the product: sign up, create a route (after a validation error shown
// at the field), a consumer and a key, call the edge with it, see the calls on the usage
// page and the changes in the audit log; then a viewer, a forged form and another
// tenant's user.
func TestConsole(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	up := upstream(t)
	suffix := testenv.Name("")[:6]
	slugA, slugB := "acme-"+suffix, "globex-"+suffix
	ownerEmail, otherEmail := "owner-"+suffix+"@example.com", "viewer-"+suffix+"@example.com"
	_, edgePort, _ := net.SplitHostPort(s.edgeAddr)

	owner := newBrowser(t, s.api)

	// Sign-up errors are shown at the field.
	owner.open("/console/signup")
	owner.fill(map[string]string{"#email": "not-an-address", "#password": "short", "#slug": "Bad_Slug"})
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`.field-error`)))
	if owner.count(".field-error") < 2 {
		t.Errorf("sign-up with bad fields shows %d field errors:\n%s", owner.count(".field-error"), owner.text())
	}
	owner.screenshot("01-signup-errors")

	owner.signUp(ownerEmail, slugA)
	curl := "curl -i http://" + slugA + ".localhost:" + edgePort + "/hello"
	owner.contains("Put your first API on the edge", curl, "owner")
	owner.screenshot("02-routes-empty")

	// A route: first with an upstream the API refuses, then a good one.
	owner.do(chromedp.Click(chromedp.CSS(`a[href$="/routes/new"]`)))
	owner.waitPath("/console/t/" + slugA + "/routes/new")
	owner.fill(map[string]string{"#name": "hello", "#paths": "/hello", "#upstream": "ftp://files.example.com"})
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`#upstream-error`)))
	if msg := owner.eval(`document.querySelector("#upstream-error").innerText`); !strings.Contains(msg, "http") {
		t.Errorf("upstream error says %q, want the API's rule about http(s)", msg)
	}
	owner.screenshot("03-route-form-error")
	owner.fill(map[string]string{"#upstream": up.URL})
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	owner.waitPath("/console/t/" + slugA + "/routes?done=route-created")
	owner.contains("hello", "/hello", "Route created")
	owner.screenshot("04-routes")

	// A consumer and a key, shown once.
	owner.open("/console/t/" + slugA + "/consumers")
	owner.contains("No consumers yet")
	owner.fill(map[string]string{"#name": "mobile-app"})
	owner.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)))
	owner.waitPath("/console/t/" + slugA + "/consumers/")
	consumerURL := strings.TrimPrefix(strings.SplitN(owner.location(), "?", 2)[0], s.api)
	owner.do(chromedp.Click(chromedp.CSS(`form.key-form button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`#new-key`)))
	key := owner.eval(`document.querySelector("#new-key").innerText`)
	if !strings.HasPrefix(key, "tg_") {
		t.Fatalf("new key %q", key)
	}
	owner.contains("shown only this once", "X-API-Key: "+key)
	owner.screenshot("05-key-created")
	owner.open(consumerURL)
	if strings.Contains(owner.text(), key) {
		t.Error("the key's plaintext is shown again after the page is reloaded")
	}

	// The edge serves the route with the key (once the config has reached it).
	deadline := time.Now().Add(15 * time.Second)
	for s.callEdge(t, slugA, "/hello", key) != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("the edge never served /hello with the new key")
		}
		time.Sleep(200 * time.Millisecond)
	}
	ok, denied := 1, 0
	for i := 0; i < 4; i++ {
		if s.callEdge(t, slugA, "/hello", key) == 200 {
			ok++
		}
	}
	for i := 0; i < 2; i++ {
		if s.callEdge(t, slugA, "/hello", "") == 401 {
			denied++
		}
	}

	// Usage. `dev` runs the edge's meter and billing, which fold the calls into the rollups
	// within a few seconds. Should that path not deliver (the meter off in this build),
	// the test folds the calls it made itself, as the meter's batch would, and still checks
	// the page draws them, saying so in the log.
	tenant := s.admin(t, "GET", "/v1/tenants/"+slugA)
	routes := s.admin(t, "GET", "/v1/tenants/"+slugA+"/routes")
	routeID := routes["items"].([]any)[0].(map[string]any)["id"].(string)

	// Balancing and a canary from the route form: a bad share first, then a good one.
	owner.open("/console/t/" + slugA + "/routes/" + routeID)
	owner.fill(map[string]string{"#balance": "least_conn", "#canary": up.URL + "/next", `input[name=canary_weight]`: "150"})
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`#canary-error`)))
	if msg := owner.eval(`document.querySelector("#canary-error").innerText`); !strings.Contains(msg, "100") {
		t.Errorf("canary error says %q, want the 0–100 rule", msg)
	}
	owner.fill(map[string]string{`input[name=canary_weight]`: "10"})
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	owner.waitPath("/console/t/" + slugA + "/routes?done=route-updated")
	stored := s.admin(t, "GET", "/v1/tenants/"+slugA+"/routes/"+routeID)
	if got := fmt.Sprint(stored["upstream"].(map[string]any)["balance"], stored["canary"]); !strings.Contains(got, "least_conn") || !strings.Contains(got, "weight:10") || !strings.Contains(got, "/next") {
		t.Errorf("after saving the form the route's balance and canary are %s", got)
	}
	total := fmt.Sprint(ok + denied)
	got := ""
	for end := time.Now().Add(20 * time.Second); got != total && time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		owner.open("/console/t/" + slugA + "/usage")
		got = owner.eval(`document.querySelector("[data-testid=total]").innerText`)
	}
	if got != total {
		t.Logf("usage shows %s requests after 20 s: the edge meter did not feed the rollups; folding the %s calls made", got, total)
		store, err := billingpg.Open(context.Background(), s.dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		hour := billing.Hour(time.Now())
		rec := func(class, n int, billable bool) usage.Record {
			c := usage.Counts{Requests: int64(n)}
			if billable {
				c.Billable = int64(n)
			}
			return usage.Record{TenantID: tenant["id"].(string), Hour: hour, RouteID: routeID, Class: class, Counts: c}
		}
		_, err = store.Fold(context.Background(), &usage.Batch{ID: usage.BatchID("web-test", suffix, 1), EdgeID: "web-test", BootID: suffix, Seq: 1,
			Created: time.Now().UTC(), Records: []usage.Record{rec(2, ok, true), rec(4, denied, false)}})
		if err != nil {
			t.Fatal(err)
		}
		owner.open("/console/t/" + slugA + "/usage")
	}
	if got := owner.eval(`document.querySelector("[data-testid=total]").innerText`); got != total {
		t.Errorf("usage total %q, want %s", got, total)
	}
	if n := owner.count("svg.chart rect.bar"); n < 3 {
		t.Errorf("usage charts have %d bars, want the range's hours or days, a route and the statuses", n)
	}
	owner.contains("Requests over time", "By route", "By status", "hello", "2xx", "4xx")
	owner.screenshot("06-usage")

	owner.open("/console/t/" + slugA + "/audit")
	owner.contains(ownerEmail, "routes.create", "consumers.create", "keys.create", "tenant.create")
	owner.screenshot("07-audit")

	// Another tenant's user sees nothing of tenant A: 404 pages and 404 from the API.
	other := newBrowser(t, s.api)
	other.signUp(otherEmail, slugB)
	for _, p := range []string{"/console/t/" + slugA + "/routes", "/console/t/" + slugA + "/routes/" + routeID, consumerURL, "/console/t/" + slugA + "/usage"} {
		other.open(p)
		if !strings.Contains(other.text(), "Not found") || other.count(`[data-status="404"]`) != 1 {
			t.Errorf("tenant B's user on %s sees:\n%s", p, other.text())
		}
	}
	other.screenshot("08-other-tenant-404")
	other.open("/console/t/" + slugB + "/routes")
	if st := other.apiFetch("GET", "/v1/tenants/"+slugA+"/routes", ""); st != "404" {
		t.Errorf("tenant B's user reading tenant A's routes through the API: %s, want 404", st)
	}

	// The owner invites B's user as a viewer of A; B accepts from the mailed link once its
	// address is verified.
	owner.open("/console/t/" + slugA + "/members")
	owner.fill(map[string]string{"#email": otherEmail, "#role": "viewer"})
	owner.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)))
	owner.waitPath("/console/t/" + slugA + "/members?done=member-invited")
	owner.contains(otherEmail, "viewer")
	owner.screenshot("09-members")
	invitation := s.inviteLink(t, otherEmail)
	other.open(invitation)
	other.contains("Verify your address first")
	s.verifyEmail(t, otherEmail)
	other.open(invitation)
	other.do(chromedp.Click(chromedp.CSS(`[data-testid=accept]`)))
	other.waitPath("/console/t/" + slugA + "/routes?done=invite-accepted")

	// The viewer sees no write controls, and the API and the forms refuse its writes.
	viewer := other
	viewer.open("/console/t/" + slugA + "/routes")
	viewer.contains("hello", "viewer")
	for _, css := range []string{`a[href$="/routes/new"]`, `form[action$="/delete"]`, `td.actions a`} {
		if n := viewer.count(css); n != 0 {
			t.Errorf("the viewer sees %d write controls %s", n, css)
		}
	}
	viewer.screenshot("10-viewer-routes")
	viewer.open("/console/t/" + slugA + "/routes/" + routeID)
	if viewer.count(`fieldset[disabled]`) != 1 || viewer.count(`button[type=submit].primary`) != 0 {
		t.Errorf("the viewer's route page is editable:\n%s", viewer.text())
	}
	viewer.open(consumerURL)
	if viewer.count(`form[action$="/keys"]`) != 0 {
		t.Error("the viewer sees the Create key button")
	}
	route := `{"name":"sneaky","paths":["/sneaky"],"upstream":{"targets":[{"url":"` + up.URL + `","weight":1}]}}`
	if st := viewer.apiFetch("POST", "/v1/tenants/"+slugA+"/routes", route); st != "403" {
		t.Errorf("the viewer's API write: %s, want 403", st)
	}
	if st := viewer.apiFetch("GET", "/v1/tenants/"+slugA+"/routes", ""); st != "200" {
		t.Errorf("the viewer's API read: %s, want 200", st)
	}
	if st := viewer.apiFetch("DELETE", "/v1/tenants/"+slugA+"/routes/"+routeID, ""); st != "403" {
		t.Errorf("the viewer's API delete: %s, want 403", st)
	}
	st := viewer.eval(`fetch("/console/t/` + slugA + `/routes/` + routeID + `/delete", {method: "POST", credentials: "same-origin",
		body: new URLSearchParams({_csrf: document.querySelector("input[name=_csrf]").value})}).then(r => String(r.status))`)
	if st != "403" {
		t.Errorf("the viewer posting the delete form: %s, want 403", st)
	}

	// A form posted without its CSRF token is refused, and changes nothing.
	owner.open("/console/t/" + slugA + "/routes/new")
	owner.fill(map[string]string{"#name": "forged", "#paths": "/forged", "#upstream": up.URL})
	owner.eval(`document.querySelector("form.form input[name=_csrf]").remove(); "ok"`)
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`[data-status="403"]`)))
	owner.contains("Request refused")
	owner.screenshot("11-csrf-refused")
	owner.open("/console/t/" + slugA + "/routes")
	if strings.Contains(owner.text(), "forged") {
		t.Error("the forged form created a route")
	}

	// Signing out ends the session on the server too.
	owner.do(chromedp.Click(chromedp.CSS(`.who button[type=submit]`)))
	owner.waitPath("/console/login")
	owner.screenshot("12-login")
	owner.open("/console/t/" + slugA + "/routes")
	owner.waitPath("/console/login")
}
