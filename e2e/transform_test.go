package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestJSONRewriteAndCache: a route's JSON request rewrite is observed at the upstream,
// and a cached route's repeats are served without reaching the upstream.
func TestJSONRewriteAndCache(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	var hits atomic.Int64
	var lastBody atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		lastBody.Store(string(b))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "rw")
		fmt.Fprintf(w, `{"n":%d}`, hits.Load())
	}))
	t.Cleanup(up.Close)

	api.createTenant("acme")
	api.createRoute("acme", routeSpec("rw", "/rw", up.URL, "none", "transform", map[string]any{
		"request": map[string]any{"json": map[string]any{
			"set": map[string]any{"meta.via": "tollgate"}, "remove": []string{"password"}, "rename": map[string]string{"user": "login"},
		}},
	}))
	api.createRoute("acme", routeSpec("cached", "/cached", up.URL, "none", "cache", map[string]any{"ttl_ms": 60000}))
	eventually(t, applyDeadline, "the cached route is served", served(edge, "acme", "/cached", "rw"))

	post := func(body string) *http.Response {
		req, _ := http.NewRequest("POST", "http://"+edge.addr+"/rw", bytes.NewBufferString(body))
		req.Host = "acme.localhost:" + portOf(edge.addr)
		req.Header.Set("Content-Type", "application/json")
		resp, err := edge.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := post(`{"user":"ann","password":"s3cret","keep":1}`); r.StatusCode != 200 {
		t.Fatalf("rewrite: %d", r.StatusCode)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lastBody.Load().(string)), &got); err != nil {
		t.Fatalf("upstream got %q: %v", lastBody.Load(), err)
	}
	if b, _ := json.Marshal(got); string(b) != `{"keep":1,"login":"ann","meta":{"via":"tollgate"}}` {
		t.Errorf("upstream got %s", b)
	}
	before := hits.Load()
	if r := post(`{"user":`); r.StatusCode != 400 || hits.Load() != before {
		t.Errorf("malformed JSON: %d, upstream hits %d", r.StatusCode, hits.Load()-before)
	}

	before = hits.Load()
	first := edge.get(t, "acme", "/cached/x")
	for range 5 {
		r := edge.get(t, "acme", "/cached/x")
		if r.Header.Get("X-Cache") != "HIT" || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("repeat: %v %s", r.Header, r)
		}
	}
	if n := hits.Load() - before; n != 1 {
		t.Errorf("6 GETs reached the upstream %d times, want 1", n)
	}
}
