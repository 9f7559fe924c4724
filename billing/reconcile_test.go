package billing_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingnats "tollgate/billing/nats"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// views are the inputs of one Reconcile, in memory: the rules are a pure function of
// them, so each case is planted exactly (the real stores are exercised below).
type views struct {
	edges     []usage.EdgeTotal
	byEdge    []billing.EdgeFolded
	extra     map[string]int64 // tenant → requests in the tenant rollup beyond the per-edge ones
	inflight  []billing.EdgeFolded
	pushes    []billing.PushTotal
	customers map[string]string
}

func (v *views) EdgeTotals(context.Context, billing.Period) ([]usage.EdgeTotal, error) {
	return v.edges, nil
}

func (v *views) FoldedByEdge(context.Context, billing.Period) ([]billing.EdgeFolded, error) {
	return v.byEdge, nil
}

// FoldedTotals is the per-edge rollup summed per tenant-hour, plus extra.
func (v *views) FoldedTotals(context.Context, billing.Period) ([]billing.HourTotal, error) {
	sum := map[string]*billing.HourTotal{}
	var out []billing.HourTotal
	for _, f := range v.byEdge {
		k := f.TenantID + f.Hour.String()
		if sum[k] == nil {
			sum[k] = &billing.HourTotal{TenantID: f.TenantID, Hour: f.Hour}
		}
		sum[k].Requests += f.Requests + v.extra[f.TenantID]
		sum[k].Billable += f.Billable
		sum[k].FunctionUS += f.FunctionUS
		delete(v.extra, f.TenantID)
	}
	for _, t := range sum {
		out = append(out, *t)
	}
	return out, nil
}

func (v *views) InFlight(context.Context) (*billing.InFlight, error) {
	return &billing.InFlight{Batches: len(v.inflight), Totals: v.inflight}, nil
}

func (v *views) PushTotals(context.Context, billing.Period) ([]billing.PushTotal, error) {
	return v.pushes, nil
}

func (v *views) BillingCustomers(context.Context) (map[string]string, error) {
	return v.customers, nil
}

