package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/gofiber/fiber/v2"
	stripeapi "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	billingpg "tollgate/billing/postgres"
	"tollgate/infra/testcert"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

// portalAdmin calls the management API with the admin token and a JSON body, and fails
// the test unless the answer is a success.
func (s *stack) portalAdmin(t *testing.T, method, path, body string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.api+path, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
}

// waitEdge calls the edge until it answers want (the config or a revocation reaching it
// takes moments).
func (s *stack) waitEdge(t *testing.T, slug, path, key string, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for got := s.callEdge(t, slug, path, key); got != want; got = s.callEdge(t, slug, path, key) {
		if time.Now().After(deadline) {
			t.Fatalf("the edge answers %s with %d, want %d", path, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPortal walks the developer portal in Chromium: the tenant turns it on in the
// console (after a bad colour shown at its field); a consumer reads the docs, signs up,
// follows the mailed link, signs in, creates a labelled key, calls the edge with it,
// sees the call in its usage, revokes the key and is refused at the edge.
func TestPortal(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	up := upstream(t)
	suffix := testenv.Name("")[:6]
	slug, owner, dev := "shop-"+suffix, "owner-"+suffix+"@example.com", "dev-"+suffix+"@example.com"

	tenant := newBrowser(t, s.api)
	tenant.signUp(owner, slug)
	// The route comes from an OpenAPI import, which keeps the document for the docs.
	s.portalAdmin(t, "POST", "/v1/tenants/"+slug+"/routes:import", `{"upstream":{"targets":[{"url":"`+up.URL+`"}]},
		"openapi":{"openapi":"3.0.3","info":{"title":"Shop API","version":"1.0"},
		"components":{"securitySchemes":{"key":{"type":"apiKey","in":"header","name":"X-API-Key"}}},"security":[{"key":[]}],
		"paths":{"/hello":{"get":{"summary":"Say hello","parameters":[{"name":"name","in":"query","schema":{"type":"string"}}],
		"responses":{"200":{"description":"A greeting"}}}}}}}`)
	s.portalAdmin(t, "POST", "/v1/tenants/"+slug+"/plans", `{"name":"starter","public":true,"description":"To try the API","quota":{"requests":1000}}`)

	// Off by default: the portal is a 404.
	consumer := newBrowser(t, s.api)
	consumer.open("/portal/" + slug + "/")
	consumer.contains("Not found")

	// The tenant turns it on; a bad colour is refused at its field.
	tenant.open("/console/t/" + slug + "/portal")
	tenant.do(chromedp.Click(chromedp.CSS(`#enabled`)))
	tenant.fill(map[string]string{"#display_name": "Shop developers", "#primary_color": "#12"})
	tenant.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`#primary_color-error`)))
	tenant.contains("#rrggbb")
	tenant.screenshot("portal-01-settings-error")
	tenant.fill(map[string]string{"#primary_color": "#7a1f5c"})
	tenant.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	tenant.waitPath("/console/t/" + slug + "/portal?done=portal-saved")
	tenant.contains("Portal settings saved", "/portal/"+slug+"/")
	tenant.screenshot("portal-02-settings")

	// The docs show the imported document's operations, the edge's URL and a curl line.
	consumer.open("/portal/" + slug + "/")
	consumer.contains("Shop developers", "Shop API", "GET /hello", "Say hello", "A greeting", "http://"+slug+".localhost:", "X-API-Key")
	consumer.screenshot("portal-03-docs")

	// Sign-up, the mailed link, sign-in.
	consumer.open("/portal/" + slug + "/signup")
	consumer.fill(map[string]string{"#email": dev, "#password": "short"})
	consumer.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`#password-error`)))
	consumer.screenshot("portal-04-signup-error")
	consumer.fill(map[string]string{"#email": dev, "#password": password})
	consumer.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`[data-notice]`)))
	consumer.contains("Check your inbox", dev)
	link := s.mail.WaitFor(t, dev)
	verify := ""
	for _, l := range strings.Fields(link.Text) {
		if strings.HasPrefix(l, s.api+"/portal/"+slug+"/verify?token=") {
			verify = l
		}
	}
	if verify == "" {
		t.Fatalf("no verification link in:\n%s", link.Text)
	}
	consumer.open(strings.TrimPrefix(verify, s.api))
	consumer.contains("Address verified")
	consumer.open("/portal/" + slug + "/login")
	consumer.fill(map[string]string{"#email": dev, "#password": password})
	consumer.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	consumer.waitPath("/portal/" + slug + "/keys")
	consumer.contains("No keys yet", dev)

	// A labelled key, shown once.
	consumer.fill(map[string]string{"#label": "laptop"})
	consumer.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`#new-key`)))
	key := consumer.eval(`document.querySelector("#new-key").innerText`)
	if !strings.HasPrefix(key, "tg_") {
		t.Fatalf("new key %q", key)
	}
	consumer.contains("shown only this once", "laptop")
	consumer.screenshot("portal-05-key-created")
	consumer.open("/portal/" + slug + "/keys")
	if strings.Contains(consumer.text(), key) {
		t.Error("the key's plaintext is shown again after a reload")
	}

	// The key works at the edge; the tenant sees the consumer the account made.
	s.waitEdge(t, slug, "/hello", key, 200)
	tenant.open("/console/t/" + slug + "/consumers")
	tenant.contains(dev)

	// The call reaches the consumer's usage (meter → billing → rollups, within seconds).
	got := ""
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		consumer.open("/portal/" + slug + "/usage")
		if got = consumer.eval(`document.querySelector("[data-testid=total]").innerText`); got != "0" {
			break
		}
	}
	if got == "0" || got == "" {
		t.Errorf("the usage page shows %q requests after a call", got)
	}
	consumer.screenshot("portal-06-usage")

	consumer.open("/portal/" + slug + "/plans")
	consumer.contains("starter", "To try the API", "1,000 requests per month")
	consumer.do(chromedp.Click(chromedp.CSS(`[data-plan=starter] button[type=submit]`)))
	consumer.waitPath("/portal/" + slug + "/plans?done=plan-chosen")
	consumer.contains("your plan")
	consumer.screenshot("portal-07-plans")

	// On a phone.
	consumer.do(chromedp.EmulateViewport(390, 844))
	consumer.open("/portal/" + slug + "/keys")
	if w := consumer.eval(`String(document.documentElement.scrollWidth)`); w != "390" {
		t.Errorf("the keys page is %s px wide at 390 px", w)
	}
	consumer.screenshot("portal-08-keys-390")
	consumer.do(chromedp.EmulateViewport(1280, 860))

	// Revoked, the key is refused at the edge.
	consumer.do(chromedp.Click(chromedp.CSS(`tr[data-key] button.danger`)))
	consumer.waitPath("/portal/" + slug + "/keys?done=key-revoked")
	consumer.contains("Key revoked", "No keys yet")
	s.waitEdge(t, slug, "/hello", key, 401)
}

