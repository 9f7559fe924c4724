package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// signUp makes a user with a tenant of its own; verified users have proven their address.
func signUp(t *testing.T, db *postgres.DB, email, slug string, verified bool) *tenants.User {
	t.Helper()
	ctx := context.Background()
	u := &tenants.User{Email: email, PasswordHash: "x"}
	if err := db.SignUp(ctx, u, &tenants.Tenant{Slug: slug}); err != nil {
		t.Fatalf("sign up %s: %v", email, err)
	}
	if verified {
		if _, err := db.Pool().Exec(ctx, `UPDATE users SET email_verified_at = now() WHERE id = $1`, u.ID); err != nil {
			t.Fatal(err)
		}
		u.EmailVerified = true
	}
	return u
}

func invite(t *testing.T, db *postgres.DB, tenantID, email, role string) (string, *tenants.Invite) {
	t.Helper()
	inv := &tenants.Invite{TenantID: tenantID, Email: email, Role: role, InvitedBy: "owner@example.com"}
	tok, err := db.Invite(context.Background(), inv)
	if err != nil {
		t.Fatalf("invite %s: %v", email, err)
	}
	return tok, inv
}

// TestInvitesAndOwners: members arrive only by accepting an invitation; the last owner can
// be neither demoted nor removed.
func TestInvitesAndOwners(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	owner := signUp(t, db, "owner@example.com", "acme", true)
	tn, err := db.FindTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "x@example.com", Role: "root"}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Errorf("invite with a bad role: %v", err)
	}
	if _, err := db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "not an address", Role: tenants.RoleViewer}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Errorf("invite of a non-address: %v", err)
	}
	if _, err := db.Invite(ctx, &tenants.Invite{TenantID: "00000000-0000-0000-0000-000000000000", Email: "x@example.com", Role: tenants.RoleViewer}); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("invite to no tenant: %v", err)
	}
	if _, err := db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "Owner@Example.com", Role: tenants.RoleViewer}); tenants.ErrorCode(err) != tenants.EConflict {
		t.Errorf("inviting a member: %v, want conflict", err)
	}

	tok, inv := invite(t, db, tn.ID, "New@Example.com", tenants.RoleDeveloper)
	if !strings.HasPrefix(tok, tenants.InvitePrefix) || inv.Email != "new@example.com" || inv.ExpiresAt.Sub(inv.CreatedAt) != tenants.InviteTTL {
		t.Fatalf("invite: token %q, %+v", tok, inv)
	}
	newbie := signUp(t, db, "new@example.com", "newbie", true)
	if _, err := db.FindMembership(ctx, tn.ID, newbie.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("signing up made a member without accepting: %v", err)
	}
	m, err := db.AcceptInvite(ctx, tok, newbie.ID)
	if err != nil || m.Role != tenants.RoleDeveloper || m.TenantSlug != "acme" || m.Email != "new@example.com" {
		t.Fatalf("accept: %+v, %v", m, err)
	}
	if invs, _ := db.ListInvites(ctx, tn.ID); len(invs) != 0 {
		t.Errorf("invite still pending after acceptance: %+v", invs)
	}

	// The last owner stays.
	if _, err := db.SetMemberRole(ctx, tn.ID, owner.ID, tenants.RoleViewer); tenants.ErrorCode(err) != tenants.EConflict {
		t.Errorf("demoting the last owner: %v", err)
	}
	if err := db.RemoveMember(ctx, tn.ID, owner.ID); tenants.ErrorCode(err) != tenants.EConflict {
		t.Errorf("removing the last owner: %v", err)
	}
	if _, err := db.SetMemberRole(ctx, tn.ID, newbie.ID, tenants.RoleOwner); err != nil {
		t.Fatal(err)
	}
	if m, err := db.SetMemberRole(ctx, tn.ID, owner.ID, tenants.RoleViewer); err != nil || m.Role != tenants.RoleViewer {
		t.Errorf("demoting one of two owners: %+v, %v", m, err)
	}
	if err := db.RemoveMember(ctx, tn.ID, owner.ID); err != nil {
		t.Errorf("removing a viewer: %v", err)
	}
	if err := db.RemoveMember(ctx, tn.ID, owner.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("removing again: %v", err)
	}
}

