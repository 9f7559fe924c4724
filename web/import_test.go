package web_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"tollgate/tenants"
)

const importDoc = `openapi: 3.0.3
info: {title: Users, version: "1"}
servers: [{url: "https://users.example.com/api"}]
security: [{key: []}]
components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-API-Key}
paths:
  /users/{id}:
    get: {parameters: [{name: id, in: path, required: true, schema: {type: string}}], responses: {"200": {description: ok}}}
  /health:
    get: {security: [], responses: {"200": {description: ok}}}
`

// TestImportPage: the routes page links the import page; a preview lists what would be
// created and writes nothing; the import creates the routes, records routes.import, and
// shows them; a bad document is shown next to the document; an uploaded file is read.
func TestImportPage(t *testing.T) {
	e := newConsole(t)
	owner := e.signUp("acme", true)
	tenantID := mustTenant(t, e, "acme")
	routes := func() []*tenants.Route {
		t.Helper()
		list, _, err := e.db.ListRoutes(context.Background(), tenantID, tenants.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}

	if pg := e.get(owner, "/console/t/acme/routes"); !strings.Contains(pg.body, `href="/console/t/acme/routes/import"`) {
		t.Errorf("the routes page does not link the import page:\n%s", pg.body)
	}
	if pg := e.get(owner, "/console/t/acme/routes/import"); pg.status != http.StatusOK || !strings.Contains(pg.body, `name="document"`) {
		t.Fatalf("import page: %d\n%s", pg.status, pg.body)
	}

	form := url.Values{"document": {importDoc}, "upstream": {"https://api.example.com"}, "use_base": {"on"}, "action": {"preview"}}
	pg := e.post(owner, "/console/t/acme/routes/import", form)
	if pg.status != http.StatusOK || !strings.Contains(pg.body, "will create") || !strings.Contains(pg.body, "openapi:users:/users/{id}") || !strings.Contains(pg.body, "=/api/users/{id}") {
		t.Fatalf("preview: %d\n%s", pg.status, pg.body)
	}
	if n := len(routes()); n != 0 {
		t.Fatalf("the preview wrote %d routes", n)
	}

	form.Set("action", "import")
	pg = e.post(owner, "/console/t/acme/routes/import", form)
	if pg.status != http.StatusOK || !strings.Contains(pg.body, "Imported") || strings.Count(pg.body, `data-change="create"`) != 2 {
		t.Fatalf("import: %d\n%s", pg.status, pg.body)
	}
	got := routes()
	if len(got) != 2 {
		t.Fatalf("import stored %d routes, want 2", len(got))
	}
	for _, r := range got {
		if want := map[string]string{"openapi:users:/health": "none", "openapi:users:/users/{id}": "key"}[r.Name]; r.Auth != want {
			t.Errorf("route %s auth %q, want %q", r.Name, r.Auth, want)
		}
	}
	entries, _, err := e.db.ListAudit(context.Background(), tenantID, tenants.AuditQuery{Page: tenants.Page{Limit: 10}})
	if err != nil || len(entries) == 0 || entries[0].Action != "routes.import" || entries[0].Actor != owner.email {
		t.Errorf("audit: %v %+v", err, entries)
	}

	form.Set("document", "openapi: 3.0.3\ninfo: {title: x}\npaths: {}\n")
	pg = e.post(owner, "/console/t/acme/routes/import", form)
	if pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, `id="document-error"`) {
		t.Errorf("a bad document: %d\n%s", pg.status, pg.body)
	}

	// The same document uploaded as a file: nothing changes.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range map[string]string{"_csrf": owner.csrf, "upstream": "https://api.example.com", "use_base": "on", "action": "import"} {
		_ = mw.WriteField(k, v)
	}
	fw, _ := mw.CreateFormFile("file", "users.yaml")
	_, _ = io.WriteString(fw, importDoc)
	_ = mw.Close()
	req := httptest.NewRequest(http.MethodPost, "/console/t/acme/routes/import", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Cookie", owner.cookie)
	res, err := e.app.Test(req, 30_000)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || !isReplay(req.URL.Path, res.Header.Get("Location")) {
		t.Fatalf("upload: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	pg = e.get(owner, res.Header.Get("Location")) // the result, as a browser follows
	if pg.status != http.StatusOK || strings.Count(pg.body, `data-change="none"`) != 2 {
		t.Errorf("upload: %d\n%s", pg.status, pg.body)
	}
}
