package api_test

import (
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"tollgate/api"
	"tollgate/tenants"
)

// TestConfigDocument: export as JSON and YAML; either applies back to no change; an edit
// applies with its plan; errors name the document path; a stale document is refused
// unless forced; the flags and the roles of PUT.
func TestConfigDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Audit = c.Tenants.(tenants.AuditService) })
	e.tenant("acme")
	e.plan("acme", "gold")
	e.route("acme", "hello", "/hello")
	e.do("POST", "/v1/tenants/acme/consumers", adminToken, map[string]any{"name": "alice", "plan": "gold"}).want(201)
	e.do("PUT", "/v1/tenants/acme/policy", adminToken, `{"rules":[["alice","/hello/*","GET"]]}`).want(200)

	js := e.do("GET", "/v1/tenants/acme/config", adminToken, nil).want(200)
	if js.str("tenant") != "acme" || js.json["version"] != 1.0 || strings.Contains(string(js.body), `"id"`) {
		t.Fatalf("export: %s", js.body)
	}
	ym := e.yamlDo("GET", "/v1/tenants/acme/config", nil, "Accept", "application/yaml").want(200)
	if ct := ym.header.Get("Content-Type"); ct != "application/yaml" || !strings.Contains(string(ym.body), "tenant: acme\n") {
		t.Fatalf("YAML export (%s):\n%s", ct, ym.body)
	}

	// Either form applies back to no change.
	p := e.yamlDo("PUT", "/v1/tenants/acme/config", ym.body, "Content-Type", "application/yaml").want(200)
	if p.json["applied"] != false || p.json["unchanged"] != 4.0 || len(p.json["created"].([]any))+len(p.json["updated"].([]any)) != 0 {
		t.Fatalf("apply the YAML export: %s", p.body)
	}
	e.do("PUT", "/v1/tenants/acme/config?prune=true", adminToken, js.body).want(200)
	if again := e.do("GET", "/v1/tenants/acme/config", adminToken, nil).want(200); string(again.body) != string(js.body) {
		t.Fatalf("export → apply → export differs:\n%s\n%s", js.body, again.body)
	}

	// An edit, dry first.
	edited := string(ym.body)
	if i := strings.Index(edited, "- /hello\n"); i > 0 {
		line := edited[strings.LastIndexByte(edited[:i], '\n')+1 : i]
		edited = edited[:i] + "- /hello\n" + line + "- /hi\n" + edited[i+len("- /hello\n"):]
	}
	if edited == string(ym.body) {
		t.Fatalf("no path to edit in:\n%s", ym.body)
	}
	p = e.yamlDo("PUT", "/v1/tenants/acme/config?dry_run", []byte(edited), "Content-Type", "application/yaml").want(200)
	if p.json["applied"] != false || p.str("revision") != js.str("revision") || jsonOf2(p.json["updated"]) != `[{"kind":"route","name":"hello"}]` {
		t.Fatalf("dry run: %s", p.body)
	}
	p = e.yamlDo("PUT", "/v1/tenants/acme/config", []byte(edited), "Content-Type", "application/yaml").want(200)
	if p.json["applied"] != true || p.str("revision") == js.str("revision") {
		t.Fatalf("apply: %s", p.body)
	}
	audit := e.do("GET", "/v1/tenants/acme/audit", adminToken, nil).want(200).items()
	if a := audit[0].(map[string]any); a["action"] != "config.apply" || a["object"] != "" || a["actor"] != "admin" {
		t.Fatalf("audit: %v", audit[0])
	}

	// The first export is stale now: an edit of it is refused unless forced.
	stale := strings.Replace(string(js.body), `"timeout_ms": 30000`, `"timeout_ms": 1000`, 1)
	e.do("PUT", "/v1/tenants/acme/config", adminToken, stale).wantErr(409, tenants.EVersionConflict, "revision")
	e.do("PUT", "/v1/tenants/acme/config?force=true", adminToken, stale).want(200)

	// Errors name the document path, as the objects' own endpoints word them.
	bad := strings.Replace(string(js.body), `"url": "http://127.0.0.1:9"`, `"url": "ftp://x"`, 1)
	e.do("PUT", "/v1/tenants/acme/config?force=true", adminToken, bad).wantErr(400, tenants.EValidation, "routes[0].upstream.targets[0].url")
	e.do("PUT", "/v1/tenants/acme/config", adminToken, `{"version":1,"tenant":"acme","routes":[{"name":"x","id":"y"}]}`).wantErr(400, tenants.EInvalidRequest, "routes[0].id")
	e.do("PUT", "/v1/tenants/acme/config", adminToken, `{"version":1,"tenant":"acme","policy":{"rules":[["a","nope","GET"]]}}`).wantErr(400, tenants.EValidation, "policy.rules[0][1]")
	e.do("PUT", "/v1/tenants/acme/config", adminToken, `{"version":2,"tenant":"acme"}`).wantErr(400, tenants.EValidation, "version")
	e.do("PUT", "/v1/tenants/acme/config", adminToken, `{"version":1,"tenant":"other"}`).wantErr(400, tenants.EValidation, "tenant")
	e.yamlDo("PUT", "/v1/tenants/acme/config", []byte("version: ["), "Content-Type", "application/yaml").wantErr(400, tenants.EInvalidRequest, "")
	e.do("PUT", "/v1/tenants/acme/config?dry_run=maybe", adminToken, js.body).wantErr(400, tenants.EInvalidRequest, "dry_run")
	e.do("PUT", "/v1/tenants/acme/config?prnue=true", adminToken, js.body).wantErr(400, tenants.EInvalidRequest, "")

	// Roles: a viewer reads, a developer applies.
	viewer := e.do("POST", "/v1/tenants/acme/tokens", adminToken, map[string]any{"name": "v", "role": "viewer"}).want(201).str("token")
	dev := e.do("POST", "/v1/tenants/acme/tokens", adminToken, map[string]any{"name": "d", "role": "developer"}).want(201).str("token")
	cur := e.do("GET", "/v1/tenants/acme/config", viewer, nil).want(200)
	e.do("PUT", "/v1/tenants/acme/config", viewer, cur.body).wantErr(403, tenants.EForbidden, "")
	e.do("PUT", "/v1/tenants/acme/config", dev, cur.body).want(200)
	e.do("GET", "/v1/tenants/other/config", dev, nil).want(404)
}

