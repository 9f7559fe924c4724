package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"tollgate/infra/testcert"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

const configSecret = "0123456789abcdef0123456789abcdef-config"

// exportJSON is the tenant's document as the API writes it.
func exportJSON(t *testing.T, db *postgres.DB, tenantID string) []byte {
	t.Helper()
	doc, err := db.ExportConfig(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseDoc reads a document back, as a client that edits it would.
func parseDoc(t *testing.T, b []byte) *tenants.ConfigDocument {
	t.Helper()
	var doc tenants.ConfigDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return &doc
}

func apply(t *testing.T, ctx context.Context, db *postgres.DB, tenantID string, doc *tenants.ConfigDocument, o tenants.ApplyOptions) *tenants.ConfigPlan {
	t.Helper()
	plan, err := db.ApplyConfig(ctx, tenantID, doc, o)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return plan
}

func changes(list []tenants.ConfigChange) string {
	var s []string
	for _, c := range list {
		s = append(s, c.Kind+":"+c.Name)
	}
	return strings.Join(s, " ")
}

// seedConfig gives a tenant one object of each kind.
func seedConfig(t *testing.T, db *postgres.DB, ca *testcert.CA, tn *tenants.Tenant) {
	t.Helper()
	ctx := context.Background()
	if err := db.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold", Concurrency: 5}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateConsumer(ctx, &tenants.Consumer{TenantID: tn.ID, Name: "alice", Plan: "gold"}); err != nil {
		t.Fatal(err)
	}
	mustRoute(t, db, newRoute(tn.ID, "hello", "/hello"))
	mustRoute(t, db, newRoute(tn.ID, "admin", "/admin"))
	if err := db.CreateJWTIssuer(ctx, &tenants.Issuer{TenantID: tn.ID, Issuer: "https://idp.example", Audiences: []string{"api"}, HS256Secret: configSecret}); err != nil {
		t.Fatal(err)
	}
	if err := db.PutAccessRules(ctx, &tenants.AccessRules{TenantID: tn.ID, Rules: [][]string{{"alice", "/hello/*", "GET"}}}); err != nil {
		t.Fatal(err)
	}
	mustDomain(t, db, ca, tn.ID, "api.example.com")
}

// TestConfigRoundTrip: an export applies to no change and exports the same bytes; it
// holds no id, version, timestamp or secret; an applied edit is one transaction (one
// audit entry, its entries only), and applying it again changes nothing.
func TestConfigRoundTrip(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	seedConfig(t, db, testcert.NewCA(t), tn)

	first := exportJSON(t, db, tn.ID)
	for _, leak := range []string{`"id"`, `"version":2`, `"tenant_id"`, `"created_at"`, configSecret, "PRIVATE KEY", "certificate_pem"} {
		if strings.Contains(string(first), leak) {
			t.Errorf("export holds %s:\n%s", leak, first)
		}
	}
	for _, want := range []string{`"tenant":"acme"`, `"name":"hello"`, `"issuer":"https://idp.example"`, `"hostname":"api.example.com"`, `"status":"pending"`} {
		if !strings.Contains(string(first), want) {
			t.Errorf("export lacks %s:\n%s", want, first)
		}
	}
	if strings.Index(string(first), `"admin"`) > strings.Index(string(first), `"hello"`) {
		t.Errorf("routes not sorted by name:\n%s", first)
	}

	before := maxOutboxID(t, conn)
	plan := apply(t, ctx, db, tn.ID, parseDoc(t, first), tenants.ApplyOptions{Prune: true})
	if plan.Applied || plan.Changes() != 0 || plan.Unchanged != 7 {
		t.Fatalf("applying the export: %+v", plan)
	}
	if got := outboxAfter(t, conn, before); len(got) != 0 {
		t.Fatalf("no-op apply wrote %v", got)
	}
	if again := exportJSON(t, db, tn.ID); string(again) != string(first) {
		t.Fatalf("export → apply → export differs:\n%s\n%s", first, again)
	}
	is, _, err := db.ListJWTIssuers(ctx, tn.ID, tenants.Page{})
	if err != nil || is[0].HS256Secret != configSecret {
		t.Fatalf("issuer secret not kept: %v %+v", err, is)
	}

	// An edit: one route changed, one added, nothing else.
	doc := parseDoc(t, first)
	doc.Routes[1].Paths = []string{"/hello", "/hi"}
	doc.Routes = append(doc.Routes, newRoute("", "new", "/new"))
	actx := tenants.WithAudit(ctx, tenants.Audit{TenantID: tn.ID, Actor: "ci", Action: "config.apply"})
	plan = apply(t, actx, db, tn.ID, doc, tenants.ApplyOptions{})
	if !plan.Applied || changes(plan.Created) != "route:new" || changes(plan.Updated) != "route:hello" || len(plan.Deleted) != 0 || plan.Unchanged != 6 {
		t.Fatalf("edit: %+v", plan)
	}
	rows := outboxAfter(t, conn, before)
	if len(rows) != 2 {
		t.Fatalf("edit wrote %d entries, want 2: %v", len(rows), rows)
	}
	if log := auditLog(t, db, tn.ID); len(log) != 1 || log[0] != "config.apply  ci" {
		t.Fatalf("audit: %q", log)
	}
	after := exportJSON(t, db, tn.ID)
	if parseDoc(t, after).Revision != plan.Revision || plan.Revision == parseDoc(t, first).Revision {
		t.Fatalf("revision %s after apply; export says %s", plan.Revision, parseDoc(t, after).Revision)
	}

	// Applying the same edit again changes nothing, even though its revision is now stale.
	plan = apply(t, actx, db, tn.ID, doc, tenants.ApplyOptions{})
	if plan.Applied || plan.Changes() != 0 {
		t.Fatalf("second apply: %+v", plan)
	}
	if log := auditLog(t, db, tn.ID); len(log) != 1 {
		t.Fatalf("a no-op apply was audited: %q", log)
	}
}

// TestConfigApplyRules: dry runs, prune, stale documents and the errors' paths.
func TestConfigApplyRules(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	seedConfig(t, db, testcert.NewCA(t), tn)
	exported := exportJSON(t, db, tn.ID)

	t.Run("dry run changes nothing", func(t *testing.T) {
		before := maxOutboxID(t, conn)
		doc := parseDoc(t, exported)
		doc.Consumers = []*tenants.Consumer{}
		plan := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{DryRun: true, Prune: true})
		if plan.Applied || changes(plan.Deleted) != "consumer:alice" {
			t.Fatalf("dry run: %+v", plan)
		}
		if got := outboxAfter(t, conn, before); len(got) != 0 || string(exportJSON(t, db, tn.ID)) != string(exported) {
			t.Fatalf("dry run changed the config: %v", got)
		}
	})

	t.Run("without prune nothing is deleted, a list left out is left alone", func(t *testing.T) {
		doc := parseDoc(t, exported)
		doc.Consumers = []*tenants.Consumer{}
		doc.Routes = nil
		plan := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{})
		if plan.Changes() != 0 {
			t.Fatalf("%+v", plan)
		}
		doc.Revision = ""
		plan = apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{Prune: true, DryRun: true})
		if changes(plan.Deleted) != "consumer:alice" {
			t.Fatalf("prune with routes left out: %+v", plan)
		}
	})

	t.Run("errors name the document path", func(t *testing.T) {
		for _, c := range []struct {
			name, code, field string
			edit              func(d *tenants.ConfigDocument)
		}{
			{"bad target", tenants.EValidation, "routes[1].upstream.targets[0].url", func(d *tenants.ConfigDocument) {
				d.Routes[1].Upstream.Targets[0].URL = "ftp://x"
			}},
			{"path taken", tenants.EConflict, "routes[2].paths[0]", func(d *tenants.ConfigDocument) {
				d.Routes = append(d.Routes, newRoute("", "zzz", "/hello"))
			}},
			{"unknown plan", tenants.EValidation, "consumers[0].plan", func(d *tenants.ConfigDocument) {
				d.Consumers[0].Plan = "platinum"
			}},
			{"twice", tenants.EValidation, "routes[2].name", func(d *tenants.ConfigDocument) {
				d.Routes = append(d.Routes, newRoute("", "hello", "/other"))
			}},
			{"unclaimed domain", tenants.EValidation, "domains[1].hostname", func(d *tenants.ConfigDocument) {
				d.Domains = append(d.Domains, tenants.ConfigDomain{Hostname: "new.example.com"})
			}},
			{"other tenant", tenants.EValidation, "tenant", func(d *tenants.ConfigDocument) { d.Tenant = "other" }},
			{"no key source", tenants.EValidation, "jwt_issuers[1]", func(d *tenants.ConfigDocument) {
				d.JWTIssuers = append(d.JWTIssuers, &tenants.Issuer{Issuer: "https://other.example", Audiences: []string{"a"}})
			}},
		} {
			before := maxOutboxID(t, conn)
			doc := parseDoc(t, exported)
			c.edit(doc)
			_, err := db.ApplyConfig(ctx, tn.ID, doc, tenants.ApplyOptions{})
			var te *tenants.Error
			if !errors.As(err, &te) || te.Code != c.code || !strings.HasPrefix(te.Field, c.field) {
				t.Errorf("%s: %v, want %s on %s", c.name, err, c.code, c.field)
			}
			if got := outboxAfter(t, conn, before); len(got) != 0 {
				t.Errorf("%s: a failed apply wrote %v", c.name, got)
			}
		}
	})

	t.Run("two routes swap paths", func(t *testing.T) {
		doc := parseDoc(t, exported)
		doc.Routes[0].Paths, doc.Routes[1].Paths = doc.Routes[1].Paths, doc.Routes[0].Paths
		plan := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{})
		if changes(plan.Updated) != "route:admin route:hello" {
			t.Fatalf("swap: %+v", plan)
		}
		doc = parseDoc(t, exportJSON(t, db, tn.ID))
		doc.Routes[0].Paths, doc.Routes[1].Paths = doc.Routes[1].Paths, doc.Routes[0].Paths
		apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{})
		exported = exportJSON(t, db, tn.ID)
	})

	t.Run("stale document refused unless forced", func(t *testing.T) {
		mustRoute(t, db, newRoute(tn.ID, "late", "/late"))
		doc := parseDoc(t, exported)
		doc.Routes[0].Paths = []string{"/admin", "/admin2"}
		_, err := db.ApplyConfig(ctx, tn.ID, doc, tenants.ApplyOptions{})
		wantCode(t, err, tenants.EVersionConflict)
		plan := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{Force: true, Prune: true})
		if !plan.Applied || changes(plan.Updated) != "route:admin" || changes(plan.Deleted) != "route:late" {
			t.Fatalf("forced: %+v", plan)
		}
	})

	t.Run("prune deletes what the document dropped", func(t *testing.T) {
		doc := parseDoc(t, exportJSON(t, db, tn.ID))
		doc.Consumers, doc.Plans, doc.Domains = []*tenants.Consumer{}, []*tenants.ConsumerPlan{}, []tenants.ConfigDomain{}
		doc.JWTIssuers = []*tenants.Issuer{}
		plan := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{Prune: true})
		if got := changes(plan.Deleted); got != "plan:gold consumer:alice jwt_issuer:https://idp.example domain:api.example.com" {
			t.Fatalf("deleted %s", got)
		}
		left := parseDoc(t, exportJSON(t, db, tn.ID))
		if len(left.Consumers)+len(left.Plans)+len(left.Domains)+len(left.JWTIssuers) != 0 || len(left.Routes) != 2 {
			t.Fatalf("after prune: %+v", left)
		}
	})
}

