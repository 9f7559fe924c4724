package billing

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"tollgate/infra/usage"
)

// HourTotal is a tenant's usage in one hour as one source saw it.
type HourTotal struct {
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	Requests int64     `json:"requests"`
	Billable int64     `json:"billable"`
	// FunctionUS is the tenant's function time in the hour (µs).
	FunctionUS int64 `json:"function_us,omitempty"`
}

// EdgeFolded is what billing folded, or has yet to fold, from the batches of one boot of
// an edge for a tenant's hour. EdgeID and BootID are those of the batches (usage.Batch).
type EdgeFolded struct {
	EdgeID   string    `json:"edge_id"`
	BootID   string    `json:"boot_id"`
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	Requests int64     `json:"requests"`
	Billable int64     `json:"billable"`
	// FunctionUS is the function time (µs) folded from these batches.
	FunctionUS int64 `json:"function_us,omitempty"`
}

// LegacyEdge is the edge id under which usage folded before billing kept rollups per
// edge is attributed: its hours are reconciled per tenant only.
const LegacyEdge = ""

// PushTotal is what was sent to Stripe for a tenant's hour, by the state of the pushes:
// billable requests, and function time (µs) on its own meter.
type PushTotal struct {
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	Pushed   int64     `json:"pushed"`  // accepted by Stripe
	Pending  int64     `json:"pending"` // not yet accepted; being retried
	Failed   int64     `json:"failed"`  // given up on
	// FunctionPushed, FunctionPending and FunctionFailed are the same for function time.
	FunctionPushed  int64 `json:"function_us_pushed,omitempty"`
	FunctionPending int64 `json:"function_us_pending,omitempty"`
	FunctionFailed  int64 `json:"function_us_failed,omitempty"`
}

// EdgeTotalsSource reads the totals edges published for a period (billing/nats).
type EdgeTotalsSource interface {
	EdgeTotals(ctx context.Context, p Period) ([]usage.EdgeTotal, error)
}

// FoldedSource reads what billing folded for a period (billing/postgres): per tenant and
// hour (the rollups that are billed), and per edge, boot, tenant and hour (the same
// folds, attributed to the batches' edge).
type FoldedSource interface {
	FoldedTotals(ctx context.Context, p Period) ([]HourTotal, error)
	FoldedByEdge(ctx context.Context, p Period) ([]EdgeFolded, error)
}

// InFlight is what edges published that billing has not folded yet: the batches in the
// usage stream that billing's usage reader has not folded.
type InFlight struct {
	Batches int          `json:"batches"`
	Totals  []EdgeFolded `json:"totals"`
	// Partial says more batches were waiting than were read: every shortfall is then
	// taken as pending, since an unread batch may hold any hour.
	Partial bool `json:"partial,omitempty"`
}

// InFlightSource reads the batches not yet folded (billing/nats).
type InFlightSource interface {
	InFlight(ctx context.Context) (*InFlight, error)
}

// StripeSource reads what was pushed to Stripe for a period and which tenants are billed
// through Stripe (billing/postgres).
type StripeSource interface {
	PushTotals(ctx context.Context, p Period) ([]PushTotal, error)
	// BillingCustomers maps tenant id to Stripe customer id.
	BillingCustomers(ctx context.Context) (map[string]string, error)
}

// ReconcileSources are the views Reconcile compares. InFlight and Stripe may be nil:
// without InFlight a shortfall in a settled hour is a loss even while its batches wait
// in the stream; without Stripe (no Stripe push configured) only edges and rollups are
// compared.
type ReconcileSources struct {
	Edges    EdgeTotalsSource
	Folded   FoldedSource
	InFlight InFlightSource
	Stripe   StripeSource
	// Now and Settle decide which hours have settled: those that ended at least Settle
	// before Now. Before that a difference is pending, not a loss, and Stripe is not
	// expected to have the hour. Defaults: time.Now, DefaultSettle.
	Now    func() time.Time
	Settle time.Duration
}

// DefaultSettle is how long after an hour ends its usage is pushed to Stripe, so that
// batches still in flight (or spooled at an edge for a short outage) fold first.
const DefaultSettle = 15 * time.Minute

