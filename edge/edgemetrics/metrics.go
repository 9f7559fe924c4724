// Package edgemetrics holds the edge's Prometheus metrics and the bounded labels of its
// tenants and routes.
//
// http_requests_total and http_request_duration_seconds carry the labels gateway
// ("tollgate"), tenant (the slug), route (the route's name) and status — the status
// *class* ("2xx", "4xx"…), not the code, so a route has at most five series per metric.
//
// Label cardinality is bounded: the first Config.MaxTenantLabels tenants (default 500)
// to compile get their own tenant value, later ones share "other"; within a labelled
// tenant the first Config.MaxRouteLabels routes (default 100) get their own route value,
// later ones share "other", and no more than Config.MaxRouteLabelsTotal (default 5,000)
// routes are labelled across all tenants. Requests that match no tenant count under
// tenant "none"; requests of a tenant that match no route under route "none". A deleted
// tenant or route frees its slot and its series are removed.
//
// Nothing on the request path calls WithLabelValues per request: each route holds its
// RouteMetrics, whose per-class children are resolved once on first use and then read
// with one atomic load.
//
// The tollgate_edge_responses_total, _upstream_duration_seconds, _gateway_duration_seconds,
// _request_bytes_total and _response_bytes_total series carry the same tenant and route
// labels (so the same bounds) and a node label, the edge's id. Responses carry the exact
// status code for the codes in responseCodes and the class ("4xx") for any other, so a
// route has at most len(responseCodes)+6 code series.
package edgemetrics

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/edge/balancer"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	labelOther = "other"
	labelNone  = "none"
	gateway    = "tollgate"
)

// Metrics are the edge's metrics; the config plane counts on the exported ones.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	ConfigApplied  prometheus.Counter
	ConfigIgnored  prometheus.Counter
	ConfigRejected *prometheus.CounterVec
	Compiles       prometheus.Counter
	CompileSeconds prometheus.Histogram
	ApplyDelay     prometheus.Histogram
	KVRevision     prometheus.Gauge
	Tenants        prometheus.Gauge
	Routes         prometheus.Gauge
	Ready          prometheus.Gauge
	UpstreamErrors *prometheus.CounterVec
	LogDropped     prometheus.Counter

	// Upstream resilience events, by tenant and route (the route's request labels, so
	// bounded the same way); rare, so resolved with WithLabelValues when they happen.
	retries       *prometheus.CounterVec // + result
	healthChanges *prometheus.CounterVec // + state
	ejections     *prometheus.CounterVec
	breakerOpens  *prometheus.CounterVec
	canary        *prometheus.CounterVec // by tenant, route, side (the edge's canary.go)

	// What APISIX's and Kong's users read, per node (see above).
	responses     *prometheus.CounterVec // + code
	upstreamTime  *prometheus.HistogramVec
	gatewayTime   *prometheus.HistogramVec
	requestBytes  *prometheus.CounterVec
	responseBytes *prometheus.CounterVec
}

