package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestOpenAPIImport: a document with a path parameter and an X-API-Key security scheme
// becomes a key route with a {param} exact path; the edge serves it to a key and refuses
// it without one; importing a changed document updates the route at the edge.
func TestOpenAPIImport(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "users-api")

	api.createTenant("oas")
	_, key := api.createKey("oas", api.createConsumer("oas", "app"))

	doc := func(methods ...string) string {
		var ops []string
		for _, m := range methods {
			ops = append(ops, fmt.Sprintf(`    %s: {responses: {"200": {description: ok}}}`, m))
		}
		return `openapi: 3.0.3
info: {title: Users, version: "1"}
servers: [{url: "https://users.example.com/api"}]
security: [{key: []}]
components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-API-Key}
paths:
  /users/{id}:
    parameters: [{name: id, in: path, required: true, schema: {type: string}}]
` + strings.Join(ops, "\n") + "\n"
	}
	body := func(doc string) map[string]any {
		return map[string]any{"openapi": doc, "upstream": map[string]any{"targets": []any{map[string]any{"url": up.URL}}}}
	}

	res := api.must(200, "POST", "/v1/tenants/oas/routes:import", body(doc("get")))
	created, _ := res["created"].([]any)
	if len(created) != 1 {
		t.Fatalf("import created %v, want one route", res)
	}
	route := created[0].(map[string]any)
	if route["name"] != "openapi:users:/users/{id}" || route["auth"] != "key" || fmt.Sprint(route["paths"]) != "[=/api/users/{id}]" {
		t.Fatalf("imported route %v", route)
	}

	eventually(t, applyDeadline, "the imported route is served to a key",
		served(edge, "oas", "/api/users/42", "users-api", "X-API-Key", key))
	if got := decodeEcho(t, edge.get(t, "oas", "/api/users/42", "X-API-Key", key)); got.Path != "/api/users/42" {
		t.Errorf("upstream got %s, want /api/users/42", got.Path)
	}
	wantEnvelope(t, edge.get(t, "oas", "/api/users/42"), 401, "unauthenticated")
	r, err := edge.do("DELETE", "oas", "/api/users/42", "X-API-Key", key)
	if err != nil {
		t.Fatal(err)
	}
	wantEnvelope(t, r, 405, "method_not_allowed")

	// The document gains DELETE: the same route is updated, and the edge follows.
	res = api.must(200, "POST", "/v1/tenants/oas/routes:import", body(doc("get", "delete")))
	if updated, _ := res["updated"].([]any); len(updated) != 1 || updated[0].(map[string]any)["id"] != route["id"] {
		t.Fatalf("re-import: %v, want route %v updated", res, route["id"])
	}
	eventually(t, applyDeadline, "DELETE reaches the upstream after the re-import", func() error {
		r, err := edge.do("DELETE", "oas", "/api/users/42", "X-API-Key", key)
		if err != nil {
			return err
		}
		if r.Status != 200 || r.Header.Get("X-Upstream") != "users-api" {
			return fmt.Errorf("DELETE: %s", r)
		}
		return nil
	})
}
