package postgres_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"tollgate/infra/testcert"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

func mustAccount(t *testing.T, db *postgres.DB, tenantID, email string) *tenants.PortalAccount {
	t.Helper()
	a := &tenants.PortalAccount{TenantID: tenantID, Email: email, PasswordHash: "$2a$10$x"}
	if err := db.CreatePortalAccount(context.Background(), a); err != nil {
		t.Fatalf("create account %s: %v", email, err)
	}
	return a
}

// TestPortalSettingsStore: settings default to off, bad ones change nothing, the domain
// must be one of the tenant's verified ones, and PortalHosts lists only enabled portals
// on verified domains.
func TestPortalSettingsStore(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	a, b := mustTenant(t, db, "a"), mustTenant(t, db, "b")

	s, err := db.FindPortal(ctx, a.ID)
	if err != nil || s.Enabled || s.TenantID != a.ID {
		t.Fatalf("fresh settings: %+v %v", s, err)
	}
	png := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfake"))
	good := &tenants.PortalSettings{TenantID: a.ID, Enabled: true, DisplayName: "Acme API", Logo: png, PrimaryColor: "#AABBCC", AccentColor: "#112233"}
	if err := db.PutPortal(ctx, good); err != nil {
		t.Fatal(err)
	}
	if good.PrimaryColor != "#aabbcc" || good.Logo != png || !good.Enabled {
		t.Errorf("saved: %+v", good)
	}
	for field, bad := range map[string]tenants.PortalSettings{
		"primary_color": {PrimaryColor: "red"},
		"accent_color":  {AccentColor: "#12345"},
		"logo":          {Logo: "https://cdn.example.com/logo.png"},
		"display_name":  {DisplayName: " padded"},
		"domain_id":     {DomainID: "00000000-0000-0000-0000-000000000001"},
	} {
		bad.TenantID, bad.Enabled = a.ID, false
		err := db.PutPortal(ctx, &bad)
		if tenants.ErrorCode(err) != tenants.EValidation || err.(*tenants.Error).Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
	if s, _ := db.FindPortal(ctx, a.ID); !s.Enabled || s.DisplayName != "Acme API" {
		t.Errorf("a refused change changed the settings: %+v", s)
	}

	ca := testcert.NewCA(t)
	d := mustDomain(t, db, ca, a.ID, "developers.a.example")
	good.DomainID = d.ID
	if err := db.PutPortal(ctx, good); tenants.ErrorCode(err) != tenants.EValidation {
		t.Errorf("a pending domain was taken: %v", err)
	}
	if _, err := db.RecordProof(ctx, a.ID, d.ID, d.Verification.Value, proofFound, time.Now(), checks, false); err != nil {
		t.Fatal(err)
	}
	if err := db.PutPortal(ctx, good); err != nil || good.Hostname != "developers.a.example" {
		t.Fatalf("verified domain: %+v %v", good, err)
	}
	// Tenant b cannot name a's domain.
	if err := db.PutPortal(ctx, &tenants.PortalSettings{TenantID: b.ID, Enabled: true, DomainID: d.ID}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Errorf("b named a's domain: %v", err)
	}
	hosts, err := db.PortalHosts(ctx)
	if err != nil || len(hosts) != 1 || hosts["developers.a.example"] != "a" {
		t.Errorf("hosts: %v %v", hosts, err)
	}
	good.Enabled = false
	if err := db.PutPortal(ctx, good); err != nil {
		t.Fatal(err)
	}
	if hosts, _ := db.PortalHosts(ctx); len(hosts) != 0 {
		t.Errorf("a portal turned off still has its host: %v", hosts)
	}
	// Deleting the domain drops it from the settings.
	if err := db.DeleteDomain(ctx, a.ID, d.ID); err != nil {
		t.Fatal(err)
	}
	if s, _ := db.FindPortal(ctx, a.ID); s.DomainID != "" || s.Hostname != "" {
		t.Errorf("after the domain's deletion: %+v", s)
	}

	if err := db.SaveAPIDoc(ctx, a.ID, []byte(`{"openapi":"3.0.3"}`)); err != nil {
		t.Fatal(err)
	}
	if doc, err := db.FindAPIDoc(ctx, a.ID); err != nil || string(doc) != `{"openapi":"3.0.3"}` {
		t.Errorf("doc: %s %v", doc, err)
	}
	if _, err := db.FindAPIDoc(ctx, b.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("b's doc: %v", err)
	}
}

// TestPortalAccountsStore: an address has one account per tenant, and a second at
// another tenant; tokens work once, for their own tenant and purpose; sessions are found
// only with their tenant; the flash is taken once; a reset ends the sessions.
func TestPortalAccountsStore(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	a, b := mustTenant(t, db, "a"), mustTenant(t, db, "b")

	acc := mustAccount(t, db, a.ID, "Dev@Example.com")
	if acc.Email != "dev@example.com" || acc.EmailVerified || acc.ConsumerID != "" {
		t.Errorf("account: %+v", acc)
	}
	err := db.CreatePortalAccount(ctx, &tenants.PortalAccount{TenantID: a.ID, Email: "dev@example.com", PasswordHash: "x"})
	if tenants.ErrorCode(err) != tenants.EConflict {
		t.Errorf("the same address twice at a: %v", err)
	}
	other := mustAccount(t, db, b.ID, "dev@example.com")
	if _, err := db.FindPortalAccount(ctx, b.ID, acc.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("a's account found at b: %v", err)
	}

	verify := &tenants.PortalToken{Hash: tenants.HashSecret("verify-a"), TenantID: a.ID, AccountID: acc.ID, Purpose: tenants.TokenVerify, ExpiresAt: time.Now().Add(time.Hour)}
	if err := db.CreatePortalToken(ctx, verify); err != nil {
		t.Fatal(err)
	}
	if _, err := db.VerifyPortalEmail(ctx, b.ID, verify.Hash); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("a's token spent at b: %v", err)
	}
	if _, err := db.ResetPortalPassword(ctx, a.ID, verify.Hash, "$2a$10$y"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("a verify token reset a password: %v", err)
	}
	got, err := db.VerifyPortalEmail(ctx, a.ID, verify.Hash)
	if err != nil || !got.EmailVerified {
		t.Fatalf("verify: %+v %v", got, err)
	}
	if _, err := db.VerifyPortalEmail(ctx, a.ID, verify.Hash); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("a token worked twice: %v", err)
	}
	if o, _ := db.FindPortalAccount(ctx, b.ID, other.ID); o.EmailVerified {
		t.Error("verifying at a verified the address at b")
	}

	c := &tenants.Consumer{TenantID: a.ID, Name: acc.Email}
	if err := db.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := db.SetPortalConsumer(ctx, b.ID, other.ID, c.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("b's account given a's consumer: %v", err)
	}
	if err := db.SetPortalConsumer(ctx, a.ID, acc.ID, c.ID); err != nil {
		t.Fatal(err)
	}

	s := &tenants.PortalSession{Hash: tenants.HashSecret("cookie"), TenantID: a.ID, AccountID: acc.ID, CSRF: "csrf", ExpiresAt: time.Now().Add(time.Hour)}
	if err := db.CreatePortalSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := db.FindPortalSession(ctx, b.ID, s.Hash); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("a's session found at b: %v", err)
	}
	if got, err := db.FindPortalSession(ctx, a.ID, s.Hash); err != nil || got.AccountID != acc.ID || got.CSRF != "csrf" {
		t.Errorf("session: %+v %v", got, err)
	}
	if err := db.SetPortalFlash(ctx, a.ID, s.Hash, "sealed"); err != nil {
		t.Fatal(err)
	}
	if f, _ := db.TakePortalFlash(ctx, b.ID, s.Hash); f != "" {
		t.Errorf("b took a's flash %q", f)
	}
	if f, err := db.TakePortalFlash(ctx, a.ID, s.Hash); f != "sealed" || err != nil {
		t.Errorf("flash: %q %v", f, err)
	}
	if f, _ := db.TakePortalFlash(ctx, a.ID, s.Hash); f != "" {
		t.Errorf("the flash was taken twice: %q", f)
	}

	reset := &tenants.PortalToken{Hash: tenants.HashSecret("reset-a"), TenantID: a.ID, AccountID: acc.ID, Purpose: tenants.TokenReset, ExpiresAt: time.Now().Add(time.Hour)}
	if err := db.CreatePortalToken(ctx, reset); err != nil {
		t.Fatal(err)
	}
	if got, err := db.ResetPortalPassword(ctx, a.ID, reset.Hash, "$2a$10$new"); err != nil || got.PasswordHash != "$2a$10$new" {
		t.Fatalf("reset: %+v %v", got, err)
	}
	if _, err := db.FindPortalSession(ctx, a.ID, s.Hash); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("the session outlived a password reset: %v", err)
	}

	// Deleting the consumer leaves the account, acting as nobody.
	if err := db.DeleteConsumer(ctx, a.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.FindPortalAccount(ctx, a.ID, acc.ID); got.ConsumerID != "" {
		t.Errorf("after the consumer's deletion: %+v", got)
	}
}
