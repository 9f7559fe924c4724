package api_test

import (
	"encoding/json"
	"testing"
)

func TestRouteTransform(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	base := "/v1/tenants/acme/routes"
	tr := `{"request":{"headers":{"add":{"X-A":"v"},"remove":["X-B"],"rename":{"X-Old":"X-New"}},` +
		`"json":{"set":{"a.b":{"c":[1,"x"]}},"remove":["c"],"rename":{"d":"e"}},` +
		`"path":{"prefix":{"from":"/v1","to":"/v2"}}},` +
		`"response":{"headers":{"add":{"Cache-Control":"no-store"}}}}`
	body := `{"name":"tr","paths":["/tr"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},"transform":` + tr + `}`
	r := e.do("POST", base, adminToken, body).want(201)
	id := r.str("id")
	same := func(got any) {
		t.Helper()
		var want any
		_ = json.Unmarshal([]byte(tr), &want)
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Fatalf("transform echoed as %s, want %s", g, w)
		}
	}
	same(r.json["transform"])
	same(e.do("GET", base+"/"+id, adminToken, nil).want(200).json["transform"])

	// A route without one has none.
	r = e.do("POST", base, adminToken, `{"name":"plain","paths":["/plain"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]}}`).want(201)
	if _, ok := r.json["transform"]; ok {
		t.Fatalf("plain route has a transform: %s", r.body)
	}

	e.do("POST", base, adminToken, `{"name":"bad","paths":["/bad"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},`+
		`"transform":{"request":{"headers":{"remove":["X-Consumer-Id"]}}}}`).
		wantErr(400, "validation_failed", "transform.request.headers.remove[0]")
	e.do("POST", base, adminToken, `{"name":"bad","paths":["/bad"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},`+
		`"transform":{"request":{"json":{"set":{"a.*":1}}}}}`).
		wantErr(400, "validation_failed", `transform.request.json.set["a.*"]`)
	e.do("POST", base, adminToken, `{"name":"bad","paths":["/bad"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},`+
		`"transform":{"request":{"headerz":{}}}}`).want(400)
}

func TestRouteCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	base := "/v1/tenants/acme/routes"
	r := e.do("POST", base, adminToken, `{"name":"c","paths":["/c"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},`+
		`"cache":{"ttl_ms":5000,"vary":["Accept"]}}`).want(201)
	want := `{"max_body_bytes":65536,"max_entries":1000,"ttl_ms":5000,"vary":["Accept"]}`
	if g, _ := json.Marshal(r.json["cache"]); string(g) != want {
		t.Fatalf("cache echoed as %s, want %s", g, want)
	}
	got := e.do("GET", base+"/"+r.str("id"), adminToken, nil).want(200).json["cache"]
	if g, _ := json.Marshal(got); string(g) != want {
		t.Fatalf("cache read back as %s, want %s", g, want)
	}
	e.do("POST", base, adminToken, `{"name":"bad","paths":["/bad"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},`+
		`"cache":{"ttl_ms":0}}`).wantErr(400, "validation_failed", "cache.ttl_ms")
}