// An apply counts the tenant's routes once and keeps counting as it creates (countMemo):
// the plan's limit still holds at the last route, and routes it deletes make room for
// the ones it creates in the same apply.
func TestConfigApplyRouteLimit(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn := &tenants.Tenant{Slug: "acme", PlatformPlan: tenants.PlatformFree} // 10 routes
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	limit := tn.Limits.Resources.Routes
	doc := func(from, to int) *tenants.ConfigDocument {
		d := &tenants.ConfigDocument{Version: 1, Tenant: "acme", Routes: []*tenants.Route{}}
		for i := from; i < to; i++ {
			d.Routes = append(d.Routes, newRoute("", fmt.Sprintf("r%03d", i), fmt.Sprintf("/r%d", i)))
		}
		return d
	}
	if plan := apply(t, ctx, db, tn.ID, doc(0, limit), tenants.ApplyOptions{}); len(plan.Created) != limit {
		t.Fatalf("filling to the limit: %+v", plan)
	}
	// Three routes pruned, three new ones created: the tenant stays at its limit.
	plan := apply(t, ctx, db, tn.ID, doc(3, limit+3), tenants.ApplyOptions{Prune: true})
	if len(plan.Created) != 3 || len(plan.Deleted) != 3 {
		t.Fatalf("replacing three: %+v", plan)
	}
	_, err := db.ApplyConfig(ctx, tn.ID, doc(3, limit+4), tenants.ApplyOptions{})
	wantCode(t, err, tenants.EValidation)
	routes, _, err := db.ListRoutes(ctx, tn.ID, tenants.Page{Limit: 100})
	if err != nil || len(routes) != limit {
		t.Fatalf("after the refused apply: %d routes, %v", len(routes), err)
	}
}

