package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"tollgate/tenants"
)

// petsDoc is a small OpenAPI document: a key-protected API under /v1 with a public
// health check; extra adds paths (as JSON members) to it.
func petsDoc(extra string) map[string]any {
	doc := `{"openapi":"3.0.3","info":{"title":"Pets","version":"1"},
		"servers":[{"url":"https://pets.example.com/v1"}],
		"security":[{"key":[]}],
		"components":{"securitySchemes":{"key":{"type":"apiKey","in":"header","name":"X-API-Key"}}},
		"paths":{
			"/pets":{"get":{"responses":{"200":{"description":"ok"}}},"trace":{"responses":{"200":{"description":"ok"}}}},
			"/health":{"get":{"security":[],"responses":{"200":{"description":"ok"}}}}` + extra + `}}`
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		panic(err)
	}
	return m
}

func importBody(doc any, more ...any) map[string]any {
	b := map[string]any{
		"openapi":  doc,
		"upstream": map[string]any{"targets": []any{map[string]any{"url": "http://127.0.0.1:9"}}},
	}
	for i := 0; i+1 < len(more); i += 2 {
		b[more[i].(string)] = more[i+1]
	}
	return b
}

func names(r *resp, list string) []string {
	var out []string
	items, _ := r.json[list].([]any)
	for _, it := range items {
		out = append(out, it.(map[string]any)["name"].(string))
	}
	return out
}

func wantNames(t *testing.T, r *resp, list string, want ...string) {
	t.Helper()
	if got := strings.Join(names(r, list), " "); got != strings.Join(want, " ") {
		t.Errorf("%s: got [%s], want %v\nbody: %s", list, got, want, r.body)
	}
}

func TestImportRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	e.route("acme", "mine", "/other")
	const path = "/v1/tenants/acme/routes:import"

	r := e.do("POST", path, adminToken, importBody(petsDoc(""), "dry_run", true)).want(200)
	wantNames(t, r, "created", "openapi:pets:/health", "openapi:pets:/pets")
	if r.json["dry_run"] != true || r.json["api"] != "pets" {
		t.Errorf("dry run answer: %s", r.body)
	}
	if !strings.Contains(string(r.body), `"TRACE: not a method the edge routes, left out"`) {
		t.Errorf("the TRACE operation is not noted: %s", r.body)
	}
	if strings.Contains(string(r.body), `"id"`) {
		t.Errorf("a dry run shows ids of routes it did not create: %s", r.body)
	}
	if n := e.count("/v1/tenants/acme/routes"); n != 1 {
		t.Fatalf("a dry run wrote: %d routes", n)
	}

	r = e.do("POST", path, adminToken, importBody(petsDoc(""))).want(200)
	wantNames(t, r, "created", "openapi:pets:/health", "openapi:pets:/pets")
	created := r.json["created"].([]any)
	health := created[0].(map[string]any)
	id, _ := health["id"].(string)
	got := e.do("GET", "/v1/tenants/acme/routes/"+id, adminToken, nil).want(200)
	if got.str("auth") != "none" || strings.Join(anyStrings(got.json["paths"]), ",") != "=/v1/health" || strings.Join(anyStrings(got.json["methods"]), ",") != "GET" {
		t.Errorf("imported /health: %s", got.body)
	}
	pets := created[1].(map[string]any)
	if pets["auth"] != "key" || strings.Join(anyStrings(pets["paths"]), ",") != "=/v1/pets" {
		t.Errorf("imported /pets: %v", pets)
	}

	// The same document again changes nothing.
	r = e.do("POST", path, adminToken, importBody(petsDoc(""))).want(200)
	wantNames(t, r, "unchanged", "openapi:pets:/health", "openapi:pets:/pets")
	wantNames(t, r, "created")
	wantNames(t, r, "updated")

	// A changed document, as YAML in a string: /health gains POST, /pets goes, /owners comes.
	yaml := `openapi: 3.0.3
info: {title: Pets, version: "2"}
servers: [{url: "https://pets.example.com/v1"}]
paths:
  /health:
    get: {responses: {"200": {description: ok}}}
    post: {responses: {"200": {description: ok}}}
  /owners:
    get: {responses: {"200": {description: ok}}}
`
	r = e.do("POST", path, adminToken, importBody(yaml)).want(200)
	wantNames(t, r, "created", "openapi:pets:/owners")
	wantNames(t, r, "updated", "openapi:pets:/health")
	wantNames(t, r, "stale", "openapi:pets:/pets")
	wantNames(t, r, "deleted")
	if m := anyStrings(e.do("GET", "/v1/tenants/acme/routes/"+id, adminToken, nil).want(200).json["methods"]); strings.Join(m, ",") != "GET,POST" {
		t.Errorf("updated /health methods %v", m)
	}

	// With prune, the stale route goes; the tenant's own route stays.
	r = e.do("POST", path, adminToken, importBody(yaml, "prune", true)).want(200)
	wantNames(t, r, "deleted", "openapi:pets:/pets")
	wantNames(t, r, "stale")
	wantNames(t, r, "unchanged", "openapi:pets:/health", "openapi:pets:/owners")
	if n := e.count("/v1/tenants/acme/routes"); n != 3 {
		t.Errorf("after prune: %d routes, want mine, /health and /owners", n)
	}
}

func anyStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func TestImportRoutesRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	const path = "/v1/tenants/acme/routes:import"

	e.do("POST", path, adminToken, importBody(map[string]any{"openapi": "3.0.3", "paths": map[string]any{}})).
		wantErr(400, tenants.EValidation, "openapi.info")
	e.do("POST", path, adminToken, importBody(`{"swagger":"2.0"}`)).wantErr(400, tenants.EValidation, "openapi")
	e.do("POST", path, adminToken, importBody(42)).wantErr(400, tenants.EInvalidRequest, "openapi")
	e.do("POST", path, adminToken, map[string]any{"upstream": map[string]any{"targets": []any{}}}).wantErr(400, tenants.EInvalidRequest, "openapi")
	e.do("POST", path, adminToken, importBody(petsDoc(""), "auth", "basic")).wantErr(400, tenants.EValidation, "auth")
	bad := importBody(petsDoc(""))
	bad["upstream"] = map[string]any{"targets": []any{map[string]any{"url": "ftp://x"}}}
	e.do("POST", path, adminToken, bad).wantErr(400, tenants.EValidation, "upstream.targets[0].url")

	// One route that cannot be written fails the whole import: /pets is the tenant's
	// already, so /health is not created either.
	e.do("POST", "/v1/tenants/acme/routes", adminToken, map[string]any{
		"name": "taken", "paths": []string{"=/v1/pets"}, "methods": []string{"GET"},
		"upstream": map[string]any{"targets": []any{map[string]any{"url": "http://127.0.0.1:9"}}},
	}).want(201)
	r := e.do("POST", path, adminToken, importBody(petsDoc(""))).want(409)
	if !strings.Contains(r.message(), "openapi:pets:/pets") {
		t.Errorf("the conflict does not name the route: %s", r.body)
	}
	if n := e.count("/v1/tenants/acme/routes"); n != 1 {
		t.Errorf("a failed import left %d routes, want 1", n)
	}
}

// TestImportRoutesPathParameter: an OpenAPI {param} segment stays one in the route's
// exact path.
func TestImportRoutesPathParameter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	r := e.do("POST", "/v1/tenants/acme/routes:import", adminToken, importBody(petsDoc(`,
		"/pets/{id}":{"parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],
			"get":{"responses":{"200":{"description":"ok"}}},"delete":{"responses":{"204":{"description":"gone"}}}}`))).want(200)
	wantNames(t, r, "created", "openapi:pets:/health", "openapi:pets:/pets", "openapi:pets:/pets/{id}")
	one := r.json["created"].([]any)[2].(map[string]any)
	if strings.Join(anyStrings(one["paths"]), ",") != "=/v1/pets/{id}" || strings.Join(anyStrings(one["methods"]), ",") != "GET,DELETE" || one["auth"] != "key" {
		t.Errorf("/pets/{id}: %v", one)
	}
}

// TestImportRoutesPlanLimit: the plan's routes count the imported ones as any others, and
// an import past it writes nothing.
func TestImportRoutesPlanLimit(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, map[string]any{"routes": 2})
	e.route("small", "mine", "/mine")
	wantOver(t, e.do("POST", "/v1/tenants/small/routes:import", adminToken, importBody(petsDoc(""))), "routes", "tiny")
	if n := e.count("/v1/tenants/small/routes"); n != 1 {
		t.Errorf("an import past the plan left %d routes, want 1", n)
	}
	e.do("DELETE", "/v1/tenants/small/routes/"+e.do("GET", "/v1/tenants/small/routes", adminToken, nil).want(200).items()[0].(map[string]any)["id"].(string), adminToken, nil).want(204)
	wantNames(t, e.do("POST", "/v1/tenants/small/routes:import", adminToken, importBody(petsDoc(""))).want(200), "created", "openapi:pets:/health", "openapi:pets:/pets")
}
