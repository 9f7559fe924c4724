package portal_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/infra/testcert"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web/portal"
)

const password = "correct horse battery"

type env struct {
	t    *testing.T
	db   *postgres.DB
	app  *fiber.App
	p    *portal.Portal
	mail *smtptest.Server
}

// newEnv serves the portals of a fresh database on a Fiber app, mailing through a real
// SMTP server.
func newEnv(t *testing.T) *env {
	t.Helper()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	app := fiber.New(fiber.Config{Immutable: true})
	p := portal.New(portal.Config{Tenants: db, Consumers: db, Plans: db, Routes: db, Portals: db, Throttle: db,
		Mailer: mail.Mailer(t), PublicURL: "http://api.test", HostRefresh: time.Hour})
	p.Mount(app)
	return &env{t: t, db: db, app: app, p: p, mail: mail}
}

func (e *env) tenant(slug string, on bool) *tenants.Tenant {
	e.t.Helper()
	tn := &tenants.Tenant{Slug: slug, Name: "Tenant " + slug, PlatformPlan: tenants.PlatformUnlimited}
	if err := e.db.CreateTenant(context.Background(), tn); err != nil {
		e.t.Fatal(err)
	}
	if on {
		if err := e.db.PutPortal(context.Background(), &tenants.PortalSettings{TenantID: tn.ID, Enabled: true}); err != nil {
			e.t.Fatal(err)
		}
	}
	return tn
}

// client is a browser of the test: its own cookies, following no redirects.
type client struct {
	e    *env
	jar  *cookiejar.Jar
	host string
}

func (e *env) client(host string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{e: e, jar: jar, host: host}
}

type answer struct {
	status   int
	body     string
	location string
}

func (c *client) do(method, path string, form neturl.Values) answer {
	c.e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, "http://"+c.host+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, ck := range c.jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	res, err := c.e.app.Test(req, 10_000)
	if err != nil {
		c.e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	c.jar.SetCookies(req.URL, res.Cookies())
	b, _ := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, body: string(b), location: res.Header.Get("Location")}
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// post sends a form from the page at from, with that page's CSRF token, and follows
// the redirect back to that page, as a browser would (a POST never answers with a page:
// a form shown again comes from the GET it redirects to).
func (c *client) post(from, path string, form neturl.Values) answer {
	c.e.t.Helper()
	page := c.do("GET", from, nil)
	m := csrfRE.FindStringSubmatch(page.body)
	if m == nil {
		c.e.t.Fatalf("GET %s (%d) has no form token:\n%s", from, page.status, page.body)
	}
	form.Set("_csrf", m[1])
	return c.back(from, c.do("POST", path, form))
}

// back follows a POST's redirect to the form's page from.
func (c *client) back(from string, a answer) answer {
	c.e.t.Helper()
	if a.status != http.StatusSeeOther {
		c.e.t.Errorf("a POST answered %d, not 303:\n%s", a.status, a.body)
		return a
	}
	if path, _, _ := strings.Cut(from, "?"); a.location != path {
		return a
	}
	return c.do("GET", a.location, nil)
}

func (a answer) want(t *testing.T, status int, texts ...string) {
	t.Helper()
	if a.status != status {
		t.Errorf("status %d, want %d:\n%s", a.status, status, a.body)
	}
	for _, s := range texts {
		if !strings.Contains(a.body, s) {
			t.Errorf("the page does not say %q:\n%s", s, a.body)
		}
	}
}

// signUp makes a verified account at slug's portal and signs c in.
func (c *client) signUp(slug, email string) {
	c.e.t.Helper()
	base := "/portal/" + slug
	c.post(base+"/signup", base+"/signup", neturl.Values{"email": {email}, "password": {password}}).want(c.e.t, 200, "Check your inbox")
	link := smtptest.Link(c.e.t, c.e.mail.WaitFor(c.e.t, email), "http://api.test"+base+"/verify")
	u, _ := neturl.Parse(link)
	c.do("GET", u.RequestURI(), nil).want(c.e.t, 200, "Address verified")
	a := c.post(base+"/login", base+"/login", neturl.Values{"email": {email}, "password": {password}})
	if a.status != 303 || a.location != base+"/keys" {
		c.e.t.Fatalf("sign-in: %d %s\n%s", a.status, a.location, a.body)
	}
}

// TestPortalOff: a portal that is off, or of no tenant, is the same bare 404.
func TestPortalOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("off", false)
	c := e.client("api.test")
	for _, p := range []string{"/portal/off/", "/portal/off/signup", "/portal/off/keys", "/portal/nobody/", "/portal/Bad_Slug/"} {
		a := c.do("GET", p, nil)
		if a.status != 404 || a.body != "Not found." {
			t.Errorf("GET %s: %d %q", p, a.status, a.body)
		}
	}
	if a := c.do("POST", "/portal/off/signup", neturl.Values{"email": {"x@example.com"}}); a.status != 404 {
		t.Errorf("POST to a portal that is off: %d", a.status)
	}
}