// TestConfigCreatesRevision: an apply that only creates objects stamps its plan with the
// revision an export then reports, whether it reads the new versions back or not, into
// an empty tenant and beside objects stored before.
func TestConfigCreatesRevision(t *testing.T) {
	for _, fold := range []bool{true, false} {
		t.Run(fmt.Sprintf("folded=%v", fold), func(t *testing.T) {
			db, _ := pgtest.Open(t, postgres.WithFoldedRoundTrips(fold), postgres.WithUpstreamAddressRule(&tenants.UpstreamAddressRule{
				AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			}))
			ctx := context.Background()
			empty, seeded := mustTenant(t, db, "empty"), mustTenant(t, db, "seeded")
			seedConfig(t, db, testcert.NewCA(t), seeded)
			for _, tn := range []*tenants.Tenant{empty, seeded} {
				doc := parseDoc(t, exportJSON(t, db, tn.ID))
				doc.Routes = append(doc.Routes, newRoute("", "new1", "/new1"), newRoute("", "new2", "/new2"))
				doc.Plans = append(doc.Plans, &tenants.ConsumerPlan{Name: "silver", Concurrency: 2})
				doc.Consumers = append(doc.Consumers, &tenants.Consumer{Name: "bob", Plan: "silver"})
				doc.JWTIssuers = append(doc.JWTIssuers, &tenants.Issuer{Issuer: "https://idp2.example", Audiences: []string{"api"}, HS256Secret: configSecret})
				plan := apply(t, ctx, db, tn.ID, doc, tenants.ApplyOptions{})
				if !plan.Applied || len(plan.Created) != 5 || len(plan.Updated)+len(plan.Deleted) != 0 {
					t.Fatalf("%s: %+v", tn.Slug, plan)
				}
				if got := parseDoc(t, exportJSON(t, db, tn.ID)).Revision; got != plan.Revision {
					t.Errorf("%s: revision %s after apply; export says %s", tn.Slug, plan.Revision, got)
				}
			}
		})
	}
}
