package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
)

// ecKey returns a fresh P-256 public JWK as a body value.
func ecKey(t *testing.T, kid string) map[string]any {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return map[string]any{"kty": "EC", "crv": "P-256", "kid": kid, "x": enc(b[1:33]), "y": enc(b[33:])}
}

const hsSecret = "an HS256 secret of at least 32 bytes, never echoed"

func TestJWTIssuerCRUD(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	base := "/v1/tenants/acme/jwt-issuers"

	key := ecKey(t, "k1")
	r := e.do("POST", base, adminToken, map[string]any{
		"issuer": "https://idp.example", "audiences": []string{"orders-api"}, "algorithms": []string{"ES256"},
		"keys": []any{key}, "roles_claim": "realm_access.roles",
	}).want(201)
	id := r.str("id")
	if r.header.Get("Location") != base+"/"+id || r.etag() != `"1"` {
		t.Fatalf("Location %q ETag %q", r.header.Get("Location"), r.etag())
	}
	if r.str("consumer_claim") != "sub" || r.str("roles_claim") != "realm_access.roles" || r.json["leeway_seconds"] != 30.0 {
		t.Fatalf("defaults: %s", r.body)
	}
	// The store has it; the tenant's list shows it.
	if n := e.count(base); n != 1 {
		t.Fatalf("list has %d issuers", n)
	}
	g := e.do("GET", base+"/"+id, adminToken, nil).want(200)
	if g.str("issuer") != "https://idp.example" || len(g.json["keys"].([]any)) != 1 {
		t.Fatalf("get: %s", g.body)
	}
	// "issuer" is unique per tenant.
	e.do("POST", base, adminToken, map[string]any{"issuer": "https://idp.example", "audiences": []string{"x"}, "algorithms": []string{"ES256"}, "keys": []any{key}}).
		wantErr(409, "conflict", "issuer")

	// HS256: the secret is write-only.
	hs := e.do("POST", base, adminToken, map[string]any{"issuer": "hs", "audiences": []string{"a"}, "hs256_secret": hsSecret}).want(201)
	hsID := hs.str("id")
	for _, body := range []string{string(hs.body), string(e.do("GET", base+"/"+hsID, adminToken, nil).want(200).body), string(e.do("GET", base, adminToken, nil).want(200).body)} {
		if strings.Contains(body, "hs256_secret") || strings.Contains(body, hsSecret) {
			t.Fatalf("the secret came back: %s", body)
		}
	}
	if algs := hs.json["algorithms"].([]any); len(algs) != 1 || algs[0] != "HS256" {
		t.Fatalf("algorithms %v", algs)
	}
	// PUT without any key source keeps the stored secret; with If-Match.
	p := e.do("PUT", base+"/"+hsID, adminToken, map[string]any{"issuer": "hs", "audiences": []string{"a", "b"}}, "If-Match", `"1"`).want(200)
	if p.json["version"] != 2.0 || strings.Contains(string(p.body), hsSecret) {
		t.Fatalf("put: %s", p.body)
	}
	stored, err := e.db.FindJWTIssuer(context.Background(), p.str("tenant_id"), hsID)
	if err != nil || stored.HS256Secret != hsSecret || len(stored.Audiences) != 2 {
		t.Fatalf("stored after put: %+v %v", stored, err)
	}
	// PUT needs a version; a stale one conflicts.
	e.do("PUT", base+"/"+hsID, adminToken, map[string]any{"issuer": "hs", "audiences": []string{"a"}}).wantErr(400, "validation_failed", "version")
	e.do("PUT", base+"/"+hsID, adminToken, map[string]any{"issuer": "hs", "audiences": []string{"a"}, "version": 1}).wantErr(409, "version_conflict", "")
	// A key issuer updated without a key source has nothing to keep.
	e.do("PUT", base+"/"+id, adminToken, map[string]any{"issuer": "https://idp.example", "audiences": []string{"a"}}, "If-Match", "*").
		wantErr(400, "validation_failed", "jwks_url")

	e.do("DELETE", base+"/"+hsID, adminToken, nil).want(204)
	e.do("GET", base+"/"+hsID, adminToken, nil).wantErr(404, "not_found", "")
	e.do("DELETE", base+"/"+hsID, adminToken, nil).wantErr(404, "not_found", "")
	e.do("GET", base+"/not-a-uuid", adminToken, nil).wantErr(404, "not_found", "")
}

