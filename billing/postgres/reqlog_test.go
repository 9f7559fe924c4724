package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"tollgate/billing/billingtest"
	"tollgate/infra/reqlog"
	"tollgate/tenants"
)

func logEntry(tenantID string, at time.Time, status int, route, reqID string) reqlog.Entry {
	return reqlog.Entry{Time: at, TenantID: tenantID, RequestID: reqID, Method: "GET", Path: "/" + route, RouteID: "id-" + route,
		RouteName: route, Status: status, GatewayUS: 120, UpstreamUS: 800, BytesOut: 42, Reason: "why " + reqID}
}

// A batch is stored once however often it arrives; the listing filters, pages with its
// cursor newest first, and sums what was not logged.
func TestRequestLogStoreAndList(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	other := db.Tenant(t, "other", "pro")
	now := time.Now().UTC()
	var es []reqlog.Entry
	for i := 0; i < 5; i++ {
		es = append(es, logEntry(tn.ID, now.Add(-time.Duration(i)*time.Minute), 502, "down", fmt.Sprintf("r%d", i)))
	}
	es = append(es, logEntry(tn.ID, now, 200, "fine", "ok1"), logEntry(tn.ID, now, 429, "fine", "lim1"),
		logEntry(other.ID, now, 502, "down", "theirs"))
	b := &reqlog.Batch{ID: "e1.boot.1", EdgeID: "e1", Created: now, Entries: es,
		NotLogged: []reqlog.NotLogged{{TenantID: tn.ID, Hour: now.Truncate(time.Hour), Sampled: 99, Dropped: 1}}}
	for i, want := range []bool{true, false} {
		stored, err := db.Store.StoreLogBatch(ctx, b)
		if err != nil || stored != want {
			t.Fatalf("store #%d: stored=%v err=%v, want %v", i+1, stored, err, want)
		}
	}

	all, err := db.Store.Logs(ctx, reqlog.Query{TenantID: tn.ID})
	if err != nil || len(all.Items) != 7 {
		t.Fatalf("all: %d items, %v; want 7 (the redelivered batch inserted nothing)", len(all.Items), err)
	}
	if all.Sampled != 99 || all.Dropped != 1 || all.RetentionDays != tenants.DefaultLogRetentionDays {
		t.Errorf("not logged %d/%d retention %d, want 99/1 and %d", all.Sampled, all.Dropped, all.RetentionDays, tenants.DefaultLogRetentionDays)
	}
	for name, q := range map[string]struct {
		q    reqlog.Query
		want int
	}{
		"status":     {reqlog.Query{Status: 502}, 5},
		"class":      {reqlog.Query{StatusClass: 4}, 1},
		"route name": {reqlog.Query{RouteID: "fine"}, 2},
		"route id":   {reqlog.Query{RouteID: "id-fine"}, 2},
		"request id": {reqlog.Query{RequestID: "r3"}, 1},
		"since":      {reqlog.Query{Since: now.Add(-90 * time.Second)}, 4},
		"until":      {reqlog.Query{Until: now.Add(-90 * time.Second)}, 3},
	} {
		q.q.TenantID = tn.ID
		p, err := db.Store.Logs(ctx, q.q)
		if err != nil || len(p.Items) != q.want {
			t.Errorf("%s: %d items, %v; want %d", name, len(p.Items), err, q.want)
		}
	}
	// Paging, two a page.
	var seen []string
	q := reqlog.Query{TenantID: tn.ID, Status: 502, Limit: 2}
	for {
		p, err := db.Store.Logs(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			seen = append(seen, it.RequestID)
		}
		if p.Next == nil {
			break
		}
		c, err := reqlog.DecodeCursor(p.Next.Encode())
		if err != nil {
			t.Fatal(err)
		}
		q.After = c
	}
	if fmt.Sprint(seen) != "[r0 r1 r2 r3 r4]" {
		t.Errorf("pages gave %v, want r0…r4 newest first", seen)
	}
}

// Partitions are made ahead and dropped whole past the longest retention, and the api
// never shows an entry older than the tenant's plan keeps.
func TestRequestLogRetention(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	now := time.Now().UTC()
	old := now.AddDate(0, 0, -5)
	b := &reqlog.Batch{ID: "e1.boot.1", EdgeID: "e1", Created: now, Entries: []reqlog.Entry{
		logEntry(tn.ID, now, 500, "a", "new"), logEntry(tn.ID, old, 500, "a", "old"),
		logEntry(tn.ID, now.AddDate(0, 0, -30), 500, "a", "ancient")}}
	if _, err := db.Store.StoreLogBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	p, err := db.Store.Logs(ctx, reqlog.Query{TenantID: tn.ID})
	if err != nil || len(p.Items) != 2 {
		t.Fatalf("%d items, %v; want 2 (the 30-day-old entry is past every retention)", len(p.Items), err)
	}
	// A plan keeping 3 days hides the 5-day-old entry.
	plan, err := db.Tenants.FindPlatformPlan(ctx, "pro")
	if err != nil {
		t.Fatal(err)
	}
	plan.Logs = &tenants.LogPolicy{RetentionDays: 3}
	if err := db.Tenants.PutPlatformPlan(ctx, plan); err != nil {
		t.Fatal(err)
	}
	p, err = db.Store.Logs(ctx, reqlog.Query{TenantID: tn.ID})
	if err != nil || len(p.Items) != 1 || p.RetentionDays != 3 {
		t.Fatalf("%d items, retention %d, %v; want 1 and 3", len(p.Items), p.RetentionDays, err)
	}
	// The longest retention is now the default 7 days: six days on, the 5-day-old entry's day is dropped and today's kept.
	later := db.Store.WithClock(func() time.Time { return now.AddDate(0, 0, 6) })
	dropped, err := later.MaintainLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "request_log_p" + old.Format("20060102"); !contains(dropped, want) {
		t.Errorf("dropped %v, want %s among them", dropped, want)
	}
	var n int
	if err := db.Tenants.Pool().QueryRow(ctx, `SELECT count(*) FROM request_log`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rows left, %v; want 1 (today's)", n, err)
	}
	if err := db.Tenants.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1`,
		"request_log_p"+now.AddDate(0, 0, 8).Format("20060102")).Scan(&n); err != nil || n != 1 {
		t.Errorf("the partition two days ahead of the clock: %d, %v", n, err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