// TestInviteConsent: an invitation link is taken only by a verified user with the invited
// address, once, before it expires, is withdrawn or is replaced; a refusal leaves the
// invite pending; the inviter's answer is the same for an address with an account and one
// without.
func TestInviteConsent(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	signUp(t, db, "owner@example.com", "acme", true)
	tn, _ := db.FindTenant(ctx, "acme")
	known := signUp(t, db, "known@example.com", "known", true)
	unverified := signUp(t, db, "fresh@example.com", "fresh", false)
	stranger := signUp(t, db, "stranger@example.com", "stranger", true)

	// Known and unknown addresses: the same kind of answer.
	tokKnown, invKnown := invite(t, db, tn.ID, "known@example.com", tenants.RoleAdmin)
	tokUnknown, invUnknown := invite(t, db, tn.ID, "nobody@example.com", tenants.RoleAdmin)
	if tokKnown == "" || tokUnknown == "" || len(tokKnown) != len(tokUnknown) ||
		invKnown.ExpiresAt.Sub(invKnown.CreatedAt) != invUnknown.ExpiresAt.Sub(invUnknown.CreatedAt) {
		t.Errorf("answers differ: %q %+v / %q %+v", tokKnown, invKnown, tokUnknown, invUnknown)
	}

	// Another verified user, and an unverified one with the right address: refused, and
	// the invite stays.
	if _, err := db.AcceptInvite(ctx, tokKnown, stranger.ID); tenants.ErrorCode(err) != tenants.EForbidden {
		t.Errorf("another address accepts: %v", err)
	}
	if _, err := db.DeclineInvite(ctx, tokKnown, stranger.ID); tenants.ErrorCode(err) != tenants.EForbidden {
		t.Errorf("another address declines: %v", err)
	}
	tokFresh, _ := invite(t, db, tn.ID, "fresh@example.com", tenants.RoleOwner)
	if _, err := db.AcceptInvite(ctx, tokFresh, unverified.ID); tenants.ErrorCode(err) != tenants.EForbidden || !strings.Contains(tenants.ErrorMessage(err), "verify") {
		t.Errorf("unverified address accepts: %v", err)
	}
	if _, err := db.FindMembership(ctx, tn.ID, unverified.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("the unverified user is a member: %v", err)
	}
	if o, err := db.FindInvite(ctx, tokKnown); err != nil || o.Email != "known@example.com" || o.TenantSlug != "acme" || o.Role != tenants.RoleAdmin {
		t.Errorf("the invite after refusals: %+v, %v", o, err)
	}

	// Re-inviting replaces the token and the role: the old link is dead.
	tokKnown2, _ := invite(t, db, tn.ID, "known@example.com", tenants.RoleViewer)
	if _, err := db.AcceptInvite(ctx, tokKnown, known.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("the replaced link: %v", err)
	}
	m, err := db.AcceptInvite(ctx, tokKnown2, known.ID)
	if err != nil || m.Role != tenants.RoleViewer {
		t.Fatalf("accept the new link: %+v, %v", m, err)
	}
	// Once.
	if _, err := db.AcceptInvite(ctx, tokKnown2, known.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("second acceptance: %v", err)
	}
	if _, err := db.FindInvite(ctx, tokKnown2); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("find a used link: %v", err)
	}

	// Withdrawn.
	tokW, _ := invite(t, db, tn.ID, "stranger@example.com", tenants.RoleViewer)
	if err := db.DeleteInvite(ctx, tn.ID, "stranger@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteInvite(ctx, tn.ID, "stranger@example.com"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("withdrawing again: %v", err)
	}
	if _, err := db.AcceptInvite(ctx, tokW, stranger.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("a withdrawn link: %v", err)
	}

	// Expired: refused, still listed (so the inviter sees it lapsed).
	tokE, _ := invite(t, db, tn.ID, "stranger@example.com", tenants.RoleViewer)
	if _, err := db.Pool().Exec(ctx, `UPDATE invites SET expires_at = now() - interval '1 second' WHERE email = 'stranger@example.com'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcceptInvite(ctx, tokE, stranger.ID); tenants.ErrorCode(err) != tenants.ENotFound || !strings.Contains(tenants.ErrorMessage(err), "expired") {
		t.Errorf("an expired link: %v", err)
	}
	if o, err := db.FindInvite(ctx, tokE); err != nil || !o.Expired(time.Now()) {
		t.Errorf("find an expired link: %+v, %v", o, err)
	}

	// Declined: consumed without a membership.
	tokD, _ := invite(t, db, tn.ID, "stranger@example.com", tenants.RoleViewer)
	if o, err := db.DeclineInvite(ctx, tokD, stranger.ID); err != nil || o.Email != "stranger@example.com" {
		t.Fatalf("decline: %+v, %v", o, err)
	}
	if _, err := db.AcceptInvite(ctx, tokD, stranger.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("accept after declining: %v", err)
	}
	if _, err := db.FindMembership(ctx, tn.ID, stranger.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("declining made a member: %v", err)
	}

	// Garbage tokens name nothing.
	for _, tok := range []string{"", "tgi_", "tgi_" + strings.Repeat("x", 32), strings.Repeat("tgi_", 100), "tgt_abc", "' OR 1=1 --"} {
		if _, err := db.AcceptInvite(ctx, tok, stranger.ID); tenants.ErrorCode(err) != tenants.ENotFound {
			t.Errorf("accept %q: %v", tok, err)
		}
		if _, err := db.FindInvite(ctx, tok); tenants.ErrorCode(err) != tenants.ENotFound {
			t.Errorf("find %q: %v", tok, err)
		}
	}

	// Tokens are stored only hashed.
	var n int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM invites WHERE token_hash = $1 OR token_hash = $2`, tokUnknown, tenants.HashSecret(tokUnknown)).Scan(&n); err != nil || n != 1 {
		t.Errorf("stored token: %d rows, %v", n, err)
	}
	var plain int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM invites WHERE token_hash LIKE 'tgi_%'`).Scan(&plain); err != nil || plain != 0 {
		t.Errorf("%d plaintext tokens stored, %v", plain, err)
	}
}

// TestInviteAcceptRace: many concurrent accepts of one link make one membership.
func TestInviteAcceptRace(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	signUp(t, db, "owner@example.com", "acme", true)
	tn, _ := db.FindTenant(ctx, "acme")
	u := signUp(t, db, "racer@example.com", "racer", true)
	for round := range 5 {
		tok, _ := invite(t, db, tn.ID, "racer@example.com", tenants.RoleDeveloper)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, gone := 0, 0
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := db.AcceptInvite(ctx, tok, u.ID)
				mu.Lock()
				defer mu.Unlock()
				switch tenants.ErrorCode(err) {
				case "":
					wins++
				case tenants.ENotFound:
					gone++
				default:
					t.Errorf("round %d: %v", round, err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || gone != 7 {
			t.Fatalf("round %d: %d acceptances and %d refusals, want 1 and 7", round, wins, gone)
		}
		var n int
		if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM memberships WHERE tenant_id = $1 AND user_id = $2`, tn.ID, u.ID).Scan(&n); err != nil || n != 1 {
			t.Fatalf("round %d: %d memberships, %v", round, n, err)
		}
		if err := db.RemoveMember(ctx, tn.ID, u.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInvitePendingLimit: a tenant cannot keep more than MaxPendingInvites unexpired
// invitations; re-inviting a pending address does not count twice, and expired ones
// free their place.
func TestInvitePendingLimit(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	signUp(t, db, "owner@example.com", "acme", true)
	tn, _ := db.FindTenant(ctx, "acme")
	for i := range postgres.MaxPendingInvites {
		invite(t, db, tn.ID, fmt.Sprintf("guest%d@example.com", i), tenants.RoleViewer)
	}
	if _, err := db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "one-more@example.com", Role: tenants.RoleViewer}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("invite over the limit: %v", err)
	}
	invite(t, db, tn.ID, "guest0@example.com", tenants.RoleAdmin) // a replacement, not a new one
	if _, err := db.Pool().Exec(ctx, `UPDATE invites SET expires_at = now() - interval '1 hour' WHERE email = 'guest1@example.com'`); err != nil {
		t.Fatal(err)
	}
	invite(t, db, tn.ID, "one-more@example.com", tenants.RoleViewer)
}