// portalReady makes a tenant with its portal on (through the console) and a verified,
// signed-in portal account of it; it returns the account's browser.
func (s *stack) portalReady(t *testing.T, slug, owner, dev string) *browser {
	t.Helper()
	tenant := newBrowser(t, s.api)
	tenant.signUp(owner, slug)
	tenant.open("/console/t/" + slug + "/portal")
	tenant.do(chromedp.Click(chromedp.CSS(`#enabled`)), chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	tenant.waitPath("/console/t/" + slug + "/portal?done=portal-saved")
	b := newBrowser(t, s.api)
	b.open("/portal/" + slug + "/signup")
	b.fill(map[string]string{"#email": dev, "#password": password})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`[data-notice]`)))
	link := smtptest.Link(t, s.mail.WaitFor(t, dev), s.api+"/portal/"+slug+"/verify")
	b.open(strings.TrimPrefix(link, s.api))
	b.contains("Address verified")
	b.open("/portal/" + slug + "/login")
	b.fill(map[string]string{"#email": dev, "#password": password})
	b.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	b.waitPath("/portal/" + slug + "/keys")
	return b
}

// TestPortalCheckout: a priced public plan sends the consumer to Stripe Checkout (on
// stripe-mock; the browser's navigation to Stripe is blocked: the test checks where it
// was sent), and the plan applies when the signed checkout.session.completed webhook
// arrives.
func TestPortalCheckout(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	const secret = "whsec_portal_browser_test"
	mock := testenv.StripeMock(t)
	t.Setenv("TOLLGATE_STRIPE_KEY", "sk_test_portal")
	t.Setenv("TOLLGATE_STRIPE_URL", mock)
	t.Setenv("TOLLGATE_STRIPE_WEBHOOK_SECRET", secret)
	s := startDev(t)
	suffix := testenv.Name("")[:6]
	slug := "paid-" + suffix
	b := s.portalReady(t, slug, "owner-"+suffix+"@example.com", "buyer-"+suffix+"@example.com")
	s.portalAdmin(t, "POST", "/v1/tenants/"+slug+"/plans", `{"name":"pro","public":true,"description":"For production","quota":{"requests":100000}}`)
	month := time.Now().UTC().Format("2006-01")
	s.portalAdmin(t, "PUT", "/v1/tenants/"+slug+"/prices/pro/"+month, `{"currency":"usd","monthly_fee":2900}`)

	b.open("/portal/" + slug + "/plans")
	b.contains("pro", "USD 29.00 a month", "Choose and pay")
	b.screenshot("portal-09-paid-plan")
	if _, err := chromedp.Call(b.ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{
		URLPatterns: []*network.BlockPattern{{URLPattern: "https://*.stripe.com/*", Block: true}}}); err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.Click(chromedp.CSS(`[data-plan=pro] button[type=submit]`)))
	want := stripeMockCheckoutURL(t, mock)
	sent := ""
	for end := time.Now().Add(20 * time.Second); sent != want && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		h, err := chromedp.Call(b.ctx, cdppage.GetNavigationHistory, cdp.Empty{})
		if err == nil && len(h.Entries) > 0 {
			sent = h.Entries[len(h.Entries)-1].URL
		}
	}
	if sent != want {
		t.Fatalf("the browser was sent to %q, want stripe-mock's checkout URL %q", sent, want)
	}

	// Stripe calls back: the session Tollgate recorded is paid, the plan applies.
	tenant := s.admin(t, "GET", "/v1/tenants/"+slug)
	store, err := billingpg.Open(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sessions, err := store.Checkouts(context.Background(), tenant["id"].(string), 1)
	if err != nil || len(sessions) != 1 || sessions[0].Plan != "pro" {
		t.Fatalf("recorded checkouts: %+v %v", sessions, err)
	}
	obj, _ := json.Marshal(map[string]any{"id": sessions[0].SessionID, "object": "checkout.session", "subscription": "sub_portal", "payment_status": "paid"})
	payload, _ := json.Marshal(map[string]any{"id": "evt_portal_" + suffix, "object": "event", "type": "checkout.session.completed",
		"api_version": stripeapi.APIVersion, "created": time.Now().Unix(), "data": map[string]any{"object": json.RawMessage(obj)}})
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	req, _ := http.NewRequest(http.MethodPost, s.api+"/v1/stripe/webhook", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signed.Header)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("webhook: %d %s", res.StatusCode, body)
	}
	b.open("/portal/" + slug + "/plans")
	if got := b.eval(`document.querySelector("[data-plan=pro].current") ? "current" : "not"`); got != "current" {
		t.Errorf("after the webhook the plan pro is %s:\n%s", got, b.text())
	}
	b.screenshot("portal-10-paid-plan-active")
}

