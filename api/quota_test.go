package api_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/infra/testcert"
)

// The seeded platform plans carry resource limits, shown by GET /v1/platform/plans and in
// a tenant's read-only "limits"; PUT validates them and fills omitted ones with their
// ceilings.
func TestPlatformPlanResources(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	tok := e.token("acme")

	want := map[string]string{
		"free":       `{"cache_bytes":1048576,"consumers":100,"domains":1,"function_bytes":1048576,"function_concurrency":2,"function_timeout_ms":5,"functions":3,"jwt_issuers":2,"keys_per_consumer":2,"plans":3,"policy_rules":100,"routes":10}`,
		"pro":        `{"cache_bytes":33554432,"consumers":10000,"domains":10,"function_bytes":4194304,"function_concurrency":8,"function_timeout_ms":10,"functions":25,"jwt_issuers":8,"keys_per_consumer":5,"plans":20,"policy_rules":1000,"routes":500}`,
		"enterprise": `{"cache_bytes":134217728,"consumers":100000,"domains":100,"function_bytes":16777216,"function_concurrency":32,"function_timeout_ms":50,"functions":200,"jwt_issuers":32,"keys_per_consumer":10,"plans":100,"policy_rules":11000,"routes":10000}`,
		"unlimited":  `{"cache_bytes":1073741824,"consumers":1000000,"domains":1000,"function_bytes":16777216,"function_concurrency":256,"function_timeout_ms":100,"functions":1000,"jwt_issuers":32,"keys_per_consumer":100,"plans":1000,"policy_rules":11000,"routes":50000}`,
	}
	for _, it := range e.do("GET", "/v1/platform/plans", tok, nil).want(200).items() {
		p := it.(map[string]any)
		name := p["name"].(string)
		if w, ok := want[name]; ok {
			if got := jsonText(t, p["resources"]); got != w {
				t.Errorf("%s resources %s, want %s", name, got, w)
			}
		}
	}
	tn := e.do("GET", "/v1/tenants/acme", tok, nil).want(200) // on pro
	lim, _ := tn.json["limits"].(map[string]any)
	if got := jsonText(t, lim["resources"]); got != want["pro"] {
		t.Errorf("tenant limits.resources %s", got)
	}

	// Validation: each limit within 0 and its ceiling; omitted ones take the ceiling.
	for _, c := range []struct {
		res   map[string]any
		field string
	}{
		{map[string]any{"routes": -1}, "resources.routes"},
		{map[string]any{"routes": 50_001}, "resources.routes"},
		{map[string]any{"consumers": 1_000_001}, "resources.consumers"},
		{map[string]any{"keys_per_consumer": 101}, "resources.keys_per_consumer"},
		{map[string]any{"plans": 1001}, "resources.plans"},
		{map[string]any{"domains": -5}, "resources.domains"},
		{map[string]any{"jwt_issuers": 33}, "resources.jwt_issuers"},
		{map[string]any{"policy_rules": 11_001}, "resources.policy_rules"},
		{map[string]any{"cache_bytes": int64(1)<<40 + 1}, "resources.cache_bytes"},
		{map[string]any{"functions": 1001}, "resources.functions"},
		{map[string]any{"function_bytes": 16<<20 + 1}, "resources.function_bytes"},
		{map[string]any{"function_timeout_ms": 101}, "resources.function_timeout_ms"},
		{map[string]any{"function_concurrency": -1}, "resources.function_concurrency"},
	} {
		e.do("PUT", "/v1/platform/plans/odd", adminToken, map[string]any{"resources": c.res}, "If-Match", "*").
			wantErr(400, "validation_failed", c.field)
	}
	e.do("PUT", "/v1/platform/plans/odd", adminToken, map[string]any{"resources": map[string]any{"routes": "ten"}}, "If-Match", "*").
		wantErr(400, "invalid_request", "resources.routes")
	e.do("GET", "/v1/platform/plans/odd", adminToken, nil).wantErr(404, "not_found", "")

	p := e.do("PUT", "/v1/platform/plans/odd", adminToken, map[string]any{"resources": map[string]any{"routes": 3, "cache_bytes": 0}}, "If-Match", "*").want(200)
	if got := jsonText(t, p.json["resources"]); got != `{"cache_bytes":0,"consumers":1000000,"domains":1000,"function_bytes":16777216,"function_concurrency":256,"function_timeout_ms":100,"functions":1000,"jwt_issuers":32,"keys_per_consumer":100,"plans":1000,"policy_rules":11000,"routes":3}` {
		t.Errorf("odd resources %s", got)
	}
	p = e.do("PUT", "/v1/platform/plans/odd", adminToken, map[string]any{"concurrency": 2}, "If-Match", `"1"`).want(200)
	if r := p.json["resources"].(map[string]any); r["routes"] != float64(50_000) || r["cache_bytes"] != float64(1<<40) {
		t.Errorf("a PUT without resources: %s", p.body)
	}
}

