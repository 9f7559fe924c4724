package postgres_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

var ctx = context.Background()

func TestFoldIsIdempotent(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	at := time.Date(2024, 5, 1, 10, 30, 0, 0, time.UTC)
	b := billingtest.Batch(1,
		billingtest.Record(tn.ID, at, "r1", "c1", 200, true, 5),
		billingtest.Record(tn.ID, at, "r1", "c1", 200, true, 2), // same row twice in one batch
		billingtest.Record(tn.ID, at, "r1", "", 401, false, 3),
	)
	folded, err := db.Store.Fold(ctx, b)
	if err != nil || !folded {
		t.Fatalf("first fold: %v %v", folded, err)
	}
	for i := 0; i < 2; i++ {
		folded, err = db.Store.Fold(ctx, b)
		if err != nil || folded {
			t.Fatalf("refold: folded=%v err=%v", folded, err)
		}
	}
	// Same id, different content (a replay after the dedupe window is the same bytes, but
	// even a corrupted copy must not fold).
	b2 := billingtest.Batch(1, billingtest.Record(tn.ID, at, "r9", "", 200, true, 1000))
	if folded, _ := db.Store.Fold(ctx, b2); folded {
		t.Fatal("a batch id folded twice")
	}
	if req, bill := db.Sum(t); req != 10 || bill != 7 {
		t.Fatalf("rollups hold %d requests (%d billable), want 10 (7)", req, bill)
	}
	if n, _ := db.Store.Batches(ctx); n != 1 {
		t.Fatalf("%d batches recorded", n)
	}
	// The per-edge rollup moved with the tenant's, once.
	byEdge, err := db.Store.FoldedByEdge(ctx, billing.PeriodOf(at))
	want := billing.EdgeFolded{EdgeID: "test-edge", BootID: "boot", TenantID: tn.ID, Hour: billing.Hour(at), Requests: 10, Billable: 7}
	if err != nil || len(byEdge) != 1 || byEdge[0] != want {
		t.Fatalf("folded by edge: %+v %v, want %+v", byEdge, err, want)
	}
	done, err := db.Store.FoldedBatches(ctx, []string{b.ID, "test-edge.boot.2"})
	if err != nil || !done[b.ID] || done["test-edge.boot.2"] {
		t.Fatalf("folded batches: %v %v", done, err)
	}
}