// Discrepancy kinds. Each names one way two views disagree; Difference carries the sign.
const (
	// Loss: an edge served more requests than billing folded from its batches and than
	// it reported dropping, in an hour that has settled, with nothing left in flight to
	// make up the difference: usage gone without the edge knowing. Difference < 0.
	Loss = "loss"
	// DroppedUsage: requests an edge served and reported dropping (it could neither
	// publish nor spool their batch, or deleted it from a full spool) that billing never
	// folded, in a settled hour. A loss whose cause is known; never billed. Difference < 0.
	DroppedUsage = "dropped"
	// DoubleCount: billing folded more from an edge's batches than the edge served
	// (dropped or not). Difference > 0.
	DoubleCount = "double_count"
	// MissingTotals: billing folded batches of an edge's boot that never published its
	// totals for the tenant and hour, so nothing says what it served. Difference > 0 is
	// what was folded unchecked.
	MissingTotals = "missing_totals"
	// Unattributed: the tenant's rollup differs from the sum of its per-edge rollups,
	// which Fold moves together: something wrote usage_hourly outside Fold (or an older
	// billing folded during an upgrade). Difference is rollup − per-edge sum.
	Unattributed = "unattributed"
	// StripeShort: Stripe accepted fewer billable requests (unit billable) or less
	// function time (unit function_us) for a settled hour than were folded, and no push
	// being retried makes up the difference. Difference < 0.
	StripeShort = "stripe_short"
	// StripeExcess: Stripe accepted more than was folded (either unit). Difference > 0.
	StripeExcess = "stripe_excess"
	// Pending is not a discrepancy: a difference in an hour that has not settled, or one
	// that batches in flight or Stripe pushes being retried may still close. It is listed
	// under Pending and does not fail a reconciliation.
	Pending = "pending"
)

// Units of a Difference.
const (
	UnitRequests = "requests"
	// UnitFunctionUS: microseconds of function time, compared per edge-hour when requests
	// and billable requests agree.
	UnitFunctionUS = "function_us"
	UnitBillable   = "billable"
)

// Discrepancy is one tenant-hour, and for the edge kinds one edge, where two views
// disagree. Difference is signed: the later view minus the earlier one (the part of
// folded − served of its kind for the edge kinds, pushed − folded billable for Stripe's),
// so a negative difference is something missing and a positive one something extra;
// Message says which in words.
type Discrepancy struct {
	Kind       string    `json:"kind"`
	TenantID   string    `json:"tenant_id"`
	Hour       time.Time `json:"hour"`
	EdgeID     string    `json:"edge_id,omitempty"`
	BootIDs    []string  `json:"boot_ids,omitempty"` // missing_totals: the boots without totals
	Difference int64     `json:"difference"`
	Unit       string    `json:"unit"`
	Edge       int64     `json:"edge_requests"`
	Dropped    int64     `json:"edge_dropped"`
	Folded     int64     `json:"folded_requests"`
	Billable   int64     `json:"folded_billable"`
	InFlight   int64     `json:"in_flight_requests"`
	Pushed     int64     `json:"stripe_pushed"`
	// FoldedFunctionUS and PushedFunctionUS are the tenant-hour's function time folded
	// and accepted by Stripe (µs): set on the Stripe kinds in unit function_us.
	FoldedFunctionUS int64  `json:"folded_function_us,omitempty"`
	PushedFunctionUS int64  `json:"stripe_pushed_function_us,omitempty"`
	Message          string `json:"message"`
}

// TenantReconciliation sums one tenant's period in each view.
type TenantReconciliation struct {
	TenantID        string `json:"tenant_id"`
	EdgeRequests    int64  `json:"edge_requests"`
	EdgeBillable    int64  `json:"edge_billable"`
	Dropped         int64  `json:"edge_dropped"`
	DroppedBillable int64  `json:"edge_dropped_billable"`
	FoldedRequests  int64  `json:"folded_requests"`
	FoldedBillable  int64  `json:"folded_billable"`
	InFlight        int64  `json:"in_flight_requests"`
	StripeCustomer  string `json:"stripe_customer,omitempty"`
	Pushed          int64  `json:"stripe_pushed"`
	PushPending     int64  `json:"stripe_pending"`
	PushFailed      int64  `json:"stripe_failed"`
	// FoldedFunctionUS is the function time folded (µs); FunctionPushed,
	// FunctionPushPending and FunctionPushFailed are what of it went to Stripe's function
	// meter, by the state of the pushes.
	FoldedFunctionUS    int64 `json:"folded_function_us"`
	FunctionPushed      int64 `json:"stripe_function_us_pushed"`
	FunctionPushPending int64 `json:"stripe_function_us_pending"`
	FunctionPushFailed  int64 `json:"stripe_function_us_failed"`
}

// EdgeReconciliation sums one edge's period for one tenant: what it served (its totals,
// every boot), what it dropped, what was folded from its batches and what is in flight.
// EdgeID LegacyEdge holds what was folded before rollups were kept per edge.
type EdgeReconciliation struct {
	TenantID string `json:"tenant_id"`
	EdgeID   string `json:"edge_id"`
	Boots    int    `json:"boots"`
	Served   int64  `json:"edge_requests"`
	Dropped  int64  `json:"edge_dropped"`
	Folded   int64  `json:"folded_requests"`
	InFlight int64  `json:"in_flight_requests"`
}

