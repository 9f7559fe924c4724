// Package billingtest holds the helpers billing's tests share: a migrated database of
// the test's own with a billing store on it, tenants in it, and batches. Only tests
// import it.
package billingtest

import (
	"context"
	"testing"
	"time"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// DB is a test's database: the billing store and the tenants store on it.
type DB struct {
	URL     string
	Store   *billingpg.Store
	Tenants *postgres.DB
}

// Open creates and migrates a database for the test.
func Open(t testing.TB) *DB {
	t.Helper()
	url := testenv.Postgres(t)
	ctx := context.Background()
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st, err := billingpg.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	tdb, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tdb.Close)
	return &DB{URL: url, Store: st, Tenants: tdb}
}

// Tenant creates a tenant on a platform plan, creating the plan (without limits) if it
// does not exist.
func (db *DB) Tenant(t testing.TB, slug, plan string) *tenants.Tenant {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Tenants.FindPlatformPlan(ctx, plan); tenants.ErrorCode(err) == tenants.ENotFound {
		if err := db.Tenants.PutPlatformPlan(ctx, &tenants.PlatformPlan{Name: plan}); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	tn := &tenants.Tenant{Slug: slug, Name: "Tenant " + slug, PlatformPlan: plan}
	if err := db.Tenants.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn
}

// Record is a record of n billable requests (billable = n when upstream).
func Record(tenantID string, at time.Time, route, consumer string, status int, upstream bool, n int64) usage.Record {
	r := usage.Record{TenantID: tenantID, Hour: billing.Hour(at), RouteID: route, ConsumerID: consumer,
		Class: usage.StatusClass(status), Counts: usage.Counts{Requests: n, BytesIn: 10 * n, BytesOut: 100 * n}}
	o := usage.OriginEdge
	if upstream {
		o = usage.OriginUpstream
	}
	if usage.Billable(r.Class, o) {
		r.Billable = n
	}
	return r
}

// Batch makes a batch of the records with edge "test-edge", boot "boot".
func Batch(seq uint64, recs ...usage.Record) *usage.Batch {
	return &usage.Batch{
		ID: usage.BatchID("test-edge", "boot", seq), EdgeID: "test-edge", BootID: "boot", Seq: seq,
		Created: time.Now().UTC(), Records: recs,
	}
}

// Fold folds batches and fails the test on an error.
func (db *DB) Fold(t testing.TB, bs ...*usage.Batch) {
	t.Helper()
	for _, b := range bs {
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Store.Fold(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
}

// Sum is the requests and billable of all rollups.
func (db *DB) Sum(t testing.TB) (requests, billable int64) {
	t.Helper()
	c, err := db.Store.Sum(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c.Requests, c.Billable
}