// Concurrent folds of the same edge-hour, with every batch delivered twice, leave the
// per-edge rollup equal to the tenant's and to what was sent once.
func TestFoldByEdgeConcurrent(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	at := time.Date(2024, 5, 1, 10, 30, 0, 0, time.UTC)
	const workers, batches = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < batches; i++ {
				// Workers w and w^1 send the same batches: each is folded once.
				seq := uint64((w/2)*batches + i + 1)
				b := billingtest.Batch(seq, billingtest.Record(tn.ID, at, "r", "", 200, true, int64(seq)))
				b.BootID = []string{"a", "b"}[seq%2]
				b.ID = usage.BatchID(b.EdgeID, b.BootID, seq)
				if _, err := db.Store.Fold(ctx, b); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := int64(workers / 2 * batches)
	sent := n * (n + 1) / 2
	if req, _ := db.Sum(t); req != sent {
		t.Fatalf("rollups hold %d requests, sent %d", req, sent)
	}
	byEdge, err := db.Store.FoldedByEdge(ctx, billing.PeriodOf(at))
	if err != nil || len(byEdge) != 2 {
		t.Fatalf("folded by edge: %+v %v", byEdge, err)
	}
	if got := byEdge[0].Requests + byEdge[1].Requests; got != sent {
		t.Fatalf("per-edge rollups hold %d requests, sent %d", got, sent)
	}
}

func TestUsageReport(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	other := db.Tenant(t, "other", "pro")
	d := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(tn.ID, d.Add(1*time.Hour), "r1", "c1", 200, true, 1),
		billingtest.Record(tn.ID, d.Add(1*time.Hour), "r2", "c1", 200, true, 2),
		billingtest.Record(tn.ID, d.Add(2*time.Hour), "r1", "", 429, false, 4),
		billingtest.Record(tn.ID, d.Add(25*time.Hour), "r1", "c2", 500, true, 8),
		billingtest.Record(tn.ID, d.Add(49*time.Hour), "r1", "c2", 200, true, 16), // outside [d, d+48h)
		billingtest.Record(other.ID, d.Add(1*time.Hour), "r1", "c1", 200, true, 32),
	))
	q := billing.UsageQuery{TenantID: tn.ID, From: d, To: d.Add(48 * time.Hour)}
	rep, err := db.Store.Usage(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Requests != 15 || rep.Total.Billable != 11 || len(rep.Items) != 3 {
		t.Fatalf("hourly: %+v", rep)
	}
	q.Granularity = billing.GranularityDay
	q.ByRoute, q.ByConsumer = true, true
	rep, err = db.Store.Usage(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		day             int
		route, consumer string
		req             int64
	}
	var got []row
	for _, it := range rep.Items {
		got = append(got, row{it.Start.Day(), *it.RouteID, *it.ConsumerID, it.Requests})
	}
	want := []row{{1, "r1", "", 4}, {1, "r1", "c1", 1}, {1, "r2", "c1", 2}, {2, "r1", "c2", 8}}
	if len(got) != len(want) {
		t.Fatalf("daily by route, consumer: %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("item %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	q = billing.UsageQuery{TenantID: tn.ID, From: d, To: d.Add(48 * time.Hour), ByStatus: true, Granularity: "day"}
	rep, _ = db.Store.Usage(ctx, q)
	if len(rep.Items) != 3 || rep.Items[0].Status != "2xx" || rep.Items[1].Status != "4xx" || rep.Items[2].Status != "5xx" {
		t.Fatalf("by status: %+v", rep.Items)
	}
	// Bad ranges.
	for _, bad := range []billing.UsageQuery{
		{TenantID: tn.ID, From: d.Add(time.Minute), To: d.Add(time.Hour)},
		{TenantID: tn.ID, From: d, To: d},
		{TenantID: tn.ID, From: d, To: d.Add(40 * 24 * time.Hour)},
		{TenantID: tn.ID, From: d, To: d.Add(time.Hour), Granularity: "week"},
	} {
		if _, err := db.Store.Usage(ctx, bad); tenants.ErrorCode(err) != tenants.EInvalidRequest {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// The export's totals are the rollups', tenant by tenant, priced by plan.
func TestExportTotalsEqualRollups(t *testing.T) {
	db := billingtest.Open(t)
	free := db.Tenant(t, "free-co", "free")
	pro := db.Tenant(t, "pro-co", "pro")
	ent := db.Tenant(t, "ent-co", "enterprise")
	odd := db.Tenant(t, "odd-co", "custom-plan") // no price: unpriced
	at := time.Date(2024, 5, 10, 12, 0, 0, 0, time.UTC)
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(free.ID, at, "r", "", 200, true, 12_000),
		billingtest.Record(free.ID, at, "r", "", 403, false, 50),
		billingtest.Record(pro.ID, at, "r", "c1", 200, true, 1_000_000),
		billingtest.Record(pro.ID, at.Add(time.Hour), "r", "c2", 200, true, 501),
		billingtest.Record(ent.ID, at, "r", "c1", 200, true, 5_000_001),
		billingtest.Record(ent.ID, at, "r", "c2", 200, true, 10),
		billingtest.Record(odd.ID, at, "r", "", 200, true, 7),
	))
	rows, err := db.Store.Export(ctx, billing.PeriodOf(at))
	if err != nil {
		t.Fatal(err)
	}
	var req, bill int64
	amounts := map[string]int64{}
	for _, r := range rows {
		req += r.Requests
		bill += r.Billable
		amounts[r.Tenant+"/"+r.ConsumerID] = r.Amount
		want := map[bool]string{true: "", false: "usd"}[r.Tenant == "odd-co"]
		if r.Currency != want || r.Period != "2024-05" || (r.Status == billing.StatusUnpriced) != (r.Tenant == "odd-co") {
			t.Errorf("row %+v", r)
		}
	}
	wantReq, wantBill := db.Sum(t)
	if req != wantReq || bill != wantBill {
		t.Fatalf("export sums to %d/%d, rollups to %d/%d", req, bill, wantReq, wantBill)
	}
	for k, want := range map[string]int64{
		"free-co/":  0,     // allowance only
		"pro-co/":   11,    // 501 over 1M at 20 per 1,000: 10.02 → 11
		"ent-co/c1": 50001, // every request at 10 per 1,000: 50,000.01 → 50,001
		"ent-co/c2": 1,     // 10 at 10 per 1,000: 0.1 → 1
		"odd-co/":   0,
	} {
		if got, ok := amounts[k]; !ok || got != want {
			t.Errorf("amount of %s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	if len(rows) != 5 || rows[0].Tenant != "ent-co" || rows[4].Tenant != "pro-co" {
		t.Fatalf("rows not in tenant order: %+v", rows)
	}
}

// Months are UTC calendar months: the last second of January and the first of February
// land in different periods.
func TestMonthBoundaryUTC(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	last := time.Date(2024, 1, 31, 23, 59, 59, 0, time.UTC)
	first := time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(tn.ID, last, "r", "", 200, true, 1),
		billingtest.Record(tn.ID, first, "r", "", 200, true, 2),
	))
	for _, c := range []struct {
		period string
		want   int64
	}{{"2024-01", 1}, {"2024-02", 2}, {"2023-12", 0}, {"2024-03", 0}} {
		p, _ := billing.ParsePeriod(c.period)
		rows, err := db.Store.Export(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, r := range rows {
			n += r.Requests
		}
		if n != c.want {
			t.Errorf("%s: %d requests, want %d", c.period, n, c.want)
		}
	}
	// And the hours themselves: 23:00 on Jan 31 and 00:00 on Feb 1, UTC, whatever the
	// session's time zone.
	rep, err := db.Store.Usage(ctx, billing.UsageQuery{TenantID: tn.ID, From: last.Add(-time.Hour).Truncate(time.Hour), To: first.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Items) != 2 || !rep.Items[0].Start.Equal(billing.Hour(last)) || !rep.Items[1].Start.Equal(first) {
		t.Fatalf("hours: %+v", rep.Items)
	}
}

func TestExportIsDeterministic(t *testing.T) {
	db := billingtest.Open(t)
	var ts []*tenants.Tenant
	for _, s := range []string{"zeta", "alpha", "mid", "beta"} {
		ts = append(ts, db.Tenant(t, s, []string{"free", "pro", "enterprise"}[len(ts)%3]))
	}
	at := time.Date(2024, 7, 3, 4, 0, 0, 0, time.UTC)
	seq := uint64(0)
	for i, tn := range ts {
		for j := 0; j < 5; j++ {
			seq++
			db.Fold(t, billingtest.Batch(seq,
				billingtest.Record(tn.ID, at.Add(time.Duration(j)*time.Hour), "r", string(rune('a'+j)), 200, true, int64(100*i+j)),
			))
		}
	}
	p := billing.PeriodOf(at)
	export := func() (csv, js []byte) {
		rows, err := db.Store.Export(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var c, j bytes.Buffer
		if err := billing.WriteCSV(&c, rows); err != nil {
			t.Fatal(err)
		}
		if err := billing.WriteJSON(&j, p, rows); err != nil {
			t.Fatal(err)
		}
		return c.Bytes(), j.Bytes()
	}
	c1, j1 := export()
	// Usage in another period changes nothing of this one.
	db.Fold(t, billingtest.Batch(999, billingtest.Record(ts[0].ID, at.AddDate(0, 1, 0), "r", "", 200, true, 5)))
	c2, j2 := export()
	if !bytes.Equal(c1, c2) || !bytes.Equal(j1, j2) {
		t.Fatalf("exports differ:\n%s\n---\n%s", c1, c2)
	}
	if !bytes.HasPrefix(c1, []byte("period,tenant,tenant_id,consumer_id,plan,requests,billable,included,overage,unit_price,unit_requests,amount,currency,status,monthly_fee,function_us,function_included_ms,function_overage_us,function_unit_price,function_unit_ms,function_amount\n")) {
		t.Fatalf("csv header: %s", c1)
	}
}