// TestPortalForms: every form's bad input is shown next to its field and writes
// nothing; a forged form is refused; sign-in waits for the verified address.
func TestPortalForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.tenant("acme", true)
	c := e.client("api.test")
	ctx := context.Background()

	c.post("/portal/acme/signup", "/portal/acme/signup", neturl.Values{"email": {"not-an-address"}, "password": {"short"}}).
		want(t, 422, `id="email-error"`, `id="password-error"`, `value="not-an-address"`)
	c.back("/portal/acme/signup", c.do("POST", "/portal/acme/signup", neturl.Values{"email": {"dev@example.com"}, "password": {password}, "_csrf": {"forged"}})).
		want(t, 403, "Request refused")
	// Reloading the page after a refused form draws the form afresh.
	c.do("GET", "/portal/acme/signup", nil).want(t, 200, "Create your account")
	if _, err := e.db.FindPortalAccountByEmail(ctx, a.ID, "dev@example.com"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("a refused sign-up made an account: %v", err)
	}

	c.post("/portal/acme/signup", "/portal/acme/signup", neturl.Values{"email": {"dev@example.com"}, "password": {password}}).want(t, 200, "Check your inbox")
	msg := e.mail.WaitFor(t, "dev@example.com")
	c.post("/portal/acme/login", "/portal/acme/login", neturl.Values{"email": {"dev@example.com"}, "password": {password}}).want(t, 403, "Verify your address first", `data-testid="resend"`)
	c.post("/portal/acme/login", "/portal/acme/verify/resend", neturl.Values{"email": {"dev@example.com"}}).want(t, 200, "we sent it a new link")
	if again := e.mail.WaitFor(t, "dev@example.com"); !strings.Contains(again.Text, "new link") {
		t.Errorf("the resent mail: %s", again.Text)
	}
	c.post("/portal/acme/login", "/portal/acme/login", neturl.Values{"email": {"dev@example.com"}, "password": {"wrong password!"}}).want(t, 401, "not right")

	// The same address again: the same answer, and a note to the mailbox.
	c.post("/portal/acme/signup", "/portal/acme/signup", neturl.Values{"email": {"dev@example.com"}, "password": {password}}).want(t, 200, "Check your inbox")
	if n := e.mail.WaitFor(t, "dev@example.com"); !strings.Contains(n.Subject, "tried to sign up") || len(smtptest.Links(n)) != 2 {
		t.Errorf("a second sign-up mails %q:\n%s", n.Subject, n.Text)
	}

	u, _ := neturl.Parse(smtptest.Link(t, msg, "http://api.test/portal/acme/verify"))
	c.do("GET", u.RequestURI(), nil).want(t, 200, "Address verified")
	c.do("GET", u.RequestURI(), nil).want(t, 404, "does not work")
	acc, err := e.db.FindPortalAccountByEmail(ctx, a.ID, "dev@example.com")
	if err != nil || !acc.EmailVerified || acc.ConsumerID == "" {
		t.Fatalf("after verification: %+v %v", acc, err)
	}
	cons, err := e.db.FindConsumer(ctx, a.ID, acc.ConsumerID)
	if err != nil || cons.Name != "dev@example.com" {
		t.Fatalf("the account's consumer: %+v %v", cons, err)
	}
	entries, _, _ := e.db.ListAudit(ctx, a.ID, tenants.AuditQuery{Page: tenants.Page{}})
	if len(entries) == 0 || entries[0].Actor != "portal:dev@example.com" || entries[0].Action != "consumers.create" {
		t.Errorf("audit: %+v", entries)
	}

	if r := c.post("/portal/acme/login", "/portal/acme/login", neturl.Values{"email": {"dev@example.com"}, "password": {password}}); r.status != 303 {
		t.Fatalf("sign-in: %d %s", r.status, r.body)
	}
	c.post("/portal/acme/keys", "/portal/acme/keys", neturl.Values{"label": {strings.Repeat("x", 101)}}).want(t, 422, `id="label-error"`, "at most 100")
	c.post("/portal/acme/keys", "/portal/acme/keys", neturl.Values{"label": {"ci"}, "expires": {"2000-01-01"}}).want(t, 422, `id="expires-error"`)
	c.post("/portal/acme/keys", "/portal/acme/keys", neturl.Values{"label": {"ci"}, "expires": {"next week"}}).want(t, 422, `id="expires-error"`, "YYYY-MM-DD")
	if keys, _, _ := e.db.ListKeys(ctx, a.ID, acc.ConsumerID, tenants.Page{}); len(keys) != 0 {
		t.Errorf("refused key forms made keys: %v", keys)
	}

	// A good key: the plaintext on the next page only, never in the URL.
	page := c.post("/portal/acme/keys", "/portal/acme/keys", neturl.Values{"label": {"ci"}, "expires": {time.Now().AddDate(0, 1, 0).Format("2006-01-02")}})
	key := regexp.MustCompile(`id="new-key">(tg_[0-9A-Za-z]+)<`).FindStringSubmatch(page.body)
	if key == nil {
		t.Fatalf("no new key on the page:\n%s", page.body)
	}
	keys, _, _ := e.db.ListKeys(ctx, a.ID, acc.ConsumerID, tenants.Page{})
	if len(keys) != 1 || keys[0].Label != "ci" || keys[0].ExpiresAt == nil || keys[0].Hash != tenants.HashSecret(key[1]) {
		t.Fatalf("stored keys: %+v", keys)
	}
	if again := c.do("GET", "/portal/acme/keys", nil); strings.Contains(again.body, key[1]) || !strings.Contains(again.body, keys[0].Prefix) {
		t.Error("the key's plaintext was shown twice, or the list lacks it")
	}
	if r := c.post("/portal/acme/keys", "/portal/acme/keys/"+keys[0].ID+"/delete", neturl.Values{}); r.status != 303 || !strings.Contains(r.location, "key-revoked") {
		t.Errorf("revoke: %d %s", r.status, r.location)
	}
	if keys, _, _ := e.db.ListKeys(ctx, a.ID, acc.ConsumerID, tenants.Page{}); len(keys) != 0 {
		t.Errorf("after revoking: %v", keys)
	}
	// Revoking someone else's key id is a 404 and changes nothing.
	c.post("/portal/acme/keys", "/portal/acme/keys/00000000-0000-0000-0000-000000000001/delete", neturl.Values{}).want(t, 404)

	// Plans: a private plan is not offered; a public free plan is chosen at once.
	for _, pl := range []*tenants.ConsumerPlan{{TenantID: a.ID, Name: "internal"}, {TenantID: a.ID, Name: "starter", Public: true, Description: "For trying it out", Quota: &tenants.Quota{Requests: 1000}}} {
		if err := e.db.CreatePlan(ctx, pl); err != nil {
			t.Fatal(err)
		}
	}
	plans := c.do("GET", "/portal/acme/plans", nil)
	plans.want(t, 200, "starter", "For trying it out", "1,000 requests per month")
	if strings.Contains(plans.body, "internal") {
		t.Error("a private plan is offered")
	}
	c.post("/portal/acme/plans", "/portal/acme/plans/choose", neturl.Values{"plan": {"internal"}}).want(t, 422, "no plan")
	if r := c.post("/portal/acme/plans", "/portal/acme/plans/choose", neturl.Values{"plan": {"starter"}}); r.status != 303 {
		t.Errorf("choose: %d %s", r.status, r.body)
	}
	if cons, _ := e.db.FindConsumer(ctx, a.ID, acc.ConsumerID); cons.Plan != "starter" {
		t.Errorf("the consumer's plan is %q", cons.Plan)
	}
	c.do("GET", "/portal/acme/usage", nil).want(t, 200, "Usage is not collected here")
}

