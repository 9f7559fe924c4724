package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tollgate/infra/testenv"
)

// TestConsoleImport: from the routes page to the import page, a pasted document is
// previewed (nothing written), then imported; the imported routes are listed and served
// at the edge.
func TestConsoleImport(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	up := upstream(t)
	suffix := testenv.Name("")[:6]
	slug := "oas-" + suffix
	b := newBrowser(t, s.api)
	b.signUp("oas-"+suffix+"@example.com", slug)
	base := "/console/t/" + slug

	b.open(base + "/routes")
	b.do(chromedp.Click(chromedp.CSS(`a[href$="/routes/import"]`)))
	b.waitPath(base + "/routes/import")
	b.fill(map[string]string{
		"#document": "openapi: 3.0.3\ninfo: {title: Users, version: '1'}\nservers: [{url: 'https://users.example.com/api'}]\n" +
			"security: [{key: []}]\ncomponents: {securitySchemes: {key: {type: apiKey, in: header, name: X-API-Key}}}\npaths:\n" +
			"  /users/{id}:\n    get: {parameters: [{name: id, in: path, required: true, schema: {type: string}}], responses: {'200': {description: ok}}}\n" +
			"  /health:\n    get: {security: [], responses: {'200': {description: ok}}}\n    trace: {responses: {'200': {description: ok}}}\n",
		"#upstream": up.URL,
	})
	b.do(chromedp.Click(chromedp.CSS(`button[value=preview]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=import-result]`)))
	b.contains("Preview: what importing would do", "openapi:users:/users/{id}", "=/api/users/{id}", "will create", "TRACE: not a method the edge routes")
	b.screenshot("40-import-preview")
	if n := len(s.admin(t, "GET", "/v1/tenants/"+slug+"/routes")["items"].([]any)); n != 0 {
		t.Fatalf("the preview wrote %d routes", n)
	}

	// The preview's result is on the page already: wait for what only the import's has,
	// the links to the routes it created.
	b.do(chromedp.Click(chromedp.CSS(`button[value=import]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-change=create] a[href*="/routes/"]`)))
	b.contains("Imported", "created")
	if n := b.count(`tr[data-change=create] a[href*="/routes/"]`); n != 2 {
		t.Errorf("the result links %d created routes, want 2", n)
	}
	b.screenshot("41-import-done")

	deadline := time.Now().Add(10 * time.Second)
	for s.callEdge(t, slug, "/api/health", "") != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the imported /health is not served at the edge")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := s.callEdge(t, slug, "/api/users/7", ""); got != 401 {
		t.Errorf("the imported key route without a key: %d, want 401", got)
	}
}
