package api_test

import (
	"strings"
	"testing"
)

const up = `"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]}`

// TestValidation: each bad body is refused with the right status, code and field, and
// nothing is written.
func TestValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	cid := e.consumer("acme", "existing")

	cases := []struct {
		name, path, body string
		status           int
		code, field      string
	}{
		// Tenants (the list is checked to still hold only acme).
		{"slug missing", "/v1/tenants", `{"name":"x"}`, 400, "validation_failed", "slug"},
		{"slug upper", "/v1/tenants", `{"slug":"Acme2"}`, 400, "validation_failed", "slug"},
		{"slug reserved", "/v1/tenants", `{"slug":"api"}`, 400, "validation_failed", "slug"},
		{"slug too long", "/v1/tenants", `{"slug":"` + strings.Repeat("a", 64) + `"}`, 400, "validation_failed", "slug"},
		{"slug leading dash", "/v1/tenants", `{"slug":"-a"}`, 400, "validation_failed", "slug"},
		{"tenant name spaces", "/v1/tenants", `{"slug":"ok","name":" x"}`, 400, "validation_failed", "name"},
		{"tenant name control", "/v1/tenants", `{"slug":"ok","name":"a\u0007b"}`, 400, "validation_failed", "name"},
		{"tenant plan bad", "/v1/tenants", `{"slug":"ok","plan":"Gold Plan"}`, 400, "validation_failed", "plan"},
		{"tenant slug number", "/v1/tenants", `{"slug":5}`, 400, "invalid_request", "slug"},

		// Routes.
		{"route name missing", "/v1/tenants/acme/routes", `{"paths":["/a"],` + up + `}`, 400, "validation_failed", "name"},
		{"route no paths", "/v1/tenants/acme/routes", `{"name":"r",` + up + `}`, 400, "validation_failed", "paths"},
		{"route path relative", "/v1/tenants/acme/routes", `{"name":"r","paths":["a"],` + up + `}`, 400, "validation_failed", "paths[0]"},
		{"route path dotdot", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a","/b/../c"],` + up + `}`, 400, "validation_failed", "paths[1]"},
		{"route path encoded", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a%2f"],` + up + `}`, 400, "validation_failed", "paths[0]"},
		{"route path twice", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a","/a"],` + up + `}`, 400, "validation_failed", "paths[1]"},
		{"route method", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],"methods":["GET","TRACE"],` + up + `}`, 400, "validation_failed", "methods[1]"},
		{"route no targets", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],"upstream":{"targets":[]}}`, 400, "validation_failed", "upstream.targets"},
		{"route target scheme", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],"upstream":{"targets":[{"url":"ftp://x.example"}]}}`, 400, "validation_failed", "upstream.targets[0].url"},
		{"route target private", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"},{"url":"http://10.0.0.1"}]}}`, 400, "validation_failed", "upstream.targets[1].url"},
		{"route target metadata", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],"upstream":{"targets":[{"url":"http://169.254.169.254/latest"}]}}`, 400, "validation_failed", "upstream.targets[0].url"},
		{"route target creds", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],"upstream":{"targets":[{"url":"http://u:p@x.example"}]}}`, 400, "validation_failed", "upstream.targets[0].url"},
		{"route weight", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],"upstream":{"targets":[{"url":"http://x.example","weight":1001}]}}`, 400, "validation_failed", "upstream.targets[0].weight"},
		{"route auth", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],` + up + `,"auth":"basic"}`, 400, "validation_failed", "auth"},
		{"route rps", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],` + up + `,"rate_limit":{"rps":0}}`, 400, "validation_failed", "rate_limit.rps"},
		{"route burst", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],` + up + `,"rate_limit":{"rps":1,"burst":-1}}`, 400, "validation_failed", "rate_limit.burst"},
		{"route body cap", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],` + up + `,"max_body_bytes":-5}`, 400, "validation_failed", "max_body_bytes"},
		{"route connect timeout", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],` + up + `,"connect_timeout_ms":300001}`, 400, "validation_failed", "connect_timeout_ms"},
		{"route timeout", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],` + up + `,"timeout_ms":-1}`, 400, "validation_failed", "timeout_ms"},
		{"route version on create", "/v1/tenants/acme/routes", `{"name":"r","paths":["/a"],` + up + `,"version":1}`, 400, "invalid_request", "version"},
		{"route id on create", "/v1/tenants/acme/routes", `{"id":"x","name":"r","paths":["/a"],` + up + `}`, 400, "invalid_request", "id"},

		// Consumers.
		{"consumer name missing", "/v1/tenants/acme/consumers", `{}`, 400, "validation_failed", "name"},
		{"consumer name long", "/v1/tenants/acme/consumers", `{"name":"` + strings.Repeat("x", 101) + `"}`, 400, "validation_failed", "name"},
		{"consumer plan bad", "/v1/tenants/acme/consumers", `{"name":"c","plan":"A B"}`, 400, "validation_failed", "plan"},
		{"consumer plan unknown", "/v1/tenants/acme/consumers", `{"name":"c","plan":"gold"}`, 400, "validation_failed", "plan"},

		// Plans.
		{"plan name missing", "/v1/tenants/acme/plans", `{"concurrency":1}`, 400, "validation_failed", "name"},
		{"plan name upper", "/v1/tenants/acme/plans", `{"name":"Gold"}`, 400, "validation_failed", "name"},
		{"plan rps", "/v1/tenants/acme/plans", `{"name":"g","rate_limit":{"rps":1000001}}`, 400, "validation_failed", "rate_limit.rps"},
		{"plan quota", "/v1/tenants/acme/plans", `{"name":"g","quota":{"requests":0}}`, 400, "validation_failed", "quota.requests"},
		{"plan concurrency", "/v1/tenants/acme/plans", `{"name":"g","concurrency":-1}`, 400, "validation_failed", "concurrency"},

		// Tokens and keys.
		{"token name missing", "/v1/tenants/acme/tokens", `{}`, 400, "validation_failed", "name"},
		{"token role", "/v1/tenants/acme/tokens", `{"name":"t","role":"root"}`, 400, "validation_failed", "role"},
		{"key body field", "/v1/tenants/acme/consumers/" + cid + "/keys", `{"expires":"never"}`, 400, "invalid_request", "expires"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", c.path, adminToken, c.body).wantErr(c.status, c.code, c.field)
			if r.message() == "" {
				t.Errorf("empty message")
			}
		})
	}
	// Nothing was written.
	if n := e.count("/v1/tenants"); n != 1 {
		t.Errorf("%d tenants, want 1", n)
	}
	for _, coll := range []string{"routes", "plans"} {
		if n := e.count("/v1/tenants/acme/" + coll); n != 0 {
			t.Errorf("%d %s, want 0", n, coll)
		}
	}
	if n := e.count("/v1/tenants/acme/consumers"); n != 1 {
		t.Errorf("%d consumers, want 1", n)
	}
	if n := e.count("/v1/tenants/acme/tokens"); n != 0 {
		t.Errorf("%d tokens, want 0", n)
	}
	if n := e.count("/v1/tenants/acme/consumers/" + cid + "/keys"); n != 0 {
		t.Errorf("%d keys, want 0", n)
	}
}

// TestDecoding: bodies that are not the JSON an endpoint takes get invalid_request (or 415)
// with a message naming the problem.
func TestDecoding(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	routes := "/v1/tenants/acme/routes"

	cases := []struct {
		name, path, body string
		hdr              []string
		status           int
		code, field, msg string
	}{
		{"unknown field", routes, `{"name":"r","pathz":["/a"]}`, nil, 400, "invalid_request", "pathz", `field "pathz" is not known`},
		{"unknown nested field", routes, `{"name":"r","paths":["/a"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"},{"url":"http://x.example","wieght":2}]}}`, nil,
			400, "invalid_request", "upstream.targets[1].wieght", `field "upstream.targets[1].wieght" is not known`},
		{"case-insensitive key", routes, `{"NAME":"r"}`, nil, 400, "invalid_request", "NAME", `did you mean "name"?`},
		{"wrong type number", routes, `{"name":"r","paths":["/a"],` + up + `,"rate_limit":{"rps":"10"}}`, nil, 400, "invalid_request", "rate_limit.rps", `"rate_limit.rps" must be an integer, not a string`},
		{"fraction for integer", routes, `{"name":"r","paths":["/a"],` + up + `,"rate_limit":{"rps":1.5}}`, nil, 400, "invalid_request", "rate_limit.rps", `"rate_limit.rps" must be an integer, not 1.5`},
		{"integer overflow", routes, `{"name":"r","paths":["/a"],` + up + `,"timeout_ms":99999999999999999999}`, nil, 400, "invalid_request", "timeout_ms", "out of range"},
		{"string for array", routes, `{"name":"r","paths":"/a"}`, nil, 400, "invalid_request", "paths", `"paths" must be an array, not a string`},
		{"number in array", routes, `{"name":"r","paths":["/a",5]}`, nil, 400, "invalid_request", "paths[1]", `"paths[1]" must be a string`},
		{"array for object", routes, `{"name":"r","upstream":[]}`, nil, 400, "invalid_request", "upstream", `"upstream" must be an object, not an array`},
		{"string for bool", routes, `{"name":"r","policy":"yes"}`, nil, 400, "invalid_request", "policy", `"policy" must be true or false`},
		{"malformed", routes, `{"name":"r",}`, nil, 400, "invalid_request", "", "not valid JSON"},
		{"truncated", routes, `{"name":"r"`, nil, 400, "invalid_request", "", "not valid JSON"},
		{"trailing data", routes, `{"name":"r"} {"name":"s"}`, nil, 400, "invalid_request", "", "data after the JSON object"},
		{"trailing garbage", routes, `{"name":"r"}x`, nil, 400, "invalid_request", "", "data after the JSON object"},
		{"empty", routes, ``, nil, 400, "invalid_request", "", "request body is empty"},
		{"whitespace", routes, " \n\t", nil, 400, "invalid_request", "", "request body is empty"},
		{"null", routes, `null`, nil, 400, "invalid_request", "", "must be a JSON object"},
		{"array", routes, `[{"name":"r"}]`, nil, 400, "invalid_request", "", "must be a JSON object"},
		{"string", routes, `"r"`, nil, 400, "invalid_request", "", "must be a JSON object"},
		{"text/plain", routes, `{"name":"r"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", "", `got "text/plain"`},
		{"form", routes, `name=r`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", "", "application/json"},
		{"no content type", routes, `{"name":"r"}`, []string{"Content-Type", ""}, 415, "unsupported_media_type", "", "Content-Type: application/json"},
		{"latin1", routes, `{"name":"r"}`, []string{"Content-Type", "application/json; charset=latin1"}, 415, "unsupported_media_type", "", "UTF-8"},
		// What the server owns is not known to a request, as if it were not a field.
		{"id", routes, `{"id":"01900000-0000-7000-8000-000000000001","name":"r"}`, nil, 400, "invalid_request", "id", `field "id" is not known`},
		{"version on create", routes, `{"name":"r","version":1}`, nil, 400, "invalid_request", "version", `field "version" is not known`},
		{"created_at", "/v1/tenants/acme/consumers", `{"name":"c","created_at":"2026-01-01T00:00:00Z"}`, nil, 400, "invalid_request", "created_at", `field "created_at" is not known`},
		{"tenant_id", "/v1/tenants/acme/plans", `{"name":"p","tenant_id":"x"}`, nil, 400, "invalid_request", "tenant_id", `field "tenant_id" is not known`},
		{"domain status", "/v1/tenants/acme/domains", `{"hostname":"api.acme.example","status":"verified"}`, nil, 400, "invalid_request", "status", `field "status" is not known`},
		{"issuer updated_at", "/v1/tenants/acme/jwt-issuers", `{"issuer":"https://idp.example","updated_at":"x"}`, nil, 400, "invalid_request", "updated_at", `field "updated_at" is not known`},
		// A plan's rate is only a rate: the plan has the mode, and counts per consumer.
		{"plan rate per", "/v1/tenants/acme/plans", `{"name":"p","rate_limit":{"rps":5,"per":"ip"}}`, nil, 400, "invalid_request", "rate_limit.per", `field "rate_limit.per" is not known`},
		{"tenant body empty", "/v1/tenants", ``, nil, 400, "invalid_request", "", "request body is empty"},
		{"patch empty", "/v1/tenants/acme", ``, nil, 400, "invalid_request", "", "request body is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "POST"
			if c.path == "/v1/tenants/acme" {
				method = "PATCH"
			}
			r := e.do(method, c.path, adminToken, c.body, c.hdr...).wantErr(c.status, c.code, c.field)
			if !strings.Contains(r.message(), c.msg) {
				t.Errorf("message %q does not contain %q", r.message(), c.msg)
			}
		})
	}
	// Accepted variants: charset, +json types, leading whitespace.
	e.do("POST", routes, adminToken, routeBody("a", "/a"), "Content-Type", "application/json; charset=UTF-8").want(201)
	e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"Merge"}`, "Content-Type", "application/merge-patch+json", "If-Match", "*").want(200)
	e.do("POST", "/v1/tenants/acme/consumers", adminToken, "\n  {\"name\":\"ws\"}\n").want(201)
	e.do("PUT", "/v1/tenants/acme/policy", adminToken, `{"rules":[],"tenant_id":"x"}`).wantErr(400, "invalid_request", "tenant_id")
	// Null is the zero value, then judged by the rules.
	e.do("POST", "/v1/tenants/acme/consumers", adminToken, `{"name":null}`).wantErr(400, "validation_failed", "name")
	if n := e.count(routes); n != 1 {
		t.Errorf("%d routes, want 1", n)
	}
}
