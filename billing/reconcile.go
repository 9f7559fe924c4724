package billing

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"
)

// HourTotal is a tenant's usage in one hour as one source saw it.
type HourTotal struct {
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	Requests int64     `json:"requests"`
	Billable int64     `json:"billable"`
}

// PushTotal is what was sent to Stripe for a tenant's hour, by the state of the pushes.
type PushTotal struct {
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	Pushed   int64     `json:"pushed"`  // accepted by Stripe
	Pending  int64     `json:"pending"` // not yet accepted; being retried
	Failed   int64     `json:"failed"`  // given up on
}

// EdgeTotalsSource reads the totals edges published for a period (billing/nats).
type EdgeTotalsSource interface {
	EdgeTotals(ctx context.Context, p Period) ([]EdgeTotal, error)
}

// FoldedSource reads what billing folded for a period, per tenant and hour
// (billing/postgres).
type FoldedSource interface {
	FoldedTotals(ctx context.Context, p Period) ([]HourTotal, error)
}

// StripeSource reads what was pushed to Stripe for a period and which tenants are billed
// through Stripe (billing/postgres).
type StripeSource interface {
	PushTotals(ctx context.Context, p Period) ([]PushTotal, error)
	// BillingCustomers maps tenant id to Stripe customer id.
	BillingCustomers(ctx context.Context) (map[string]string, error)
}

// ReconcileSources are the three views Reconcile compares. Stripe may be nil (no Stripe
// push configured): then only edges and rollups are compared.
type ReconcileSources struct {
	Edges  EdgeTotalsSource
	Folded FoldedSource
	Stripe StripeSource
	// Now and Settle decide which hours Stripe should have by now: those that ended at
	// least Settle before Now. Defaults: time.Now, DefaultSettle.
	Now    func() time.Time
	Settle time.Duration
}

// DefaultSettle is how long after an hour ends its usage is pushed to Stripe, so that
// batches still in flight (or spooled at an edge for a short outage) fold first.
const DefaultSettle = 15 * time.Minute

// Discrepancy kinds.
const (
	// EdgeVsFolded: the edges' counts, less what they reported dropped, differ from the
	// rollups. Batches in flight or spooled at an edge explain a shortfall for a while;
	// one that persists is lost usage (or an edge that never reported its totals).
	EdgeVsFolded = "edge_vs_folded"
	// FoldedVsStripe: a settled hour's billable rollup differs from what Stripe accepted.
	FoldedVsStripe = "folded_vs_stripe"
)

// Discrepancy is one tenant-hour where two views disagree.
type Discrepancy struct {
	Kind     string    `json:"kind"`
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	Edge     int64     `json:"edge_requests"`
	Dropped  int64     `json:"edge_dropped"`
	Folded   int64     `json:"folded_requests"`
	Billable int64     `json:"folded_billable"`
	Pushed   int64     `json:"stripe_pushed"`
	Message  string    `json:"message"`
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
	StripeCustomer  string `json:"stripe_customer,omitempty"`
	Pushed          int64  `json:"stripe_pushed"`
	PushPending     int64  `json:"stripe_pending"`
	PushFailed      int64  `json:"stripe_failed"`
}

// Reconciliation is the outcome of Reconcile.
type Reconciliation struct {
	Period        string                 `json:"period"`
	Tenants       []TenantReconciliation `json:"tenants"`
	Discrepancies []Discrepancy          `json:"discrepancies"`
}

// OK says whether every view agreed.
func (r *Reconciliation) OK() bool { return len(r.Discrepancies) == 0 }

type tenantHour struct {
	tenant string
	hour   int64 // unix seconds
}