// stripeMockCheckoutURL is the URL stripe-mock answers for a new Checkout session (its
// fixture's, the same for every session).
func stripeMockCheckoutURL(t *testing.T, mock string) string {
	t.Helper()
	form := "mode=subscription&success_url=https%3A%2F%2Fexample.com%2Fok&line_items[0][price]=price_x&line_items[0][quantity]=1"
	req, _ := http.NewRequest(http.MethodPost, mock+"/v1/checkout/sessions", strings.NewReader(form))
	req.SetBasicAuth("sk_test_portal", "")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s struct{ URL string }
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil || s.URL == "" {
		t.Fatalf("stripe-mock's checkout session: %v", err)
	}
	return s.URL
}

// TestPortalSettingsForm: the portal's settings page (no browser: the console's handlers
// on a real Postgres) shows each bad value at its field and saves nothing; a good form
// with a logo is saved whole.
func TestPortalSettingsForm(t *testing.T) {
	db, _ := pgtest.Open(t)
	app := fiber.New(fiber.Config{Immutable: true})
	web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db, Portals: db, Domains: db}).Mount(app)
	e := &consoleEnv{t: t, app: app, db: db}
	owner := e.signUp("portalowner", true)
	tn, err := db.FindTenant(context.Background(), "portalowner")
	if err != nil {
		t.Fatal(err)
	}
	ca := testcert.NewCA(t)
	leaf := ca.Issue(t, []string{"dev.portalowner.example"}, time.Time{}, time.Time{})
	d := &tenants.Domain{TenantID: tn.ID, Hostname: "dev.portalowner.example", CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM}
	if err := db.CreateDomain(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), make([]byte, 64)...)
	save := func(fields map[string]string, file string, content []byte) page {
		t.Helper()
		var body bytes.Buffer
		w := multipart.NewWriter(&body)
		fields["_csrf"] = owner.csrf
		for k, v := range fields {
			_ = w.WriteField(k, v)
		}
		if file != "" {
			fw, _ := w.CreateFormFile("logo", file)
			_, _ = fw.Write(content)
		}
		_ = w.Close()
		req := httptest.NewRequest(http.MethodPost, "/console/t/portalowner/portal", &body)
		req.Header.Set("Content-Type", w.FormDataContentType())
		req.Header.Set("Cookie", owner.cookie)
		res, err := app.Test(req, 30_000)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		pg := page{status: res.StatusCode, location: res.Header.Get("Location"), body: string(b)}
		if pg.status == http.StatusSeeOther && pg.location == "/console/t/portalowner/portal" {
			return e.get(owner, pg.location) // the form shown again, as a browser follows
		}
		return pg
	}
	for _, c := range []struct {
		field   string
		fields  map[string]string
		file    string
		content []byte
	}{
		{"primary_color", map[string]string{"enabled": "1", "primary_color": "blue"}, "", nil},
		{"accent_color", map[string]string{"enabled": "1", "accent_color": "#12345g"}, "", nil},
		{"display_name", map[string]string{"enabled": "1", "display_name": strings.Repeat("n", 101)}, "", nil},
		{"domain_id", map[string]string{"enabled": "1", "domain_id": d.ID}, "", nil}, // pending, not verified
		{"logo", map[string]string{"enabled": "1"}, "logo.png", []byte("<svg onload=alert(1)></svg>")},
		{"logo", map[string]string{"enabled": "1"}, "big.png", append(png, make([]byte, 64<<10)...)},
	} {
		pg := save(c.fields, c.file, c.content)
		if !strings.Contains(pg.body, `id="`+c.field+`-error"`) {
			t.Errorf("%s: %d, no message at the field:\n%s", c.field, pg.status, pg.body)
		}
		if s, _ := db.FindPortal(context.Background(), tn.ID); s.Enabled || s.Logo != "" {
			t.Errorf("%s: a refused form saved %+v", c.field, s)
		}
	}
	pg := save(map[string]string{"enabled": "1", "display_name": "Dev portal", "primary_color": "#112233"}, "logo.png", png)
	if pg.status != http.StatusSeeOther || pg.location != "/console/t/portalowner/portal?done=portal-saved" {
		t.Fatalf("good form: %d %s\n%s", pg.status, pg.location, pg.body)
	}
	s, _ := db.FindPortal(context.Background(), tn.ID)
	if !s.Enabled || s.DisplayName != "Dev portal" || s.PrimaryColor != "#112233" || !strings.HasPrefix(s.Logo, "data:image/png;base64,") {
		t.Errorf("saved: %+v", s)
	}
	if got := e.get(owner, "/console/t/portalowner/portal?done=portal-saved"); !strings.Contains(got.body, "Portal settings saved") || !strings.Contains(got.body, "/portal/portalowner/") {
		t.Errorf("after saving:\n%s", got.body)
	}
}