// Reconciliation is the outcome of Reconcile.
type Reconciliation struct {
	Period        string                 `json:"period"`
	Settle        string                 `json:"settle"`
	Tenants       []TenantReconciliation `json:"tenants"`
	Edges         []EdgeReconciliation   `json:"edges"`
	Discrepancies []Discrepancy          `json:"discrepancies"`
	Pending       []Discrepancy          `json:"pending"`
	// InFlightBatches is how many batches were waiting in the stream, unfolded.
	InFlightBatches int `json:"in_flight_batches"`
}

// OK says whether every view agreed, apart from what is pending.
func (r *Reconciliation) OK() bool { return len(r.Discrepancies) == 0 }

type tenantHour struct {
	tenant string
	hour   int64 // unix seconds
}

type edgeHour struct {
	tenantHour
	edge string
}

// edgeView is one edge's tenant-hour in every view.
type edgeView struct {
	served, servedBill, dropped, droppedBill  int64
	folded, foldedBill                        int64
	inflight, inflightBill                    int64
	servedFn, droppedFn, foldedFn, inflightFn int64      // function time (µs)
	boots                                     []bootView // usually one or two
}

type tenantView struct {
	folded, foldedBill       int64 // usage_hourly
	foldedFn                 int64 // usage_hourly's function time (µs)
	attributed, attributedBl int64 // Σ usage_edge_hourly
	pushed, pending, failed  int64
	fnPushed, fnPending      int64 // function time (µs) on Stripe's function meter
	fnFailed                 int64
	legacy                   bool // some of it folded before per-edge rollups
}

// Reconcile compares, per tenant, hour and edge, what each edge served (its published
// totals, every boot summed) with what billing folded from that edge's batches, telling
// what the edge reported dropping (DroppedUsage) from what went missing unannounced
// (Loss) and from what was folded beyond what it served (DoubleCount); per tenant and
// hour, the rollup that is billed with the per-edge rollups; and — for tenants billed
// through Stripe and hours that have settled — the folded billable requests and function
// time with what Stripe accepted on each meter. It reads only. Every disagreement is a Discrepancy of a kind that says
// what it is (Loss, DroppedUsage, DoubleCount, MissingTotals, Unattributed, StripeShort,
// StripeExcess); differences that may yet close — an hour not settled, batches in
// flight, pushes being retried — are listed as Pending instead.
//
// It gathers every view (gather), sums each edge's period (edgeSummaries), compares each
// edge-hour (compareEdgeHour) and each tenant-hour (compareTenantHour), classifying a
// difference by what may still close it (classify, addEdgeKinds), and reports them in a
// stable order.
func Reconcile(ctx context.Context, p Period, src ReconcileSources) (*Reconciliation, error) {
	if src.Now == nil {
		src.Now = time.Now
	}
	if src.Settle <= 0 {
		src.Settle = DefaultSettle
	}
	vs, err := gather(ctx, p, src)
	if err != nil {
		return nil, err
	}
	r := &Reconciliation{Period: p.String(), Settle: src.Settle.String(), InFlightBatches: vs.inFlightBatches,
		Tenants: []TenantReconciliation{}, Edges: []EdgeReconciliation{}, Discrepancies: []Discrepancy{}, Pending: []Discrepancy{}}
	now := src.Now()
	cmp := comparison{
		settled: func(h time.Time) bool { return !h.Add(time.Hour + src.Settle).After(now) },
		partial: vs.partial,
	}

	ekeys := vs.edgeKeys()
	r.Edges = append(r.Edges, vs.edgeSummaries(ekeys)...)
	for _, k := range ekeys {
		if vs.tenants[k.tenantHour].legacy {
			continue // compared per tenant below
		}
		r.compareEdgeHour(k, vs.edges[k], cmp)
	}

	perTenant := vs.edgesPerTenant()
	var cur *TenantReconciliation
	for _, k := range vs.tenantKeys() {
		if cur == nil || cur.TenantID != k.tenant {
			r.Tenants = append(r.Tenants, TenantReconciliation{TenantID: k.tenant, StripeCustomer: vs.customers[k.tenant]})
			cur = &r.Tenants[len(r.Tenants)-1]
		}
		all := perTenant[k]
		if all == nil {
			all = &edgeView{}
		}
		cur.add(vs.tenants[k], all)
		r.compareTenantHour(k, vs.tenants[k], all, vs.customers[k.tenant] != "", cmp)
	}
	sortDiscrepancies(r.Discrepancies)
	sortDiscrepancies(r.Pending)
	return r, nil
}