// TestInviteMailThrottle: a tenant mails one address at most InviteMailsPerAddress times
// an hour; other addresses and other tenants are not held back by it.
func TestInviteMailThrottle(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	signUp(t, db, "owner@example.com", "acme", true)
	signUp(t, db, "rival@example.com", "rival", true)
	acme, _ := db.FindTenant(ctx, "acme")
	rival, _ := db.FindTenant(ctx, "rival")
	for range postgres.InviteMailsPerAddress.Limit {
		invite(t, db, acme.ID, "target@example.com", tenants.RoleViewer)
	}
	_, err := db.Invite(ctx, &tenants.Invite{TenantID: acme.ID, Email: "Target@Example.com", Role: tenants.RoleViewer})
	if tenants.ErrorCode(err) != tenants.ERateLimited || !strings.Contains(tenants.ErrorMessage(err), "this address") {
		t.Fatalf("one invitation too many: %v", err)
	}
	invite(t, db, acme.ID, "someone-else@example.com", tenants.RoleViewer)
	invite(t, db, rival.ID, "target@example.com", tenants.RoleViewer)
}

// TestCreateOwnedTenant: a signed-in user's further tenant has them as its owner, its
// creation in its audit log; a taken slug names the field, and nothing is half-written.
func TestCreateOwnedTenant(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	u := signUp(t, db, "owner@example.com", "acme", true)
	second := &tenants.Tenant{Slug: "acme-labs", Name: "Acme Labs"}
	if err := db.CreateOwnedTenant(tenants.WithAudit(ctx, tenants.Audit{Actor: u.Email, Action: "tenant.create"}), u.ID, second); err != nil {
		t.Fatal(err)
	}
	if second.ID == "" || second.PlatformPlan != "free" || second.Version != 1 {
		t.Errorf("created %+v", second)
	}
	m, err := db.FindMembership(ctx, second.ID, u.ID)
	if err != nil || m.Role != tenants.RoleOwner {
		t.Fatalf("membership %+v %v", m, err)
	}
	ms, err := db.ListMemberships(ctx, u.ID)
	if err != nil || len(ms) != 2 {
		t.Fatalf("memberships %d %v", len(ms), err)
	}
	entries, _, err := db.ListAudit(ctx, second.ID, tenants.AuditQuery{Page: tenants.Page{Limit: 10}})
	if err != nil || len(entries) != 1 || entries[0].Action != "tenant.create" || entries[0].Object != second.ID || entries[0].Actor != u.Email {
		t.Fatalf("audit %+v %v", entries, err)
	}

	err = db.CreateOwnedTenant(ctx, u.ID, &tenants.Tenant{Slug: "acme"})
	if te, ok := err.(*tenants.Error); !ok || te.Code != tenants.EConflict || te.Field != "slug" {
		t.Errorf("taken slug: %v", err)
	}
	if err := db.CreateOwnedTenant(ctx, u.ID, &tenants.Tenant{Slug: "Bad Slug"}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Errorf("bad slug: %v", err)
	}
	if err := db.CreateOwnedTenant(ctx, "0190a8f0-0000-7000-8000-000000000001", &tenants.Tenant{Slug: "nobody-s"}); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("unknown user: %v", err)
	}
	if _, err := db.FindTenant(ctx, "nobody-s"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("the unknown user's tenant was written: %v", err)
	}
}
