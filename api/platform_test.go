package api_test

import (
	"testing"
)

// Platform plans: readable with any token, changed only by the admin, conditional like
// every PUT; a tenant's plan must name one and the tenant shows its limits.
func TestPlatformPlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	tok := e.token("acme")

	items := e.do("GET", "/v1/platform/plans", tok, nil).want(200).items()
	names := map[string]bool{}
	for _, it := range items {
		names[it.(map[string]any)["name"].(string)] = true
	}
	for _, n := range []string{"free", "pro", "enterprise", "unlimited"} {
		if !names[n] {
			t.Errorf("plan %s not listed: %v", n, names)
		}
	}
	free := e.do("GET", "/v1/platform/plans/free", tok, nil).want(200)
	if free.etag() != `"1"` {
		t.Errorf("ETag %q", free.etag())
	}
	checkFields(t, free, map[string]string{"rate_limit": `{"burst":20,"rps":10}`, "quota": `{"requests":10000}`, "concurrency": "10", "mode": `"approximate"`})
	e.do("GET", "/v1/platform/plans/gold", tok, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/platform/plans/Gold!", tok, nil).wantErr(404, "not_found", "")
	e.do("GET", "/v1/platform/plans", "", nil).wantErr(401, "unauthenticated", "")

	body := map[string]any{"rate_limit": map[string]any{"rpm": 600, "burst": 30}, "quota": map[string]any{"requests": 500}, "concurrency": 3}
	e.do("PUT", "/v1/platform/plans/gold", tok, body, "If-Match", "*").wantErr(403, "forbidden", "")
	e.do("PUT", "/v1/platform/plans/gold", adminToken, body).wantErr(400, "validation_failed", "version")
	gold := e.do("PUT", "/v1/platform/plans/gold", adminToken, body, "If-Match", "*").want(200)
	checkFields(t, gold, map[string]string{"rate_limit": `{"burst":30,"rpm":600}`, "mode": `"approximate"`, "version": "1"})
	e.do("PUT", "/v1/platform/plans/gold", adminToken, body, "If-Match", `"7"`).wantErr(409, "version_conflict", "")
	e.do("PUT", "/v1/platform/plans/gold", adminToken, map[string]any{"mode": "approximate", "rate_limit": map[string]any{"rps": 1000, "burst": 10}}, "If-Match", `"1"`).
		wantErr(400, "validation_failed", "rate_limit.burst")
	e.do("PUT", "/v1/platform/plans/gold", adminToken, map[string]any{"rate_limit": map[string]any{"rps": 5, "per": "ip"}}, "If-Match", `"1"`).
		wantErr(400, "invalid_request", "rate_limit.per")
	e.do("PUT", "/v1/platform/plans/Bad!", adminToken, body, "If-Match", "*").wantErr(400, "validation_failed", "name")

	// Tenants: the plan must exist; the tenant shows its limits, read-only.
	e.do("POST", "/v1/tenants", adminToken, map[string]any{"slug": "nope", "plan": "platinum"}).wantErr(400, "validation_failed", "plan")
	tn := e.do("POST", "/v1/tenants", adminToken, map[string]any{"slug": "goldy", "plan": "gold"}).want(201)
	lim, _ := tn.json["limits"].(map[string]any)
	if lim == nil || lim["name"] != "gold" || lim["concurrency"] != float64(3) {
		t.Fatalf("tenant limits: %s", tn.body)
	}
	e.do("PATCH", "/v1/tenants/goldy", adminToken, map[string]any{"limits": map[string]any{}}, "If-Match", "*").wantErr(400, "invalid_request", "limits")
	e.do("PATCH", "/v1/tenants/goldy", adminToken, map[string]any{"plan": "platinum"}, "If-Match", "*").wantErr(400, "validation_failed", "plan")
	up := e.do("PATCH", "/v1/tenants/goldy", adminToken, map[string]any{"plan": "unlimited"}, "If-Match", "*").want(200)
	if lim, _ := up.json["limits"].(map[string]any); lim == nil || lim["name"] != "unlimited" || lim["rate_limit"] != nil {
		t.Fatalf("after the plan change: %s", up.body)
	}
	// A change of the plan shows in its tenants.
	e.do("PATCH", "/v1/tenants/goldy", adminToken, map[string]any{"plan": "gold"}, "If-Match", "*").want(200)
	e.do("PUT", "/v1/platform/plans/gold", adminToken, map[string]any{"concurrency": 9, "version": 1}).want(200)
	got := e.do("GET", "/v1/tenants/goldy", adminToken, nil).want(200)
	if lim, _ := got.json["limits"].(map[string]any); lim == nil || lim["concurrency"] != float64(9) || lim["version"] != float64(2) {
		t.Fatalf("tenant after the plan changed: %s", got.body)
	}
}

