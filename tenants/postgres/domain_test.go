package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"tollgate/infra/testcert"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

var (
	proofFound   = tenants.Proof{Outcome: tenants.ProofFound}
	proofMissing = tenants.Proof{Outcome: tenants.ProofMissing, Reason: "no TXT record"}
	checks       = tenants.DomainSchedule{PendingMin: time.Second, Recheck: time.Hour, Failures: 3}
)

func mustDomain(t *testing.T, db *postgres.DB, ca *testcert.CA, tenantID, host string) *tenants.Domain {
	t.Helper()
	leaf := ca.Issue(t, []string{host}, time.Time{}, time.Time{})
	d := &tenants.Domain{TenantID: tenantID, Hostname: host, CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM}
	if err := db.CreateDomain(context.Background(), d); err != nil {
		t.Fatalf("create domain %s: %v", host, err)
	}
	return d
}

// TestDomainProofStore: a claim's status changes publish its entry (with the status, not
// the token) and bump its version; checks that change nothing publish nothing; a check
// made with a replaced token records nothing; two tenants' proofs of one name racing
// leave exactly one verified, whatever the interleaving (the partial unique index).
func TestDomainProofStore(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	ca := testcert.NewCA(t)
	a, b := mustTenant(t, db, "a"), mustTenant(t, db, "b")

	d := mustDomain(t, db, ca, a.ID, "api.a.example")
	if d.Status != tenants.DomainPending || len(d.Verification.Value) != 32 || d.NextCheckAt == nil {
		t.Fatalf("created: %+v", d)
	}
	before := maxOutboxID(t, conn)
	now := time.Now()
	got, err := db.RecordProof(ctx, a.ID, d.ID, d.Verification.Value, proofMissing, now, checks, false)
	if err != nil || got.Status != tenants.DomainPending || got.Version != 1 || got.LastError != "no TXT record" {
		t.Fatalf("a miss: %+v %v", got, err)
	}
	if rows := outboxAfter(t, conn, before); len(rows) != 0 {
		t.Errorf("a check that changed no status published %v", rows)
	}
	got, err = db.RecordProof(ctx, a.ID, d.ID, d.Verification.Value, proofFound, now, checks, false)
	if err != nil || !got.Verified() || got.Version != 2 || got.VerifiedAt == nil || got.LastError != "" {
		t.Fatalf("found: %+v %v", got, err)
	}
	rows := outboxAfter(t, conn, before)
	if len(rows) != 1 {
		t.Fatalf("verification published %d entries, want 1: %v", len(rows), rows)
	}
	if e := decode(t, rows[0]); e.Domain == nil || !e.Domain.Verified() || e.Domain.Verification != nil || e.Domain.PrivateKeyPEM == "" {
		t.Errorf("published entry: %s", rows[0].Value)
	}
	// A check made with another token (the claim was replaced meanwhile) records nothing.
	stale, err := db.RecordProof(ctx, a.ID, d.ID, "ffffffffffffffffffffffffffffffff", proofMissing, now, checks, false)
	if err != nil || !stale.Verified() || stale.Failures != 0 {
		t.Errorf("stale check: %+v %v", stale, err)
	}

	// Two tenants' claims of one name, both proven at once: one wins, the other is told.
	host := "race.example"
	for i := range 10 {
		x := mustDomain(t, db, ca, a.ID, host)
		y := mustDomain(t, db, ca, b.ID, host)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, dd := range []*tenants.Domain{x, y} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = db.RecordProof(ctx, dd.TenantID, dd.ID, dd.Verification.Value, proofFound, time.Now(), checks, true)
			}()
		}
		wg.Wait()
		verified := 0
		for j, dd := range []*tenants.Domain{x, y} {
			cur, err := db.FindDomain(ctx, dd.TenantID, dd.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.Verified() {
				verified++
				if errs[j] != nil {
					t.Errorf("round %d: the verified claim's proof answered %v", i, errs[j])
				}
			} else {
				wantCode(t, errs[j], tenants.EConflict)
			}
		}
		if verified != 1 {
			t.Fatalf("round %d: %d claims of %s verified, want 1", i, verified, host)
		}
		for _, dd := range []*tenants.Domain{x, y} {
			if err := db.DeleteDomain(ctx, dd.TenantID, dd.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDueDomains: a due domain is leased to one caller at a time, and due again when its
// lease ends without a check recorded; a verified domain is due again after Recheck.
func TestDueDomains(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	ca := testcert.NewCA(t)
	a := mustTenant(t, db, "a")
	soon := time.Now()
	var ids []string
	for _, h := range []string{"one.example", "two.example", "three.example"} {
		d := mustDomain(t, db, ca, a.ID, h)
		ids = append(ids, d.ID)
	}
	now := soon.Add(time.Second) // every claim (next check: now()) is due
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			due, err := db.DueDomains(ctx, now, time.Minute, 2)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, d := range due {
				seen[d.ID]++
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("domain %s leased %d times, want once: %v", id, seen[id], seen)
		}
	}
	if due, _ := db.DueDomains(ctx, now, time.Minute, 10); len(due) != 0 {
		t.Errorf("%d domains due while leased", len(due))
	}
	// The lease ran out without a check: due again.
	if due, _ := db.DueDomains(ctx, now.Add(2*time.Minute), time.Minute, 10); len(due) != 3 {
		t.Errorf("%d domains due after their lease ended, want 3", len(due))
	}
	// Verified: due again after Recheck, not before.
	d, err := db.FindDomain(ctx, a.ID, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	at := now.Add(3 * time.Minute)
	if _, err := db.RecordProof(ctx, a.ID, d.ID, d.Verification.Value, proofFound, at, checks, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   time.Time
		want bool
	}{{at.Add(59 * time.Minute), false}, {at.Add(61 * time.Minute), true}} {
		due, err := db.DueDomains(ctx, c.at, time.Second, 10)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range due {
			found = found || x.ID == d.ID
		}
		if found != c.want {
			t.Errorf("verified domain due at +%v: %v, want %v", c.at.Sub(at), found, c.want)
		}
	}
}