// views are every view of a period, keyed by tenant-hour and by edge-hour: what
// Reconcile compares.
type views struct {
	edges     map[edgeHour]*edgeView
	tenants   map[tenantHour]*tenantView
	customers map[string]string // tenant id → Stripe customer id
	// inFlightBatches is how many batches were waiting unfolded; partial says not all of
	// them were read.
	inFlightBatches int
	partial         bool
}

// tenant is the tenant-hour's view, made on first use.
func (vs *views) tenant(tenant string, h time.Time) *tenantView {
	k := tenantHour{strings.ToLower(tenant), h.Unix()}
	v := vs.tenants[k]
	if v == nil {
		v = &tenantView{}
		vs.tenants[k] = v
	}
	return v
}

// edge is the edge-hour's view, made on first use with its tenant-hour's: every
// edge-hour has its tenant-hour.
func (vs *views) edge(tenant string, h time.Time, edge string) *edgeView {
	k := edgeHour{tenantHour{strings.ToLower(tenant), h.Unix()}, edge}
	v := vs.edges[k]
	if v == nil {
		v = &edgeView{}
		vs.edges[k] = v
		vs.tenant(tenant, h)
	}
	return v
}

// gather reads every source src has for p into views: the edges' totals, the rollups
// (per tenant and per edge), the batches in flight and what was pushed to Stripe.
func gather(ctx context.Context, p Period, src ReconcileSources) (*views, error) {
	vs := &views{edges: map[edgeHour]*edgeView{}, tenants: map[tenantHour]*tenantView{}, customers: map[string]string{}}
	start, end := p.Start(), p.End()
	in := func(h time.Time) bool { return !h.Before(start) && h.Before(end) }

	served, err := src.Edges.EdgeTotals(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("reconcile: edge totals: %w", err)
	}
	for _, t := range served {
		if !in(t.Hour) {
			continue
		}
		v := vs.edge(t.TenantID, t.Hour, t.EdgeID)
		v.served += t.Requests
		v.servedBill += t.Billable
		v.dropped += t.Dropped
		v.droppedBill += t.DroppedBillable
		v.servedFn += t.FunctionUS
		v.droppedFn += t.DroppedFunctionUS
		v.boot(t.BootID).reported = true
	}
	folded, err := src.Folded.FoldedTotals(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("reconcile: rollups: %w", err)
	}
	for _, t := range folded {
		v := vs.tenant(t.TenantID, t.Hour)
		v.folded += t.Requests
		v.foldedBill += t.Billable
		v.foldedFn += t.FunctionUS
	}
	byEdge, err := src.Folded.FoldedByEdge(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("reconcile: rollups by edge: %w", err)
	}
	for _, t := range byEdge {
		v := vs.edge(t.TenantID, t.Hour, t.EdgeID)
		v.folded += t.Requests
		v.foldedBill += t.Billable
		v.foldedFn += t.FunctionUS
		bv := v.boot(t.BootID)
		bv.folded += t.Requests
		bv.foldedBill += t.Billable
		bv.foldedFn += t.FunctionUS
		tv := vs.tenant(t.TenantID, t.Hour)
		tv.attributed += t.Requests
		tv.attributedBl += t.Billable
		if t.EdgeID == LegacyEdge {
			tv.legacy = true
		}
	}
	if src.InFlight != nil {
		flight, err := src.InFlight.InFlight(ctx)
		if err != nil {
			return nil, fmt.Errorf("reconcile: batches in flight: %w", err)
		}
		vs.inFlightBatches, vs.partial = flight.Batches, flight.Partial
		for _, t := range flight.Totals {
			if !in(t.Hour) {
				continue
			}
			v := vs.edge(t.TenantID, t.Hour, t.EdgeID)
			v.inflight += t.Requests
			v.inflightBill += t.Billable
			v.inflightFn += t.FunctionUS
			bv := v.boot(t.BootID)
			bv.inflight += t.Requests
			bv.inflightBill += t.Billable
			bv.inflightFn += t.FunctionUS
		}
	}
	if src.Stripe != nil {
		if vs.customers, err = src.Stripe.BillingCustomers(ctx); err != nil {
			return nil, fmt.Errorf("reconcile: billing customers: %w", err)
		}
		pushes, err := src.Stripe.PushTotals(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("reconcile: stripe pushes: %w", err)
		}
		for _, t := range pushes {
			v := vs.tenant(t.TenantID, t.Hour)
			v.pushed += t.Pushed
			v.pending += t.Pending
			v.failed += t.Failed
			v.fnPushed += t.FunctionPushed
			v.fnPending += t.FunctionPending
			v.fnFailed += t.FunctionFailed
		}
	}
	return vs, nil
}

// edgeKeys are the edge-hours by tenant, edge and hour.
func (vs *views) edgeKeys() []edgeHour {
	keys := make([]edgeHour, 0, len(vs.edges))
	for k := range vs.edges {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		switch {
		case a.tenant != b.tenant:
			return a.tenant < b.tenant
		case a.edge != b.edge:
			return a.edge < b.edge
		}
		return a.hour < b.hour
	})
	return keys
}

