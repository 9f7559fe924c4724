package web_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"tollgate/edge/function/functiontest"
	"tollgate/infra/functionstore"
	"tollgate/infra/testenv"
)

// TestConsoleFunctions: a module that is not Wasm is refused at the field; a proxy-wasm
// filter is uploaded, listed with its digest, attached to a route on the route's form
// (which pins its version), shown on the function's page with that route; the delete is
// refused while the route runs it and done once the route is gone.
func TestConsoleFunctions(t *testing.T) {
	if noBrowser != "" {
		t.Fatal(noBrowser) // a browser test that cannot run fails: skipping would hide it
	}
	s := startDev(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "add-header.wasm")
	module := functiontest.Build(t, "watnoop")
	if err := os.WriteFile(good, module, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "notes.wasm")
	if err := os.WriteFile(bad, []byte("just some text"), 0o644); err != nil {
		t.Fatal(err)
	}
	suffix := testenv.Name("")[:6]
	slug := "fn-" + suffix
	owner := newBrowser(t, s.api)
	owner.signUp("fn-"+suffix+"@example.com", slug)
	base := "/console/t/" + slug

	owner.open(base + "/functions")
	owner.contains("No functions yet", "Upload a module", "No lines in the last 24 hours")
	owner.screenshot("40-functions-empty")

	owner.fill(map[string]string{"#fn-name": "add-header"})
	owner.do(chromedp.SetUploadFiles(chromedp.CSS(`#fn-module`), []string{bad}))
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`#fn-module-error`)))
	if msg := owner.eval(`document.querySelector("#fn-module-error").innerText`); !strings.Contains(msg, "WebAssembly") {
		t.Errorf("a text file: the field says %q", msg)
	}
	owner.screenshot("41-functions-not-wasm")

	owner.fill(map[string]string{"#fn-name": "add-header"})
	owner.do(chromedp.SetUploadFiles(chromedp.CSS(`#fn-module`), []string{good}))
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	owner.waitPath(base + "/functions/add-header?done=function-uploaded")
	sha := functionstore.Digest(module)
	owner.contains("Module uploaded", "Function add-header", sha, "None.")
	owner.screenshot("42-function")

	owner.open(base + "/functions")
	owner.contains("add-header", sha[:12])
	if n := owner.count(`#functions tbody tr`); n != 1 {
		t.Fatalf("%d functions listed", n)
	}

	// A route that runs it, set on the route's form.
	owner.open(base + "/routes/new")
	owner.fill(map[string]string{"#name": "hello", "#paths": "/hello", "#upstream": "http://127.0.0.1:9",
		"#functions": `add-header {"name": "X-Hello"}`})
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)))
	owner.waitPath(base + "/routes?done=route-created")
	routes := s.admin(t, "GET", "/v1/tenants/"+slug+"/routes")["items"].([]any)
	fns := routes[0].(map[string]any)["functions"].([]any)
	if f := fns[0].(map[string]any); f["sha256"] != sha || f["config"] != `{"name": "X-Hello"}` {
		t.Fatalf("the route's functions: %v", fns)
	}
	routeID := routes[0].(map[string]any)["id"].(string)
	owner.open(base + "/routes/" + routeID)
	if v := owner.eval(`document.querySelector("#functions").value`); v != `add-header@`+sha+` {"name": "X-Hello"}` {
		t.Errorf("the route form shows %q", v)
	}
	// A name the tenant never uploaded is refused at the field.
	owner.fill(map[string]string{"#functions": "nope"})
	owner.do(chromedp.Click(chromedp.CSS(`button[type=submit].primary`)), chromedp.WaitVisible(chromedp.CSS(`#functions-error`)))
	owner.contains("no function named")
	owner.screenshot("43-route-function-error")

	owner.open(base + "/functions/add-header")
	owner.contains("Routes running it", "hello")
	if n := owner.count(`#fn-routes li`); n != 1 {
		t.Fatalf("%d routes listed on the function's page", n)
	}
	owner.eval(`window.confirm = () => true; "ok"`)
	owner.do(chromedp.Click(chromedp.CSS(`form[action$="/delete"] button`)), chromedp.WaitNotPresent(chromedp.CSS(`#versions`)))
	owner.contains("is used by route(s) " + routeID + "; remove it from them first")
	owner.screenshot("44-function-delete-refused")

	req, _ := http.NewRequest("DELETE", s.api+"/v1/tenants/"+slug+"/routes/"+routeID, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 204 {
		t.Fatalf("delete the route: %v %v", res, err)
	}
	res.Body.Close()
	owner.open(base + "/functions/add-header")
	owner.eval(`window.confirm = () => true; "ok"`)
	owner.do(chromedp.Click(chromedp.CSS(`form[action$="/delete"] button`)))
	owner.waitPath(base + "/functions?done=function-deleted")
	owner.contains("Function deleted", "No functions yet")
}
