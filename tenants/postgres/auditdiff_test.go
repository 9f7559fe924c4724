package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// lastAudit is the tenant's newest audit entry.
func lastAudit(t *testing.T, db *postgres.DB, tenantID string) *tenants.AuditEntry {
	t.Helper()
	items, _, err := db.ListAudit(context.Background(), tenantID, tenants.AuditQuery{Page: tenants.Page{Limit: 1}})
	if err != nil || len(items) == 0 {
		t.Fatalf("audit log: %v (%d entries)", err, len(items))
	}
	return items[0]
}

func fieldJSON(t *testing.T, c *tenants.AuditChanges) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAuditRecordsWhatChanged: an update's entry keeps the fields it changed before and
// after, a secret only as changed; a config apply's entry names the objects it created,
// updated (with their fields) and deleted; a logo's data URL is kept short.
func TestAuditRecordsWhatChanged(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	signUp(t, db, "owner@example.com", "acme", true)
	tn, err := db.FindTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}

	renamed := *tn
	renamed.Name = "Acme Corp"
	if err := db.UpdateTenant(audit(tn.ID, "tenant.update", tn.ID), &renamed); err != nil {
		t.Fatal(err)
	}
	if got, want := fieldJSON(t, lastAudit(t, db, tn.ID).Changes), `{"fields":{"name":{"before":"`+tn.Name+`","after":"Acme Corp"}}}`; got != want {
		t.Errorf("tenant rename changes\n got %s\nwant %s", got, want)
	}

	p := &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold", RateLimit: &tenants.RateLimit{RPS: 10, Burst: 10}}
	if err := db.CreatePlan(audit(tn.ID, "plans.create", ""), p); err != nil {
		t.Fatal(err)
	}
	if e := lastAudit(t, db, tn.ID); e.Changes != nil {
		t.Errorf("a create records no changes, got %s", fieldJSON(t, e.Changes))
	}
	p.RateLimit = &tenants.RateLimit{RPS: 20, Burst: 10}
	p.Description = "for partners"
	if err := db.UpdatePlan(audit(tn.ID, "plans.update", p.ID), p); err != nil {
		t.Fatal(err)
	}
	e := lastAudit(t, db, tn.ID)
	if e.Action != "plans.update" || e.Changes == nil {
		t.Fatalf("entry %+v", e)
	}
	if got, want := fieldJSON(t, e.Changes), `{"fields":{"description":{"after":"for partners"},"rate_limit.rps":{"before":10,"after":20}}}`; got != want {
		t.Errorf("plan update changes\n got %s\nwant %s", got, want)
	}

	const oldSecret, newSecret = "0123456789abcdef0123456789abcdef-old", "0123456789abcdef0123456789abcdef-new"
	is := &tenants.Issuer{TenantID: tn.ID, Issuer: "https://idp.example", Audiences: []string{"api"}, HS256Secret: oldSecret}
	if err := db.CreateJWTIssuer(ctx, is); err != nil {
		t.Fatal(err)
	}
	is.HS256Secret, is.Audiences = newSecret, []string{"api", "web"}
	if err := db.UpdateJWTIssuer(audit(tn.ID, "jwt_issuers.update", is.ID), is); err != nil {
		t.Fatal(err)
	}
	got := fieldJSON(t, lastAudit(t, db, tn.ID).Changes)
	if want := `{"fields":{"audiences":{"before":["api"],"after":["api","web"]},"hs256_secret":{"redacted":true}}}`; got != want {
		t.Errorf("issuer update changes\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "0123456789") {
		t.Errorf("a secret is in the log: %s", got)
	}

	// An apply: one route created, the plan updated, the consumer pruned.
	if err := db.CreateConsumer(ctx, &tenants.Consumer{TenantID: tn.ID, Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	doc, err := db.ExportConfig(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	doc.Routes = append(doc.Routes, newRoute(tn.ID, "hello", "/hello"))
	doc.Plans[0].Concurrency = 5
	doc.Consumers = []*tenants.Consumer{}
	apply(t, audit(tn.ID, "config.apply", ""), db, tn.ID, doc, tenants.ApplyOptions{Prune: true})
	e = lastAudit(t, db, tn.ID)
	got = fieldJSON(t, e.Changes)
	if want := `{"created":[{"kind":"route","name":"hello"}],"updated":[{"kind":"plan","name":"gold","fields":{"concurrency":{"before":0,"after":5}}}],"deleted":[{"kind":"consumer","name":"bob"}]}`; e.Action != "config.apply" || got != want {
		t.Errorf("apply entry %s\n got %s\nwant %s", e.Action, got, want)
	}

	// A portal's logo is a data URL of up to 64 KiB: the entry keeps its start and size.
	logo := "data:image/png;base64," + strings.Repeat("A", 4000)
	if err := db.PutPortal(audit(tn.ID, "portal.update", ""), &tenants.PortalSettings{TenantID: tn.ID, Enabled: true, DisplayName: "Acme", Logo: logo}); err != nil {
		t.Fatal(err)
	}
	c := lastAudit(t, db, tn.ID).Changes
	if c == nil || string(c.Fields["enabled"].After) != "true" || string(c.Fields["display_name"].After) != `"Acme"` {
		t.Fatalf("portal changes: %s", fieldJSON(t, c))
	}
	if l := c.Fields["logo"].After; len(l) > tenants.MaxAuditValueBytes || !strings.Contains(string(l), "(4022 bytes)") {
		t.Errorf("logo kept as %s", l)
	}
}