// TestPortalTryIt: an imported document's schemas drawn with allOf merged, arrays and
// enums; the docs' curl line calls an operation a route serves; on an operation's page
// the try-it form, sent without a key, shows the edge's 401, and with the consumer's key
// the upstream's 200, its headers and body.
func TestPortalTryIt(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	up := upstream(t)
	suffix := testenv.Name("")[:6]
	slug := "pets-" + suffix
	b := s.portalReady(t, slug, "owner-"+suffix+"@example.com", "dev-"+suffix+"@example.com")
	s.portalAdmin(t, "POST", "/v1/tenants/"+slug+"/routes:import", `{"upstream":{"targets":[{"url":"`+up.URL+`"}]},
		"openapi":{"openapi":"3.0.3","info":{"title":"Pet API","version":"2.0"},
		"components":{"securitySchemes":{"key":{"type":"apiKey","in":"header","name":"X-API-Key"}},
		  "schemas":{
		    "Named":{"type":"object","required":["name"],"properties":{"name":{"type":"string","description":"What the pet answers to"}}},
		    "Pet":{"allOf":[{"$ref":"#/components/schemas/Named"},{"type":"object","required":["kind"],"properties":{
		      "kind":{"type":"string","enum":["cat","dog","parrot"]},
		      "tags":{"type":"array","items":{"type":"string"}},
		      "visits":{"type":"array","items":{"type":"object","properties":{"day":{"type":"string","format":"date"},"vet":{"$ref":"#/components/schemas/Named"}}}},
		      "parent":{"$ref":"#/components/schemas/Pet"}}}]}}},
		"security":[{"key":[]}],
		"paths":{"/pets/{petId}":{"get":{"summary":"Read a pet",
		  "parameters":[{"name":"petId","in":"path","required":true,"schema":{"type":"integer","example":42}},{"name":"fields","in":"query","schema":{"type":"string"}}],
		  "responses":{"200":{"description":"The pet","content":{"application/json":{"schema":{"$ref":"#/components/schemas/Pet"}}}}}}}}}}`)

	// A key of the consumer, shown once; the edge has it once it answers 200.
	b.open("/portal/" + slug + "/keys")
	b.fill(map[string]string{"#label": "try-it"})
	b.do(chromedp.Click(chromedp.CSS(`form.inline-form button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`#new-key`)))
	key := b.eval(`document.querySelector("#new-key").innerText`)
	b.contains("/pets/42") // the key's curl line calls the documented path
	s.waitEdge(t, slug, "/pets/42", key, 200)

	// The docs: the curl line calls the operation with its example, and the schema is a tree.
	b.open("/portal/" + slug + "/")
	curl := b.eval(`document.querySelector("[data-testid=curl]").innerText`)
	if !strings.Contains(curl, "http://"+slug+".localhost:") || !strings.HasSuffix(curl, "/pets/42") || !strings.Contains(curl, "X-API-Key: YOUR_KEY") {
		t.Errorf("the docs' curl line: %s", curl)
	}
	b.contains("array of string", "One of: \"cat\" \"dog\" \"parrot\"", "What the pet answers to", "refers back to Pet above", "string (date)")
	b.do(chromedp.ScrollIntoView(chromedp.CSS(`[data-testid=enum]`)))
	b.screenshot("portal-schema")

	// The operation's page: its try-it form, first without a key.
	b.do(chromedp.Click(chromedp.CSS(`[data-testid=operation] a.button`)))
	b.waitPath("/portal/" + slug + "/operations/")
	if got := b.eval(`document.querySelector("#param-0").value`); got != "42" {
		t.Errorf("the path parameter starts as %q, want its example 42", got)
	}
	b.do(chromedp.Click(chromedp.CSS(`[data-testid=try-it] button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=answer-status]`)))
	if got := b.eval(`document.querySelector("[data-testid=answer-status]").innerText`); got != "401" {
		t.Errorf("without a key the edge answers %s, want 401:\n%s", got, b.text())
	}
	// With the key and a query parameter: the upstream's answer.
	b.fill(map[string]string{"#key": key, "#param-1": "name,kind"})
	b.do(chromedp.Click(chromedp.CSS(`[data-testid=try-it] button[type=submit]`)))
	// The first answer (401) stays on the page until the second replaces it: wait for that.
	status := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// The form posts: while the next page loads an evaluation may fail, and is tried again.
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector("[data-testid=answer-status]") || {}).innerText || ""`, chromedp.EvalAwaitPromise))
		cancel()
		if status = s; err == nil && status == "200" {
			break
		}
	}
	if status != "200" {
		t.Fatalf("with the consumer's key the edge answers %s, want 200:\n%s", status, b.text())
	}
	b.contains(`"hello": "world"`, `"path": "/pets/42"`, "Content-Type", "application/json", "/pets/42?fields=name%2Ckind")
	if strings.Contains(b.location(), key) {
		t.Error("the key is in the page's URL")
	}
	b.do(chromedp.ScrollIntoView(chromedp.CSS(`[data-testid=answer]`)))
	b.screenshot("portal-try-it")

	// On a phone the operation's page, its schema and the answer fit the width.
	b.do(chromedp.EmulateViewport(390, 844))
	b.do(chromedp.Click(chromedp.CSS(`[data-testid=try-it] button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=answer-body]`)))
	// (A page taller than the screen has a scroll bar: its width is the client width.)
	if w := b.eval(`document.documentElement.scrollWidth + " of " + document.documentElement.clientWidth`); !strings.HasSuffix(w, " of "+strings.Fields(w)[0]) {
		t.Errorf("the operation's page at 390 px scrolls sideways: %s px", w)
	}
}
