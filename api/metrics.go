package api

import (
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the api process's Prometheus series: its HTTP requests, and the outbox
// relay's state (backlog, publish errors and lag), which the process sets through the
// methods below. Request series are labelled by route template ("/v1/tenants/:slug"),
// method and status class, never by raw path, so their number is bounded by the
// endpoint table: a path that matches no endpoint counts under route "unmatched".
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	outboxRows    prometheus.Gauge
	outboxAge     prometheus.Gauge
	relayActive   prometheus.Gauge
	publishErrors prometheus.Counter
	publishLag    prometheus.Histogram
	published     prometheus.Counter
}

// NewMetrics registers the api's series on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_api_http_requests_total", Help: "Management API requests, by route template, method and status class.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tollgate_api_http_request_duration_seconds", Help: "Management API request duration, by route template, method and status class.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method", "status"}),
		outboxRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_outbox_unsent_rows", Help: "Config changes in the outbox not yet published to the KV bucket (read every few seconds).",
		}),
		outboxAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_outbox_oldest_unsent_age_seconds", Help: "Age of the oldest unpublished outbox row; 0 when none is waiting.",
		}),
		relayActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_relay_active", Help: "1 when this process's outbox relay holds the relay lock (one per database is active).",
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_relay_publish_errors_total", Help: "Outbox batches whose publish to the KV bucket failed (retried with backoff).",
		}),
		publishLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tollgate_relay_publish_lag_seconds", Help: "Time from a config change's write to its publish in the KV bucket, per change.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_relay_published_total", Help: "Config changes the relay published to the KV bucket.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.outboxRows, m.outboxAge, m.relayActive, m.publishErrors, m.publishLag, m.published} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// routeUnmatched labels requests that matched no endpoint.
const routeUnmatched = "unmatched"

// handler counts one request. It runs before frame, so the error envelope is rendered
// and the status final when it looks.
func (m *Metrics) handler(c *fiber.Ctx) error {
	// After Next, Ctx.Route is the last route that ran: the endpoint's, or, when the path
	// matched none, still this middleware's (or another app.Use prefix's, itself a
	// template).
	mine := c.Route()
	start := time.Now()
	err := c.Next()
	route := routeUnmatched
	if r := c.Route(); r != nil && r != mine {
		route = r.Path
	}
	class := statusClass(c.Response().StatusCode())
	m.requests.WithLabelValues(route, c.Method(), class).Inc()
	m.duration.WithLabelValues(route, c.Method(), class).Observe(time.Since(start).Seconds())
	return err
}

var statusClasses = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

func statusClass(status int) string {
	c := status / 100
	if c < 1 || c > 5 {
		c = 0
	}
	return statusClasses[c]
}

// SetOutboxBacklog records the outbox's unsent rows and its oldest unsent row's age.
func (m *Metrics) SetOutboxBacklog(rows int64, oldest time.Duration) {
	m.outboxRows.Set(float64(rows))
	m.outboxAge.Set(oldest.Seconds())
}

// SetRelayActive records whether this process's relay is the active one.
func (m *Metrics) SetRelayActive(active bool) {
	v := 0.0
	if active {
		v = 1
	}
	m.relayActive.Set(v)
}

// PublishFailed counts a failed publish of an outbox batch.
func (m *Metrics) PublishFailed() { m.publishErrors.Inc() }

// Published records a published change's lag from its write.
func (m *Metrics) Published(lag time.Duration) {
	m.published.Inc()
	m.publishLag.Observe(max(lag, 0).Seconds())
}