func jsonText(t *testing.T, v any) string {
	t.Helper()
	s, err := jsonOf(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// quotaEnv is an env with a platform plan "tiny" of the given resources and a tenant
// "small" on it.
func quotaEnv(t *testing.T, res map[string]any) *env {
	t.Helper()
	e := newEnv(t)
	e.do("PUT", "/v1/platform/plans/tiny", adminToken, map[string]any{"resources": res}, "If-Match", "*").want(200)
	e.do("POST", "/v1/tenants", adminToken, map[string]any{"slug": "small", "name": "Small", "plan": "tiny"}).want(201)
	return e
}

// wantOver checks a refusal for being over the limit of resource: 400 validation_failed,
// field the resource, a message naming the plan and the limit.
func wantOver(t *testing.T, r *resp, resource, msg string) {
	t.Helper()
	r.wantErr(400, "validation_failed", resource)
	if !strings.Contains(r.message(), msg) {
		t.Fatalf("%s: message %q, want it to say %q", r.req, r.message(), msg)
	}
}

// Every resource limit of the plan is enforced at save time, with an error that names
// the resource, the plan and its limit, and nothing written.
func TestResourceLimitsRefused(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, map[string]any{"routes": 2, "consumers": 2, "keys_per_consumer": 1, "plans": 1,
		"domains": 1, "jwt_issuers": 1, "policy_rules": 3, "cache_bytes": 0})
	base := "/v1/tenants/small"

	// Routes: two fit, the third is refused.
	e.route("small", "r1", "/r1")
	e.route("small", "r2", "/r2")
	wantOver(t, e.do("POST", base+"/routes", adminToken, routeBody("r3", "/r3")), "routes",
		"the tiny plan allows 2 routes; delete one or move to a larger plan")
	if n := e.count(base + "/routes"); n != 2 {
		t.Errorf("%d routes after the refusal", n)
	}

	// Consumers.
	c1 := e.consumer("small", "c1")
	e.consumer("small", "c2")
	wantOver(t, e.do("POST", base+"/consumers", adminToken, map[string]any{"name": "c3"}), "consumers", "the tiny plan allows 2 consumers;")
	if n := e.count(base + "/consumers"); n != 2 {
		t.Errorf("%d consumers after the refusal", n)
	}

	// Keys, per consumer: another consumer still gets its own.
	e.do("POST", base+"/consumers/"+c1+"/keys", adminToken, nil).want(201)
	wantOver(t, e.do("POST", base+"/consumers/"+c1+"/keys", adminToken, nil), "keys_per_consumer",
		"the tiny plan allows 1 key per consumer; delete one or move to a larger plan")
	if n := e.count(base + "/consumers/" + c1 + "/keys"); n != 1 {
		t.Errorf("%d keys after the refusal", n)
	}
	c2 := e.do("GET", base+"/consumers?limit=500", adminToken, nil).want(200).items()[1].(map[string]any)["id"].(string)
	e.do("POST", base+"/consumers/"+c2+"/keys", adminToken, nil).want(201)

	// Consumer plans.
	e.plan("small", "gold")
	wantOver(t, e.do("POST", base+"/plans", adminToken, map[string]any{"name": "silver", "rate_limit": map[string]any{"rps": 5}}),
		"plans", "the tiny plan allows 1 consumer plan;")

	// Custom domains.
	ca := testcert.NewCA(t)
	domain := func(host string) map[string]any {
		l := ca.Issue(t, []string{host}, time.Time{}, time.Time{})
		return map[string]any{"hostname": host, "certificate_pem": l.CertPEM, "private_key_pem": l.KeyPEM}
	}
	e.do("POST", base+"/domains", adminToken, domain("api.small.example")).want(201)
	wantOver(t, e.do("POST", base+"/domains", adminToken, domain("www.small.example")), "domains", "the tiny plan allows 1 custom domain;")
	if n := e.count(base + "/domains"); n != 1 {
		t.Errorf("%d domains after the refusal", n)
	}

	// JWT issuers.
	issuer := func(iss string) map[string]any {
		return map[string]any{"issuer": iss, "audiences": []string{"a"}, "hs256_secret": hsSecret}
	}
	e.do("POST", base+"/jwt-issuers", adminToken, issuer("https://one.example")).want(201)
	wantOver(t, e.do("POST", base+"/jwt-issuers", adminToken, issuer("https://two.example")), "jwt_issuers", "the tiny plan allows 1 JWT issuer;")

	// Policy: rules and role links count together.
	e.do("PUT", base+"/policy", adminToken, `{"rules":[["ops","/a","GET"],["ops","/b","GET"]],"roles":[["c1","ops"]]}`).want(200)
	wantOver(t, e.do("PUT", base+"/policy", adminToken, `{"rules":[["ops","/a","GET"],["ops","/b","GET"]],"roles":[["c1","ops"],["c2","ops"]]}`),
		"policy_rules", "the tiny plan allows 3 policy rules and role links together; remove some or move to a larger plan (this policy has 4)")
	if got := e.do("GET", base+"/policy", adminToken, nil).want(200); len(got.json["roles"].([]any)) != 1 {
		t.Errorf("policy after the refusal: %s", got.body)
	}

	// Cache: a plan without cache bytes refuses routes that cache.
	cached := routeBody("cached", "/cached")
	cached["cache"] = map[string]any{"ttl_ms": 1000}
	e.do("DELETE", base+"/routes/"+e.do("GET", base+"/routes", adminToken, nil).want(200).items()[0].(map[string]any)["id"].(string), adminToken, nil).want(204)
	wantOver(t, e.do("POST", base+"/routes", adminToken, cached), "cache_bytes",
		"the tiny plan allows no response cache (cache_bytes 0); remove the route's cache or move to a larger plan")
	if n := e.count(base + "/routes"); n != 1 {
		t.Errorf("%d routes after the refused cached one", n)
	}
	r2 := e.do("GET", base+"/routes", adminToken, nil).want(200).items()[0].(map[string]any)
	upd := routeBody("r2", "/r2")
	upd["cache"] = map[string]any{"ttl_ms": 1000}
	upd["version"] = r2["version"]
	wantOver(t, e.do("PUT", base+"/routes/"+r2["id"].(string), adminToken, upd), "cache_bytes", "allows no response cache")

	// The limits are the tenant's: another tenant on the same plan has its own counts.
	e.do("POST", "/v1/tenants", adminToken, map[string]any{"slug": "small2", "name": "Small 2", "plan": "tiny"}).want(201)
	e.route("small2", "r1", "/r1")
	e.route("small2", "r2", "/r2")
}

// Two creations at the limit racing each other: exactly as many pass as the plan
// allows, whatever the interleaving.
func TestResourceLimitsConcurrent(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, map[string]any{"routes": 5, "consumers": 5, "keys_per_consumer": 3})
	base := "/v1/tenants/small"
	e.route("small", "r0", "/r0")
	e.consumer("small", "c0")
	c0 := e.do("GET", base+"/consumers", adminToken, nil).want(200).items()[0].(map[string]any)["id"].(string)

	const n = 16
	for _, c := range []struct {
		path, resource string
		body           func(i int) any
		limit          int
	}{
		{base + "/routes", "routes", func(i int) any { return routeBody(fmt.Sprint("r", i+1), fmt.Sprint("/r", i+1)) }, 5},
		{base + "/consumers", "consumers", func(i int) any { return map[string]any{"name": fmt.Sprint("c", i+1)} }, 5},
		{base + "/consumers/" + c0 + "/keys", "keys_per_consumer", func(int) any { return nil }, 3},
	} {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
			refused int
		)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := e.do("POST", c.path, adminToken, c.body(i))
				mu.Lock()
				defer mu.Unlock()
				switch r.status {
				case 201:
					created++
				case 400:
					if f, _ := r.json["error"].(map[string]any)["field"].(string); f == c.resource {
						refused++
						return
					}
					fallthrough
				default:
					t.Errorf("%s: %d %s", c.path, r.status, r.body)
				}
			}()
		}
		close(start)
		wg.Wait()
		already := 1
		if c.resource == "keys_per_consumer" {
			already = 0
		}
		if created != c.limit-already || refused != n-created {
			t.Errorf("%s: %d created, %d refused; want %d created", c.resource, created, refused, c.limit-already)
		}
		if got := e.count(c.path); got != c.limit {
			t.Errorf("%s: %d stored, limit %d", c.resource, got, c.limit)
		}
	}
}