// Reconcile compares, tenant by tenant and hour by hour, what the edges counted (their
// published totals, all edges and boots summed), what billing folded into the rollups,
// and — for tenants billed through Stripe and hours that have settled — what Stripe
// accepted. It reads only; the result lists every disagreement.
//
// Expected, when nothing is lost: folded requests = edge requests − edge dropped, the
// same for billable, and Stripe's pushed quantity = folded billable.
func Reconcile(ctx context.Context, p Period, src ReconcileSources) (*Reconciliation, error) {
	if src.Now == nil {
		src.Now = time.Now
	}
	if src.Settle <= 0 {
		src.Settle = DefaultSettle
	}
	type view struct {
		edge, edgeBill, dropped, droppedBill int64
		folded, foldedBill                   int64
		pushed, pending, failed              int64
	}
	hours := map[tenantHour]*view{}
	at := func(tenant string, h time.Time) *view {
		k := tenantHour{tenant, h.Unix()}
		v := hours[k]
		if v == nil {
			v = &view{}
			hours[k] = v
		}
		return v
	}
	start, end := p.Start(), p.End()
	in := func(h time.Time) bool { return !h.Before(start) && h.Before(end) }

	edges, err := src.Edges.EdgeTotals(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("reconcile: edge totals: %w", err)
	}
	for _, t := range edges {
		if !in(t.Hour) {
			continue
		}
		v := at(t.TenantID, t.Hour)
		v.edge += t.Requests
		v.edgeBill += t.Billable
		v.dropped += t.Dropped
		v.droppedBill += t.DroppedBillable
	}
	folded, err := src.Folded.FoldedTotals(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("reconcile: rollups: %w", err)
	}
	for _, t := range folded {
		v := at(t.TenantID, t.Hour)
		v.folded += t.Requests
		v.foldedBill += t.Billable
	}
	customers := map[string]string{}
	if src.Stripe != nil {
		if customers, err = src.Stripe.BillingCustomers(ctx); err != nil {
			return nil, fmt.Errorf("reconcile: billing customers: %w", err)
		}
		pushes, err := src.Stripe.PushTotals(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("reconcile: stripe pushes: %w", err)
		}
		for _, t := range pushes {
			v := at(t.TenantID, t.Hour)
			v.pushed += t.Pushed
			v.pending += t.Pending
			v.failed += t.Failed
		}
	}

	keys := make([]tenantHour, 0, len(hours))
	for k := range hours {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].hour < keys[j].hour
	})
	r := &Reconciliation{Period: p.String(), Tenants: []TenantReconciliation{}, Discrepancies: []Discrepancy{}}
	settledBefore := src.Now().Add(-src.Settle)
	var cur *TenantReconciliation
	for _, k := range keys {
		v := hours[k]
		h := time.Unix(k.hour, 0).UTC()
		if cur == nil || cur.TenantID != k.tenant {
			r.Tenants = append(r.Tenants, TenantReconciliation{TenantID: k.tenant, StripeCustomer: customers[k.tenant]})
			cur = &r.Tenants[len(r.Tenants)-1]
		}
		cur.EdgeRequests += v.edge
		cur.EdgeBillable += v.edgeBill
		cur.Dropped += v.dropped
		cur.DroppedBillable += v.droppedBill
		cur.FoldedRequests += v.folded
		cur.FoldedBillable += v.foldedBill
		cur.Pushed += v.pushed
		cur.PushPending += v.pending
		cur.PushFailed += v.failed

		d := Discrepancy{TenantID: k.tenant, Hour: h, Edge: v.edge, Dropped: v.dropped, Folded: v.folded, Billable: v.foldedBill, Pushed: v.pushed}
		wantReq, wantBill := v.edge-v.dropped, v.edgeBill-v.droppedBill
		if v.folded != wantReq || v.foldedBill != wantBill {
			d.Kind = EdgeVsFolded
			switch {
			case v.folded < wantReq:
				d.Message = fmt.Sprintf("edges counted %d requests (%d dropped), billing folded %d: %d missing (in flight, spooled at an edge, or lost)",
					v.edge, v.dropped, v.folded, wantReq-v.folded)
			case v.folded > wantReq:
				d.Message = fmt.Sprintf("billing folded %d requests, edges report only %d (%d dropped): %d unaccounted for by edge totals",
					v.folded, v.edge, v.dropped, v.folded-wantReq)
			default:
				d.Message = fmt.Sprintf("requests agree (%d) but billable differs: edges %d (%d dropped), folded %d",
					v.folded, v.edgeBill, v.droppedBill, v.foldedBill)
			}
			r.Discrepancies = append(r.Discrepancies, d)
		}
		if customers[k.tenant] != "" && !h.Add(time.Hour).After(settledBefore) && v.pushed != v.foldedBill {
			d.Kind = FoldedVsStripe
			d.Message = fmt.Sprintf("folded %d billable, Stripe accepted %d (%d pending, %d failed)", v.foldedBill, v.pushed, v.pending, v.failed)
			r.Discrepancies = append(r.Discrepancies, d)
		}
	}
	return r, nil
}

// WriteText writes the reconciliation for a terminal: one line per tenant, then every
// discrepancy.
func (r *Reconciliation) WriteText(w io.Writer) error {
	var err error
	pr := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, args...)
		}
	}
	pr("reconciliation of %s: %d tenants, %d discrepancies\n", r.Period, len(r.Tenants), len(r.Discrepancies))
	pr("%-36s %12s %10s %12s %12s %12s %12s\n", "tenant", "edge", "dropped", "folded", "billable", "stripe", "pending")
	for _, t := range r.Tenants {
		pr("%-36s %12d %10d %12d %12d %12d %12d\n", t.TenantID, t.EdgeRequests, t.Dropped, t.FoldedRequests, t.FoldedBillable, t.Pushed, t.PushPending)
	}
	for _, d := range r.Discrepancies {
		pr("DIFF %s %s %s: %s\n", d.Kind, d.TenantID, d.Hour.Format("2006-01-02T15Z"), d.Message)
	}
	if r.OK() {
		pr("OK: edges, rollups and Stripe agree\n")
	}
	return err
}
