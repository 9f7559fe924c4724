package postgres_test

import (
	"context"
	"testing"
	"time"
	"tollgate/infra/testenv"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// readmeNumbers is what pattern captures in the README and docs/, stated once.
func readmeNumbers(t *testing.T, pattern string) []int {
	t.Helper()
	return testenv.DocNumbers(t, pattern)
}

// The invitation caps, stated twice in the README (the trust model, then the console):
// per (tenant, address) an hour, per tenant an hour, pending per tenant.
func readmeInviteCaps(t *testing.T) (perAddress, perTenant, pending int) {
	t.Helper()
	a := readmeNumbers(t, `Invitation mail is limited to (\d+) an hour per \(tenant, address\) and (\d+) an hour per tenant, and (\d+) pending invitations per tenant`)
	b := readmeNumbers(t, `A tenant keeps at most (\d+) unexpired invitations \(expired ones stay listed for \d+ days\) and mails at most (\d+) invitations to one address and (\d+) in all per hour`)
	if a[0] != b[1] || a[1] != b[2] || a[2] != b[0] {
		t.Fatalf("the README disagrees with itself on the invitation caps: %v against %v", a, b)
	}
	return a[0], a[1], a[2]
}

func TestREADMEInviteMailsPerAddress(t *testing.T) {
	n, _, _ := readmeInviteCaps(t)
	if want := (tenants.ThrottleRule{Limit: n, Window: time.Hour}); postgres.InviteMailsPerAddress != want {
		t.Errorf("invitation mail per (tenant, address) is %+v; the README states %+v", postgres.InviteMailsPerAddress, want)
	}
}

func TestREADMEInviteMailsPerTenant(t *testing.T) {
	_, n, _ := readmeInviteCaps(t)
	if want := (tenants.ThrottleRule{Limit: n, Window: time.Hour}); postgres.InviteMailsPerTenant != want {
		t.Errorf("invitation mail per tenant is %+v; the README states %+v", postgres.InviteMailsPerTenant, want)
	}
}

func TestREADMEPendingInvites(t *testing.T) {
	_, _, n := readmeInviteCaps(t)
	if postgres.MaxPendingInvites != n {
		t.Errorf("a tenant keeps %d pending invitations; the README states %d", postgres.MaxPendingInvites, n)
	}
}

// TestREADMEInvitationExpiry: the store gives an invitation the README's lifetime, to the
// second, as Postgres computes it.
func TestREADMEInvitationExpiry(t *testing.T) {
	days := readmeNumbers(t, `works once and for (\d+) days`)[0]
	db, _ := openDB(t)
	signUp(t, db, "owner@example.com", "acme", true)
	tn, err := db.FindTenant(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	_, inv := invite(t, db, tn.ID, "guest@example.com", tenants.RoleViewer)
	if got, want := inv.ExpiresAt.Sub(inv.CreatedAt), time.Duration(days)*24*time.Hour; got != want {
		t.Errorf("an invitation expires %s after it was made; the README states %s", got, want)
	}
}
