package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// checkCounts compares every tenant's kept counts with its rows.
func checkCounts(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		WITH kept AS (SELECT tenant_id, sum(routes) r, sum(consumers) c, sum(plans) p, sum(jwt_issuers) j,
				sum(domains) d, sum(functions) f FROM tenant_counts GROUP BY tenant_id)
		SELECT t.slug, coalesce(k.r, 0), (SELECT count(*) FROM routes x WHERE x.tenant_id = t.id),
			coalesce(k.c, 0), (SELECT count(*) FROM consumers x WHERE x.tenant_id = t.id),
			coalesce(k.p, 0), (SELECT count(*) FROM plans x WHERE x.tenant_id = t.id),
			coalesce(k.j, 0), (SELECT count(*) FROM jwt_issuers x WHERE x.tenant_id = t.id),
			coalesce(k.d, 0), (SELECT count(*) FROM domains x WHERE x.tenant_id = t.id),
			coalesce(k.f, 0), (SELECT count(*) FROM functions x WHERE x.tenant_id = t.id)
		FROM tenants t LEFT JOIN kept k ON k.tenant_id = t.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var slug string
		var n [12]int64
		if err := rows.Scan(&slug, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &n[7], &n[8], &n[9], &n[10], &n[11]); err != nil {
			t.Fatal(err)
		}
		for i, what := range []string{"routes", "consumers", "plans", "jwt issuers", "domains", "functions"} {
			if n[2*i] != n[2*i+1] {
				t.Errorf("tenant %s: %d %s kept, %d stored", slug, n[2*i], what, n[2*i+1])
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var orphans, wrong int64
	if err := conn.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM tenant_counts c WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = c.tenant_id)),
		(SELECT count(*) FROM consumers c LEFT JOIN consumer_key_counts k ON k.tenant_id = c.tenant_id AND k.consumer_id = c.id
			WHERE coalesce(k.keys, 0) <> (SELECT count(*) FROM keys x WHERE x.tenant_id = c.tenant_id AND x.consumer_id = c.id))`).Scan(&orphans, &wrong); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 || wrong != 0 {
		t.Errorf("%d counts of deleted tenants, %d consumers whose key count is wrong", orphans, wrong)
	}
}

// The counts the plan limits are checked against follow every way objects come and go:
// single creates and deletes, concurrent ones, config applies (with prune), a consumer's
// delete taking its keys, a tenant's delete taking everything.
func TestCountsFollowWrites(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	a := mustTenant(t, db, "count-a")
	b := mustTenant(t, db, "count-b")

	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newRoute(a.ID, fmt.Sprintf("r%02d", i), fmt.Sprintf("/r%02d", i))
			if err := db.CreateRoute(ctx, r); err != nil {
				t.Error(err)
				return
			}
			if i%3 == 0 {
				if err := db.DeleteRoute(ctx, a.ID, r.ID); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	// A failed create counts nothing.
	wantCode(t, db.CreateRoute(ctx, newRoute(a.ID, "r01", "/other")), tenants.EConflict)
	wantCode(t, db.CreateRoute(ctx, newRoute(a.ID, "other", "/r01")), tenants.EConflict)
	checkCounts(t, conn)

	plan := &tenants.ConsumerPlan{TenantID: a.ID, Name: "gold"}
	if err := db.CreatePlan(ctx, plan); err != nil {
		t.Fatal(err)
	}
	c := &tenants.Consumer{TenantID: a.ID, Name: "alice", Plan: "gold"}
	if err := db.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	var keys []*tenants.Key
	for range 3 {
		_, hash, prefix := tenants.NewSecret(tenants.KeyPrefix)
		k := &tenants.Key{TenantID: a.ID, ConsumerID: c.ID, Hash: hash, Prefix: prefix}
		if err := db.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := db.DeleteKey(ctx, a.ID, c.ID, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateJWTIssuer(ctx, newIssuer(t, a.ID, "https://idp.example")); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, conn)

	// An apply that creates, keeps and (pruning) deletes.
	doc := &tenants.ConfigDocument{Version: tenants.ConfigDocumentVersion, Tenant: a.Slug,
		Routes:    []*tenants.Route{newRoute("", "r01", "/r01"), newRoute("", "new1", "/new1"), newRoute("", "new2", "/new2")},
		Consumers: []*tenants.Consumer{{Name: "bob"}},
	}
	if _, err := db.ApplyConfig(ctx, a.ID, doc, tenants.ApplyOptions{Prune: true}); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, conn)
	// A failed apply counts nothing.
	doc.Routes = append(doc.Routes, newRoute("", "clash", "/new1"))
	if _, err := db.ApplyConfig(ctx, a.ID, doc, tenants.ApplyOptions{}); err == nil {
		t.Fatal("an apply with a path clash went through")
	}
	checkCounts(t, conn)

	for i := range 5 {
		mustRoute(t, db, newRoute(b.ID, fmt.Sprintf("b%d", i), fmt.Sprintf("/b%d", i)))
	}
	if err := db.DeleteTenant(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, conn)
}

// Two creations racing for a tenant's last place never both pass, whichever way the
// check goes (near the limit every check is exclusive).
func TestCountsAtLimitConcurrent(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()
	p := &tenants.PlatformPlan{Name: "tiny", Resources: &tenants.ResourceLimits{Routes: 5, Consumers: 1, KeysPerConsumer: 2}}
	if err := db.PutPlatformPlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	tn := &tenants.Tenant{Slug: "tiny", PlatformPlan: "tiny"}
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
	)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := db.CreateRoute(ctx, newRoute(tn.ID, fmt.Sprintf("r%02d", i), fmt.Sprintf("/r%02d", i)))
			if err == nil {
				mu.Lock()
				created++
				mu.Unlock()
			} else if tenants.ErrorCode(err) != tenants.EValidation {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if created != 5 {
		t.Fatalf("%d routes created on a plan of 5", created)
	}
	checkCounts(t, conn)
}
