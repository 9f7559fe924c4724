package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"tollgate/tenants"
)

// The seeded platform plans and their limits, as the README documents them.
func TestPlatformPlansSeeded(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	plans, err := db.ListPlatformPlans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range plans {
		got[p.Name] = mustJSON(struct {
			R *tenants.RateLimit
			Q *tenants.Quota
			C int
			M string
		}{p.RateLimit, p.Quota, p.Concurrency, p.Mode})
		if p.Version != 1 || p.CreatedAt.IsZero() {
			t.Errorf("%s: %+v", p.Name, p)
		}
	}
	want := map[string]string{
		"free":       `{"R":{"rps":10,"burst":20},"Q":{"requests":10000},"C":10,"M":"approximate"}`,
		"pro":        `{"R":{"rps":200,"burst":400},"Q":{"requests":1000000},"C":100,"M":"approximate"}`,
		"enterprise": `{"R":{"rps":2000,"burst":4000},"Q":null,"C":1000,"M":"approximate"}`,
		"unlimited":  `{"R":null,"Q":null,"C":0,"M":"approximate"}`,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s", name, got[name], w)
		}
	}
	if len(plans) != len(want) {
		t.Errorf("plans: %v", got)
	}
	_, err = db.FindPlatformPlan(context.Background(), "gold")
	wantCode(t, err, tenants.ENotFound)
}

