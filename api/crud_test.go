package api_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestTenantCRUD(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	r := e.do("POST", "/v1/tenants", adminToken, `{"slug":"acme","name":"Acme Inc","plan":"pro"}`).want(201)
	id := r.str("id")
	if r.str("slug") != "acme" || r.str("name") != "Acme Inc" || r.str("plan") != "pro" || r.json["version"] != 1.0 {
		t.Fatalf("created: %s", r.body)
	}
	if r.etag() != `"1"` || r.header.Get("Location") != "/v1/tenants/acme" {
		t.Fatalf("ETag %q Location %q", r.etag(), r.header.Get("Location"))
	}
	// Defaults: name is the slug, plan is free.
	d := e.do("POST", "/v1/tenants", adminToken, `{"slug":"bare"}`).want(201)
	if d.str("name") != "bare" || d.str("plan") != "free" {
		t.Fatalf("defaults: %s", d.body)
	}

	g := e.do("GET", "/v1/tenants/acme", adminToken, nil).want(200)
	if g.str("id") != id || g.etag() != `"1"` {
		t.Fatalf("get: %s etag %s", g.body, g.etag())
	}
	if n := e.count("/v1/tenants"); n != 2 {
		t.Fatalf("list has %d tenants, want 2", n)
	}

	// Duplicate slug.
	e.do("POST", "/v1/tenants", adminToken, `{"slug":"acme"}`).wantErr(409, "conflict", "slug")

	// PATCH with If-Match; only the fields sent change.
	p := e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"Acme Corp"}`, "If-Match", `"1"`).want(200)
	if p.str("name") != "Acme Corp" || p.str("plan") != "pro" || p.json["version"] != 2.0 || p.etag() != `"2"` {
		t.Fatalf("patch: %s etag %s", p.body, p.etag())
	}
	// Version in the body instead.
	p = e.do("PATCH", "/v1/tenants/acme", adminToken, `{"plan":"enterprise","version":2}`).want(200)
	if p.str("plan") != "enterprise" || p.str("name") != "Acme Corp" {
		t.Fatalf("patch: %s", p.body)
	}
	// Stale version, by header and by body.
	e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"X"}`, "If-Match", `"1"`).wantErr(409, "version_conflict", "")
	e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"X","version":2}`).wantErr(409, "version_conflict", "")
	// No version at all.
	e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"X"}`).wantErr(400, "validation_failed", "version")
	// Header and body disagree.
	e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"X","version":3}`, "If-Match", `"2"`).wantErr(400, "validation_failed", "version")
	// A malformed If-Match.
	e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"X"}`, "If-Match", `W/"3"`).wantErr(400, "invalid_request", "If-Match")
	// If-Match: * overwrites whatever is current.
	p = e.do("PATCH", "/v1/tenants/acme", adminToken, `{"name":"Star"}`, "If-Match", "*").want(200)
	if p.str("name") != "Star" || p.json["version"] != 4.0 {
		t.Fatalf("patch *: %s", p.body)
	}
	// The slug is immutable: not a field of the patch.
	e.do("PATCH", "/v1/tenants/acme", adminToken, `{"slug":"other"}`, "If-Match", "*").wantErr(400, "invalid_request", "slug")
	if g := e.do("GET", "/v1/tenants/acme", adminToken, nil).want(200); g.str("name") != "Star" {
		t.Fatalf("failed patches changed the tenant: %s", g.body)
	}

	e.do("DELETE", "/v1/tenants/acme", adminToken, nil).want(204)
	e.do("GET", "/v1/tenants/acme", adminToken, nil).wantErr(404, "not_found", "")
	e.do("DELETE", "/v1/tenants/acme", adminToken, nil).wantErr(404, "not_found", "")
	if n := e.count("/v1/tenants"); n != 1 {
		t.Fatalf("list has %d tenants after delete, want 1", n)
	}
}

