package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// TestFinanceWithoutTenant: an account of no tenant whose address holds the finance role
// lands on the billing export, which it may read; without the role it sees the page that
// says it has no tenant.
func TestFinanceWithoutTenant(t *testing.T) {
	e := newConsole(t)
	ctx := context.Background()
	hash, _ := tenants.HashPassword("correct horse battery")
	u := &tenants.User{Email: "fin@example.com", PasswordHash: hash}
	if err := e.db.SignUp(ctx, u, nil); err != nil {
		t.Fatal(err)
	}
	if ms, err := e.db.ListMemberships(ctx, u.ID); err != nil || len(ms) != 0 {
		t.Fatalf("memberships of an account of no tenant: %v %v", ms, err)
	}
	if err := e.db.SignUp(ctx, &tenants.User{Email: "FIN@example.com", PasswordHash: hash}, nil); tenants.ErrorCode(err) != tenants.EConflict {
		t.Fatalf("the same address again: %v", err)
	}
	raw := "session-fin-0123456789abcdef0123456789"
	s := &tenants.Session{Hash: tenants.HashSecret(raw), UserID: u.ID, CSRF: "csrf-fin", ExpiresAt: time.Now().Add(time.Hour)}
	if err := e.db.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	fin := person{email: u.Email, id: u.ID, cookie: tenants.SessionCookie + "=" + raw, csrf: s.CSRF}

	if pg := e.get(fin, "/console/"); pg.status != http.StatusOK || !strings.Contains(pg.body, "No tenant yet") {
		t.Fatalf("home without a role: %d %s", pg.status, pg.location)
	}
	if pg := e.get(fin, "/console/finance"); pg.status != http.StatusNotFound {
		t.Fatalf("finance without the role: %d", pg.status)
	}
	// The grant applies once the address is proven.
	if _, err := e.db.SetPlatformRole(ctx, "fin@example.com", tenants.PlatformFinance); err != nil {
		t.Fatal(err)
	}
	if pg := e.get(fin, "/console/finance"); pg.status != http.StatusNotFound {
		t.Fatalf("finance before the address is verified: %d", pg.status)
	}
	vt := &tenants.UserToken{Hash: tenants.HashSecret("verify-fin"), UserID: u.ID, Purpose: tenants.TokenVerify, ExpiresAt: time.Now().Add(time.Hour)}
	if err := e.db.CreateUserToken(ctx, vt); err != nil {
		t.Fatal(err)
	}
	if v, err := e.db.VerifyEmail(ctx, vt.Hash); err != nil || v.PlatformRole != tenants.PlatformFinance {
		t.Fatalf("verify: %+v %v", v, err)
	}
	if pg := e.get(fin, "/console/"); pg.status != http.StatusSeeOther || pg.location != "/console/finance" {
		t.Fatalf("home of a finance user of no tenant: %d → %q", pg.status, pg.location)
	}
	if pg := e.get(fin, "/console/finance"); pg.status != http.StatusOK || !strings.Contains(pg.body, "Billing export") {
		t.Fatalf("finance page: %d", pg.status)
	}
}
