package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/api"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

const adminToken = "test-admin-token-0123456789"

// policy lets routes point at loopback, as the dev stack does, so bodies can use
// http://127.0.0.1:9; the refusal of private ranges is tested with other addresses.
var policy = &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// env is one API server on its own fresh, migrated Postgres database.
type env struct {
	t   *testing.T
	srv *api.Server
	db  *postgres.DB
	doc map[string]any
	log *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newEnv starts a server; edit may change the config before New.
func newEnv(t *testing.T, edit ...func(*api.Config)) *env {
	t.Helper()
	db, _ := pgtest.Open(t, postgres.WithUpstreamAddressRule(policy))
	logs := &syncBuffer{}
	cfg := api.Config{
		Tenants: db, Routes: db, Consumers: db, Plans: db, Tokens: db,
		JWTIssuers: db, AccessRules: db,
		Domains: db, EdgeDomain: "edge.test",
		AdminToken: adminToken,
		Upstreams:  policy,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready:      db.Ping,
	}
	for _, f := range edit {
		f(&cfg)
	}
	e := &env{t: t, srv: api.New(cfg), db: db, log: logs}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	r := e.do("GET", "/v1/openapi.json", "", nil)
	r.want(200)
	if err := json.Unmarshal(r.body, &e.doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return e
}

// resp is a response with its decoded JSON body.
type resp struct {
	t      *testing.T
	req    string
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

// do sends a request through app.Test. body: nil for none, string or []byte as raw JSON,
// anything else marshaled. hdr are name, value pairs (a Content-Type there wins).
// Every response is checked against the OpenAPI document.
func (e *env) do(method, path, token string, body any, hdr ...string) *resp {
	e.t.Helper()
	var rd io.Reader
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			e.t.Fatal(err)
		}
	}
	if body != nil {
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := e.srv.App().Test(req, 30_000)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	r := &resp{t: e.t, req: method + " " + path, status: res.StatusCode, header: res.Header, body: out}
	if len(out) > 0 && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			e.t.Fatalf("%s: response is not JSON: %v\n%s", r.req, err, out)
		}
		r.json, _ = v.(map[string]any)
	}
	if e.doc != nil {
		if err := e.conforms(method, req.URL.Path, r, decodeAny(out)); err != nil {
			e.t.Errorf("%s → %d does not match the OpenAPI document: %v\nbody: %s", r.req, r.status, err, out)
		}
	}
	if res.Header.Get("X-Request-Id") == "" {
		e.t.Errorf("%s: no X-Request-Id in the response", r.req)
	}
	return r
}

func decodeAny(b []byte) any {
	var x any
	if len(b) > 0 {
		_ = json.Unmarshal(b, &x)
	}
	return x
}

// want fails the test unless the status is one of the given.
func (r *resp) want(status ...int) *resp {
	r.t.Helper()
	if !slices.Contains(status, r.status) {
		r.t.Fatalf("%s: status %d, want %v\nbody: %s", r.req, r.status, status, r.body)
	}
	return r
}

// wantErr checks status, code and (when not "") field of an error envelope.
func (r *resp) wantErr(status int, code, field string) *resp {
	r.t.Helper()
	r.want(status)
	e, _ := r.json["error"].(map[string]any)
	if e == nil {
		r.t.Fatalf("%s: no error envelope: %s", r.req, r.body)
	}
	if e["code"] != code {
		r.t.Fatalf("%s: code %v, want %s\nbody: %s", r.req, e["code"], code, r.body)
	}
	if got, _ := e["field"].(string); got != field {
		r.t.Fatalf("%s: field %q, want %q\nbody: %s", r.req, got, field, r.body)
	}
	if e["request_id"] != r.header.Get("X-Request-Id") {
		r.t.Fatalf("%s: request_id %v differs from X-Request-Id %q", r.req, e["request_id"], r.header.Get("X-Request-Id"))
	}
	return r
}