func TestRouteCRUD(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	base := "/v1/tenants/acme/routes"

	body := `{"name":"hello","paths":["/hello","=/exact"],"methods":["get","POST"],
		"upstream":{"targets":[{"url":"http://127.0.0.1:9/base/","weight":3},{"url":"https://Example.COM"}]},
		"auth":"key_or_jwt","policy":true,"rate_limit":{"rps":100},"strip_prefix":true,
		"max_body_bytes":4096,"connect_timeout_ms":500,"timeout_ms":7000}`
	r := e.do("POST", base, adminToken, body).want(201)
	id := r.str("id")
	if r.header.Get("Location") != base+"/"+id || r.etag() != `"1"` {
		t.Fatalf("Location %q ETag %q", r.header.Get("Location"), r.etag())
	}
	want := map[string]string{
		"methods":            `["GET","POST"]`,
		"upstream":           `{"balance":"round_robin","targets":[{"url":"http://127.0.0.1:9/base","weight":3},{"url":"https://example.com","weight":0}]}`,
		"rate_limit":         `{"burst":100,"mode":"approximate","per":"route","rps":100}`,
		"auth":               `"key_or_jwt"`,
		"policy":             `true`,
		"strip_prefix":       `true`,
		"max_body_bytes":     `4096`,
		"connect_timeout_ms": `500`,
		"timeout_ms":         `7000`,
	}
	checkFields(t, r, want)

	g := e.do("GET", base+"/"+id, adminToken, nil).want(200)
	checkFields(t, g, want)
	// Ids are UUIDs in any case; a malformed one is simply not found.
	e.do("GET", base+"/"+strings.ToUpper(id), adminToken, nil).want(200)
	e.do("GET", base+"/not-a-uuid", adminToken, nil).wantErr(404, "not_found", "")
	e.do("GET", base+"/00000000-0000-0000-0000-000000000000", adminToken, nil).wantErr(404, "not_found", "")

	// Conflicts: same name, same path+method.
	e.do("POST", base, adminToken, routeBody("hello", "/other")).wantErr(409, "conflict", "name")
	e.do("POST", base, adminToken, routeBody("other", "/other", "/hello")).wantErr(409, "conflict", "paths[1]")
	if n := e.count(base); n != 1 {
		t.Fatalf("%d routes after conflicts, want 1", n)
	}

	// PUT is a full replacement: omitted settings return to their defaults.
	put := routeBody("hello2", "/v2")
	u := e.do("PUT", base+"/"+id, adminToken, put, "If-Match", r.etag()).want(200)
	checkFields(t, u, map[string]string{
		"name": `"hello2"`, "paths": `["/v2"]`, "auth": `"key"`, "policy": "false", "strip_prefix": "false",
		"max_body_bytes": "10485760", "timeout_ms": "30000", "connect_timeout_ms": "2000", "version": "2",
	})
	if _, ok := u.json["rate_limit"]; ok {
		t.Fatalf("rate_limit survived a PUT without it: %s", u.body)
	}
	if u.etag() != `"2"` {
		t.Fatalf("ETag after PUT %q", u.etag())
	}
	// Stale If-Match, stale body version, and none.
	e.do("PUT", base+"/"+id, adminToken, put, "If-Match", `"1"`).wantErr(409, "version_conflict", "")
	put["version"] = 1
	e.do("PUT", base+"/"+id, adminToken, put).wantErr(409, "version_conflict", "")
	delete(put, "version")
	e.do("PUT", base+"/"+id, adminToken, put).wantErr(400, "validation_failed", "version")
	put["version"] = 2
	put["name"] = "hello3"
	e.do("PUT", base+"/"+id, adminToken, put).want(200)
	// A PUT that breaks a rule changes nothing.
	bad := routeBody("hello4", "nope")
	e.do("PUT", base+"/"+id, adminToken, bad, "If-Match", "*").wantErr(400, "validation_failed", "paths[0]")
	checkFields(t, e.do("GET", base+"/"+id, adminToken, nil).want(200), map[string]string{"name": `"hello3"`, "version": "3"})
	// PUT of a route that does not exist.
	e.do("PUT", base+"/00000000-0000-0000-0000-000000000000", adminToken, routeBody("x", "/x"), "If-Match", `"1"`).wantErr(404, "not_found", "")

	e.do("DELETE", base+"/"+id, adminToken, nil).want(204)
	e.do("GET", base+"/"+id, adminToken, nil).wantErr(404, "not_found", "")
	e.do("DELETE", base+"/"+id, adminToken, nil).wantErr(404, "not_found", "")
	// The freed path can be claimed again.
	e.route("acme", "again", "/v2")
}

