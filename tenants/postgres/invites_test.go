package postgres_test

import (
	"context"
	"testing"

	"tollgate/tenants"
)

// TestInvitesAndOwners: an invite of an email without an account waits and becomes a
// membership at sign-up; an invite of a signed-up user is a membership at once; the last
// owner can be neither demoted nor removed.
func TestInvitesAndOwners(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	owner := &tenants.User{Email: "owner@example.com", PasswordHash: "x"}
	tn := &tenants.Tenant{Slug: "acme"}
	if err := db.SignUp(ctx, owner, tn); err != nil {
		t.Fatal(err)
	}

	m, err := db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "New@Example.com", Role: tenants.RoleDeveloper, InvitedBy: owner.Email})
	if err != nil || m != nil {
		t.Fatalf("invite of a new email: %v, %v (want pending)", m, err)
	}
	if _, err := db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "x@example.com", Role: "root"}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Errorf("invite with a bad role: %v", err)
	}
	invs, err := db.ListInvites(ctx, tn.ID)
	if err != nil || len(invs) != 1 || invs[0].Email != "new@example.com" || invs[0].Role != tenants.RoleDeveloper || invs[0].InvitedBy != owner.Email {
		t.Fatalf("invites: %+v, %v", invs, err)
	}

	newbie := &tenants.User{Email: "new@example.com", PasswordHash: "x"}
	if err := db.SignUp(ctx, newbie, &tenants.Tenant{Slug: "newbie"}); err != nil {
		t.Fatal(err)
	}
	got, err := db.FindMembership(ctx, tn.ID, newbie.ID)
	if err != nil || got.Role != tenants.RoleDeveloper {
		t.Fatalf("membership after sign-up: %+v, %v", got, err)
	}
	if invs, _ := db.ListInvites(ctx, tn.ID); len(invs) != 0 {
		t.Errorf("invite still pending after sign-up: %+v", invs)
	}

	// A signed-up user is added at once.
	m, err = db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "owner@example.com", Role: tenants.RoleOwner})
	if err != nil || m == nil || m.Role != tenants.RoleOwner {
		t.Fatalf("invite of a user: %+v, %v", m, err)
	}

	// The last owner stays.
	if _, err := db.SetMemberRole(ctx, tn.ID, owner.ID, tenants.RoleViewer); tenants.ErrorCode(err) != tenants.EConflict {
		t.Errorf("demoting the last owner: %v", err)
	}
	if err := db.RemoveMember(ctx, tn.ID, owner.ID); tenants.ErrorCode(err) != tenants.EConflict {
		t.Errorf("removing the last owner: %v", err)
	}
	if err := db.AddMember(ctx, &tenants.Membership{TenantID: tn.ID, Email: owner.Email, Role: tenants.RoleAdmin}); tenants.ErrorCode(err) != tenants.EConflict {
		t.Errorf("AddMember demoting the last owner: %v", err)
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

	// Withdrawing an invite.
	if _, err := db.Invite(ctx, &tenants.Invite{TenantID: tn.ID, Email: "later@example.com", Role: tenants.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteInvite(ctx, tn.ID, "later@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteInvite(ctx, tn.ID, "later@example.com"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("withdrawing again: %v", err)
	}
}
