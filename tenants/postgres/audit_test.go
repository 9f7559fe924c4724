package postgres_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// auditLog is a tenant's audit log, oldest first, as "action object actor".
func auditLog(t *testing.T, db *postgres.DB, tenantID string) []string {
	t.Helper()
	items, _, err := db.ListAudit(context.Background(), tenantID, tenants.AuditQuery{Page: tenants.Page{Limit: tenants.MaxPageLimit}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range slices.Backward(items) {
		out = append(out, e.Action+" "+e.Object+" "+e.Actor)
	}
	return out
}

func audit(tenantID, action, object string) context.Context {
	return tenants.WithAudit(context.Background(), tenants.Audit{TenantID: tenantID, Actor: "ann@example.com", Action: action, Object: object})
}

// TestAuditInTransaction: a write with an audit entry attached records it in its own
// transaction, the store naming what the caller could not know (a created object's id, the
// tenant of an invitation answered by its token); a write without one records nothing.
func TestAuditInTransaction(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	signUp(t, db, "owner@example.com", "acme", true)
	tn, err := db.FindTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	mustRoute(t, db, newRoute(tn.ID, "quiet", "/quiet")) // no entry attached: none recorded

	r := newRoute(tn.ID, "hello", "/hello")
	if err := db.CreateRoute(audit(tn.ID, "routes.create", ""), r); err != nil {
		t.Fatal(err)
	}
	r.Paths = []string{"/hi"}
	if err := db.UpdateRoute(audit(tn.ID, "routes.update", r.ID), r); err != nil {
		t.Fatal(err)
	}
	c := &tenants.Consumer{TenantID: tn.ID, Name: "bob"}
	if err := db.CreateConsumer(audit(tn.ID, "consumers.create", ""), c); err != nil {
		t.Fatal(err)
	}
	k := &tenants.Key{TenantID: tn.ID, ConsumerID: c.ID, Prefix: "tg_x", Hash: tenants.HashSecret("k")}
	if err := db.CreateKey(audit(tn.ID, "keys.create", ""), k); err != nil {
		t.Fatal(err)
	}
	if err := db.PutAccessRules(audit(tn.ID, "policy.update", ""), &tenants.AccessRules{TenantID: tn.ID}); err != nil {
		t.Fatal(err)
	}
	tok := &tenants.Token{TenantID: tn.ID, Name: "ci", Role: tenants.RoleAdmin, Prefix: "tgt_x", Hash: tenants.HashSecret("t")}
	if err := db.CreateToken(audit(tn.ID, "tokens.create", ""), tok); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Invite(audit(tn.ID, "invites.create", ""), &tenants.Invite{TenantID: tn.ID, Email: "New@Example.com", Role: tenants.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	invTok, _ := invite(t, db, tn.ID, "dev@example.com", tenants.RoleDeveloper)
	dev := signUp(t, db, "dev@example.com", "devs", true)
	if _, err := db.AcceptInvite(audit("", "invites.accept", ""), invTok, dev.ID); err != nil {
		t.Fatal(err)
	}
	// A failed write records nothing.
	if err := db.DeleteRoute(audit(tn.ID, "routes.delete", "nope"), tn.ID, "00000000-0000-0000-0000-000000000000"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("delete of no route: %v", err)
	}

	want := []string{
		"routes.create " + r.ID + " ann@example.com",
		"routes.update " + r.ID + " ann@example.com",
		"consumers.create " + c.ID + " ann@example.com",
		"keys.create " + k.ID + " ann@example.com",
		"policy.update  ann@example.com",
		"tokens.create " + tok.ID + " ann@example.com",
		"invites.create new@example.com ann@example.com",
		"invites.accept dev@example.com ann@example.com",
		"members.create " + dev.ID + " ann@example.com",
	}
	if got := auditLog(t, db, tn.ID); !slices.Equal(got, want) {
		t.Fatalf("audit log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A sign-up's entry is in the tenant it creates, naming it.
	u := &tenants.User{Email: "sam@example.com", PasswordHash: "x"}
	nt := &tenants.Tenant{Slug: "sams"}
	if err := db.SignUp(audit("", "tenant.create", ""), u, nt); err != nil {
		t.Fatal(err)
	}
	if got := auditLog(t, db, nt.ID); !slices.Equal(got, []string{"tenant.create " + nt.ID + " ann@example.com"}) {
		t.Fatalf("sign-up's audit log: %q", got)
	}
	// A tenant's deletion names the tenant, not the first of its objects.
	if err := db.DeleteTenant(audit(tn.ID, "tenants.delete", ""), tn.ID); err != nil {
		t.Fatal(err)
	}
	if got := auditLog(t, db, tn.ID); got[len(got)-1] != "tenants.delete  ann@example.com" {
		t.Fatalf("after the tenant's deletion: %q", got)
	}
}

// TestAuditRollsBackTheChange: when the audit entry cannot be written the change is not
// made either, config writes (no row, no outbox entry) and the api's own data alike.
func TestAuditRollsBackTheChange(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	signUp(t, db, "owner@example.com", "acme", true)
	tn, err := db.FindTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	// Postgres refuses a NUL byte in text: the entry's insert fails after the change's.
	const bad = "routes.create\x00"
	before := maxOutboxID(t, conn)
	if err := db.CreateRoute(audit(tn.ID, bad, ""), newRoute(tn.ID, "hello", "/hello")); err == nil {
		t.Fatal("a route was created whose audit entry failed")
	}
	if routes, _, err := db.ListRoutes(ctx, tn.ID, tenants.Page{}); err != nil || len(routes) != 0 {
		t.Fatalf("routes after the failed write: %v, %v", routes, err)
	}
	if rows := outboxAfter(t, conn, before); len(rows) != 0 {
		t.Fatalf("outbox rows of a rolled-back change: %v", rows)
	}
	tok := &tenants.Token{TenantID: tn.ID, Name: "ci", Role: tenants.RoleAdmin, Prefix: "tgt_x", Hash: tenants.HashSecret("t")}
	if err := db.CreateToken(audit(tn.ID, bad, ""), tok); err == nil {
		t.Fatal("a token was created whose audit entry failed")
	}
	if toks, _, err := db.ListTokens(ctx, tn.ID, tenants.Page{}); err != nil || len(toks) != 0 {
		t.Fatalf("tokens after the failed write: %v, %v", toks, err)
	}
	if _, err := db.Invite(audit(tn.ID, bad, ""), &tenants.Invite{TenantID: tn.ID, Email: "x@example.com", Role: tenants.RoleViewer}); err == nil {
		t.Fatal("an invite was made whose audit entry failed")
	}
	if invs, err := db.ListInvites(ctx, tn.ID); err != nil || len(invs) != 0 {
		t.Fatalf("invites after the failed write: %v, %v", invs, err)
	}
	// The change names the tenant when the caller does not.
	if err := db.CreateRoute(tenants.WithAudit(ctx, tenants.Audit{Actor: "a", Action: "routes.create"}), newRoute(tn.ID, "x", "/x")); err != nil {
		t.Fatal(err)
	}
	if got := auditLog(t, db, tn.ID); len(got) != 1 {
		t.Fatalf("audit log: %q", got)
	}
}

// TestAuditRange: a range keeps the entries written inside it, either bound may be open.
func TestAuditRange(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	signUp(t, db, "owner@example.com", "acme", true)
	tn, err := db.FindTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateRoute(audit(tn.ID, "routes.create", ""), newRoute(tn.ID, "hello", "/hello")); err != nil {
		t.Fatal(err)
	}
	all, _, err := db.ListAudit(ctx, tn.ID, tenants.AuditQuery{Page: tenants.Page{Limit: 10}})
	if err != nil || len(all) != 1 {
		t.Fatalf("all: %v entries, %v", len(all), err)
	}
	at := all[0].At
	for _, c := range []struct {
		name     string
		from, to time.Time
		want     int
	}{
		{"open", time.Time{}, time.Time{}, 1},
		{"from before", at.Add(-time.Minute), time.Time{}, 1},
		{"from after", at.Add(time.Second), time.Time{}, 0},
		{"to after", time.Time{}, at.Add(time.Second), 1},
		{"to at (exclusive)", time.Time{}, at, 0},
		{"around", at.Add(-time.Hour), at.Add(time.Hour), 1},
	} {
		got, _, err := db.ListAudit(ctx, tn.ID, tenants.AuditQuery{Page: tenants.Page{Limit: 10}, From: c.from, To: c.to})
		if err != nil || len(got) != c.want {
			t.Errorf("%s: %d entries, want %d (%v)", c.name, len(got), c.want, err)
		}
	}
}