func TestConsumerKeyPlanCRUD(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	plans, consumers := "/v1/tenants/acme/plans", "/v1/tenants/acme/consumers"

	// Plans.
	p := e.do("POST", plans, adminToken, `{"name":"gold","rate_limit":{"rps":50,"burst":80},"quota":{"requests":100000},"concurrency":4}`).want(201)
	planID := p.str("id")
	checkFields(t, p, map[string]string{"rate_limit": `{"burst":80,"rps":50}`, "quota": `{"requests":100000}`, "concurrency": "4"})
	e.do("POST", plans, adminToken, `{"name":"gold"}`).wantErr(409, "conflict", "name")
	e.plan("acme", "silver")
	if n := e.count(plans); n != 2 {
		t.Fatalf("%d plans, want 2", n)
	}
	pu := e.do("PUT", plans+"/"+planID, adminToken, `{"name":"gold","concurrency":8}`, "If-Match", p.etag()).want(200)
	checkFields(t, pu, map[string]string{"concurrency": "8", "version": "2"})
	if _, ok := pu.json["rate_limit"]; ok {
		t.Fatalf("PUT kept rate_limit: %s", pu.body)
	}
	e.do("GET", plans+"/"+planID, adminToken, nil).want(200)

	// Consumers, with a plan reference.
	c := e.do("POST", consumers, adminToken, `{"name":"mobile","plan":"gold"}`).want(201)
	cid := c.str("id")
	e.do("POST", consumers, adminToken, `{"name":"mobile"}`).wantErr(409, "conflict", "name")
	e.do("POST", consumers, adminToken, `{"name":"web","plan":"nope"}`).wantErr(400, "validation_failed", "plan")
	if n := e.count(consumers); n != 1 {
		t.Fatalf("%d consumers, want 1", n)
	}
	// A plan in use cannot be deleted.
	e.do("DELETE", plans+"/"+planID, adminToken, nil).wantErr(409, "conflict", "")

	g := e.do("GET", consumers+"/"+cid, adminToken, nil).want(200)
	checkFields(t, g, map[string]string{"name": `"mobile"`, "plan": `"gold"`})
	// PUT without plan removes it.
	cu := e.do("PUT", consumers+"/"+cid, adminToken, `{"name":"mobile-app","version":1}`).want(200)
	if _, ok := cu.json["plan"]; ok || cu.str("name") != "mobile-app" {
		t.Fatalf("consumer PUT: %s", cu.body)
	}
	e.do("PUT", consumers+"/"+cid, adminToken, `{"name":"x","plan":"nope"}`, "If-Match", "*").wantErr(400, "validation_failed", "plan")
	e.do("PUT", consumers+"/"+cid, adminToken, `{"name":"x"}`, "If-Match", `"1"`).wantErr(409, "version_conflict", "")
	e.do("DELETE", plans+"/"+planID, adminToken, nil).want(204)
	e.do("GET", plans+"/"+planID, adminToken, nil).wantErr(404, "not_found", "")

	// Keys: the plaintext once, then only the prefix.
	keys := consumers + "/" + cid + "/keys"
	k := e.do("POST", keys, adminToken, nil).want(201)
	plain, kid := k.str("key"), k.str("id")
	if !strings.HasPrefix(plain, "tg_") || len(plain) != 35 || !strings.HasPrefix(plain, k.str("prefix")) {
		t.Fatalf("key: %s", k.body)
	}
	if k.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("key response is cacheable: %q", k.header.Get("Cache-Control"))
	}
	if _, ok := k.json["hash"]; ok {
		t.Fatalf("key response leaks the hash: %s", k.body)
	}
	e.do("POST", keys, adminToken, `{}`).want(201)
	e.do("POST", keys, adminToken, `{"name":"x"}`).wantErr(400, "invalid_request", "name")
	l := e.do("GET", keys, adminToken, nil).want(200)
	if len(l.items()) != 2 {
		t.Fatalf("%d keys, want 2", len(l.items()))
	}
	if strings.Contains(string(l.body), plain) || strings.Contains(string(l.body), `"key"`) || strings.Contains(string(l.body), "hash") {
		t.Fatalf("key list shows secrets: %s", l.body)
	}
	e.do("DELETE", keys+"/"+kid, adminToken, nil).want(204)
	e.do("DELETE", keys+"/"+kid, adminToken, nil).wantErr(404, "not_found", "")
	if n := len(e.do("GET", keys, adminToken, nil).want(200).items()); n != 1 {
		t.Fatalf("%d keys after delete, want 1", n)
	}
	// Keys of a consumer that does not exist.
	missing := consumers + "/00000000-0000-0000-0000-000000000000/keys"
	e.do("POST", missing, adminToken, nil).wantErr(404, "not_found", "")
	e.do("GET", missing, adminToken, nil).wantErr(404, "not_found", "")

	e.do("DELETE", consumers+"/"+cid, adminToken, nil).want(204)
	e.do("GET", consumers+"/"+cid, adminToken, nil).wantErr(404, "not_found", "")
	e.do("GET", keys, adminToken, nil).wantErr(404, "not_found", "")
}

func TestTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	base := "/v1/tenants/acme/tokens"

	r := e.do("POST", base, adminToken, `{"name":"deploy"}`).want(201)
	tok, id := r.str("token"), r.str("id")
	if !strings.HasPrefix(tok, "tgt_") || r.str("role") != "admin" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("token: %s", r.body)
	}
	// The tenant token may create more tokens for its own tenant.
	r2 := e.do("POST", base, tok, `{"name":"ci","role":"admin"}`).want(201)
	e.do("GET", "/v1/tenants/acme", r2.str("token"), nil).want(200)
	e.do("POST", base, tok, `{"name":"x","role":"owner"}`).wantErr(400, "validation_failed", "role")

	l := e.do("GET", base, tok, nil).want(200)
	if len(l.items()) != 2 || strings.Contains(string(l.body), tok) || strings.Contains(string(l.body), `"token"`) {
		t.Fatalf("token list: %s", l.body)
	}
	e.do("DELETE", base+"/"+id, tok, nil).want(204)
	// The revoked token no longer works.
	e.do("GET", "/v1/tenants/acme", tok, nil).wantErr(401, "invalid_credential", "")
	e.do("DELETE", base+"/"+id, adminToken, nil).wantErr(404, "not_found", "")

	// Deleting the tenant revokes its tokens.
	e.do("DELETE", "/v1/tenants/acme", adminToken, nil).want(204)
	e.do("GET", "/v1/tenants/acme", r2.str("token"), nil).wantErr(401, "invalid_credential", "")
}

func TestPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	base := "/v1/tenants/acme/consumers"
	var ids []string
	for i := range 5 {
		ids = append(ids, e.consumer("acme", fmt.Sprintf("c%d", i)))
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		path := base + "?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.do("GET", path, adminToken, nil).want(200)
		items := r.items()
		if len(items) > 2 {
			t.Fatalf("page of %d items with limit 2", len(items))
		}
		for _, it := range items {
			got = append(got, it.(map[string]any)["id"].(string))
		}
		cursor = r.str("next_cursor")
		if _, ok := r.json["next_cursor"]; !ok {
			t.Fatalf("no next_cursor: %s", r.body)
		}
		if cursor == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("pages gave %v, want %v (creation order)", got, ids)
	}
	// The default page holds them all; an empty collection is [] not null.
	if n := len(e.do("GET", base, adminToken, nil).want(200).items()); n != 5 {
		t.Fatalf("default page has %d", n)
	}
	if r := e.do("GET", "/v1/tenants/acme/routes", adminToken, nil).want(200); string(r.body) != `{"items":[],"next_cursor":""}` {
		t.Fatalf("empty list: %s", r.body)
	}
	for _, q := range []string{"limit=0", "limit=501", "limit=x", "limit=-1", "limit="} {
		e.do("GET", base+"?"+q, adminToken, nil).wantErr(400, "invalid_request", "limit")
	}
	e.do("GET", base+"?cursor=garbage", adminToken, nil).wantErr(400, "invalid_request", "")
	e.do("GET", base+"?cursor=%20x", adminToken, nil).wantErr(400, "invalid_request", "cursor")
	e.do("GET", base+"?limt=5", adminToken, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme?limit=5", adminToken, nil).wantErr(400, "invalid_request", "")
	// Tenants list too.
	e.tenant("beta")
	r := e.do("GET", "/v1/tenants?limit=1", adminToken, nil).want(200)
	if len(r.items()) != 1 || r.str("next_cursor") == "" {
		t.Fatalf("tenant page: %s", r.body)
	}
	r = e.do("GET", "/v1/tenants?limit=1&cursor="+r.str("next_cursor"), adminToken, nil).want(200)
	if len(r.items()) != 1 || r.items()[0].(map[string]any)["slug"] != "beta" {
		t.Fatalf("tenant page 2: %s", r.body)
	}
}

// checkFields compares top-level fields of a JSON response with JSON literals.
func checkFields(t *testing.T, r *resp, want map[string]string) {
	t.Helper()
	for k, w := range want {
		got, err := jsonOf(r.json[k])
		if err != nil || got != w {
			t.Errorf("%s: %s = %s, want %s", r.req, k, got, w)
		}
	}
}

// ?q= on the routes list finds the routes whose name starts with it, in name order, page
// by page; its cursor is not the plain list's, and other lists take no ?q=.
func TestRouteSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	for i, n := range []string{"orders-v2", "orders", "users", "orders-v1", "Orders"} {
		e.route("acme", n, fmt.Sprintf("/r%d", i))
	}
	base := "/v1/tenants/acme/routes?q=orders&limit=2"
	var got []string
	path := base
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("the search does not end")
		}
		r := e.do("GET", path, adminToken, nil).want(200)
		for _, it := range r.items() {
			got = append(got, it.(map[string]any)["name"].(string))
		}
		next := r.str("next_cursor")
		if next == "" {
			break
		}
		path = base + "&cursor=" + url.QueryEscape(next)
	}
	if strings.Join(got, ",") != "orders,orders-v1,orders-v2" {
		t.Fatalf("search gave %v", got)
	}
	plain := e.do("GET", "/v1/tenants/acme/routes?limit=1", adminToken, nil).want(200).str("next_cursor")
	e.do("GET", base+"&cursor="+plain, adminToken, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme/routes?q="+strings.Repeat("x", 401), adminToken, nil).wantErr(400, "invalid_request", "q")
	e.do("GET", "/v1/tenants/acme/consumers?q=orders", adminToken, nil).wantErr(400, "invalid_request", "")
	if n := len(e.do("GET", "/v1/tenants/acme/routes?q=", adminToken, nil).want(200).items()); n != 5 {
		t.Fatalf("an empty q lists %d routes, want all 5", n)
	}
}
