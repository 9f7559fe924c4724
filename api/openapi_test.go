package api_test

import (
	"sort"
	"strings"
	"testing"
)

// TestOpenAPICoverage: every registered route is in the document and every documented
// operation is registered, with request and response schemas and the error envelope.
func TestOpenAPICoverage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if e.doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi version %v", e.doc["openapi"])
	}
	paths := e.doc["paths"].(map[string]any)

	registered := map[string]bool{}
	for _, r := range e.srv.App().GetRoutes(true) {
		if r.Method == "HEAD" {
			continue // HEAD of each GET, registered as app.Get does
		}
		registered[r.Method+" "+toOpenAPI(r.Path)] = true
	}
	documented := map[string]bool{}
	for p, item := range paths {
		for m := range item.(map[string]any) {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	var missing, extra []string
	for k := range registered {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if !registered[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes missing from /v1/openapi.json: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("documented but not served: %v", extra)
	}
	if len(registered) < 29 {
		t.Errorf("only %d routes registered", len(registered))
	}
	// Every HEAD route has its GET.
	for _, r := range e.srv.App().GetRoutes(true) {
		if r.Method == "HEAD" && !registered["GET "+toOpenAPI(r.Path)] {
			t.Errorf("HEAD %s without GET", r.Path)
		}
	}

	ids := map[string]bool{}
	for p, item := range paths {
		for m, o := range item.(map[string]any) {
			op := o.(map[string]any)
			where := strings.ToUpper(m) + " " + p
			id, _ := op["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s: operationId %q missing or repeated", where, id)
			}
			ids[id] = true
			if op["summary"] == "" {
				t.Errorf("%s: no summary", where)
			}
			// Path parameters are declared.
			declared := map[string]bool{}
			for _, prm := range op["parameters"].([]any) {
				prm := e.resolve(prm.(map[string]any))
				if prm["in"] == "path" {
					declared[prm["name"].(string)] = true
				}
			}
			for _, seg := range strings.Split(p, "/") {
				if strings.HasPrefix(seg, "{") && !declared[strings.Trim(seg, "{}")] {
					t.Errorf("%s: path parameter %s not declared", where, seg)
				}
			}
			// Writes have a request body schema.
			if m == "post" || m == "put" || m == "patch" {
				if p == "/v1/openapi.json" {
					continue
				}
				if p == "/v1/stripe/webhook" { // a Stripe event: Stripe's schema, open
					continue
				}
				rb, ok := op["requestBody"].(map[string]any)
				if !ok {
					t.Errorf("%s: no requestBody", where)
					continue
				}
				if rb["content"].(map[string]any)["application/wasm"] != nil { // a function's module, bytes
					continue
				}
				schema := rb["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
				if s := e.resolve(schema); s["type"] != "object" || s["additionalProperties"] != false {
					t.Errorf("%s: request schema is not a closed object: %v", where, s)
				}
			}
			// A success response, and errors as the envelope.
			responses := op["responses"].(map[string]any)
			var success bool
			for code, r := range responses {
				r := e.resolve(r.(map[string]any))
				if code[0] == '2' {
					success = true
					continue
				}
				schema := r["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
				if schema["$ref"] != "#/components/schemas/Error" {
					t.Errorf("%s: response %s is not the error envelope", where, code)
				}
			}
			if !success || responses["default"] == nil {
				t.Errorf("%s: needs a 2xx and a default response", where)
			}
			if strings.HasPrefix(p, "/v1/tenants") && responses["401"] == nil {
				t.Errorf("%s: 401 undocumented", where)
			}
		}
	}
	// Every $ref resolves.
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				var cur any = e.doc
				for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
					m, _ := cur.(map[string]any)
					cur = m[part]
				}
				if cur == nil {
					t.Errorf("%s: $ref %s does not resolve", at, ref)
				}
			}
			for k, y := range x {
				walk(y, at+"/"+k)
			}
		case []any:
			for _, y := range x {
				walk(y, at)
			}
		}
	}
	walk(e.doc, "#")
}

// TestConformanceCheckerBites makes sure the response checker every test relies on fails
// when a response and the document disagree.
func TestConformanceCheckerBites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("POST", "/v1/tenants", adminToken, `{"slug":"acme"}`).want(201)
	tenant := e.doc["components"].(map[string]any)["schemas"].(map[string]any)["Tenant"].(map[string]any)
	props := tenant["properties"].(map[string]any)
	saved := props["slug"]
	delete(props, "slug")
	if err := e.conforms("POST", "/v1/tenants", r, decodeAny(r.body)); err == nil || !strings.Contains(err.Error(), "slug") {
		t.Fatalf("an undocumented property passed: %v", err)
	}
	props["slug"] = saved
	r.status = 202
	if err := e.conforms("POST", "/v1/tenants", r, decodeAny(r.body)); err == nil {
		t.Fatal("an undocumented status passed")
	}
	r.status = 201
	r.header.Del("ETag")
	if err := e.conforms("POST", "/v1/tenants", r, decodeAny(r.body)); err == nil {
		t.Fatal("a missing documented header passed")
	}
}

func toOpenAPI(p string) string {
	segs := strings.Split(strings.ReplaceAll(p, `\:`, ":"), "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// TestOpenAPIInputSchemas: a domain type's input schema leaves out what the server owns
// and its update schema adds the version; its output schema has every field.
func TestOpenAPIInputSchemas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	schemas := e.doc["components"].(map[string]any)["schemas"].(map[string]any)
	props := func(name string) map[string]any {
		t.Helper()
		s, ok := schemas[name].(map[string]any)
		if !ok {
			t.Fatalf("no schema %s", name)
		}
		return s["properties"].(map[string]any)
	}
	owned := []string{"id", "tenant_id", "version", "created_at", "updated_at"}
	for in, out := range map[string]string{"RouteCreate": "Route", "ConsumerCreate": "Consumer", "PlanCreate": "Plan",
		"JWTIssuerCreate": "JWTIssuer", "domainBody": "Domain"} {
		for _, f := range owned {
			if _, ok := props(in)[f]; ok {
				t.Errorf("%s has the server-owned %s", in, f)
			}
			if _, ok := props(out)[f]; !ok {
				t.Errorf("%s lacks %s", out, f)
			}
		}
	}
	for _, name := range []string{"RouteUpdate", "ConsumerUpdate", "PlanUpdate", "JWTIssuerUpdate", "domainUpdate", "PolicyPut"} {
		if _, ok := props(name)["version"]; !ok {
			t.Errorf("%s lacks version", name)
		}
		if _, ok := props(name)["id"]; ok {
			t.Errorf("%s has id", name)
		}
	}
}