// tenantKeys are the tenant-hours by tenant and hour.
func (vs *views) tenantKeys() []tenantHour {
	keys := make([]tenantHour, 0, len(vs.tenants))
	for k := range vs.tenants {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].hour < keys[j].hour
	})
	return keys
}

// edgeSummaries sums each edge's period for each tenant, in the order of ekeys (the
// edge-hours sorted by edgeKeys). A boot counts when it reported totals or had batches
// folded.
func (vs *views) edgeSummaries(ekeys []edgeHour) []EdgeReconciliation {
	sums := map[[2]string]*EdgeReconciliation{}
	var order [][2]string
	boots := map[[2]string]map[string]bool{}
	for _, k := range ekeys {
		v := vs.edges[k]
		sk := [2]string{k.tenant, k.edge}
		es := sums[sk]
		if es == nil {
			es = &EdgeReconciliation{TenantID: k.tenant, EdgeID: k.edge}
			sums[sk] = es
			order = append(order, sk)
			boots[sk] = map[string]bool{}
		}
		for _, b := range v.boots {
			if b.reported || b.folded != 0 || b.foldedBill != 0 {
				boots[sk][b.id] = true
			}
		}
		es.Served += v.served
		es.Dropped += v.dropped
		es.Folded += v.folded
		es.InFlight += v.inflight
	}
	out := make([]EdgeReconciliation, 0, len(order))
	for _, sk := range order {
		es := sums[sk]
		es.Boots = len(boots[sk])
		out = append(out, *es)
	}
	return out
}

// edgesPerTenant sums every edge of each tenant-hour.
func (vs *views) edgesPerTenant() map[tenantHour]*edgeView {
	perTenant := map[tenantHour]*edgeView{}
	for k, ekv := range vs.edges {
		all := perTenant[k.tenantHour]
		if all == nil {
			all = &edgeView{}
			perTenant[k.tenantHour] = all
		}
		all.served += ekv.served
		all.servedBill += ekv.servedBill
		all.dropped += ekv.dropped
		all.droppedBill += ekv.droppedBill
		all.inflight += ekv.inflight
		all.inflightBill += ekv.inflightBill
	}
	return perTenant
}

// add sums one tenant-hour into t: v its rollups and pushes, all its edges together.
func (t *TenantReconciliation) add(v *tenantView, all *edgeView) {
	t.EdgeRequests += all.served
	t.EdgeBillable += all.servedBill
	t.Dropped += all.dropped
	t.DroppedBillable += all.droppedBill
	t.FoldedRequests += v.folded
	t.FoldedBillable += v.foldedBill
	t.InFlight += all.inflight
	t.Pushed += v.pushed
	t.PushPending += v.pending
	t.PushFailed += v.failed
	t.FoldedFunctionUS += v.foldedFn
	t.FunctionPushed += v.fnPushed
	t.FunctionPushPending += v.fnPending
	t.FunctionPushFailed += v.fnFailed
}

// comparison is what every comparison of a reconciliation shares: which hours have
// settled, and whether the batches in flight were only partly read.
type comparison struct {
	settled func(hour time.Time) bool
	partial bool
}