// latencyBuckets are the request duration histograms' buckets.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// New registers the edge's metrics; node, the edge's id, labels the per-node ones.
func New(reg prometheus.Registerer, node string) (*Metrics, error) {
	var constLabels prometheus.Labels
	nodeLabel := prometheus.Labels{"node": node}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total", Help: "Requests served by the edge, by tenant, route and status class.",
			ConstLabels: constLabels,
		}, []string{"gateway", "tenant", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds", Help: "Time from request received to response ready, by tenant, route and status class.",
			ConstLabels: constLabels,
			Buckets:     latencyBuckets,
		}, []string{"gateway", "tenant", "route", "status"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_responses_total", Help: "Responses sent, by node, tenant, route and status code (the class, such as 4xx, for a code without its own series).",
			ConstLabels: nodeLabel,
		}, []string{"tenant", "route", "code"}),
		upstreamTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tollgate_edge_upstream_duration_seconds", Help: "Time spent in the upstream exchange (all attempts, to the response head), by node, tenant and route; only requests that went upstream.",
			ConstLabels: nodeLabel, Buckets: latencyBuckets,
		}, []string{"tenant", "route"}),
		gatewayTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tollgate_edge_gateway_duration_seconds", Help: "Time the edge itself took (request duration minus the upstream exchange), by node, tenant and route.",
			ConstLabels: nodeLabel, Buckets: latencyBuckets,
		}, []string{"tenant", "route"}),
		requestBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_request_bytes_total", Help: "Request body bytes received, by node, tenant and route.",
			ConstLabels: nodeLabel,
		}, []string{"tenant", "route"}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_response_bytes_total", Help: "Response body bytes sent, by node, tenant and route.",
			ConstLabels: nodeLabel,
		}, []string{"tenant", "route"}),
		ConfigApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_edge_config_applied_total", Help: "Config entries (puts and deletes) applied.", ConstLabels: constLabels,
		}),
		ConfigIgnored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_edge_config_ignored_total", Help: "Config entries ignored because their rev was not newer than the one held (replays, late publishes).", ConstLabels: constLabels,
		}),
		ConfigRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_config_rejected_total", Help: "Config entries rejected as invalid; the tenant keeps its last good config.", ConstLabels: constLabels,
		}, []string{"kind"}),
		Compiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_edge_compiles_total", Help: "Tenant snapshots compiled.", ConstLabels: constLabels,
		}),
		CompileSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tollgate_edge_compile_duration_seconds", Help: "Time to compile one tenant snapshot.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}),
		ApplyDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tollgate_edge_config_apply_delay_seconds", Help: "Time from a config entry's arrival to the snapshot that contains it serving requests.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.0005, 3, 10),
		}),
		KVRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_edge_config_kv_revision", Help: "KV revision of the last config entry received.", ConstLabels: constLabels,
		}),
		Tenants: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_edge_tenants", Help: "Tenants served.", ConstLabels: constLabels,
		}),
		Routes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_edge_routes", Help: "Routes served, over all tenants.", ConstLabels: constLabels,
		}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_edge_ready", Help: "1 when the initial config is loaded and the edge is not shutting down.", ConstLabels: constLabels,
		}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_upstream_errors_total", Help: "Upstream exchanges that failed, by kind (policy, connect, connect_timeout, timeout, overloaded, bad_response, no_healthy_upstream).", ConstLabels: constLabels,
		}, []string{"kind"}),
		LogDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_edge_access_log_dropped_total", Help: "Access log lines dropped because the log writer fell behind.", ConstLabels: constLabels,
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_upstream_retries_total", Help: "Upstream retries, by tenant, route and result (success, failure, budget_exhausted: due but refused by the retry budget).", ConstLabels: constLabels,
		}, []string{"tenant", "route", "result"}),
		healthChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_upstream_health_changes_total", Help: "Targets the active health check took out of rotation (state unhealthy) or put back (healthy), by tenant and route.", ConstLabels: constLabels,
		}, []string{"tenant", "route", "state"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_upstream_ejections_total", Help: "Targets passive health ejected after consecutive failures, by tenant and route.", ConstLabels: constLabels,
		}, []string{"tenant", "route"}),
		breakerOpens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_upstream_breaker_opens_total", Help: "Target circuits opened (from closed or after a failed half-open trial), by tenant and route.", ConstLabels: constLabels,
		}, []string{"tenant", "route"}),
		canary: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_canary_requests_total", Help: "Requests of routes with a canary, by tenant, route and the side they were sent to (primary, canary).", ConstLabels: constLabels,
		}, []string{"tenant", "route", "side"}),
	}
	for _, c := range []prometheus.Collector{
		m.retries, m.healthChanges, m.ejections, m.breakerOpens,
		m.requests, m.duration, m.ConfigApplied, m.ConfigIgnored, m.ConfigRejected, m.Compiles,
		m.CompileSeconds, m.ApplyDelay, m.KVRevision, m.Tenants, m.Routes, m.Ready, m.UpstreamErrors, m.LogDropped, m.canary,
		m.responses, m.upstreamTime, m.gatewayTime, m.requestBytes, m.responseBytes,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// statusClasses are the status label values, indexed by status/100 (0 for anything
// outside 1xx–5xx).
var statusClasses = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// RouteMetrics are the metric children of one (tenant, route) label pair.
type RouteMetrics struct {
	m             *Metrics
	tenant, route string
	class         [6]atomic.Pointer[classMetrics]
	sides         [2]atomic.Pointer[sideCounter] // CanarySide
	node          atomic.Pointer[nodeMetrics]
	codes         [numCodeSlots]atomic.Pointer[codeCounter]
}

// nodeMetrics are a route's per-node children, resolved on first use.
type nodeMetrics struct {
	upstream, gateway prometheus.Observer
	in, out           prometheus.Counter
}

type codeCounter struct{ c prometheus.Counter }

// responseCodes are the status codes with a series of their own.
var responseCodes = [...]int{
	100, 101, 200, 201, 202, 204, 206, 301, 302, 303, 304, 307, 308,
	400, 401, 403, 404, 405, 406, 408, 409, 410, 411, 412, 413, 414, 415, 416, 421, 422, 425, 426, 428, 429, 431, 451, 499,
	500, 501, 502, 503, 504, 505,
}

// numCodeSlots: one per listed code, then one per class (statusClasses' order).
const numCodeSlots = len(responseCodes) + len(statusClasses)

// codeSlot maps a status code to its slot: 1+i for responseCodes[i], 0 for a code to
// count under its class.
var codeSlot = func() (t [600]uint8) {
	for i, c := range responseCodes {
		t[c] = uint8(1 + i)
	}
	return t
}()

func slotOf(status int) int {
	if status >= 0 && status < len(codeSlot) {
		if s := codeSlot[status]; s != 0 {
			return int(s) - 1
		}
	}
	c := status / 100
	if c < 1 || c > 5 {
		c = 0
	}
	return len(responseCodes) + c
}

func slotLabel(slot int) string {
	if slot < len(responseCodes) {
		return strconv.Itoa(responseCodes[slot])
	}
	return statusClasses[slot-len(responseCodes)]
}

// observeNode counts a response's exact code, its time upstream and at the edge, and its
// body bytes.
func (rm *RouteMetrics) ObserveNode(status int, total, upstream time.Duration, in, out int64) {
	s := slotOf(status)
	cc := rm.codes[s].Load()
	if cc == nil {
		cc = &codeCounter{rm.m.responses.WithLabelValues(rm.tenant, rm.route, slotLabel(s))}
		if !rm.codes[s].CompareAndSwap(nil, cc) {
			cc = rm.codes[s].Load()
		}
	}
	cc.c.Inc()
	nm := rm.node.Load()
	if nm == nil {
		nm = &nodeMetrics{
			upstream: rm.m.upstreamTime.WithLabelValues(rm.tenant, rm.route),
			gateway:  rm.m.gatewayTime.WithLabelValues(rm.tenant, rm.route),
			in:       rm.m.requestBytes.WithLabelValues(rm.tenant, rm.route),
			out:      rm.m.responseBytes.WithLabelValues(rm.tenant, rm.route),
		}
		if !rm.node.CompareAndSwap(nil, nm) {
			nm = rm.node.Load()
		}
	}
	if upstream > 0 {
		nm.upstream.Observe(upstream.Seconds())
	}
	nm.gateway.Observe(max(total-upstream, 0).Seconds())
	if in > 0 {
		nm.in.Add(float64(in))
	}
	if out > 0 {
		nm.out.Add(float64(out))
	}
}

type classMetrics struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func (rm *RouteMetrics) Observe(status int, d time.Duration) {
	c := status / 100
	if c < 1 || c > 5 {
		c = 0
	}
	cm := rm.class[c].Load()
	if cm == nil {
		cm = rm.resolve(c)
	}
	cm.requests.Inc()
	cm.duration.Observe(d.Seconds())
}

func (rm *RouteMetrics) resolve(c int) *classMetrics {
	cm := &classMetrics{
		requests: rm.m.requests.WithLabelValues(gateway, rm.tenant, rm.route, statusClasses[c]),
		duration: rm.m.duration.WithLabelValues(gateway, rm.tenant, rm.route, statusClasses[c]),
	}
	if !rm.class[c].CompareAndSwap(nil, cm) {
		return rm.class[c].Load()
	}
	return cm
}

func (rm *RouteMetrics) delete() {
	l := prometheus.Labels{"tenant": rm.tenant, "route": rm.route}
	rm.m.requests.DeletePartialMatch(l)
	rm.m.duration.DeletePartialMatch(l)
	rm.m.deleteUpstreamSeries(l)
	rm.m.canary.DeletePartialMatch(l)
	rm.m.deleteNodeSeries(l)
}

// Labeler hands out label values within the bounds described above. It belongs to the
// config plane; Compiles take its lock, requests never do.
type Labeler struct {
	mu                              sync.Mutex
	m                               *Metrics
	maxTenants, maxRoutes, maxTotal int
	ownTenants, ownRoutes           int
	tenants                         map[string]*TenantLabels // by tenant id
	other                           *TenantLabels
	NoTenant                        *RouteMetrics
}

type TenantLabels struct {
	Value  string // the tenant label: its slug, or "other"
	Own    bool
	None   *RouteMetrics // requests of the tenant that match no route
	other  *RouteMetrics // its routes past the bound
	routes map[string]*routeLabel
}

type routeLabel struct {
	name string
	rm   *RouteMetrics
}

func NewLabeler(m *Metrics, maxTenants, maxRoutes, maxTotal int) *Labeler {
	l := &Labeler{m: m, maxTenants: maxTenants, maxRoutes: maxRoutes, maxTotal: maxTotal, tenants: map[string]*TenantLabels{}}
	l.other = l.newTenantLabels(labelOther, false)
	l.NoTenant = &RouteMetrics{m: m, tenant: labelNone, route: labelNone}
	return l
}

func (l *Labeler) newTenantLabels(value string, own bool) *TenantLabels {
	return &TenantLabels{
		Value: value, Own: own,
		None:   &RouteMetrics{m: l.m, tenant: value, route: labelNone},
		other:  &RouteMetrics{m: l.m, tenant: value, route: labelOther},
		routes: map[string]*routeLabel{},
	}
}

// Tenant returns the labels of a tenant, giving it its own value while there is room.
func (l *Labeler) Tenant(id, slug string) *TenantLabels {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tl := l.tenants[id]; tl != nil {
		if tl.Value == slug {
			return tl
		}
		l.dropLocked(id) // the slug changed: start over under the new value
	}
	if l.ownTenants >= l.maxTenants {
		return l.other
	}
	tl := l.newTenantLabels(slug, true)
	l.tenants[id] = tl
	l.ownTenants++
	return tl
}

// Routes assigns the route metrics of a tenant's current routes (ids → names), in the
// order given, and frees the labels of routes no longer present.
func (l *Labeler) Routes(tl *TenantLabels, ids, names []string) []*RouteMetrics {
	out := make([]*RouteMetrics, len(ids))
	l.mu.Lock()
	defer l.mu.Unlock()
	if !tl.Own {
		for i := range out {
			out[i] = tl.other
		}
		return out
	}
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
	}
	for id, rl := range tl.routes {
		if !live[id] {
			rl.rm.delete()
			delete(tl.routes, id)
			l.ownRoutes--
		}
	}
	for i, id := range ids {
		rl := tl.routes[id]
		if rl != nil && rl.name != names[i] {
			rl.rm.delete()
			rl.rm = &RouteMetrics{m: l.m, tenant: tl.Value, route: names[i]}
			rl.name = names[i]
		}
		if rl == nil {
			if len(tl.routes) >= l.maxRoutes || l.ownRoutes >= l.maxTotal {
				out[i] = tl.other
				continue
			}
			rl = &routeLabel{name: names[i], rm: &RouteMetrics{m: l.m, tenant: tl.Value, route: names[i]}}
			tl.routes[id] = rl
			l.ownRoutes++
		}
		out[i] = rl.rm
	}
	return out
}

