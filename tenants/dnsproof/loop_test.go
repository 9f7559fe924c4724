package dnsproof_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tollgate/infra/testcert"
	"tollgate/infra/testdns"
	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
	"tollgate/tenants/postgres/pgtest"
)

// countingChecker counts the checks of each host name.
type countingChecker struct {
	next tenants.ProofChecker
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingChecker) CheckProof(ctx context.Context, host, token string) tenants.Proof {
	c.mu.Lock()
	c.n[host]++
	c.mu.Unlock()
	return c.next.CheckProof(ctx, host, token)
}

// TestLoopReplicas: three api replicas' loops on one database split the due domains
// between them: every domain is checked once (no lock, no double work), those with their
// record published end verified, the others pending with the reason.
func TestLoopReplicas(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	ctx := context.Background()
	tn := &tenants.Tenant{Slug: "acme", PlatformPlan: tenants.PlatformUnlimited}
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	srv := testdns.Start(t)
	ca := testcert.NewCA(t)
	const n = 30
	var domains []*tenants.Domain
	for i := range n {
		host := fmt.Sprintf("d%d.acme.example", i)
		leaf := ca.Issue(t, []string{host}, time.Time{}, time.Time{})
		d := &tenants.Domain{TenantID: tn.ID, Hostname: host, CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM}
		if err := db.CreateDomain(ctx, d); err != nil { // first check due at once
			t.Fatal(err)
		}
		if i%2 == 0 {
			srv.SetTXT(d.Verification.RecordName, d.Verification.Value)
		}
		domains = append(domains, d)
	}
	// Once checked, a domain is not due again for an hour: any second check is a replica
	// doing another's work.
	sched := tenants.DomainSchedule{PendingMin: time.Hour, Recheck: time.Hour}
	cc := &countingChecker{next: dnsproof.New(srv.Addr()), n: map[string]int{}}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := &dnsproof.Loop{Store: db, Checker: cc, Schedule: sched, Every: 10 * time.Millisecond, Batch: 4, Parallel: 2}
			_ = l.Run(runCtx)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cc.mu.Lock()
		done := len(cc.n)
		cc.mu.Unlock()
		if done == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // time for a double check to show
	cancel()
	wg.Wait()
	for i, d := range domains {
		if got := cc.n[d.Hostname]; got != 1 {
			t.Errorf("%s checked %d times, want once", d.Hostname, got)
		}
		cur, err := db.FindDomain(ctx, tn.ID, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := i%2 == 0; cur.Verified() != want || cur.CheckedAt == nil || !want && cur.LastError == "" {
			t.Errorf("%s: status %s, last_error %q, checked_at %v", d.Hostname, cur.Status, cur.LastError, cur.CheckedAt)
		}
	}
}