func TestReconcileRules(t *testing.T) {
	h0 := time.Date(2024, 5, 10, 3, 0, 0, 0, time.UTC)
	h1 := h0.Add(time.Hour)
	now := func() time.Time { return h1.Add(30 * time.Minute) } // h0 settled, h1 not
	p := billing.PeriodOf(h0)
	served := func(edge, boot, tenant string, h time.Time, req, bill, dropped int64) usage.EdgeTotal {
		return usage.EdgeTotal{EdgeID: edge, BootID: boot, TenantID: tenant, Hour: h, Requests: req, Billable: bill, Dropped: dropped, DroppedBillable: dropped}
	}
	folded := func(edge, boot, tenant string, h time.Time, req, bill int64) billing.EdgeFolded {
		return billing.EdgeFolded{EdgeID: edge, BootID: boot, TenantID: tenant, Hour: h, Requests: req, Billable: bill}
	}
	v := &views{
		edges: []usage.EdgeTotal{
			// t1: two boots of e1 agree; e2 is short in an hour not yet settled
			served("e1", "a", "t1", h0, 60, 50, 0), served("e1", "b", "t1", h0, 40, 40, 0),
			served("e2", "a", "t1", h1, 10, 10, 0),
			// t2 dropped 5 when its spool was full: 95 folded, 5 never billed
			served("e1", "a", "t2", h0, 100, 100, 5),
			served("e1", "a", "t3", h0, 20, 20, 0),                    // t3: 7 lost
			served("e1", "a", "t4", h0, 20, 20, 0),                    // t4: 5 folded twice
			served("e1", "a", "t5", h0, 10, 10, 0),                    // t5: boot z has no totals
			served("e1", "a", "t7", h0, 30, 30, 0),                    // t7: 10 in flight
			served("e1", "a", "t8", h0, 45, 45, 0),                    // t8: 5 folded outside Fold
			served("e1", "a", "t9", h0, 30, 30, 0),                    // t9: folded before per-edge rollups, agrees
			served("e1", "a", "t9", h0.Add(-time.Hour), 40, 40, 0),    // …and is short
			served("e1", "a", "t10", h0, 50, 50, 0),                   // Stripe short
			served("e1", "a", "t11", h0, 50, 50, 0),                   // Stripe over
			served("e1", "a", "t3", h0.AddDate(0, 1, 0), 999, 999, 0), // another period: ignored
			// e1 and e3 balance each other in t12's rollup, which cannot see it
			served("e1", "a", "t12", h0, 10, 10, 0), served("e3", "a", "t12", h0, 10, 10, 0),
		},
		byEdge: []billing.EdgeFolded{
			folded("e1", "a", "t1", h0, 60, 50), folded("e1", "b", "t1", h0, 40, 40),
			folded("e1", "a", "t2", h0, 95, 95),
			folded("e1", "a", "t3", h0, 13, 13),
			folded("e1", "a", "t4", h0, 25, 25),
			folded("e1", "a", "t5", h0, 10, 10), folded("e1", "z", "t5", h0, 4, 4),
			folded("e9", "a", "t6", h0, 8, 8), // t6: e9 never reported totals
			folded("e1", "a", "t7", h0, 20, 20),
			folded("e1", "a", "t8", h0, 45, 45),
			folded("", "", "t9", h0, 30, 30), folded("", "", "t9", h0.Add(-time.Hour), 33, 33),
			folded("e1", "a", "t10", h0, 50, 50),
			folded("e1", "a", "t11", h0, 50, 50),
			folded("e1", "a", "t12", h0, 13, 13), folded("e3", "a", "t12", h0, 7, 7),
		},
		extra:     map[string]int64{"t8": 5},
		inflight:  []billing.EdgeFolded{folded("e1", "a", "t7", h0, 10, 10)},
		customers: map[string]string{"t1": "cus_1", "t2": "cus_2", "t10": "cus_10", "t11": "cus_11"},
		pushes: []billing.PushTotal{
			{TenantID: "t1", Hour: h0, Pushed: 90},
			{TenantID: "t2", Hour: h0, Pushed: 90, Pending: 5}, // 5 still being retried
			{TenantID: "t10", Hour: h0, Pushed: 40, Failed: 10},
			{TenantID: "t11", Hour: h0, Pushed: 60},
		},
	}
	r, err := billing.Reconcile(context.Background(), p, billing.ReconcileSources{Edges: v, Folded: v, InFlight: v, Stripe: v, Now: now, Settle: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	list := func(ds []billing.Discrepancy) string {
		var out []string
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%s %s %s %s %+d", d.Kind, d.TenantID, d.Hour.Format("15"), d.EdgeID, d.Difference))
		}
		return strings.Join(out, "\n")
	}
	want := strings.Join([]string{
		"stripe_short t10 03  -10",
		"stripe_excess t11 03  +10",
		"double_count t12 03 e1 +3",
		"loss t12 03 e3 -3",
		"dropped t2 03 e1 -5",
		"loss t3 03 e1 -7",
		"double_count t4 03 e1 +5",
		"missing_totals t5 03 e1 +4",
		"missing_totals t6 03 e9 +8",
		"unattributed t8 03  +5",
		"loss t9 02  -7",
	}, "\n")
	if got := list(r.Discrepancies); got != want {
		t.Fatalf("discrepancies:\n%s\nwant:\n%s", got, want)
	}
	wantPending := strings.Join([]string{
		"pending t1 04 e2 -10",
		"pending t2 03  -5", // a Stripe push being retried
		"pending t7 03 e1 -10",
	}, "\n")
	if got := list(r.Pending); got != wantPending {
		t.Fatalf("pending:\n%s\nwant:\n%s", got, wantPending)
	}
	for _, d := range r.Discrepancies {
		words := map[string]string{billing.Loss: "missing", billing.StripeShort: "missing", billing.DoubleCount: "too many",
			billing.StripeExcess: "too many", billing.DroppedUsage: "missing", billing.MissingTotals: "never reported totals", billing.Unattributed: "too many"}[d.Kind]
		if !strings.Contains(d.Message, words) {
			t.Errorf("%s %s: message %q does not say %q", d.Kind, d.TenantID, d.Message, words)
		}
	}
	if r.Tenants[0].TenantID != "t1" || r.Tenants[0].EdgeRequests != 110 || r.Tenants[0].StripeCustomer != "cus_1" {
		t.Fatalf("tenants: %+v", r.Tenants[0])
	}
	if e := r.Edges[0]; e.TenantID != "t1" || e.EdgeID != "e1" || e.Boots != 2 || e.Served != 100 || e.Folded != 100 {
		t.Fatalf("edges: %+v", r.Edges[0])
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"DIFF loss t3 2024-05-10T03Z edge e1: LOSS", "PENDING t7 2024-05-10T03Z edge e1: pending (batches in flight)"} {
		if !strings.Contains(buf.String(), line) {
			t.Fatalf("text lacks %q:\n%s", line, buf.String())
		}
	}
	if r.OK() || strings.Contains(buf.String(), "OK:") {
		t.Fatal("a reconciliation with discrepancies says OK")
	}
}

// plantedEdge publishes what an edge's meter would — batches to the usage stream, totals
// to the bucket — so a test can leave out or spoil exactly one of them.
type plantedEdge struct {
	pub      *usage.Publisher
	id, boot string
	seq      uint64
}

func (s *stack) edge(t *testing.T, id string) *plantedEdge {
	t.Helper()
	pub, err := usage.NewPublisher(s.nc, s.prefix, id)
	if err != nil {
		t.Fatal(err)
	}
	return &plantedEdge{pub: pub, id: id, boot: "b1"}
}

// batch publishes a batch of n billable requests of tenant at hour at.
func (e *plantedEdge) batch(t *testing.T, tenant string, at time.Time, n int64) *usage.Batch {
	t.Helper()
	e.seq++
	b := &usage.Batch{ID: usage.BatchID(e.id, e.boot, e.seq), EdgeID: e.id, BootID: e.boot, Seq: e.seq,
		Created: time.Now().UTC(), Records: []usage.Record{billingtest.Record(tenant, at, "r", "", 200, true, n)}}
	data, err := usage.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pub.Publish(context.Background(), b.ID, data); err != nil {
		t.Fatal(err)
	}
	return b
}

// totals publishes the edge's totals: served requests, all billable.
func (e *plantedEdge) totals(t *testing.T, tenant string, at time.Time, served int64) {
	t.Helper()
	tot := usage.EdgeTotal{EdgeID: e.id, BootID: e.boot, TenantID: tenant, Hour: billing.Hour(at), Requests: served, Billable: served}
	if err := e.pub.PutTotals(context.Background(), []usage.EdgeTotal{tot}); err != nil {
		t.Fatal(err)
	}
}

// Each kind of disagreement planted in real stores — a lost batch, a batch folded twice,
// an edge without totals, Stripe short and over, batches in flight — is reported as what
// it is, per edge and with its sign, and a clean edge's hour reports OK.
func TestReconcilePlantedCases(t *testing.T) {
	ns := testenv.NATS(t)
	s := newStack(t, ns.ClientURL())
	ctx := context.Background()
	at := time.Now().UTC().Add(-2 * time.Hour) // settled
	p := billing.PeriodOf(at)
	src := billing.ReconcileSources{
		Edges: billingnats.NewTotals(s.js, s.prefix), Folded: s.db.Store, Stripe: s.db.Store,
		InFlight: billingnats.NewInFlight(s.js, s.prefix, "", s.db.Store),
	}
	reconcile := func() *billing.Reconciliation {
		t.Helper()
		r, err := billing.Reconcile(ctx, p, src)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	slugs := map[string]string{}
	tenant := func(slug string) string {
		id := s.db.Tenant(t, slug, "pro").ID
		slugs[id] = slug
		return id
	}
	// kinds lists a reconciliation's discrepancies and pending differences by slug.
	kinds := func(r *billing.Reconciliation) string {
		var out []string
		for _, d := range r.Discrepancies {
			out = append(out, fmt.Sprintf("%s %s %s %+d", d.Kind, slugs[d.TenantID], d.EdgeID, d.Difference))
		}
		for _, d := range r.Pending {
			out = append(out, fmt.Sprintf("pending %s %s %+d", slugs[d.TenantID], d.EdgeID, d.Difference))
		}
		sort.Strings(out)
		return strings.Join(out, "; ")
	}

	// A clean hour: pending while billing has not folded it, then OK.
	clean := tenant("clean")
	ec := s.edge(t, "edge-clean.eu")
	ec.batch(t, clean, at, 10)
	ec.batch(t, clean, at, 15)
	ec.totals(t, clean, at, 25)
	if r := reconcile(); !r.OK() || kinds(r) != "pending clean edge-clean.eu -25" || r.InFlightBatches != 2 {
		t.Fatalf("before billing folded: %s (%d in flight)", kinds(r), r.InFlightBatches)
	}
	partial := billingnats.NewInFlight(s.js, s.prefix, "", s.db.Store)
	partial.Max = 1
	r, err := billing.Reconcile(ctx, p, billing.ReconcileSources{Edges: src.Edges, Folded: src.Folded, InFlight: partial})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || len(r.Pending) != 1 {
		t.Fatalf("one of two batches in flight read: %s", kinds(r))
	}
	ctx1, stop := context.WithCancel(ctx)
	_, done := s.consumeCtx(t, ctx1, ns.ClientURL(), billingnats.UsageReaderConfig{})
	waitFor(t, 10*time.Second, "clean folded", func() bool { return s.folded(t) == 25 })
	if r := reconcile(); !r.OK() || len(r.Pending) != 0 || r.Edges[0].Served != 25 || r.Edges[0].Folded != 25 {
		t.Fatalf("a clean hour: %s %+v", kinds(r), r.Edges)
	}
	stop()
	<-done

	// A lost batch: the edge served 15, its second batch never reaches billing.
	lost := tenant("lost")
	el := s.edge(t, "edge-lossy")
	el.batch(t, lost, at, 10)
	el.batch(t, lost, at, 5)
	el.totals(t, lost, at, 15)
	stream, err := s.js.Stream(ctx, usage.Stream(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, usage.Subject(s.prefix, "edge-lossy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, msg.Sequence); err != nil {
		t.Fatal(err)
	}
	// A batch folded twice: folded once here, then again below past the dedup.
	double := tenant("double")
	ed := s.edge(t, "edge-double")
	twice := ed.batch(t, double, at, 12)
	ed.totals(t, double, at, 12)
	// An edge whose totals are missing.
	silent := tenant("silent")
	s.edge(t, "edge-silent").batch(t, silent, at, 8)
	// Stripe short (the push given up on) and over (more pushed than folded).
	short, over := tenant("short"), tenant("over")
	for _, c := range []struct{ id, edge string }{{short, "edge-s"}, {over, "edge-o"}} {
		e := s.edge(t, c.edge)
		e.batch(t, c.id, at, 20)
		e.totals(t, c.id, at, 20)
		if _, err := s.db.Store.SetCustomer(ctx, c.id, "cus_"+c.edge); err != nil {
			t.Fatal(err)
		}
	}
	ctx2, stop := context.WithCancel(ctx)
	_, done = s.consumeCtx(t, ctx2, ns.ClientURL(), billingnats.UsageReaderConfig{})
	waitFor(t, 10*time.Second, "folded", func() bool { return s.folded(t) == 25+10+12+8+20+20 })
	stop()
	<-done

	sql, err := pgx.Connect(ctx, s.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(ctx)
	if _, err := sql.Exec(ctx, `DELETE FROM usage_batches WHERE batch_id = $1`, twice.ID); err != nil {
		t.Fatal(err)
	}
	s.db.Fold(t, twice)
	if n, err := s.db.Store.PlanPushes(ctx, billing.Hour(at).Add(-time.Hour), time.Now(), time.Now()); err != nil || n != 2 {
		t.Fatalf("planned %d: %v", n, err)
	}
	if err := s.db.Store.PushFailed(ctx, billing.PushIdentifier(short, billing.Hour(at), 1), "card declined", time.Now(), true); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Store.PushSucceeded(ctx, billing.PushIdentifier(over, billing.Hour(at), 1), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, `UPDATE stripe_pushes SET quantity = quantity + 3 WHERE tenant_id = $1`, over); err != nil {
		t.Fatal(err)
	}

	// Batches in flight in a settled hour: pending, not lost.
	late := tenant("late")
	ef := s.edge(t, "edge-late")
	ef.batch(t, late, at, 6)
	ef.totals(t, late, at, 6)

	r = reconcile()
	want := "double_count double edge-double +12; loss lost edge-lossy -5; missing_totals silent edge-silent +8; " +
		"pending late edge-late -6; stripe_excess over  +3; stripe_short short  -20"
	if got := kinds(r); got != want {
		var buf bytes.Buffer
		r.WriteText(&buf)
		t.Fatalf("got  %s\nwant %s\n%s", got, want, buf.String())
	}
	if r.OK() || r.InFlightBatches != 1 {
		t.Fatalf("OK %v with %d batches in flight", r.OK(), r.InFlightBatches)
	}
	for _, d := range r.Discrepancies {
		if d.Kind == billing.Loss && !strings.Contains(d.Message, "5 requests missing") {
			t.Errorf("loss message: %s", d.Message)
		}
		if d.Kind == billing.DoubleCount && !strings.Contains(d.Message, "12 requests too many") {
			t.Errorf("double count message: %s", d.Message)
		}
	}
	// Folded at last, the late batch agrees.
	s.consume(t, ns.ClientURL(), billingnats.UsageReaderConfig{})
	waitFor(t, 10*time.Second, "late folded", func() bool { return s.folded(t) == 25+10+12+12+8+20+20+6 })
	if got := kinds(reconcile()); strings.Contains(got, "late") {
		t.Fatalf("after the late batch folded: %s", got)
	}
}

// Function time on Stripe's function meter is compared with the folded function time like
// billable requests are: short, over, pending while a push is retried, agreeing — and only
// once the requests' comparison is done, never instead of it.
func TestReconcileStripeFunctionTime(t *testing.T) {
	h0 := time.Date(2024, 5, 10, 3, 0, 0, 0, time.UTC)
	p := billing.PeriodOf(h0)
	fn := func(tenant string, bill, us int64) (usage.EdgeTotal, billing.EdgeFolded) {
		return usage.EdgeTotal{EdgeID: "e1", BootID: "a", TenantID: tenant, Hour: h0, Requests: bill, Billable: bill, FunctionUS: us},
			billing.EdgeFolded{EdgeID: "e1", BootID: "a", TenantID: tenant, Hour: h0, Requests: bill, Billable: bill, FunctionUS: us}
	}
	v := &views{customers: map[string]string{}}
	for _, c := range []struct {
		tenant string
		us     int64
		push   billing.PushTotal
	}{
		{"agree", 1_000_001, billing.PushTotal{Pushed: 10, FunctionPushed: 1_000_001}},
		{"short", 500, billing.PushTotal{Pushed: 10, FunctionPushed: 200, FunctionFailed: 300}},
		{"over", 500, billing.PushTotal{Pushed: 10, FunctionPushed: 501}},
		{"retrying", 500, billing.PushTotal{Pushed: 10, FunctionPushed: 100, FunctionPending: 400}},
		{"both", 500, billing.PushTotal{Pushed: 9}}, // requests short too: both reported
		{"none", 0, billing.PushTotal{Pushed: 10}},  // no function time, none pushed
	} {
		e, f := fn(c.tenant, 10, c.us)
		v.edges, v.byEdge = append(v.edges, e), append(v.byEdge, f)
		v.customers[c.tenant] = "cus_" + c.tenant
		c.push.TenantID, c.push.Hour = c.tenant, h0
		v.pushes = append(v.pushes, c.push)
	}
	r, err := billing.Reconcile(context.Background(), p, billing.ReconcileSources{Edges: v, Folded: v, Stripe: v,
		Now: func() time.Time { return h0.Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range r.Discrepancies {
		got = append(got, fmt.Sprintf("%s %s %s %+d", d.Kind, d.TenantID, d.Unit, d.Difference))
	}
	for _, d := range r.Pending {
		got = append(got, fmt.Sprintf("pending %s %s %+d", d.TenantID, d.Unit, d.Difference))
	}
	want := []string{
		"stripe_short both billable -1", "stripe_short both function_us -500",
		"stripe_excess over function_us +1",
		"stripe_short short function_us -300",
		"pending retrying function_us -400",
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		var buf bytes.Buffer
		r.WriteText(&buf)
		t.Fatalf("got  %s\nwant %s\n%s", strings.Join(got, "; "), strings.Join(want, "; "), buf.String())
	}
	for _, d := range r.Discrepancies {
		if d.Unit == billing.UnitFunctionUS && (d.FoldedFunctionUS != 500 || !strings.Contains(d.Message, "µs of function time")) {
			t.Errorf("function time discrepancy without its counts: %+v", d)
		}
	}
	for _, tr := range r.Tenants {
		if tr.TenantID == "agree" && (tr.FoldedFunctionUS != 1_000_001 || tr.FunctionPushed != 1_000_001) {
			t.Errorf("tenant %+v", tr)
		}
	}
}

// BenchmarkReconcile: a month of 100 tenants served by 10 edges, every hour, one boot
// each, all agreeing (the figure is per whole reconciliation).
func BenchmarkReconcile(b *testing.B) {
	start := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	p := billing.PeriodOf(start)
	v := &views{}
	for tn := 0; tn < 100; tn++ {
		tenant := fmt.Sprintf("t%03d", tn)
		for e := 0; e < 10; e++ {
			edge := fmt.Sprintf("edge-%d", e)
			for h := start; h.Before(p.End()); h = h.Add(time.Hour) {
				v.edges = append(v.edges, usage.EdgeTotal{EdgeID: edge, BootID: "b", TenantID: tenant, Hour: h, Requests: 100, Billable: 90})
				v.byEdge = append(v.byEdge, billing.EdgeFolded{EdgeID: edge, BootID: "b", TenantID: tenant, Hour: h, Requests: 100, Billable: 90})
			}
		}
	}
	src := billing.ReconcileSources{Edges: v, Folded: v, Now: func() time.Time { return p.End().Add(time.Hour) }}
	b.ReportAllocs()
	for b.Loop() {
		r, err := billing.Reconcile(context.Background(), p, src)
		if err != nil || !r.OK() {
			b.Fatal(err, r.Discrepancies[:1])
		}
	}
}

// TestReconcileDroppedIsLoss: every way an edge's served, dropped, folded and in-flight
// counts can disagree gets its own kind and sign. What an edge reported dropping was
// served and never billed: a discrepancy (dropped, negative), not an agreement; only
// folded beyond served is a double count.
func TestReconcileDroppedIsLoss(t *testing.T) {
	h0 := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	now := func() time.Time { return h0.Add(2 * time.Hour) }
	cases := []struct {
		name                              string
		served, dropped, folded, inflight int64
		unsettled                         bool
		want                              string // kind difference, …; "" agrees
		pending                           string
	}{
		// The spool's disk was full during a NATS outage: 2,800 of 12,002 dropped.
		{name: "spool full", served: 12002, dropped: 2800, folded: 9202, want: "dropped -2800"},
		// A crash on a full disk: the dead run's totals counted drops, yet a batch it
		// dropped after a publish that timed out had landed, so folded exceeds served less
		// dropped by 28; that is 189 dropped, not a double count of 28.
		{name: "crash, a dropped batch landed", served: 6932, dropped: 217, folded: 6743, want: "dropped -189"},
		{name: "every dropped batch landed", served: 100, dropped: 10, folded: 100},
		{name: "dropped and lost", served: 100, dropped: 10, folded: 80, want: "dropped -10, loss -10"},
		{name: "lost only", served: 100, folded: 93, want: "loss -7"},
		{name: "folded twice", served: 100, dropped: 10, folded: 105, want: "double_count +5"},
		{name: "in flight covers the unannounced part", served: 100, dropped: 10, folded: 80, inflight: 10, want: "dropped -10", pending: "pending -10"},
		{name: "in flight covers a dropped batch that landed", served: 100, dropped: 10, folded: 90, inflight: 10, pending: "pending -10"},
		{name: "not settled", served: 100, dropped: 10, folded: 80, unsettled: true, pending: "pending -20"},
		{name: "not settled, folded beyond", served: 100, folded: 104, unsettled: true, pending: "pending +4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := h0
			if c.unsettled {
				h = now().Add(-30 * time.Minute).Truncate(time.Hour)
			}
			v := &views{
				edges:  []usage.EdgeTotal{{EdgeID: "e1", BootID: "b", TenantID: "t", Hour: h, Requests: c.served, Billable: c.served, Dropped: c.dropped, DroppedBillable: c.dropped}},
				byEdge: []billing.EdgeFolded{{EdgeID: "e1", BootID: "b", TenantID: "t", Hour: h, Requests: c.folded, Billable: c.folded}},
			}
			if c.inflight > 0 {
				v.inflight = []billing.EdgeFolded{{EdgeID: "e1", BootID: "b", TenantID: "t", Hour: h, Requests: c.inflight, Billable: c.inflight}}
			}
			r, err := billing.Reconcile(context.Background(), billing.PeriodOf(h), billing.ReconcileSources{Edges: v, Folded: v, InFlight: v, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			list := func(ds []billing.Discrepancy) string {
				var out []string
				for _, d := range ds {
					out = append(out, fmt.Sprintf("%s %+d", d.Kind, d.Difference))
				}
				return strings.Join(out, ", ")
			}
			if got := list(r.Discrepancies); got != c.want {
				t.Errorf("discrepancies %q, want %q", got, c.want)
			}
			if got := list(r.Pending); got != c.pending {
				t.Errorf("pending %q, want %q", got, c.pending)
			}
			if r.OK() != (c.want == "") {
				t.Errorf("OK() = %v with discrepancies %q", r.OK(), c.want)
			}
			var buf bytes.Buffer
			if err := r.WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(c.want, "dropped") && !strings.Contains(buf.String(), "DIFF dropped t 2026-12-05T03Z edge e1: DROPPED") {
				t.Errorf("the text does not name the drop:\n%s", buf.String())
			}
		})
	}
}

// TestReconcileDroppedBillable: requests that agree while the billable ones fall short by
// what the edge dropped are still a drop, in billable requests.
func TestReconcileDroppedBillable(t *testing.T) {
	h := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	v := &views{
		edges:  []usage.EdgeTotal{{EdgeID: "e1", BootID: "b", TenantID: "t", Hour: h, Requests: 50, Billable: 40, Dropped: 0, DroppedBillable: 3}},
		byEdge: []billing.EdgeFolded{{EdgeID: "e1", BootID: "b", TenantID: "t", Hour: h, Requests: 50, Billable: 37}},
	}
	r, err := billing.Reconcile(context.Background(), billing.PeriodOf(h), billing.ReconcileSources{Edges: v, Folded: v, Now: func() time.Time { return h.Add(3 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Discrepancies) != 1 || r.Discrepancies[0].Kind != billing.DroppedUsage || r.Discrepancies[0].Difference != -3 || r.Discrepancies[0].Unit != billing.UnitBillable {
		t.Fatalf("discrepancies %+v, want one dropped of -3 billable", r.Discrepancies)
	}
}

// Function time is reconciled per edge-hour like requests, once requests and billable
// requests agree: time the edge served and billing never folded is a loss (or dropped,
// when the edge said so), time folded beyond it a double count, time in flight pending.
func TestReconcileFunctionTime(t *testing.T) {
	h0 := time.Date(2024, 5, 10, 3, 0, 0, 0, time.UTC)
	now := func() time.Time { return h0.Add(2 * time.Hour) }
	served := func(tenant string, fn, droppedFn int64) usage.EdgeTotal {
		return usage.EdgeTotal{EdgeID: "e1", BootID: "a", TenantID: tenant, Hour: h0, Requests: 10, Billable: 10, FunctionUS: fn, DroppedFunctionUS: droppedFn}
	}
	folded := func(tenant string, fn int64) billing.EdgeFolded {
		return billing.EdgeFolded{EdgeID: "e1", BootID: "a", TenantID: tenant, Hour: h0, Requests: 10, Billable: 10, FunctionUS: fn}
	}
	v := &views{
		edges: []usage.EdgeTotal{
			served("agree", 500, 0), served("lost", 500, 0), served("twice", 500, 0), served("dropped", 500, 200), served("flight", 500, 0),
		},
		byEdge: []billing.EdgeFolded{
			folded("agree", 500), folded("lost", 300), folded("twice", 800), folded("dropped", 300), folded("flight", 300),
		},
		inflight: []billing.EdgeFolded{{EdgeID: "e1", BootID: "a", TenantID: "flight", Hour: h0, FunctionUS: 200}},
	}
	r, err := billing.Reconcile(context.Background(), billing.PeriodOf(h0), billing.ReconcileSources{Edges: v, Folded: v, InFlight: v, Now: now, Settle: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range append(r.Discrepancies, r.Pending...) {
		got[d.TenantID] += fmt.Sprintf("%s %d %s;", d.Kind, d.Difference, d.Unit)
		if d.Unit == billing.UnitFunctionUS && !strings.Contains(d.Message, "function time") {
			t.Errorf("%s: message %q", d.TenantID, d.Message)
		}
	}
	want := map[string]string{
		"lost":    "loss -200 function_us;",
		"twice":   "double_count 300 function_us;",
		"dropped": "dropped -200 function_us;",
		"flight":  "pending -200 function_us;",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("discrepancies %v, want %v", got, want)
	}
}