// TestPortalIsolation: a session of tenant A's portal is nothing at tenant B's, even
// under B's cookie name; the same address signs up at both separately.
func TestPortalIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("alpha", true)
	e.tenant("beta", true)
	c := e.client("api.test")
	c.signUp("alpha", "dev@example.com")
	c.do("GET", "/portal/alpha/keys", nil).want(t, 200, "dev@example.com")
	if r := c.do("GET", "/portal/beta/keys", nil); r.status != 303 || r.location != "/portal/beta/login" {
		t.Errorf("alpha's session at beta: %d %s", r.status, r.location)
	}
	u, _ := neturl.Parse("http://api.test/portal/alpha/")
	var raw string
	for _, ck := range c.jar.Cookies(u) {
		if ck.Name == "tollgate_portal_alpha" {
			raw = ck.Value
		}
	}
	if raw == "" {
		t.Fatal("no session cookie for alpha")
	}
	forged := e.client("api.test")
	forged.jar.SetCookies(&neturl.URL{Scheme: "http", Host: "api.test", Path: "/portal/beta/"},
		[]*http.Cookie{{Name: "tollgate_portal_beta", Value: raw, Path: "/portal/beta/"}})
	if r := forged.do("GET", "/portal/beta/keys", nil); r.status != 303 {
		t.Errorf("alpha's cookie value under beta's name: %d", r.status)
	}
	other := e.client("api.test")
	other.signUp("beta", "dev@example.com")
	other.do("GET", "/portal/beta/keys", nil).want(t, 200, "No keys yet")
}

