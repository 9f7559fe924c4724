package billing_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingnats "tollgate/billing/nats"
	"tollgate/edge/meter"
	"tollgate/infra/testenv"
)

type fakeEdges []billing.EdgeTotal

func (f fakeEdges) EdgeTotals(context.Context, billing.Period) ([]billing.EdgeTotal, error) {
	return f, nil
}

type fakeFolded []billing.HourTotal

func (f fakeFolded) FoldedTotals(context.Context, billing.Period) ([]billing.HourTotal, error) {
	return f, nil
}

type fakeStripe struct {
	pushes    []billing.PushTotal
	customers map[string]string
}

func (f fakeStripe) PushTotals(context.Context, billing.Period) ([]billing.PushTotal, error) {
	return f.pushes, nil
}
func (f fakeStripe) BillingCustomers(context.Context) (map[string]string, error) {
	return f.customers, nil
}

func TestReconcileRules(t *testing.T) {
	h0 := time.Date(2024, 5, 10, 3, 0, 0, 0, time.UTC)
	h1 := h0.Add(time.Hour)
	now := func() time.Time { return h1.Add(30 * time.Minute) } // h0 settled, h1 not
	p := billing.PeriodOf(h0)
	edges := fakeEdges{
		// two edges, two boots of one
		{EdgeID: "e1", BootID: "a", TenantID: "t1", Hour: h0, Requests: 60, Billable: 50},
		{EdgeID: "e1", BootID: "b", TenantID: "t1", Hour: h0, Requests: 40, Billable: 40},
		{EdgeID: "e2", BootID: "a", TenantID: "t1", Hour: h1, Requests: 10, Billable: 10},
		// t2 dropped 5 when its spool was full: folded 95 is right
		{EdgeID: "e1", BootID: "a", TenantID: "t2", Hour: h0, Requests: 100, Billable: 100, Dropped: 5, DroppedBillable: 5},
		// t3 lost 7 somewhere
		{EdgeID: "e1", BootID: "a", TenantID: "t3", Hour: h0, Requests: 20, Billable: 20},
		// another period's hour is ignored
		{EdgeID: "e1", BootID: "a", TenantID: "t3", Hour: h0.AddDate(0, 1, 0), Requests: 999},
	}
	folded := fakeFolded{
		{TenantID: "t1", Hour: h0, Requests: 100, Billable: 90},
		{TenantID: "t1", Hour: h1, Requests: 10, Billable: 10},
		{TenantID: "t2", Hour: h0, Requests: 95, Billable: 95},
		{TenantID: "t3", Hour: h0, Requests: 13, Billable: 13},
	}
	stripe := fakeStripe{
		customers: map[string]string{"t1": "cus_1", "t2": "cus_2"},
		pushes: []billing.PushTotal{
			{TenantID: "t1", Hour: h0, Pushed: 90},
			{TenantID: "t2", Hour: h0, Pushed: 90, Pending: 5}, // 5 still being retried
		},
	}
	r, err := billing.Reconcile(context.Background(), p, billing.ReconcileSources{Edges: edges, Folded: folded, Stripe: stripe, Now: now, Settle: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range r.Discrepancies {
		got = append(got, d.Kind+" "+d.TenantID+" "+d.Hour.Format("15"))
	}
	want := []string{"folded_vs_stripe t2 03", "edge_vs_folded t3 03"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("discrepancies %v, want %v", got, want)
	}
	if !strings.Contains(r.Discrepancies[1].Message, "7 missing") {
		t.Errorf("message: %s", r.Discrepancies[1].Message)
	}
	if len(r.Tenants) != 3 || r.Tenants[0].EdgeRequests != 110 || r.Tenants[1].Dropped != 5 || r.Tenants[0].StripeCustomer != "cus_1" {
		t.Fatalf("tenants: %+v", r.Tenants)
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	if !strings.Contains(buf.String(), "DIFF edge_vs_folded t3") {
		t.Fatalf("text:\n%s", buf.String())
	}
}

// End to end: an edge's totals in the KV bucket, the rollups billing folded from its
// batches and the Stripe record agree; a batch that did not come from the edge shows.
func TestReconcileEdgeTotalsWithRollups(t *testing.T) {
	ns := testenv.NATS(t)
	s := newStack(t, ns.ClientURL())
	tn := s.db.Tenant(t, "acme", "pro")
	pub, err := billingnats.NewPublisher(s.nc, s.prefix, "edge-1.eu")
	if err != nil {
		t.Fatal(err)
	}
	m, err := meter.New(meter.Config{EdgeID: "edge-1.eu", Sink: pub, SpoolDir: t.TempDir(), FlushInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Add(-2 * time.Hour) // settled for Stripe
	r := m.Route(tn.ID, "r")
	for i := 0; i < 40; i++ {
		r.Record(nil, []int{200, 429}[i%2], i%2 == 0, 0, 0, at)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.consume(t, ns.ClientURL(), billingnats.ConsumerConfig{})
	waitFor(t, 10*time.Second, "folded", func() bool { return s.folded(t) == 40 })
	ctx := context.Background()
	if _, err := s.db.Store.SetCustomer(ctx, tn.ID, "cus_test"); err != nil {
		t.Fatal(err)
	}
	src := billing.ReconcileSources{Edges: billingnats.NewTotals(s.js, s.prefix), Folded: s.db.Store, Stripe: s.db.Store}
	p := billing.PeriodOf(at)
	rec, err := billing.Reconcile(ctx, p, src)
	if err != nil {
		t.Fatal(err)
	}
	// Not pushed yet: Stripe is short of the rollups.
	if len(rec.Discrepancies) != 1 || rec.Discrepancies[0].Kind != billing.FoldedVsStripe {
		t.Fatalf("before the push: %+v", rec.Discrepancies)
	}
	if n, err := s.db.Store.PlanPushes(ctx, billing.Hour(at).Add(-time.Hour), time.Now(), time.Now()); err != nil || n != 1 {
		t.Fatalf("planned %d: %v", n, err)
	}
	if err := s.db.Store.PushSucceeded(ctx, billing.PushIdentifier(tn.ID, billing.Hour(at), 1), time.Now()); err != nil {
		t.Fatal(err)
	}
	if rec, _ = billing.Reconcile(ctx, p, src); !rec.OK() || rec.Tenants[0].EdgeRequests != 40 || rec.Tenants[0].Pushed != 20 {
		t.Fatalf("after the push: %+v", rec)
	}
	// Usage from nowhere.
	s.db.Fold(t, billingtest.Batch(77, billingtest.Record(tn.ID, at, "r", "", 200, true, 3)))
	rec, _ = billing.Reconcile(ctx, p, src)
	if len(rec.Discrepancies) != 2 || rec.Discrepancies[0].Kind != billing.EdgeVsFolded {
		t.Fatalf("after a stray batch: %+v", rec.Discrepancies)
	}
}