// The flow-control fields of routes and plans, with their defaults and rules.
func TestLimitFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	routes := "/v1/tenants/acme/routes"
	rt := func(name string, rl map[string]any, auth string) map[string]any {
		b := routeBody(name, "/"+name)
		b["auth"] = auth
		b["rate_limit"] = rl
		return b
	}
	r := e.do("POST", routes, adminToken, rt("login", map[string]any{"rpm": 30, "burst": 5, "per": "ip"}, "none")).want(201)
	checkFields(t, r, map[string]string{"rate_limit": `{"burst":5,"mode":"local","per":"ip","rpm":30}`})
	r = e.do("POST", routes, adminToken, rt("orders", map[string]any{"rps": 100, "burst": 5}, "key")).want(201)
	checkFields(t, r, map[string]string{"rate_limit": `{"burst":5,"mode":"exact","per":"route","rps":100}`})
	r = e.do("POST", routes, adminToken, rt("mine", map[string]any{"rps": 100, "per": "consumer"}, "key")).want(201)
	checkFields(t, r, map[string]string{"rate_limit": `{"burst":100,"mode":"approximate","per":"consumer","rps":100}`})

	for _, tc := range []struct {
		name  string
		rl    map[string]any
		auth  string
		field string
	}{
		{"consumer without auth", map[string]any{"rps": 5, "per": "consumer"}, "none", "rate_limit.per"},
		{"both rates", map[string]any{"rps": 5, "rpm": 5}, "none", "rate_limit.rpm"},
		{"no rate", map[string]any{"burst": 5}, "none", "rate_limit.rps"},
		{"approximate small burst", map[string]any{"rps": 100, "burst": 10, "mode": "approximate"}, "none", "rate_limit.burst"},
		{"unknown mode", map[string]any{"rps": 100, "mode": "redis"}, "none", "rate_limit.mode"},
		{"unknown per", map[string]any{"rps": 100, "per": "user"}, "none", "rate_limit.per"},
	} {
		e.do("POST", routes, adminToken, rt("bad", tc.rl, tc.auth)).wantErr(400, "validation_failed", tc.field)
	}

	plans := "/v1/tenants/acme/plans"
	p := e.do("POST", plans, adminToken, map[string]any{"name": "gold", "rate_limit": map[string]any{"rpm": 6000, "burst": 200}, "quota": map[string]any{"requests": 5}, "mode": "exact"}).want(201)
	checkFields(t, p, map[string]string{"rate_limit": `{"burst":200,"rpm":6000}`, "mode": `"exact"`})
	p = e.do("POST", plans, adminToken, map[string]any{"name": "silver", "rate_limit": map[string]any{"rps": 100, "burst": 200}}).want(201)
	checkFields(t, p, map[string]string{"mode": `"approximate"`})
	e.do("POST", plans, adminToken, map[string]any{"name": "x", "mode": "approximate", "rate_limit": map[string]any{"rps": 100, "burst": 5}}).
		wantErr(400, "validation_failed", "rate_limit.burst")
	e.do("POST", plans, adminToken, map[string]any{"name": "x", "rate_limit": map[string]any{"rps": 100, "per": "ip"}}).
		wantErr(400, "invalid_request", "rate_limit.per")
}