// compareEdgeHour compares what one edge served in a tenant-hour with what billing
// folded from its batches: the batches of boots that reported no totals apart
// (MissingTotals), the rest by edgeKinds, in requests or, when those agree, in billable
// requests.
func (r *Reconciliation) compareEdgeHour(k edgeHour, v *edgeView, cmp comparison) {
	h := time.Unix(k.hour, 0).UTC()
	base := Discrepancy{TenantID: k.tenant, Hour: h, EdgeID: k.edge, Edge: v.served, Dropped: v.dropped,
		Folded: v.folded, Billable: v.foldedBill, InFlight: v.inflight}
	// Batches of a boot that published no totals have nothing to be checked against:
	// they are set apart, and the rest is compared with the boots that did report.
	var missing []string
	var mReq, mBill, mIn, mInBill, mFn, mInFn int64
	reported := false
	for _, b := range v.boots {
		if b.reported {
			reported = true
			continue
		}
		if b.folded == 0 && b.foldedBill == 0 && b.inflight == 0 && b.inflightBill == 0 {
			continue
		}
		mReq += b.folded
		mBill += b.foldedBill
		mIn += b.inflight
		mInBill += b.inflightBill
		mFn += b.foldedFn
		mInFn += b.inflightFn
		missing = append(missing, b.id)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		d := base
		d.Kind, d.BootIDs, d.Difference, d.Unit = MissingTotals, missing, mReq, UnitRequests
		who := "edge " + quoteEdge(k.edge)
		if reported {
			who += fmt.Sprintf(" (boot %s)", strings.Join(missing, ", "))
		}
		d.Message = fmt.Sprintf("MISSING TOTALS: %s never reported totals for this hour, yet billing folded %d requests (%d billable) from its batches%s: nothing says what it served",
			who, mReq, mBill, inFlightNote(mIn))
		if mReq == 0 && mBill == 0 || !cmp.settled(h) {
			d.Kind = Pending
			d.Message = fmt.Sprintf("pending: %s has not reported totals for this hour yet; %d requests folded, %d in flight", who, mReq, mIn)
			r.Pending = append(r.Pending, d)
		} else {
			r.Discrepancies = append(r.Discrepancies, d)
		}
	}
	got, gotBill := v.folded-mReq, v.foldedBill-mBill
	inf, infBill := v.inflight-mIn, v.inflightBill-mInBill
	c := classify(v.served, v.dropped, got, inf, cmp.partial)
	unit := UnitRequests
	if c.none() {
		c, unit = classify(v.servedBill, v.droppedBill, gotBill, infBill, cmp.partial), UnitBillable
	}
	gotFn, infFn := v.foldedFn-mFn, v.inflightFn-mInFn
	if c.none() {
		c, unit = classify(v.servedFn, v.droppedFn, gotFn, infFn, cmp.partial), UnitFunctionUS
	}
	if c.none() {
		return
	}
	what := fmt.Sprintf("edge %s served %d requests (%d of them dropped by the edge), billing folded %d", quoteEdge(k.edge), v.served, v.dropped, got)
	switch unit {
	case UnitBillable:
		what = fmt.Sprintf("requests agree but edge %s's billable %d (%d of them dropped by the edge) and the folded %d do not", quoteEdge(k.edge), v.servedBill, v.droppedBill, gotBill)
	case UnitFunctionUS:
		what = fmt.Sprintf("requests agree but edge %s's function time %d µs (%d µs of it dropped by the edge) and the folded %d µs do not", quoteEdge(k.edge), v.servedFn, v.droppedFn, gotFn)
		inf = infFn
	}
	r.addEdgeKinds(base, c, unit, cmp.settled(h), what, inf)
}

// compareTenantHour compares a tenant-hour's billed rollup v with its per-edge rollups
// (Unattributed); for an hour folded (partly) before rollups were kept per edge, all its
// edges' totals with the rollup; and, when the tenant is billed through Stripe and the
// hour has settled, the rollup's billable requests and function time with what Stripe
// accepted of each.
func (r *Reconciliation) compareTenantHour(k tenantHour, v *tenantView, all *edgeView, stripe bool, cmp comparison) {
	h := time.Unix(k.hour, 0).UTC()
	base := Discrepancy{TenantID: k.tenant, Hour: h, Edge: all.served, Dropped: all.dropped,
		Folded: v.folded, Billable: v.foldedBill, InFlight: all.inflight, Pushed: v.pushed}
	if v.folded != v.attributed || v.foldedBill != v.attributedBl {
		d := base
		d.Kind, d.Difference, d.Unit = Unattributed, v.folded-v.attributed, UnitRequests
		if d.Difference == 0 {
			d.Difference, d.Unit = v.foldedBill-v.attributedBl, UnitBillable
		}
		d.Message = fmt.Sprintf("UNATTRIBUTED: the tenant's rollup has %d requests (%d billable), its per-edge rollups %d (%d billable): %s, written outside the fold",
			v.folded, v.foldedBill, v.attributed, v.attributedBl, signWords(d.Difference, d.Unit))
		r.Discrepancies = append(r.Discrepancies, d)
	}
	if v.legacy {
		// Folded (partly) before rollups were kept per edge: the edges' sum against
		// the tenant's rollup, as reconcile used to compare.
		c := classify(all.served, all.dropped, v.folded, all.inflight, cmp.partial)
		unit := UnitRequests
		if c.none() {
			c, unit = classify(all.servedBill, all.droppedBill, v.foldedBill, all.inflightBill, cmp.partial), UnitBillable
		}
		if !c.none() {
			what := fmt.Sprintf("all edges served %d requests (%d of them dropped by the edges), billing folded %d (partly before rollups were kept per edge, so per tenant only)",
				all.served, all.dropped, v.folded)
			r.addEdgeKinds(base, c, unit, cmp.settled(h), what, all.inflight)
		}
	}
	if !stripe || !cmp.settled(h) {
		return
	}
	r.compareStripe(base, v.foldedBill, v.pushed, v.pending, v.failed, UnitBillable)
	fn := base
	fn.FoldedFunctionUS, fn.PushedFunctionUS = v.foldedFn, v.fnPushed
	r.compareStripe(fn, v.foldedFn, v.fnPushed, v.fnPending, v.fnFailed, UnitFunctionUS)
}

