package billing

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the billing process's Prometheus series: how far behind the edges the
// folding is, and how the Stripe push fares. A nil *Metrics records nothing, so the
// usage reader and the pusher take one whether or not the process serves metrics.
type Metrics struct {
	foldLag      prometheus.Histogram
	batches      *prometheus.CounterVec
	pushes       prometheus.Counter
	pushFailures *prometheus.CounterVec
	lastPush     prometheus.Gauge
}

// NewMetrics registers billing's series on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		foldLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tollgate_billing_fold_lag_seconds", Help: "Time from an edge cutting a usage batch to billing folding it (by the edge's clock against billing's).",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_billing_batches_total", Help: "Usage batches handled, by result (folded, duplicate: folded already, poison: undecodable and terminated, failed: fold failed and retried).",
		}, []string{"result"}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_billing_stripe_pushes_total", Help: "Meter events Stripe accepted.",
		}),
		pushFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_billing_stripe_push_failures_total", Help: "Meter event pushes Stripe refused or that did not reach it, by kind (retry: retried with backoff, permanent: given up).",
		}, []string{"kind"}),
		lastPush: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_billing_stripe_last_push_success_timestamp_seconds", Help: "Unix time of the last meter event Stripe accepted; 0 before the first.",
		}),
	}
	for _, c := range []prometheus.Collector{m.foldLag, m.batches, m.pushes, m.pushFailures, m.lastPush} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{BatchFolded, BatchDuplicate, BatchPoison, BatchFailed} {
		m.batches.WithLabelValues(r)
	}
	m.pushFailures.WithLabelValues("retry")
	m.pushFailures.WithLabelValues("permanent")
	return m, nil
}

// Batch results, the label values of tollgate_billing_batches_total.
const (
	BatchFolded    = "folded"
	BatchDuplicate = "duplicate"
	BatchPoison    = "poison"
	BatchFailed    = "failed"
)

// Batch counts a batch's result; a folded one also records its lag from created.
func (m *Metrics) Batch(result string, created, now time.Time) {
	if m == nil {
		return
	}
	m.batches.WithLabelValues(result).Inc()
	if result == BatchFolded && !created.IsZero() {
		m.foldLag.Observe(max(now.Sub(created), 0).Seconds())
	}
}

// Pushed records a meter event Stripe accepted at.
func (m *Metrics) Pushed(at time.Time) {
	if m == nil {
		return
	}
	m.pushes.Inc()
	m.lastPush.Set(float64(at.UnixNano()) / 1e9)
}

// PushFailed records a push that failed; permanent when it will not be retried.
func (m *Metrics) PushFailed(permanent bool) {
	if m == nil {
		return
	}
	kind := "retry"
	if permanent {
		kind = "permanent"
	}
	m.pushFailures.WithLabelValues(kind).Inc()
}
