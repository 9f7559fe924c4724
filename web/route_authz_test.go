package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/web"
)

// TestRouteFormExternalAuth: the console's route form offers auth external with the
// authorizer's URL, shows the API's refusal on that field, and keeps the settings only
// the API sets (headers, TTLs) when the route is edited.
func TestRouteFormExternalAuth(t *testing.T) {
	ctx := context.Background()
	db, _ := pgtest.Open(t)
	app := fiber.New(fiber.Config{Immutable: true})
	web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db}).Mount(app)
	hash, _ := tenants.HashPassword("correct horse battery")
	u := &tenants.User{Email: "owner@example.com", PasswordHash: hash}
	tn := &tenants.Tenant{Slug: "acme"}
	if err := db.SignUp(ctx, u, tn); err != nil {
		t.Fatal(err)
	}
	raw := "session-authz-0123456789abcdef0123456789"
	if err := db.CreateSession(ctx, &tenants.Session{Hash: tenants.HashSecret(raw), UserID: u.ID, CSRF: "csrf-authz", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// do sends a request with the session (and a flash cookie the last answer set).
	var flash []*http.Cookie
	do := func(method, target string, form url.Values) *http.Response {
		t.Helper()
		var body io.Reader
		if form != nil {
			form.Set("_csrf", "csrf-authz")
			body = strings.NewReader(form.Encode())
		}
		req := httptest.NewRequest(method, target, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("Cookie", tenants.SessionCookie+"="+raw)
		for _, c := range flash {
			req.AddCookie(c)
		}
		res, err := app.Test(req, 30_000)
		if err != nil {
			t.Fatal(err)
		}
		flash = res.Cookies()
		return res
	}
	// post answers the status of a form's POST and, when the form was refused (303 back
	// to the form), the page that shows it again.
	post := func(target string, form url.Values) (int, string) {
		t.Helper()
		res := do(http.MethodPost, target, form)
		res.Body.Close()
		if loc := res.Header.Get("Location"); res.StatusCode == http.StatusSeeOther && isReplay(target, loc) {
			page := do(http.MethodGet, loc, nil)
			defer page.Body.Close()
			b, _ := io.ReadAll(page.Body)
			return http.StatusBadRequest, string(b)
		}
		return res.StatusCode, ""
	}
	form := url.Values{"name": {"orders"}, "paths": {"/orders"}, "upstream": {"https://api.example.com"},
		"auth": {"external"}, "authz_url": {"http://auth.example.com/check"}}
	status, body := post("/console/t/acme/routes/new", form)
	if status == http.StatusSeeOther || !strings.Contains(body, `id="authz_url-error"`) || !strings.Contains(body, "https://") {
		t.Fatalf("plain http authorizer: %d\n%s", status, body)
	}
	form.Set("authz_url", "https://auth.example.com/check")
	if status, body = post("/console/t/acme/routes/new", form); status != http.StatusSeeOther {
		t.Fatalf("create: %d\n%s", status, body)
	}
	routes, _, err := db.ListRoutes(ctx, tn.ID, tenants.Page{Limit: 10})
	if err != nil || len(routes) != 1 {
		t.Fatalf("%v %v", routes, err)
	}
	r := routes[0]
	if r.Auth != tenants.AuthExternal || r.ExternalAuth == nil || r.ExternalAuth.URL != "https://auth.example.com/check" || *r.ExternalAuth.CacheTTLS != 60 {
		t.Fatalf("stored: %+v %+v", r, r.ExternalAuth)
	}
	// Settings only the API sets survive an edit through the form.
	ttl := 5
	r.ExternalAuth.CacheTTLS, r.ExternalAuth.DenyCacheTTLS, r.ExternalAuth.Headers = &ttl, &ttl, []string{"X-Session"}
	if err := db.UpdateRoute(ctx, r); err != nil {
		t.Fatal(err)
	}
	form.Set("authz_url", "https://auth2.example.com/check")
	form.Set("version", "2")
	if status, body = post("/console/t/acme/routes/"+r.ID, form); status != http.StatusSeeOther {
		t.Fatalf("edit: %d\n%s", status, body)
	}
	got, err := db.FindRoute(ctx, tn.ID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a := got.ExternalAuth; a == nil || a.URL != "https://auth2.example.com/check" || *a.CacheTTLS != 5 || a.Headers[0] != "X-Session" {
		t.Fatalf("after the edit: %+v", a)
	}
	// Another auth drops the authorizer.
	form.Set("auth", "key")
	form.Set("version", "3")
	if status, body = post("/console/t/acme/routes/"+r.ID, form); status != http.StatusSeeOther {
		t.Fatalf("to key auth: %d\n%s", status, body)
	}
	if got, _ = db.FindRoute(ctx, tn.ID, r.ID); got.ExternalAuth != nil {
		t.Fatalf("auth key kept %+v", got.ExternalAuth)
	}
}
