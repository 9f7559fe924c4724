package postgres_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"tollgate/tenants"
)

// TestSpecColumns: a config object's jsonb column holds what a client sets, without the
// fields the server owns or keeps in columns of their own.
func TestSpecColumns(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "spec")
	r := newRoute(tn.ID, "r", "/r")
	r.WebSocket, r.CheckAccess = true, true
	mustRoute(t, db, r)
	is := &tenants.Issuer{TenantID: tn.ID, Issuer: "https://idp.example", Audiences: []string{"api"},
		HS256Secret: "0123456789abcdef0123456789abcdef"}
	if err := db.CreateJWTIssuer(ctx, is); err != nil {
		t.Fatal(err)
	}
	p := &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold", RateLimit: &tenants.RateLimit{RPS: 5, Burst: 5}, Concurrency: 2}
	if err := db.CreatePlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	ar := &tenants.AccessRules{TenantID: tn.ID, Rules: [][]string{{"*", "/r", "GET"}}}
	if err := db.PutAccessRules(ctx, ar); err != nil {
		t.Fatal(err)
	}

	conn := rawConn(t, url)
	for _, c := range []struct {
		query string
		want  []string
	}{
		{`SELECT spec FROM routes WHERE tenant_id = $1`, []string{"auth", "connect_timeout_ms", "max_body_bytes", "methods",
			"paths", "policy", "strip_prefix", "timeout_ms", "upstream", "websocket"}},
		{`SELECT spec FROM jwt_issuers WHERE tenant_id = $1`, []string{"algorithms", "audiences", "consumer_claim", "hs256_secret", "leeway_seconds", "roles_claim"}},
		{`SELECT limits FROM plans WHERE tenant_id = $1`, []string{"concurrency", "mode", "rate_limit"}},
		{`SELECT spec FROM policies WHERE tenant_id = $1`, []string{"roles", "rules"}},
	} {
		var raw []byte
		if err := conn.QueryRow(ctx, c.query, tn.ID).Scan(&raw); err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, c.want) {
			t.Errorf("%s: keys %v, want %v", c.query, keys, c.want)
		}
	}

	got, err := db.FindRoute(ctx, tn.ID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("route read back:\n%s\nwant\n%s", mustJSON(got), mustJSON(r))
	}
}

// TestSpecOldRows: rows written before the columns held the domain types' JSON (by
// structs of their own, with some members omitted when empty) load unchanged.
func TestSpecOldRows(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "old")
	conn := rawConn(t, url)
	const (
		routeID  = "01900000-0000-7000-8000-000000000001"
		issuerID = "01900000-0000-7000-8000-000000000002"
		planID   = "01900000-0000-7000-8000-000000000003"
	)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO routes (tenant_id, id, name, spec) VALUES ($1, $2, 'old', $3)`, tn.ID, routeID,
		`{"paths":["/old"],"methods":["GET"],"upstream":{"targets":[{"url":"http://127.0.0.1:9999","weight":1}]},
		"auth":"key","policy":true,"rate_limit":{"rps":5,"burst":5,"per":"route","mode":"approximate"},"strip_prefix":true,
		"max_body_bytes":1024,"connect_timeout_ms":2000,"timeout_ms":30000,"cache":{"ttl_ms":1000}}`)
	exec(`INSERT INTO jwt_issuers (tenant_id, id, issuer, spec) VALUES ($1, $2, 'https://idp.example', $3)`, tn.ID, issuerID,
		`{"audiences":["api"],"algorithms":["HS256"],"hs256_secret":"0123456789abcdef0123456789abcdef","consumer_claim":"sub","roles_claim":"roles"}`)
	exec(`INSERT INTO plans (tenant_id, id, name, limits) VALUES ($1, $2, 'gold', $3)`, tn.ID, planID,
		`{"rate_limit":{"rps":5,"burst":5},"quota":{"requests":100},"concurrency":2,"mode":"exact"}`)
	exec(`INSERT INTO policies (tenant_id, spec) VALUES ($1, $2)`, tn.ID, `{"rules":[["*","/old","GET"]],"roles":[]}`)

	r, err := db.FindRoute(ctx, tn.ID, routeID)
	if err != nil {
		t.Fatal(err)
	}
	wantRoute := tenants.Route{ID: routeID, TenantID: tn.ID, Name: "old", Paths: []string{"/old"}, Methods: []string{"GET"},
		Upstream:    tenants.Upstream{Targets: []tenants.Target{{URL: "http://127.0.0.1:9999", Weight: 1}}},
		Auth:        tenants.AuthKey,
		CheckAccess: true, RateLimit: &tenants.RateLimit{RPS: 5, Burst: 5, Per: tenants.PerRoute, Mode: tenants.ModeApproximate},
		StripPrefix: true, MaxBodyBytes: 1024, ConnectTimeoutMS: 2000, TimeoutMS: 30000, Cache: &tenants.Cache{TTLMS: 1000},
		Version: 1, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if !reflect.DeepEqual(*r, wantRoute) {
		t.Errorf("route:\n%s\nwant\n%s", mustJSON(r), mustJSON(wantRoute))
	}

	is, err := db.FindJWTIssuer(ctx, tn.ID, issuerID)
	if err != nil {
		t.Fatal(err)
	}
	wantIssuer := tenants.Issuer{ID: issuerID, TenantID: tn.ID, Issuer: "https://idp.example", Audiences: []string{"api"},
		Algorithms: []string{"HS256"}, HS256Secret: "0123456789abcdef0123456789abcdef", ConsumerClaim: "sub", RolesClaim: "roles",
		Version: 1, CreatedAt: is.CreatedAt, UpdatedAt: is.UpdatedAt}
	if !reflect.DeepEqual(*is, wantIssuer) {
		t.Errorf("issuer:\n%s\nwant\n%s", mustJSON(is), mustJSON(wantIssuer))
	}

	p, err := db.FindPlan(ctx, tn.ID, planID)
	if err != nil {
		t.Fatal(err)
	}
	wantPlan := tenants.ConsumerPlan{ID: planID, TenantID: tn.ID, Name: "gold", RateLimit: &tenants.RateLimit{RPS: 5, Burst: 5},
		Quota: &tenants.Quota{Requests: 100}, Concurrency: 2, Mode: tenants.ModeExact,
		Version: 1, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
	if !reflect.DeepEqual(*p, wantPlan) {
		t.Errorf("plan:\n%s\nwant\n%s", mustJSON(p), mustJSON(wantPlan))
	}

	ar, err := db.FindAccessRules(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantRules := tenants.AccessRules{TenantID: tn.ID, Rules: [][]string{{"*", "/old", "GET"}}, Roles: [][]string{},
		Version: 1, CreatedAt: ar.CreatedAt, UpdatedAt: ar.UpdatedAt}
	if !reflect.DeepEqual(*ar, wantRules) {
		t.Errorf("policy:\n%s\nwant\n%s", mustJSON(ar), mustJSON(wantRules))
	}
}