// TestPortalCustomDomain: the portal answers at / on its verified domain, with links
// and cookies at /, and no other host is touched.
func TestPortalCustomDomain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a := e.tenant("acme", true)
	leaf := testcert.NewCA(t).Issue(t, []string{"developers.acme.example"}, time.Time{}, time.Time{})
	d := &tenants.Domain{TenantID: a.ID, Hostname: "developers.acme.example", CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM}
	if err := e.db.CreateDomain(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.RecordProof(ctx, a.ID, d.ID, d.Verification.Value, tenants.Proof{Outcome: tenants.ProofFound}, time.Now(), tenants.DomainSchedule{}, true); err != nil {
		t.Fatal(err)
	}
	if err := e.db.PutPortal(ctx, &tenants.PortalSettings{TenantID: a.ID, Enabled: true, DisplayName: "Acme developers", DomainID: d.ID}); err != nil {
		t.Fatal(err)
	}
	e.p.Refresh()
	custom := e.client("developers.acme.example:8080")
	home := custom.do("GET", "/", nil)
	home.want(t, 200, "Acme developers", `href="/signup"`, `href="/portal.css"`)
	if strings.Contains(home.body, "/portal/acme") {
		t.Error("the custom domain's page links under /portal/acme")
	}
	if r := custom.do("GET", "/signup", nil); r.status != 200 {
		t.Errorf("GET /signup on the custom domain: %d", r.status)
	}
	u, _ := neturl.Parse("http://developers.acme.example:8080/")
	if cks := custom.jar.Cookies(u); len(cks) != 1 || cks[0].Name != "tollgate_portal_acme_csrf" {
		t.Errorf("cookies at / of the custom domain: %v", cks)
	}
	// Any other host: the app's own routes, untouched (here, none at /).
	if r := e.client("other.example").do("GET", "/", nil); r.status != 404 || strings.Contains(r.body, "Acme") {
		t.Errorf("another host at /: %d %s", r.status, r.body)
	}
	e.client("api.test").do("GET", "/portal/acme/", nil).want(t, 200, "Acme developers")
	// Turned off, the domain serves nothing of the portal.
	if err := e.db.PutPortal(ctx, &tenants.PortalSettings{TenantID: a.ID, Enabled: false, DomainID: d.ID}); err != nil {
		t.Fatal(err)
	}
	e.p.Refresh()
	if r := custom.do("GET", "/", nil); r.status != 404 {
		t.Errorf("the custom domain of a portal turned off: %d", r.status)
	}
}