func (r *resp) message() string {
	e, _ := r.json["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

func (r *resp) str(key string) string {
	s, _ := r.json[key].(string)
	return s
}

func (r *resp) items() []any {
	it, ok := r.json["items"].([]any)
	if !ok {
		r.t.Fatalf("%s: no items array: %s", r.req, r.body)
	}
	return it
}

func (r *resp) etag() string { return r.header.Get("ETag") }

// Fixtures.

func (e *env) tenant(slug string) string {
	e.t.Helper()
	r := e.do("POST", "/v1/tenants", adminToken, map[string]any{"slug": slug, "name": "Tenant " + slug, "plan": "pro"}).want(201)
	return r.str("id")
}

// token creates a tenant token and returns its plaintext.
func (e *env) token(slug string) string {
	e.t.Helper()
	r := e.do("POST", "/v1/tenants/"+slug+"/tokens", adminToken, map[string]any{"name": "ci"}).want(201)
	return r.str("token")
}

func routeBody(name string, paths ...string) map[string]any {
	return map[string]any{
		"name":     name,
		"paths":    paths,
		"methods":  []string{"GET"},
		"upstream": map[string]any{"targets": []any{map[string]any{"url": "http://127.0.0.1:9", "weight": 1}}},
		"auth":     "key",
	}
}

func (e *env) route(slug, name string, paths ...string) string {
	e.t.Helper()
	return e.do("POST", "/v1/tenants/"+slug+"/routes", adminToken, routeBody(name, paths...)).want(201).str("id")
}

func (e *env) consumer(slug, name string) string {
	e.t.Helper()
	return e.do("POST", "/v1/tenants/"+slug+"/consumers", adminToken, map[string]any{"name": name}).want(201).str("id")
}

func (e *env) plan(slug, name string) string {
	e.t.Helper()
	return e.do("POST", "/v1/tenants/"+slug+"/plans", adminToken, map[string]any{"name": name, "rate_limit": map[string]any{"rps": 10}}).want(201).str("id")
}

// count lists a collection as admin and returns how many items it has.
func (e *env) count(path string) int {
	e.t.Helper()
	return len(e.do("GET", path+"?limit=500", adminToken, nil).want(200).items())
}

// OpenAPI conformance: the response's status must be documented for the operation (or be
// the default error), its body must match the schema, and the documented headers present.

func (e *env) conforms(method, path string, r *resp, body any) error {
	tmpl, item := e.findPath(path)
	var op map[string]any
	if item != nil {
		op, _ = item[strings.ToLower(method)].(map[string]any)
	}
	if op == nil {
		if method == "HEAD" {
			return nil
		}
		// Unknown path or method: only the envelope is promised.
		if r.status != 404 && r.status != 405 {
			return fmt.Errorf("no operation %s %s in the document, yet status %d", method, path, r.status)
		}
		return e.validate(map[string]any{"$ref": "#/components/schemas/Error"}, body, "$")
	}
	responses := op["responses"].(map[string]any)
	res, ok := responses[strconv.Itoa(r.status)].(map[string]any)
	if !ok {
		if r.status < 400 {
			return fmt.Errorf("status %d is not documented for %s %s", r.status, method, tmpl)
		}
		res = responses["default"].(map[string]any)
	}
	res = e.resolve(res)
	content, _ := res["content"].(map[string]any)
	if content == nil {
		if len(r.body) > 0 {
			return fmt.Errorf("a body where the document has none")
		}
	} else if js, ok := content["application/json"].(map[string]any); ok {
		if err := e.validate(js["schema"].(map[string]any), body, "$"); err != nil {
			return err
		}
	} else if mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type")); content[mt] == nil {
		// Not JSON (the reference page and its files): the media type is what is promised.
		return fmt.Errorf("media type %q is not documented (%v)", mt, slices.Collect(maps.Keys(content)))
	}
	if hs, _ := res["headers"].(map[string]any); hs != nil {
		for name := range hs {
			if r.header.Get(name) == "" {
				return fmt.Errorf("documented header %s is missing", name)
			}
		}
	}
	return nil
}

func (e *env) findPath(path string) (string, map[string]any) {
	paths := e.doc["paths"].(map[string]any)
	xs := strings.Split(strings.TrimSuffix(path, "/"), "/")
	for tmpl, item := range paths {
		ps := strings.Split(tmpl, "/")
		if len(ps) != len(xs) {
			continue
		}
		ok := true
		for i := range ps {
			if !strings.HasPrefix(ps[i], "{") && ps[i] != xs[i] {
				ok = false
				break
			}
		}
		if ok {
			return tmpl, item.(map[string]any)
		}
	}
	return "", nil
}

func (e *env) resolve(s map[string]any) map[string]any {
	for {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		var cur any = e.doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		s = cur.(map[string]any)
	}
}

// validate checks v against the subset of JSON Schema the document uses.
func (e *env) validate(schema map[string]any, v any, at string) error {
	s := e.resolve(schema)
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v is not one of %v", at, v, enum)
	}
	switch s["type"] {
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %T", at, v)
		}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for _, k := range req {
			if _, ok := o[k.(string)]; !ok {
				return fmt.Errorf("%s: required property %q is missing", at, k)
			}
		}
		for k, x := range o {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if s["additionalProperties"] == false {
					return fmt.Errorf("%s: property %q is not in the schema", at, k)
				}
				continue
			}
			if err := e.validate(ps, x, at+"."+k); err != nil {
				return err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array, got %T", at, v)
		}
		for i, x := range a {
			if err := e.validate(s["items"].(map[string]any), x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want a string, got %T", at, v)
		}
		switch s["format"] {
		case "date-time":
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				return fmt.Errorf("%s: %q is not a date-time", at, str)
			}
		case "uuid":
			if len(str) != 36 {
				return fmt.Errorf("%s: %q is not a uuid", at, str)
			}
		}
	case "integer":
		n, ok := v.(float64)
		if !ok || n != float64(int64(n)) {
			return fmt.Errorf("%s: want an integer, got %v", at, v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return fmt.Errorf("%s: want a number, got %T", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want a boolean, got %T", at, v)
		}
	}
	return nil
}

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