// Route returns the route metrics of one route of a tenant (an incremental compile's
// changed route): its labels when it has them and its name is unchanged, new ones while
// there is room, else the tenant's "other".
func (l *Labeler) Route(tl *TenantLabels, id, name string) *RouteMetrics {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !tl.Own {
		return tl.other
	}
	rl := tl.routes[id]
	if rl != nil && rl.name != name {
		rl.rm.delete()
		rl.rm = &RouteMetrics{m: l.m, tenant: tl.Value, route: name}
		rl.name = name
	}
	if rl == nil {
		if len(tl.routes) >= l.maxRoutes || l.ownRoutes >= l.maxTotal {
			return tl.other
		}
		rl = &routeLabel{name: name, rm: &RouteMetrics{m: l.m, tenant: tl.Value, route: name}}
		tl.routes[id] = rl
		l.ownRoutes++
	}
	return rl.rm
}

// DropRoute frees the labels of a deleted route and removes its series.
func (l *Labeler) DropRoute(tl *TenantLabels, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rl := tl.routes[id]; rl != nil {
		rl.rm.delete()
		delete(tl.routes, id)
		l.ownRoutes--
	}
}

// Drop frees a deleted tenant's labels and removes its series.
func (l *Labeler) Drop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(id)
}

func (l *Labeler) dropLocked(id string) {
	tl := l.tenants[id]
	if tl == nil {
		return
	}
	delete(l.tenants, id)
	l.ownTenants--
	l.ownRoutes -= len(tl.routes)
	p := prometheus.Labels{"tenant": tl.Value}
	l.m.requests.DeletePartialMatch(p)
	l.m.duration.DeletePartialMatch(p)
	l.m.deleteUpstreamSeries(p)
	l.m.canary.DeletePartialMatch(p)
	l.m.deleteNodeSeries(p)
}