// TestPortalDocs: the imported OpenAPI document's operations, with their parameters and
// shapes; without one, the tenant's routes; always the edge's URL and a curl line.
func TestPortalDocs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a := e.tenant("acme", true)
	c := e.client("api.test")
	// No routes: no curl line that would answer 404.
	empty := c.do("GET", "/portal/acme/", nil)
	empty.want(t, 200, "serves no endpoints yet")
	if strings.Contains(empty.body, `data-testid="curl"`) {
		t.Errorf("a tenant without routes gets a curl line:\n%s", empty.body)
	}
	r := &tenants.Route{TenantID: a.ID, Name: "orders", Paths: []string{"/orders"}, Methods: []string{"GET"}, Auth: tenants.AuthKey,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "https://orders.example.com"}}}}
	if err := e.db.CreateRoute(ctx, r); err != nil {
		t.Fatal(err)
	}
	c.do("GET", "/portal/acme/", nil).want(t, 200, "/orders", `<span class="badge">key</span>`, "http://acme.localhost:8000/",
		"curl -i -H &#39;X-API-Key: YOUR_KEY&#39; http://acme.localhost:8000/orders")

	doc := `openapi: 3.0.3
info: {title: Orders API, version: "2.1", description: Orders of the shop.}
servers: [{url: "https://api.example.com/v2"}]
security: [{key: []}]
components:
  securitySchemes: {key: {type: apiKey, in: header, name: X-API-Key}}
  schemas:
    Order: {type: object, required: [id], properties: {id: {type: string}, total: {type: integer, format: int64}}}
paths:
  /orders/{id}:
    parameters: [{name: id, in: path, required: true, schema: {type: string}, description: The order's id}]
    get:
      summary: Read an order
      parameters: [{name: expand, in: query, schema: {type: boolean}}]
      responses:
        "200": {description: The order, content: {application/json: {schema: {$ref: "#/components/schemas/Order"}}}}
        "404": {description: No such order}
    put:
      summary: Replace an order
      requestBody: {content: {application/json: {schema: {$ref: "#/components/schemas/Order"}}}}
      responses: {"204": {description: Replaced}}
`
	if err := e.db.SaveAPIDoc(ctx, a.ID, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	page := c.do("GET", "/portal/acme/", nil)
	// The import was told no prefix: the routes serve /orders/…, not the server's /v2.
	page.want(t, 200, "Orders API", "2.1", "Orders of the shop.", "Read an order", "Replace an order", "The order&#39;s id",
		"expand", `<code class="name">id</code> <span class="req">required</span> <span class="type">string</span>`,
		`<span class="type">integer (int64)</span>`, "No such order", "<code>/orders/{id}</code>",
		"curl -i -H &#39;X-API-Key: YOUR_KEY&#39; http://acme.localhost:8000/orders/ID")
	// The route answers GET only: the PUT is drawn as not served.
	if n := strings.Count(page.body, `data-testid="unserved"`); n != 1 {
		t.Errorf("%d operations marked unserved, want 1 (the PUT)", n)
	}
	if n := strings.Count(page.body, `data-testid="operation"`); n != 2 {
		t.Errorf("%d operations drawn, want 2", n)
	}
	// A document that describes none of what the routes serve: the example calls a route,
	// whose page opens.
	if err := e.db.SaveAPIDoc(ctx, a.ID, []byte(`{"openapi":"3.0.3","info":{"title":"Old","version":"1"},"paths":{"/gone":{"get":{"responses":{"200":{"description":"ok"}}}}}}`)); err != nil {
		t.Fatal(err)
	}
	old := c.do("GET", "/portal/acme/", nil)
	old.want(t, 200, `data-testid="unserved"`, "curl -i -H &#39;X-API-Key: YOUR_KEY&#39; http://acme.localhost:8000/orders")
	if m := regexp.MustCompile(`For example, <a href="([^"]+)"`).FindStringSubmatch(old.body); m == nil {
		t.Errorf("no link to the example's operation:\n%s", old.body)
	} else {
		c.do("GET", m[1], nil).want(t, 200, "Try it", "/orders")
	}
	// A document that cannot be read leaves the routes in its place.
	if err := e.db.SaveAPIDoc(ctx, a.ID, []byte("{not a document")); err != nil {
		t.Fatal(err)
	}
	c.do("GET", "/portal/acme/", nil).want(t, 200, "<h2>Endpoints</h2>", "/orders")
}

