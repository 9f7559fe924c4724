package extauth

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts decisions of routes' authorizers (tollgate_edge_external_auth_total:
// allow, deny, cached_allow, cached_deny, failed) and failures by reason
// (tollgate_edge_external_auth_failures_total), and holds the edge's count of cached
// answers (Budget.Total).
type Metrics struct {
	Allow, Deny, CachedAllow, CachedDeny, Failed prometheus.Counter
	Failures                                     [NumReasons]prometheus.Counter
	Cached                                       atomic.Int64
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	rv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_edge_external_auth_total",
		Help: "Requests of routes with an external authorizer, by result (allow, deny, cached_allow, cached_deny, failed)."}, []string{"result"})
	fv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_edge_external_auth_failures_total",
		Help: "External authorizer exchanges that failed closed (503 authorizer_failed), by reason."}, []string{"reason"})
	if err := reg.Register(rv); err != nil {
		return nil, err
	}
	if err := reg.Register(fv); err != nil {
		return nil, err
	}
	m := &Metrics{Allow: rv.WithLabelValues("allow"), Deny: rv.WithLabelValues("deny"),
		CachedAllow: rv.WithLabelValues("cached_allow"), CachedDeny: rv.WithLabelValues("cached_deny"), Failed: rv.WithLabelValues("failed")}
	for i, r := range Reasons {
		m.Failures[i] = fv.WithLabelValues(r)
	}
	return m, nil
}

// Fail counts a failure.
func (m *Metrics) Fail(r Reason) {
	m.Failed.Inc()
	m.Failures[r].Inc()
}