// A plan lowered under what a tenant has keeps the tenant's objects and refuses new ones
// until the tenant is back under the limit; a policy over it may be replaced by one no
// larger, and a cached route keeps its cache.
func TestResourceLimitLowered(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, map[string]any{"routes": 5, "policy_rules": 10})
	base := "/v1/tenants/small"
	var ids []string
	for i := range 4 {
		b := routeBody(fmt.Sprint("r", i), fmt.Sprint("/r", i))
		if i == 0 {
			b["cache"] = map[string]any{"ttl_ms": 1000}
		}
		ids = append(ids, e.do("POST", base+"/routes", adminToken, b).want(201).str("id"))
	}
	rules := func(n int) string {
		var rs []string
		for i := range n {
			rs = append(rs, fmt.Sprintf(`["ops","/p%d","GET"]`, i))
		}
		return `{"rules":[` + strings.Join(rs, ",") + `]}`
	}
	e.do("PUT", base+"/policy", adminToken, rules(8)).want(200)

	e.do("PUT", "/v1/platform/plans/tiny", adminToken, map[string]any{"resources": map[string]any{"routes": 2, "policy_rules": 5, "cache_bytes": 0}}, "If-Match", "*").want(200)
	if n := e.count(base + "/routes"); n != 4 {
		t.Fatalf("%d routes kept, want 4", n)
	}
	wantOver(t, e.do("POST", base+"/routes", adminToken, routeBody("r9", "/r9")), "routes", "the tiny plan allows 2 routes;")
	e.do("DELETE", base+"/routes/"+ids[3], adminToken, nil).want(204)
	e.do("DELETE", base+"/routes/"+ids[2], adminToken, nil).want(204)
	wantOver(t, e.do("POST", base+"/routes", adminToken, routeBody("r9", "/r9")), "routes", "the tiny plan allows 2 routes;")
	e.do("DELETE", base+"/routes/"+ids[1], adminToken, nil).want(204)
	e.do("POST", base+"/routes", adminToken, routeBody("r9", "/r9")).want(201)

	// The cached route keeps its cache, and can still be changed.
	r0 := e.do("GET", base+"/routes/"+ids[0], adminToken, nil).want(200)
	upd := routeBody("r0", "/r0", "/r0b")
	upd["cache"] = map[string]any{"ttl_ms": 2000}
	upd["version"] = r0.json["version"]
	e.do("PUT", base+"/routes/"+ids[0], adminToken, upd).want(200)

	// The policy over the limit stays; a policy no larger replaces it, a larger one not.
	e.do("GET", base+"/policy", adminToken, nil).want(200)
	e.do("PUT", base+"/policy", adminToken, rules(7)).want(200)
	wantOver(t, e.do("PUT", base+"/policy", adminToken, rules(8)), "policy_rules", "the tiny plan allows 5 policy rules")
	e.do("PUT", base+"/policy", adminToken, rules(5)).want(200)
	wantOver(t, e.do("PUT", base+"/policy", adminToken, rules(6)), "policy_rules", "the tiny plan allows 5 policy rules")
}