// TestPortalPasswordReset: a reset link sets a new password once and ends the
// account's sessions; an unknown address gets the same answer and no mail.
func TestPortalPasswordReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme", true)
	c := e.client("api.test")
	c.signUp("acme", "dev@example.com")
	c.do("GET", "/portal/acme/keys", nil).want(t, 200)

	other := e.client("api.test")
	other.post("/portal/acme/forgot", "/portal/acme/forgot", neturl.Values{"email": {"nobody@example.com"}}).want(t, 200, "If nobody@example.com has an account")
	other.post("/portal/acme/forgot", "/portal/acme/forgot", neturl.Values{"email": {"dev@example.com"}}).want(t, 200, "If dev@example.com has an account")
	e.mail.NoMoreFor(t, "nobody@example.com", 200*time.Millisecond)
	u, _ := neturl.Parse(smtptest.Link(t, e.mail.WaitFor(t, "dev@example.com"), "http://api.test/portal/acme/reset"))
	form := "/portal/acme/reset?" + u.RawQuery
	other.post(form, "/portal/acme/reset", neturl.Values{"token": {u.Query().Get("token")}, "password": {"short"}}).want(t, 422, `id="password-error"`)
	r := other.post(form, "/portal/acme/reset", neturl.Values{"token": {u.Query().Get("token")}, "password": {"a new long password"}})
	if r.status != 303 || r.location != "/portal/acme/login?done=password-reset" {
		t.Fatalf("reset: %d %s", r.status, r.location)
	}
	other.post(form, "/portal/acme/reset", neturl.Values{"token": {u.Query().Get("token")}, "password": {"another long password"}}).want(t, 404, "does not work")
	if r := c.do("GET", "/portal/acme/keys", nil); r.status != 303 {
		t.Errorf("a session outlived the reset: %d", r.status)
	}
	if r := other.post("/portal/acme/login", "/portal/acme/login", neturl.Values{"email": {"dev@example.com"}, "password": {"a new long password"}}); r.status != 303 || r.location != "/portal/acme/keys" {
		t.Errorf("sign-in with the new password: %d %s", r.status, r.location)
	}
}

// TestPortalSignUpThrottle: sign-ups from one address stop at the console's limit, with
// Retry-After and the message on the form.
func TestPortalSignUpThrottle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme", true)
	c := e.client("api.test")
	for i := 0; i < 10; i++ {
		c.post("/portal/acme/signup", "/portal/acme/signup", neturl.Values{"email": {"dev" + strconv.Itoa(i) + "@example.com"}, "password": {password}}).want(t, 200, "Check your inbox")
	}
	c.post("/portal/acme/signup", "/portal/acme/signup", neturl.Values{"email": {"dev10@example.com"}, "password": {password}}).want(t, 429, "Too many sign-ups")
}

// TestPortalLook: the tenant's name, colours and logo, all from the portal's own origin
// under a CSP that allows nothing else.
func TestPortalLook(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.tenant("acme", false)
	png := []byte("\x89PNG\r\n\x1a\nimage")
	s := &tenants.PortalSettings{TenantID: a.ID, Enabled: true, DisplayName: "Acme <developers>", PrimaryColor: "#112233", AccentColor: "#445566",
		Logo: "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)}
	if err := e.db.PutPortal(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://api.test/portal/acme/", nil)
	res, err := e.app.Test(req, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "img-src 'self';") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q", csp)
	}
	for _, want := range []string{"Acme &lt;developers&gt;", `src="/portal/acme/logo"`, `href="/portal/acme/theme.css"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	c := e.client("api.test")
	c.do("GET", "/portal/acme/theme.css", nil).want(t, 200, "--primary:#112233;", "--accent:#445566;")
	if logo := c.do("GET", "/portal/acme/logo", nil); logo.status != 200 || logo.body != string(png) {
		t.Errorf("logo: %d %q", logo.status, logo.body)
	}
}