// Validation errors name the field and the rule, and change nothing.
func TestJWTIssuerValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	base := "/v1/tenants/acme/jwt-issuers"
	key := ecKey(t, "k1")
	valid := func() map[string]any {
		return map[string]any{"issuer": "https://idp.example", "audiences": []string{"api"}, "algorithms": []string{"ES256"}, "keys": []any{key}}
	}
	private := ecKey(t, "p")
	private["d"] = "AAAA"
	cases := []struct {
		name  string
		edit  func(map[string]any)
		code  string
		field string
		msg   string
	}{
		{"no audiences", func(b map[string]any) { delete(b, "audiences") }, "validation_failed", "audiences", "at least one audience"},
		{"alg none", func(b map[string]any) { b["algorithms"] = []string{"none"} }, "validation_failed", "algorithms[0]", "never accepted"},
		{"HS256 with keys", func(b map[string]any) { b["algorithms"] = []string{"HS256"} }, "validation_failed", "algorithms[0]", "needs hs256_secret"},
		{"two sources", func(b map[string]any) { b["jwks_url"] = "https://idp.example/jwks" }, "validation_failed", "jwks_url", "exactly one"},
		{"no source", func(b map[string]any) { delete(b, "keys") }, "validation_failed", "jwks_url", "exactly one"},
		{"http jwks", func(b map[string]any) { delete(b, "keys"); b["jwks_url"] = "http://idp.example/jwks" }, "validation_failed", "jwks_url", "https://"},
		{"private jwks host", func(b map[string]any) { delete(b, "keys"); b["jwks_url"] = "https://10.0.0.1/jwks" }, "validation_failed", "jwks_url", "private"},
		{"metadata jwks host", func(b map[string]any) { delete(b, "keys"); b["jwks_url"] = "https://169.254.169.254/jwks" }, "validation_failed", "jwks_url", "link-local"},
		{"private key", func(b map[string]any) { b["keys"] = []any{private} }, "validation_failed", "keys[0].d", "private key material"},
		{"short secret", func(b map[string]any) { delete(b, "keys"); delete(b, "algorithms"); b["hs256_secret"] = "short" }, "validation_failed", "hs256_secret", "at least 32 bytes"},
		{"leeway", func(b map[string]any) { b["leeway_seconds"] = 301 }, "validation_failed", "leeway_seconds", "between 0 and 300"},
		{"claim", func(b map[string]any) { b["consumer_claim"] = "a..b" }, "validation_failed", "consumer_claim", "empty parts"},
		{"unknown field", func(b map[string]any) { b["jku"] = "https://evil.example" }, "invalid_request", "jku", "not known"},
		{"key unknown member", func(b map[string]any) { k := ecKey(t, "z"); k["jku"] = "x"; b["keys"] = []any{k} }, "invalid_request", "keys[0].jku", "not known"},
		{"wrong type", func(b map[string]any) { b["audiences"] = "api" }, "invalid_request", "audiences", "must be an array"},
	}
	for _, c := range cases {
		b := valid()
		c.edit(b)
		r := e.do("POST", base, adminToken, b).wantErr(400, c.code, c.field)
		if !strings.Contains(r.message(), c.msg) {
			t.Errorf("%s: message %q, want it to mention %q", c.name, r.message(), c.msg)
		}
	}
	if n := e.count(base); n != 0 {
		t.Fatalf("%d issuers stored by failed requests", n)
	}
}

func TestPolicyAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	path := "/v1/tenants/acme/policy"

	e.do("GET", path, adminToken, nil).wantErr(404, "not_found", "")
	r := e.do("PUT", path, adminToken, map[string]any{
		"rules": [][]string{{"reader", "/orders/:id", "GET"}, {"*", "/admin/*", "*", "deny"}},
		"roles": [][]string{{"alice", "reader"}},
	}).want(200)
	if r.json["version"] != 1.0 || r.etag() != `"1"` || len(r.json["rules"].([]any)) != 2 {
		t.Fatalf("put: %s", r.body)
	}
	g := e.do("GET", path, adminToken, nil).want(200)
	if g.etag() != `"1"` || len(g.json["roles"].([]any)) != 1 {
		t.Fatalf("get: %s", g.body)
	}
	// Unconditional replace; roles default to none.
	r = e.do("PUT", path, adminToken, `{"rules":[["*","/*","GET"]]}`).want(200)
	if r.json["version"] != 2.0 || len(r.json["roles"].([]any)) != 0 {
		t.Fatalf("replace: %s", r.body)
	}
	// Conditional: If-Match or version; stale conflicts.
	e.do("PUT", path, adminToken, `{"rules":[]}`, "If-Match", `"1"`).wantErr(409, "version_conflict", "")
	e.do("PUT", path, adminToken, `{"rules":[],"version":1}`).wantErr(409, "version_conflict", "")
	e.do("PUT", path, adminToken, `{"rules":[]}`, "If-Match", `"2"`).want(200)
	e.do("PUT", path, adminToken, `{"rules":[]}`, "If-Match", "*").want(200)

	// Validation errors name the rule, and change nothing.
	for _, c := range []struct {
		body, field, msg string
	}{
		{`{"roles":[]}`, "rules", "required"},
		{`{"rules":[["a","/x"]]}`, "rules[0]", "got 2 fields"},
		{`{"rules":[["a","/x","GET"],["a","x","GET"]]}`, "rules[1][1]", "must start with /"},
		{`{"rules":[["a","/x","get"]]}`, "rules[0][2]", "upper case"},
		{`{"rules":[["a","/x","GET","maybe"]]}`, "rules[0][3]", "allow"},
		{`{"rules":[["a","/x;y","GET"]]}`, "rules[0][1]", ""},
		{`{"rules":[],"roles":[["a","b"],["b","a"]]}`, "roles", "cycle"},
		{`{"rules":[],"roles":[["*","b"]]}`, "roles[0][0]", "any caller"},
	} {
		r := e.do("PUT", path, adminToken, c.body).wantErr(400, "validation_failed", c.field)
		if !strings.Contains(r.message(), c.msg) {
			t.Errorf("%s: message %q, want it to mention %q", c.body, r.message(), c.msg)
		}
	}
	e.do("PUT", path, adminToken, `{"rules":[["a","/x","GET"]],"extra":1}`).wantErr(400, "invalid_request", "extra")
	e.do("PUT", path, adminToken, `{"rules":[["a",1,"GET"]]}`).wantErr(400, "invalid_request", "rules[0][1]")
	if v := e.do("GET", path, adminToken, nil).want(200).json["version"]; v != 4.0 {
		t.Fatalf("failed PUTs changed the policy: version %v", v)
	}
}

// A tenant's token sees neither another tenant's issuers nor its policy: 404 as for a
// tenant that does not exist, and ids of the other tenant's issuers are not found under
// its own slug.
func TestAuthConfigIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	e.tenant("beta")
	betaToken := e.token("beta")
	acmeIss := e.do("POST", "/v1/tenants/acme/jwt-issuers", adminToken, map[string]any{
		"issuer": "https://idp.example", "audiences": []string{"a"}, "hs256_secret": hsSecret}).want(201).str("id")
	e.do("PUT", "/v1/tenants/acme/policy", adminToken, `{"rules":[["*","/*","*"]]}`).want(200)

	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/tenants/acme/jwt-issuers", ""},
		{"GET", "/v1/tenants/acme/jwt-issuers/" + acmeIss, ""},
		{"POST", "/v1/tenants/acme/jwt-issuers", `{"issuer":"x","audiences":["a"],"hs256_secret":"` + hsSecret + `"}`},
		{"PUT", "/v1/tenants/acme/jwt-issuers/" + acmeIss, `{"issuer":"x","audiences":["a"],"version":1}`},
		{"DELETE", "/v1/tenants/acme/jwt-issuers/" + acmeIss, ""},
		{"GET", "/v1/tenants/acme/policy", ""},
		{"PUT", "/v1/tenants/acme/policy", `{"rules":[]}`},
		// beta's own slug with acme's issuer id.
		{"GET", "/v1/tenants/beta/jwt-issuers/" + acmeIss, ""},
		{"PUT", "/v1/tenants/beta/jwt-issuers/" + acmeIss, `{"issuer":"x","audiences":["a"],"version":1}`},
		{"DELETE", "/v1/tenants/beta/jwt-issuers/" + acmeIss, ""},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		e.do(c.method, c.path, betaToken, body).wantErr(404, "not_found", "")
	}
	// beta's own view is empty; acme's is intact.
	if n := len(e.do("GET", "/v1/tenants/beta/jwt-issuers", betaToken, nil).want(200).items()); n != 0 {
		t.Fatalf("beta sees %d issuers", n)
	}
	e.do("GET", "/v1/tenants/beta/policy", betaToken, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/tenants/acme/jwt-issuers/"+acmeIss, adminToken, nil).want(200)
	if v := e.do("GET", "/v1/tenants/acme/policy", adminToken, nil).want(200).json["version"]; v != 1.0 {
		t.Fatalf("acme's policy changed: %v", v)
	}
}