// compareStripe compares what was folded of one meter (billable requests, or function
// time in µs) with what Stripe accepted of it: StripeExcess, StripeShort, or pending
// while pushes being retried cover the shortfall.
func (r *Reconciliation) compareStripe(base Discrepancy, folded, pushed, pending, failed int64, unit string) {
	if pushed == folded {
		return
	}
	d := base
	d.Difference, d.Unit = pushed-folded, unit
	what := fmt.Sprintf("billing folded %d billable requests, Stripe accepted %d (%d being retried, %d given up on)",
		folded, pushed, pending, failed)
	billed := "billable requests billed"
	if unit == UnitFunctionUS {
		what = fmt.Sprintf("billing folded %d µs of function time, Stripe's function meter accepted %d µs (%d µs being retried, %d µs given up on)",
			folded, pushed, pending, failed)
		billed = "µs of function time billed"
	}
	switch {
	case d.Difference > 0:
		d.Kind = StripeExcess
		d.Message = fmt.Sprintf("STRIPE EXCESS: %s: %s", what, signWords(d.Difference, billed))
		r.Discrepancies = append(r.Discrepancies, d)
	case pushed+pending >= folded:
		d.Kind = Pending
		d.Message = fmt.Sprintf("pending (Stripe push being retried): %s", what)
		r.Pending = append(r.Pending, d)
	default:
		d.Kind = StripeShort
		d.Message = fmt.Sprintf("STRIPE SHORT: %s: %s", what, signWords(d.Difference, billed))
		r.Discrepancies = append(r.Discrepancies, d)
	}
}

// edgeKinds is how what an edge served splits against what billing folded from it.
//
// served is every request the edge counted and handed over, dropped the part of it the
// edge gave up on (a batch it could neither publish nor spool, or deleted from a full
// spool), folded what billing folded from its batches, in flight what sits in the stream
// unfolded. Whatever was served and is not folded is missing, and the edge's drops are a
// loss like any other — they are only the part of it whose cause is known. So:
//
//   - double: folded beyond served (the only meaning of DoubleCount);
//   - dropped: missing, and the edge reported dropping it (DroppedUsage);
//   - lost: missing beyond what the edge reported dropping (Loss);
//   - pending: missing, and possibly still in flight.
//
// A dropped batch whose publish timed out may have been stored after all: it then folds,
// and only the dropped requests still missing are counted.
type edgeKinds struct {
	double, dropped, lost, pending int64
}

func (c edgeKinds) none() bool { return c == edgeKinds{} }

// classify splits one edge-hour (or a legacy tenant-hour) into edgeKinds. With partial,
// batches in flight were not all read, so any shortfall not reported dropped may be among
// them.
func classify(served, dropped, folded, inflight int64, partial bool) edgeKinds {
	if folded > served {
		return edgeKinds{double: folded - served}
	}
	missing := served - folded
	if missing == 0 {
		return edgeKinds{}
	}
	dl := min(max(dropped, 0), missing)
	rest := missing - dl
	// In flight first makes up what nobody reported dropped, then what was dropped after
	// a publish that may have landed.
	inf := max(inflight, 0)
	c := edgeKinds{}
	c.pending = min(inf, rest)
	rest -= c.pending
	inf -= c.pending
	if k := min(inf, dl); k > 0 {
		c.pending += k
		dl -= k
	}
	if partial {
		c.pending += rest
		rest = 0
	}
	c.dropped, c.lost = dl, rest
	return c
}

// addEdgeKinds lists an edge-hour's kinds: each difference that may still close is
// pending (all of them while the hour has not settled), each other one a discrepancy of
// its kind, signed (negative: missing, positive: too many).
func (r *Reconciliation) addEdgeKinds(base Discrepancy, c edgeKinds, unit string, settled bool, what string, inflight int64) {
	add := func(kind string, diff int64, msg string) {
		d := base
		d.Kind, d.Difference, d.Unit, d.Message = kind, diff, unit, msg
		if kind == Pending {
			r.Pending = append(r.Pending, d)
		} else {
			r.Discrepancies = append(r.Discrepancies, d)
		}
	}
	if !settled {
		diff := c.double - c.dropped - c.lost - c.pending
		add(Pending, diff, fmt.Sprintf("pending (hour not settled): %s: %s%s", what, signWords(diff, unit), inFlightNote(inflight)))
		return
	}
	if c.double > 0 {
		add(DoubleCount, c.double, fmt.Sprintf("DOUBLE COUNT: %s: %s (folded more than the edge served: folded twice, or the edge's last totals never covered its last batch, as when its machine is lost)",
			what, signWords(c.double, unit)))
	}
	if c.dropped > 0 {
		add(DroppedUsage, -c.dropped, fmt.Sprintf("DROPPED: %s: %s, given up on by the edge (tollgate_meter_dropped_requests_total says why: spool full, spool or disk error); never billed",
			what, signWords(-c.dropped, unit)))
	}
	if c.lost > 0 {
		add(Loss, -c.lost, fmt.Sprintf("LOSS: %s: %s that the edge did not report dropping%s", what, signWords(-c.lost, unit), inFlightNote(inflight)))
	}
	if c.pending > 0 {
		add(Pending, -c.pending, fmt.Sprintf("pending (batches in flight): %s: %s%s", what, signWords(-c.pending, unit), inFlightNote(inflight)))
	}
}

