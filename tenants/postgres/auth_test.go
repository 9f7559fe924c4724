package postgres_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"tollgate/tenants"
)

func ecJWK(t *testing.T, kid string) tenants.JWK {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.PublicKey.Bytes() // uncompressed: 0x04 || x || y
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return tenants.JWK{Kty: "EC", Crv: "P-256", Kid: kid, X: enc(b[1:33]), Y: enc(b[33:])}
}

func newIssuer(t *testing.T, tenantID, iss string) *tenants.Issuer {
	return &tenants.Issuer{TenantID: tenantID, Issuer: iss, Audiences: []string{"api"},
		Algorithms: []string{"ES256"}, Keys: []tenants.JWK{ecJWK(t, "k1")}}
}

const hsSecret = "0123456789abcdef0123456789abcdef-secret"

func TestJWTIssuerCRUD(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	other := mustTenant(t, db, "other")

	before := maxOutboxID(t, conn)
	is := newIssuer(t, tn.ID, "https://idp.example")
	if err := db.CreateJWTIssuer(ctx, is); err != nil {
		t.Fatal(err)
	}
	if is.ID == "" || is.Version != 1 || is.ConsumerClaim != "sub" || is.RolesClaim != "roles" || is.LeewaySeconds == nil || *is.LeewaySeconds != 30 {
		t.Fatalf("created %+v", is)
	}
	rows := outboxAfter(t, conn, before)
	if len(rows) != 1 || rows[0].Key != tn.ID+".jwt-issuer."+is.ID {
		t.Fatalf("outbox %v", rows)
	}
	if e := decode(t, rows[0]); e.JWTIssuer == nil || e.JWTIssuer.Issuer != "https://idp.example" || len(e.JWTIssuer.Keys) != 1 {
		t.Fatalf("entry %+v", e)
	}

	// "issuer" is unique per tenant, not across tenants.
	err := db.CreateJWTIssuer(ctx, newIssuer(t, tn.ID, "https://idp.example"))
	wantCode(t, err, tenants.EConflict)
	if err := db.CreateJWTIssuer(ctx, newIssuer(t, other.ID, "https://idp.example")); err != nil {
		t.Fatal(err)
	}
	// Validation, and the upstream policy on the key set host.
	bad := newIssuer(t, tn.ID, "https://b.example")
	bad.Audiences = nil
	wantCode(t, db.CreateJWTIssuer(ctx, bad), tenants.EValidation)
	for _, u := range []string{"https://10.1.2.3/jwks", "https://169.254.169.254/latest", "http://idp.example/jwks"} {
		is := &tenants.Issuer{TenantID: tn.ID, Issuer: "https://c.example", Audiences: []string{"api"}, JWKSURL: u}
		err := db.CreateJWTIssuer(ctx, is)
		wantCode(t, err, tenants.EValidation)
		if e := err.(*tenants.Error); e.Field != "jwks_url" {
			t.Fatalf("%s: %v", u, err)
		}
	}
	ok := &tenants.Issuer{TenantID: tn.ID, Issuer: "https://c.example", Audiences: []string{"api"}, JWKSURL: "https://127.0.0.1:8443/jwks?x=1"}
	if err := db.CreateJWTIssuer(ctx, ok); err != nil {
		t.Fatalf("loopback allowed by the test policy: %v", err)
	}
	// Unknown tenant, malformed ids.
	wantCode(t, db.CreateJWTIssuer(ctx, newIssuer(t, "00000000-0000-7000-8000-000000000000", "x")), tenants.ENotFound)
	_, err = db.FindJWTIssuer(ctx, tn.ID, "nope")
	wantCode(t, err, tenants.ENotFound)

	// HS256: the store keeps the secret, and an update naming no key source keeps it.
	hs := &tenants.Issuer{TenantID: tn.ID, Issuer: "hs", Audiences: []string{"api"}, HS256Secret: hsSecret}
	if err := db.CreateJWTIssuer(ctx, hs); err != nil {
		t.Fatal(err)
	}
	got, err := db.FindJWTIssuer(ctx, tn.ID, hs.ID)
	if err != nil || got.HS256Secret != hsSecret || fmt.Sprint(got.Algorithms) != "[HS256]" {
		t.Fatalf("find: %+v %v", got, err)
	}
	upd := &tenants.Issuer{ID: hs.ID, TenantID: tn.ID, Issuer: "hs", Audiences: []string{"api", "api2"}, Version: 1}
	before = maxOutboxID(t, conn)
	if err := db.UpdateJWTIssuer(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if upd.Version != 2 || upd.HS256Secret != hsSecret || len(upd.Audiences) != 2 {
		t.Fatalf("updated %+v", upd)
	}
	rows = outboxAfter(t, conn, before)
	if len(rows) != 1 || decode(t, rows[0]).JWTIssuer.HS256Secret != hsSecret {
		t.Fatalf("outbox %v", rows)
	}
	upd.Version = 1
	wantCode(t, db.UpdateJWTIssuer(ctx, upd), tenants.EVersionConflict)
	// Renaming onto a taken issuer.
	ren := newIssuer(t, tn.ID, "https://idp.example")
	ren.ID, ren.Version = hs.ID, 2
	wantCode(t, db.UpdateJWTIssuer(ctx, ren), tenants.EConflict)
	// Another tenant's issuer is not found, for every method.
	_, err = db.FindJWTIssuer(ctx, other.ID, hs.ID)
	wantCode(t, err, tenants.ENotFound)
	cross := newIssuer(t, other.ID, "z")
	cross.ID, cross.Version = hs.ID, 2
	wantCode(t, db.UpdateJWTIssuer(ctx, cross), tenants.ENotFound)
	wantCode(t, db.DeleteJWTIssuer(ctx, other.ID, hs.ID), tenants.ENotFound)

	list, next, err := db.ListJWTIssuers(ctx, tn.ID, tenants.Page{Limit: 2})
	if err != nil || len(list) != 2 || next == "" {
		t.Fatalf("list: %d %q %v", len(list), next, err)
	}
	rest, next, err := db.ListJWTIssuers(ctx, tn.ID, tenants.Page{Limit: 2, Cursor: next})
	if err != nil || len(rest) != 1 || next != "" || rest[0].ID != hs.ID {
		t.Fatalf("list page 2: %v %q %v", rest, next, err)
	}

	before = maxOutboxID(t, conn)
	if err := db.DeleteJWTIssuer(ctx, tn.ID, strings.ToUpper(hs.ID)); err != nil {
		t.Fatal(err)
	}
	rows = outboxAfter(t, conn, before)
	if len(rows) != 1 || rows[0].Key != tn.ID+".jwt-issuer."+hs.ID || rows[0].Value != nil {
		t.Fatalf("outbox %v", rows)
	}
	wantCode(t, db.DeleteJWTIssuer(ctx, tn.ID, hs.ID), tenants.ENotFound)
}

func TestJWTIssuerLimit(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	tn := mustTenant(t, db, "acme")
	key := ecJWK(t, "k")
	for i := 0; i < tn.Limits.Resources.JWTIssuers; i++ {
		is := &tenants.Issuer{TenantID: tn.ID, Issuer: fmt.Sprintf("iss-%d", i), Audiences: []string{"a"}, Algorithms: []string{"ES256"}, Keys: []tenants.JWK{key}}
		if err := db.CreateJWTIssuer(ctx, is); err != nil {
			t.Fatal(err)
		}
	}
	is := &tenants.Issuer{TenantID: tn.ID, Issuer: "one-more", Audiences: []string{"a"}, Algorithms: []string{"ES256"}, Keys: []tenants.JWK{key}}
	wantCode(t, db.CreateJWTIssuer(ctx, is), tenants.EValidation)
}

func TestAccessRulesPut(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	other := mustTenant(t, db, "other")

	_, err := db.FindAccessRules(ctx, tn.ID)
	wantCode(t, err, tenants.ENotFound)

	before := maxOutboxID(t, conn)
	p := &tenants.AccessRules{TenantID: tn.ID, Rules: [][]string{{"reader", "/orders/:id", "GET"}}}
	if err := db.PutAccessRules(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Version != 1 || p.Roles == nil || len(p.Rules) != 1 {
		t.Fatalf("put %+v", p)
	}
	rows := outboxAfter(t, conn, before)
	if len(rows) != 1 || rows[0].Key != tn.ID+".policy" {
		t.Fatalf("outbox %v", rows)
	}
	if e := decode(t, rows[0]); e.AccessRules == nil || e.AccessRules.Rules[0][1] != "/orders/:id" {
		t.Fatalf("entry %+v", e)
	}
	// Unconditional replace; then conditional.
	p2 := &tenants.AccessRules{TenantID: tn.ID, Rules: [][]string{{"*", "/*", "GET"}}, Roles: [][]string{{"alice", "reader"}}}
	if err := db.PutAccessRules(ctx, p2); err != nil || p2.Version != 2 {
		t.Fatalf("replace: %+v %v", p2, err)
	}
	p3 := &tenants.AccessRules{TenantID: tn.ID, Version: 2}
	if err := db.PutAccessRules(ctx, p3); err != nil || p3.Version != 3 || len(p3.Rules) != 0 {
		t.Fatalf("conditional: %+v %v", p3, err)
	}
	stale := &tenants.AccessRules{TenantID: tn.ID, Version: 2}
	wantCode(t, db.PutAccessRules(ctx, stale), tenants.EVersionConflict)
	// The other tenant has none, and a conditional put finds nothing to replace.
	_, err = db.FindAccessRules(ctx, other.ID)
	wantCode(t, err, tenants.ENotFound)
	wantCode(t, db.PutAccessRules(ctx, &tenants.AccessRules{TenantID: other.ID, Version: 1}), tenants.ENotFound)
	wantCode(t, db.PutAccessRules(ctx, &tenants.AccessRules{TenantID: "00000000-0000-7000-8000-000000000000"}), tenants.ENotFound)
	got, err := db.FindAccessRules(ctx, tn.ID)
	if err != nil || got.Version != 3 || got.TenantID != tn.ID {
		t.Fatalf("find: %+v %v", got, err)
	}
}

// Deleting a tenant deletes its issuers' and policy's entries too; a resync includes them.
func TestAuthEntriesDeleteAndResync(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	tn := mustTenant(t, db, "acme")
	keep := mustTenant(t, db, "keep")
	var keepKeys []string
	for _, id := range []string{tn.ID, keep.ID} {
		is := newIssuer(t, id, "https://idp.example")
		if err := db.CreateJWTIssuer(ctx, is); err != nil {
			t.Fatal(err)
		}
		if err := db.PutAccessRules(ctx, &tenants.AccessRules{TenantID: id, Rules: [][]string{{"*", "/*", "*"}}}); err != nil {
			t.Fatal(err)
		}
		if id == keep.ID {
			keepKeys = []string{tenants.ObjectKey(id, tenants.KindJWTIssuer, is.ID), tenants.AccessRulesKey(id)}
		}
	}
	issuers, _, _ := db.ListJWTIssuers(ctx, tn.ID, tenants.Page{})

	before := maxOutboxID(t, conn)
	if err := db.DeleteTenant(ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	for _, r := range outboxAfter(t, conn, before) {
		if r.Value != nil {
			t.Fatalf("a put in a tenant delete: %v", r)
		}
		deleted[r.Key] = true
	}
	for _, k := range []string{tenants.TenantKey(tn.ID), tenants.ObjectKey(tn.ID, tenants.KindJWTIssuer, issuers[0].ID), tenants.AccessRulesKey(tn.ID)} {
		if !deleted[k] {
			t.Errorf("no delete of %s in %v", k, deleted)
		}
	}

	seen := map[string]*tenants.Entry{}
	if _, err := db.Entries(ctx, func(c tenants.Change) error {
		_, e, err := tenants.DecodeEntry(c.Key, c.Value)
		if err != nil {
			return err
		}
		seen[c.Key] = e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range keepKeys {
		if seen[k] == nil {
			t.Errorf("resync lacks %s: %v", k, seen)
		}
	}
	if e := seen[keepKeys[0]]; e != nil && (e.JWTIssuer.Issuer != "https://idp.example" || len(e.JWTIssuer.Keys) != 1) {
		t.Errorf("resynced issuer %+v", e.JWTIssuer)
	}
	for k := range seen {
		if strings.HasPrefix(k, tn.ID) {
			t.Errorf("resync has deleted tenant's %s", k)
		}
	}
}
