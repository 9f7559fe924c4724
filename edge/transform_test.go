package edge_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"tollgate/tenants"
)

func transformRoute(acme, id, path, upURL string, tr *tenants.Transform) *tenants.Route {
	return &tenants.Route{ID: id, TenantID: acme, Name: id, Paths: []string{path}, Transform: tr,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upURL}}}}
}

func TestTransformRequestJSON(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	r := transformRoute(acme, "json", "/json", up.URL, &tenants.Transform{Request: &tenants.RequestTransform{
		JSON: &tenants.JSONTransform{
			Set:    map[string]json.RawMessage{"meta.source": json.RawMessage(`"edge"`), "n": json.RawMessage(`{"x":[1,2]}`)},
			Remove: []string{"secret", "absent.path"},
			Rename: map[string]string{"old": "renamed.inner"},
		},
	}})
	r.MaxBodyBytes = 200_000
	h.put(r)
	h.e.Loaded()
	host := "acme." + domain
	post := func(ct, body string, extra ...string) result {
		return send(t, h.public, "POST", host, "/json", append([]string{"Content-Type: " + ct}, extra...), body)
	}

	res := post("application/json; charset=utf-8", `{"keep":true,"secret":"s","old":{"a":1},"n":5}`)
	if res.status != 200 || res.echo == nil {
		t.Fatalf("json: %s", res)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(res.echo.Body), &got); err != nil {
		t.Fatalf("upstream got invalid JSON %q: %v", res.echo.Body, err)
	}
	want := `{"keep":true,"meta":{"source":"edge"},"n":{"x":[1,2]},"renamed":{"inner":{"a":1}}}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("upstream got %s, want %s", b, want)
	}
	if res.echo.get("Content-Length") != fmt.Sprint(len(res.echo.Body)) {
		t.Errorf("Content-Length %s for a %d-byte body", res.echo.get("Content-Length"), len(res.echo.Body))
	}

	// +json types are JSON; other types pass untouched.
	if res := post("application/vnd.api+json", `{"secret":1}`); res.status != 200 || strings.Contains(res.echo.Body, "secret") {
		t.Errorf("+json: %s", res)
	}
	if res := post("text/plain", `{"secret":1`); res.status != 200 || res.echo.Body != `{"secret":1` {
		t.Errorf("text/plain passes as is: %s", res)
	}

	// Refusals: nothing reaches the upstream.
	before := up.hits.Load()
	for _, tc := range []struct{ name, body string }{
		{"malformed", `{"secret":1`},
		{"trailing garbage", `{"a":1} x`},
		{"array", `[1,2]`},
	} {
		if res := post("application/json", tc.body); res.status != 400 || res.errCode() != tenants.EInvalidRequest {
			t.Errorf("%s: want 400 invalid_request, got %s", tc.name, res)
		}
	}
	if res := post("application/json", `{"a":1}`, "Content-Encoding: gzip"); res.status != 400 {
		t.Errorf("encoded body: %s", res)
	}
	// A chunked body over the limit, and a streamed (over the in-memory threshold) one.
	chunked := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(s), s) }
	over := `{"a":"` + strings.Repeat("x", 200_000) + `"}`
	if res := post("application/json", chunked(over), "Transfer-Encoding: chunked"); res.status != 413 {
		t.Errorf("chunked over the limit: %s", res)
	}
	if n := up.hits.Load() - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
	big := `{"secret":"s","pad":"` + strings.Repeat("y", 150_000) + `"}`
	if res := post("application/json", big); res.status != 200 || strings.Contains(res.echo.Body[:50], "secret") ||
		!strings.Contains(res.echo.Body, `"source":"edge"`) || len(res.echo.Body) < 150_000 {
		t.Errorf("streamed body: %d %.200s", res.status, res.body)
	}
}

func TestTransformHeadersAndPath(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	up.hook = func(w http.ResponseWriter) {
		w.Header().Set("Server-Timing", "db;dur=3")
		w.Header().Set("X-Internal", "leak")
	}
	acme := h.tenant("acme")
	r := transformRoute(acme, "hdr", "/api", up.URL, &tenants.Transform{
		Request: &tenants.RequestTransform{
			Headers: &tenants.HeaderTransform{
				Add:    map[string]string{"X-Added": "yes", "X-Replaced": "new"},
				Remove: []string{"x-drop"},
				Rename: map[string]string{"X-Old": "X-New"},
			},
			Path: &tenants.PathTransform{Prefix: &tenants.PrefixRewrite{From: "/v1", To: "/v2"}},
		},
		Response: &tenants.ResponseTransform{Headers: &tenants.HeaderTransform{
			Add:    map[string]string{"X-Served-By": "tollgate"},
			Remove: []string{"X-Internal"},
			Rename: map[string]string{"Server-Timing": "X-Timing"},
		}},
	})
	r.StripPrefix = true
	h.put(r)
	h.e.Loaded()
	host := "acme." + domain

	res := h.get(host, "/api/v1/users?q=1", "X-Drop: 1", "X-Old: o1", "X-Replaced: old", "X-Keep: k")
	if res.status != 200 || res.echo == nil {
		t.Fatalf("%s", res)
	}
	e := res.echo
	if e.RequestURI != "/v2/users?q=1" {
		t.Errorf("path: upstream got %q", e.RequestURI)
	}
	if e.get("X-Added") != "yes" || e.get("X-Replaced") != "new" || e.has("X-Drop") || e.has("X-Old") ||
		e.get("X-New") != "o1" || e.get("X-Keep") != "k" {
		t.Errorf("request headers: %v", e.Header)
	}
	if res.header.Get("X-Served-By") != "tollgate" || res.header.Get("X-Internal") != "" ||
		res.header.Get("Server-Timing") != "" || res.header.Get("X-Timing") != "db;dur=3" {
		t.Errorf("response headers: %v", res.header)
	}
	if res.header.Get("X-Request-Id") == "" {
		t.Errorf("the request id is still stamped: %v", res.header)
	}

	// Prefixes match on segment boundaries; the bare prefix maps to the bare target.
	for target, want := range map[string]string{
		"/api/v10/x": "/v10/x",
		"/api/v1":    "/v2",
		"/api/other": "/other",
	} {
		if res := h.get(host, target); res.echo == nil || res.echo.RequestURI != want {
			t.Errorf("%s: upstream got %v, want %q", target, res.echo, want)
		}
	}

	// The edge's own errors are not transformed.
	h.put(&tenants.Route{ID: "hdr", TenantID: acme, Name: "hdr", Paths: []string{"/api"}, Auth: tenants.AuthKey,
		Upstream: r.Upstream, Transform: r.Transform})
	waitFor(t, 2e9, func() string {
		if res := h.get(host, "/api/v1"); res.status != 401 || res.header.Get("X-Served-By") != "" {
			return res.String()
		}
		return ""
	})
}