func (m *Metrics) deleteNodeSeries(l prometheus.Labels) {
	m.responses.DeletePartialMatch(l)
	m.upstreamTime.DeletePartialMatch(l)
	m.gatewayTime.DeletePartialMatch(l)
	m.requestBytes.DeletePartialMatch(l)
	m.responseBytes.DeletePartialMatch(l)
}

func (m *Metrics) deleteUpstreamSeries(l prometheus.Labels) {
	m.retries.DeletePartialMatch(l)
	m.healthChanges.DeletePartialMatch(l)
	m.ejections.DeletePartialMatch(l)
	m.breakerOpens.DeletePartialMatch(l)
}

// Tenant is the tenant label value rm counts under.
func (rm *RouteMetrics) Tenant() string { return rm.tenant }

// The events of a route's upstream (balancer.Events), counted under its labels.

func (rm *RouteMetrics) Ejected()       { rm.m.ejections.WithLabelValues(rm.tenant, rm.route).Inc() }
func (rm *RouteMetrics) BreakerOpened() { rm.m.breakerOpens.WithLabelValues(rm.tenant, rm.route).Inc() }

func (rm *RouteMetrics) HealthChanged(healthy bool) {
	state := "unhealthy"
	if healthy {
		state = "healthy"
	}
	rm.m.healthChanges.WithLabelValues(rm.tenant, rm.route, state).Inc()
}

func (rm *RouteMetrics) Retried(r balancer.RetryResult) {
	rm.m.retries.WithLabelValues(rm.tenant, rm.route, string(r)).Inc()
}

// Sides of tollgate_edge_canary_requests_total (CanarySide).
const (
	SidePrimary = iota
	SideCanary
)

var canarySides = [2]string{"primary", "canary"}

// CanarySide counts a request of a route with a canary on the side it was sent to. The
// children are resolved on first use, so routes without a canary have no series.
func (rm *RouteMetrics) CanarySide(side int) {
	p := rm.sides[side].Load()
	if p == nil {
		p = &sideCounter{rm.m.canary.WithLabelValues(rm.tenant, rm.route, canarySides[side])}
		if !rm.sides[side].CompareAndSwap(nil, p) {
			p = rm.sides[side].Load()
		}
	}
	p.Inc()
}

// sideCounter boxes a counter for an atomic.Pointer.
type sideCounter struct{ prometheus.Counter }