// yamlDo sends a YAML request, or asks for a YAML answer: the document's conformance
// check reads JSON, so it is left out; the JSON requests check the same schema.
func (e *env) yamlDo(method, path string, body []byte, hdr ...string) *resp {
	e.t.Helper()
	doc := e.doc
	e.doc = nil
	defer func() { e.doc = doc }()
	return e.do(method, path, adminToken, body, hdr...)
}

func jsonOf2(v any) string {
	s, _ := jsonOf(v)
	return s
}

// FuzzDecodeConfig: the document decoder, JSON and YAML, never panics and fails only with
// client errors, the same way every time.
func FuzzDecodeConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ct := range []string{"application/json", "application/yaml"} {
			err := api.Decode("config", ct, body)
			if err == nil {
				continue
			}
			var te *tenants.Error
			if !errors.As(err, &te) {
				t.Fatalf("%s: %T %v is not a *tenants.Error", ct, err, err)
			}
			switch te.Code {
			case tenants.EInvalidRequest, tenants.EValidation, tenants.EBodyTooLarge, tenants.EUnsupportedMedia:
			default:
				t.Fatalf("%s: code %s for a body", ct, te.Code)
			}
			if again := api.Decode("config", ct, body); again == nil || again.Error() != err.Error() {
				t.Fatalf("%s: not deterministic: %v then %v", ct, err, again)
			}
		}
	})
}

// TestConfigYAMLIsJSON: a YAML document decodes to what its JSON does.
func TestConfigYAMLIsJSON(t *testing.T) {
	j := []byte(`{"version":1,"tenant":"acme","routes":[{"name":"a","paths":["/a"],"upstream":{"targets":[{"url":"http://example.com"}]}}],"domains":[{"hostname":"api.example.com","status":"verified"}]}`)
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Decode("config", "application/json", j); err != nil {
		t.Fatal(err)
	}
	if err := api.Decode("config", "application/yaml", y); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
}