// A tenant's plan must name a platform plan; the tenant carries its limits in every read
// and in its config entry.
func TestTenantPlatformPlan(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)

	err := db.CreateTenant(ctx, &tenants.Tenant{Slug: "acme", PlatformPlan: "gold"})
	wantCode(t, err, tenants.EValidation)
	if e := err.(*tenants.Error); e.Field != "plan" || e.Message != `there is no platform plan named "gold" (GET /v1/platform/plans lists them)` {
		t.Fatalf("error %+v", e)
	}
	if rows := outboxAfter(t, conn, 0); len(rows) != 0 {
		t.Fatalf("a refused tenant wrote %v", rows)
	}

	tn := &tenants.Tenant{Slug: "acme"} // free by default
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if tn.Limits == nil || tn.Limits.Name != "free" || tn.Limits.RateLimit.RPS != 10 || tn.Limits.Quota.Requests != 10_000 {
		t.Fatalf("created tenant limits %+v", tn.Limits)
	}
	got, err := db.FindTenant(ctx, "acme")
	if err != nil || mustJSON(got) != mustJSON(tn) {
		t.Fatalf("find: %v\n%s\n%s", err, mustJSON(got), mustJSON(tn))
	}
	list, _, err := db.ListTenants(ctx, tenants.Page{})
	if err != nil || len(list) != 1 || mustJSON(list[0]) != mustJSON(tn) {
		t.Fatalf("list: %v %s", err, mustJSON(list))
	}

	up := &tenants.Tenant{ID: tn.ID, Name: "Acme", PlatformPlan: "gold", Version: 1}
	err = db.UpdateTenant(ctx, up)
	wantCode(t, err, tenants.EValidation)
	up.PlatformPlan = "pro"
	if err := db.UpdateTenant(ctx, up); err != nil {
		t.Fatal(err)
	}
	if up.Limits == nil || up.Limits.Name != "pro" || up.Limits.Concurrency != 100 {
		t.Fatalf("updated tenant limits %+v", up.Limits)
	}
	rows := outboxAfter(t, conn, 0)
	if len(rows) != 2 {
		t.Fatalf("outbox %v", rows)
	}
	for i, want := range []string{"free", "pro"} {
		if e := decode(t, rows[i]); e.Tenant.Limits == nil || e.Tenant.Limits.Name != want {
			t.Fatalf("entry %d: %s", i, rows[i].Value)
		}
	}

	// A resync's entries carry the limits too.
	var entry *tenants.Entry
	if _, err := db.Entries(ctx, func(c tenants.Change) error {
		if c.Key == tenants.TenantKey(tn.ID) {
			_, entry, err = tenants.DecodeEntry(c.Key, c.Value)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if entry == nil || entry.Tenant.Limits == nil || entry.Tenant.Limits.Name != "pro" || entry.Tenant.Limits.RateLimit.RPS != 200 {
		t.Fatalf("resync entry %+v", entry)
	}
}

// Changing a platform plan re-emits the entries of exactly its tenants, in one
// transaction, with the new limits; versions are checked like every update.
func TestPutPlatformPlan(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)

	p := &tenants.PlatformPlan{Name: "gold", RateLimit: &tenants.RateLimit{RPS: 50, Burst: 100}, Concurrency: 5}
	if err := db.PutPlatformPlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Version != 1 || p.Mode != tenants.ModeApproximate || p.CreatedAt.IsZero() {
		t.Fatalf("created %+v", p)
	}
	on1 := &tenants.Tenant{Slug: "one", PlatformPlan: "gold"}
	on2 := &tenants.Tenant{Slug: "two", PlatformPlan: "gold"}
	for _, tn := range []*tenants.Tenant{on1, on2} {
		if err := db.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	other := mustTenant(t, db, "other")
	mark := maxOutboxID(t, conn)

	p2 := &tenants.PlatformPlan{Name: "gold", RateLimit: &tenants.RateLimit{RPM: 600, Burst: 20}, Quota: &tenants.Quota{Requests: 7}, Version: 1}
	if err := db.PutPlatformPlan(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if p2.Version != 2 || p2.RateLimit.RPM != 600 {
		t.Fatalf("replaced %+v", p2)
	}
	rows := outboxAfter(t, conn, mark)
	if len(rows) != 2 {
		t.Fatalf("re-emitted %v", rows)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		e := decode(t, r)
		if e.Tenant == nil || e.Tenant.Limits == nil || e.Tenant.Limits.Version != 2 || e.Tenant.Limits.Quota.Requests != 7 {
			t.Fatalf("re-emitted entry %s", r.Value)
		}
		seen[e.Tenant.ID] = true
	}
	if !seen[on1.ID] || !seen[on2.ID] || seen[other.ID] {
		t.Fatalf("re-emitted tenants %v", seen)
	}

	wantCode(t, db.PutPlatformPlan(ctx, &tenants.PlatformPlan{Name: "gold", Version: 1}), tenants.EVersionConflict)
	wantCode(t, db.PutPlatformPlan(ctx, &tenants.PlatformPlan{Name: "silver", Version: 3}), tenants.ENotFound)
	wantCode(t, db.PutPlatformPlan(ctx, &tenants.PlatformPlan{Name: "gold", Concurrency: -1}), tenants.EValidation)
	// Version 0 overwrites whatever is current.
	p3 := &tenants.PlatformPlan{Name: "gold"}
	if err := db.PutPlatformPlan(ctx, p3); err != nil || p3.Version != 3 || p3.RateLimit != nil {
		t.Fatalf("overwrite: %v %+v", err, p3)
	}
	got, err := db.FindTenant(ctx, "one")
	if err != nil || got.Limits.Version != 3 || got.Limits.RateLimit != nil {
		t.Fatalf("tenant after overwrite: %v %+v", err, got.Limits)
	}
}

// Tenants moving between plans while a plan changes: whatever the interleaving, the last
// entry of every tenant carries the limits of the plan it is on.
func TestPlatformPlanRace(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	for _, name := range []string{"a", "b"} {
		if err := db.PutPlatformPlan(ctx, &tenants.PlatformPlan{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 6
	ts := make([]*tenants.Tenant, n)
	for i := range ts {
		ts[i] = &tenants.Tenant{Slug: fmt.Sprintf("t%d", i), PlatformPlan: "a"}
		if err := db.CreateTenant(ctx, ts[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := 1; c <= 15; c++ {
			if err := db.PutPlatformPlan(ctx, &tenants.PlatformPlan{Name: "a", Concurrency: c}); err != nil {
				errs <- err
				return
			}
		}
	}()
	for i := range ts {
		wg.Add(1)
		go func(tn *tenants.Tenant) {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				tn.PlatformPlan = map[bool]string{true: "a", false: "b"}[j%2 == 1]
				if err := db.UpdateTenant(ctx, tn); err != nil {
					errs <- err
					return
				}
			}
		}(ts[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last := map[string]*tenants.Entry{}
	for _, r := range outboxAfter(t, conn, 0) {
		if e := decode(t, r); e.Tenant != nil {
			last[e.Tenant.ID] = e
		}
	}
	for _, tn := range ts {
		cur, err := db.FindTenant(ctx, tn.Slug)
		if err != nil {
			t.Fatal(err)
		}
		e := last[tn.ID]
		if mustJSON(e.Tenant.Limits) != mustJSON(cur.Limits) || e.Tenant.PlatformPlan != cur.PlatformPlan {
			t.Errorf("%s: last entry has plan %s %s, the tenant is on %s %s", tn.Slug, e.Tenant.PlatformPlan, mustJSON(e.Tenant.Limits), cur.PlatformPlan, mustJSON(cur.Limits))
		}
	}
}