// bootView is one boot's part of an edge's tenant-hour.
type bootView struct {
	id                     string
	reported               bool // published totals
	folded, foldedBill     int64
	inflight, inflightBill int64
	foldedFn, inflightFn   int64
}

func (v *edgeView) boot(id string) *bootView {
	for i := range v.boots {
		if v.boots[i].id == id {
			return &v.boots[i]
		}
	}
	v.boots = append(v.boots, bootView{id: id})
	return &v.boots[len(v.boots)-1]
}

// signWords says a signed difference in words, so no reader has to guess which way
// round it was subtracted.
func signWords(diff int64, unit string) string {
	if unit == UnitRequests || unit == UnitBillable || unit == UnitFunctionUS {
		unit = map[string]string{UnitRequests: "requests", UnitBillable: "billable requests", UnitFunctionUS: "µs of function time"}[unit]
	}
	switch {
	case diff < 0:
		return fmt.Sprintf("%d %s missing (fewer downstream than upstream)", -diff, unit)
	case diff > 0:
		return fmt.Sprintf("%d %s too many (more downstream than upstream)", diff, unit)
	}
	return "none missing"
}

func inFlightNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d requests in batches not yet folded", n)
}

func quoteEdge(e string) string {
	if e == LegacyEdge {
		return `"" (folded before per-edge rollups)`
	}
	return fmt.Sprintf("%q", e)
}

func sortDiscrepancies(ds []Discrepancy) {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := &ds[i], &ds[j]
		switch {
		case a.TenantID != b.TenantID:
			return a.TenantID < b.TenantID
		case !a.Hour.Equal(b.Hour):
			return a.Hour.Before(b.Hour)
		case a.EdgeID != b.EdgeID:
			return a.EdgeID < b.EdgeID
		}
		return a.Kind < b.Kind
	})
}

// WriteText writes the reconciliation for a terminal: one line per tenant and per edge
// of a tenant, then every discrepancy (DIFF) and pending difference (PENDING).
func (r *Reconciliation) WriteText(w io.Writer) error {
	var err error
	pr := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, args...)
		}
	}
	pr("reconciliation of %s: %d tenants, %d discrepancies, %d pending (settle %s, %d batches in flight)\n",
		r.Period, len(r.Tenants), len(r.Discrepancies), len(r.Pending), r.Settle, r.InFlightBatches)
	pr("%-36s %12s %10s %12s %12s %12s %12s %14s %14s\n", "tenant", "edge", "dropped", "folded", "billable", "stripe", "pending",
		"function µs", "stripe fn µs")
	for _, t := range r.Tenants {
		pr("%-36s %12d %10d %12d %12d %12d %12d %14d %14d\n", t.TenantID, t.EdgeRequests, t.Dropped, t.FoldedRequests, t.FoldedBillable,
			t.Pushed, t.PushPending, t.FoldedFunctionUS, t.FunctionPushed)
	}
	if len(r.Edges) > 0 {
		pr("%-36s %-24s %5s %12s %10s %12s %10s\n", "tenant", "edge id", "boots", "served", "dropped", "folded", "in flight")
		for _, e := range r.Edges {
			id := e.EdgeID
			if id == LegacyEdge {
				id = "(before per-edge)"
			}
			pr("%-36s %-24s %5d %12d %10d %12d %10d\n", e.TenantID, id, e.Boots, e.Served, e.Dropped, e.Folded, e.InFlight)
		}
	}
	line := func(tag string, d *Discrepancy) {
		edge := ""
		if d.EdgeID != "" {
			edge = " edge " + d.EdgeID
		}
		pr("%s %s %s%s: %s\n", tag, d.TenantID, d.Hour.Format("2006-01-02T15Z"), edge, d.Message)
	}
	for i := range r.Discrepancies {
		line("DIFF "+r.Discrepancies[i].Kind, &r.Discrepancies[i])
	}
	for i := range r.Pending {
		line("PENDING", &r.Pending[i])
	}
	if r.OK() {
		pr("OK: edges, rollups and Stripe agree\n")
	}
	return err
}
