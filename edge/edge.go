// Package edge is Tollgate's data plane: it serves tenant traffic on
// {slug}.{domain}, matching each request to a tenant's route, authenticating it and
// proxying it to the route's upstream over pooled keep-alive connections.
//
// Config arrives as KV entries (tenants.Entry) through Apply, from whatever watches the
// bucket; the edge never reads Postgres or NATS itself. Entries accumulate per tenant and
// each tenant compiles into an immutable Snapshot (route table, key table, upstream pools,
// one prebuilt handler chain per route) published with one atomic store. The request path
// takes no lock and, for routing and key lookup, allocates nothing: everything that can be
// is computed when config changes, not when requests arrive.
//
// A request's journey, one file per step:
//
//	listen.go              the Fiber door and the listeners (connections: package conn)
//	route.go               Host → tenant snapshot → route (package routing), then the chain
//	chain.go               a route's chain of steps, assembled when its tenant compiles
//	authenticate_key.go    X-API-Key → consumer
//	authenticate_jwt.go    bearer token → caller
//	authorize.go           the tenant's access rules
//	limit.go               rate limits, quotas and concurrency (package limit)
//	cache.go               answers from the route's response cache
//	limit_body.go          the route's body limit
//	transform.go           request and response rewrites
//	websocket.go           upgrades, relayed as a tunnel
//	proxy.go               the upstream exchange; its targets: upstream.go, balance.go,
//	                       health.go, retry.go, canary.go; its connections:
//	                       upstreamclient.go, upstreamclient_roundtrip.go
//	meter.go               usage records for billing (package meter)
//	reply.go               the edge's own JSON answers
//	compile.go             tenant config → Snapshot (snapshot.go), published by edge.go
//
// The package must not import storage or transport of the control plane (tenants/postgres,
// tenants/nats); it knows only the domain types of package tenants.
package edge

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tollgate/edge/jwtauth"
	"tollgate/edge/limit"
	"tollgate/edge/meter"
	"tollgate/tenants"
)

// Config configures an Edge. Zero fields take the default named in their comment.
type Config struct {
	// Domain is the edge domain: tenant "demo" is served on demo.{Domain}. Required.
	Domain string
	// AddressRule is checked on every address the edge connects to (UpstreamAddressRule.CheckAddr).
	// Default: the zero policy, which refuses every address that is not globally reachable.
	AddressRule *tenants.UpstreamAddressRule
	// TrustedProxies are the peers whose X-Forwarded-* headers the edge keeps (appending
	// to X-Forwarded-For). Default: none, every client's X-Forwarded-* is replaced.
	TrustedProxies []netip.Prefix
	// Logger receives config, lifecycle and (when AccessLog) access lines.
	// Default: slog.Default().
	Logger *slog.Logger
	// AccessLog turns on one log line per request, written asynchronously at Info level.
	// Default: false.
	AccessLog bool
	// EdgeID names this edge in logs. Default: the host name.
	EdgeID string
	// Registry is where the edge registers its metrics; Gatherer is what /metrics serves.
	// Default: a new registry (with Go and process collectors) for both.
	Registry prometheus.Registerer
	Gatherer prometheus.Gatherer
	// Pprof serves /debug/pprof/ on the admin listener. Default: false.
	Pprof bool

	// Metric label bounds (see metrics.go). Defaults: 500 tenants, 100 routes per
	// tenant, 5,000 routes in all.
	MaxTenantLabels     int
	MaxRouteLabels      int
	MaxRouteLabelsTotal int

	// CompileDelay is how long a config change waits for more changes of the same burst
	// before its tenant recompiles; a tenant compiles at most once per delay.
	// Default: 2ms.
	CompileDelay time.Duration

	// Upstream connection pools, one per tenant and target. Defaults: 1024 connections,
	// idle ones closed after 60s, a request waits up to 1s for a free connection (then
	// 503 overloaded).
	MaxConnsPerTarget   int
	MaxIdleConnDuration time.Duration
	MaxConnWait         time.Duration

	// Client side of the public listener. ReadBufferSize also bounds the request and
	// response header size. Defaults: 16 KiB; 60s to read a request, 60s to write a
	// response, idle keep-alive as long as ReadTimeout (equal, they let a busy connection
	// skip most deadline updates: see edge/conn); a negative timeout disables it.
	ReadBufferSize int
	ReadTimeout    time.Duration
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	// MaxInMemoryBody: request bodies up to this size are read before routing; larger
	// ones stream to the upstream. Default: 64 KiB.
	MaxInMemoryBody int
	// BufferResponses reads each upstream response whole before answering. Default:
	// false, responses stream to the client, so memory does not grow with body size;
	// streaming costs four small allocations per request, buffering none.
	BufferResponses bool

	// Limiter enforces the tenants' rate limits, quotas and concurrency caps (see
	// limit.go); the caller closes it after Shutdown. Default: a limiter of the edge's own
	// with local limits only (no Redis), closed by Shutdown.
	Limiter *limit.Limiter

	// Meter counts every request of a known tenant for billing (see meter.go); the
	// caller closes it after Shutdown. Default: nil, nothing is metered.
	Meter *meter.Meter

	// JWKS configures the fetching of the key sets of jwks_url issuers (one cache for
	// the process). Defaults: jwtauth's, with CheckAddr = AddressRule.CheckAddr (a key set URL
	// can reach no address an upstream may not) and Logger = Logger.
	JWKS jwtauth.JWKSConfig

	// TLSCertificate is the edge domain's wildcard certificate (*.{Domain}), which the
	// TLS listener (ServeTLS) presents to every handshake whose SNI names no tenant's
	// custom domain (tls.go). Default: nil, only custom domains' handshakes succeed.
	TLSCertificate *tls.Certificate

	// WebSocket tunnels of routes with "websocket": true (websocket.go) close after
	// WebSocketIdleTimeout without a byte either way, and after WebSocketMaxLifetime in
	// any case. Defaults: 10 minutes, 24 hours.
	WebSocketIdleTimeout time.Duration
	WebSocketMaxLifetime time.Duration

	// CacheBytes is the budget of every route's response cache together: kept answers'
	// bodies, headers, keys and a fixed overhead each, shared fairly by the tenants and
	// each tenant held to its plan's cache_bytes (cache_budget.go). Default: 256 MiB;
	// negative: no response cache (routes with a cache answer without one).
	CacheBytes int64
}

func (c *Config) setDefaults() error {
	c.Domain = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(c.Domain)), ".")
	if c.Domain == "" {
		return errors.New("edge: Config.Domain is required")
	}
	if c.AddressRule == nil {
		c.AddressRule = &tenants.UpstreamAddressRule{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.EdgeID == "" {
		c.EdgeID, _ = os.Hostname()
	}
	if c.Registry == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		c.Registry = reg
	}
	if c.Gatherer == nil {
		g, ok := c.Registry.(prometheus.Gatherer)
		if !ok {
			return errors.New("edge: Config.Gatherer is required when Registry is not a Gatherer")
		}
		c.Gatherer = g
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxTenantLabels, 500)
	def(&c.MaxRouteLabels, 100)
	def(&c.MaxRouteLabelsTotal, 5000)
	defD(&c.CompileDelay, 2*time.Millisecond)
	def(&c.MaxConnsPerTarget, 1024)
	defD(&c.MaxIdleConnDuration, 60*time.Second)
	defD(&c.MaxConnWait, time.Second)
	def(&c.ReadBufferSize, 16<<10)
	defT := func(v *time.Duration, d time.Duration) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0 // disabled
		}
	}
	defT(&c.ReadTimeout, 60*time.Second)
	defT(&c.WriteTimeout, 60*time.Second)
	defT(&c.IdleTimeout, c.ReadTimeout)
	def(&c.MaxInMemoryBody, 64<<10)
	defD(&c.WebSocketIdleTimeout, 10*time.Minute)
	defD(&c.WebSocketMaxLifetime, 24*time.Hour)
	if c.CacheBytes == 0 {
		c.CacheBytes = 256 << 20
	}
	return nil
}

// Edge is the data plane of one process. Create it with New, feed it config with Apply
// and Loaded, run it with Serve and stop it with Shutdown.
type Edge struct {
	cfg    Config
	domain string
	log    *slog.Logger
	debug  bool
	m      *metrics
	labels *labeler
	dialer *dialer
	access *accessLog

	upstreamErrs [numUpstreamErrKinds]prometheus.Counter

	lim    *limit.Limiter
	ownLim bool // lim is the edge's own: Shutdown closes it
	flow   *flowMetrics
	jwks   *jwtauth.JWKSCache // key sets of every tenant's jwks_url issuers (authenticate_jwt.go)
	cache  *cacheBudget       // the response caches' shared budget (cache_budget.go); nil: off
	auth   *authMetrics

	// Read by every request.
	hosts    atomic.Pointer[map[string]*tenantSlot]
	custom   atomic.Pointer[customHosts] // custom domains (tls.go)
	ready    atomic.Bool
	draining atomic.Bool
	cfile    atomic.Pointer[ConfigFile] // where config comes from, for /readyz (snapshotfile.go)

	// Config plane: entries per tenant, guarded by mu.
	mu       sync.Mutex
	state    map[string]*tenantState // by tenant id
	tombs    map[string]int64        // rev of deleted tenants' tenant entries
	dirty    map[string]time.Time    // tenant id → when it first changed since its last compile
	removed  []*tenantState          // deleted tenants still to unpublish
	loaded   bool
	kick     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
	shutDown chan struct{} // closed when Shutdown has finished

	// compileMu serializes compiles (Loaded's and the compiler goroutine's); the fields
	// of tenantState marked "compiler" are guarded by it.
	compileMu sync.Mutex

	public *door // the Fiber app of the public and TLS listeners (listen.go)
	admin  *http.Server
	ws     wsSet // open WebSocket tunnels (websocket.go)

	checkers healthCheckers // active health checks of upstreams (health.go)
}

// tenantSlot is a tenant's place in the host map: the map changes only when tenants come
// and go, the snapshot behind a slot on every change of the tenant.
type tenantSlot struct {
	snap atomic.Pointer[Snapshot]
}

// tenantState is a tenant's entries as received.
type tenantState struct {
	id          string
	revs        map[string]int64 // entry key → rev held (also kept after a delete)
	maxRev      int64
	tenant      *tenants.Tenant
	routes      map[string]*tenants.Route
	consumers   map[string]*tenants.Consumer
	keys        map[string]keyEntry
	plans       map[string]*tenants.Plan
	issuers     map[string]*tenants.Issuer
	accessRules *tenants.AccessRules
	domains     map[string]domainEntry // custom domains (tls.go), by id
	// domainsDirty: domains changed since the host maps were last rebuilt.
	domainsDirty bool
	slot         *tenantSlot

	// compiler
	compiled  compiled
	published string // slug under which slot is in the host map, "" when not
	labels    *tenantLabels
}

func newTenantState(id string) *tenantState {
	return &tenantState{
		id: id, revs: map[string]int64{},
		routes: map[string]*tenants.Route{}, consumers: map[string]*tenants.Consumer{},
		keys: map[string]keyEntry{}, plans: map[string]*tenants.Plan{},
		issuers:  map[string]*tenants.Issuer{},
		domains:  map[string]domainEntry{},
		slot:     &tenantSlot{},
		compiled: compiled{pools: map[string]*upstreamClient{}},
	}
}

func init() {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	hex.Encode(reqIDPrefix[:], b[:])
}

// New returns an edge that answers 503 not_ready until Loaded is called.
func New(cfg Config) (*Edge, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry, cfg.EdgeID)
	if err != nil {
		return nil, fmt.Errorf("edge: registering metrics: %w", err)
	}
	e := &Edge{
		cfg:      cfg,
		domain:   cfg.Domain,
		log:      cfg.Logger.With("edge", cfg.EdgeID),
		m:        m,
		labels:   newLabeler(m, cfg.MaxTenantLabels, cfg.MaxRouteLabels, cfg.MaxRouteLabelsTotal),
		dialer:   &dialer{addressRule: cfg.AddressRule, resolver: net.DefaultResolver},
		state:    map[string]*tenantState{},
		tombs:    map[string]int64{},
		dirty:    map[string]time.Time{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
		shutDown: make(chan struct{}),
	}
	e.debug = e.log.Enabled(context.Background(), slog.LevelDebug)
	if err := e.initLimits(); err != nil {
		return nil, fmt.Errorf("edge: limiter: %w", err)
	}
	if err := e.initAuth(); err != nil {
		return nil, fmt.Errorf("edge: auth: %w", err)
	}
	if err := e.initCache(); err != nil {
		return nil, fmt.Errorf("edge: response cache: %w", err)
	}
	for i, k := range upstreamErrKinds {
		e.upstreamErrs[i] = m.upstreamErrors.WithLabelValues(k)
	}
	empty := map[string]*tenantSlot{}
	e.hosts.Store(&empty)
	e.custom.Store(emptyCustomHosts)
	if cfg.AccessLog {
		e.access = newAccessLog(e.log, m.logDropped)
	}
	e.public = e.newDoor() // listen.go
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("/readyz", e.serveReadyz)
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	e.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go e.compiler()
	return e, nil
}

type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("edge: fasthttp: " + fmt.Sprintf(format, args...))
	}
}

func (e *Edge) serveReadyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if e.ready.Load() {
		_, _ = w.Write(e.readyzBody())
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	msg := e.loadingMessage()
	if e.draining.Load() {
		msg = "shutting down"
	}
	fmt.Fprintf(w, `{"error":{"code":%q,"message":%q,"request_id":""}}`, tenants.ENotReady, msg)
}

// Ready reports whether the edge serves tenant traffic: the initial load is complete and
// it is not shutting down.
func (e *Edge) Ready() bool { return e.ready.Load() }

// Apply takes one KV entry: value is the entry's JSON, nil for a delete; kvRevision is
// the KV sequence it came with. Entries whose Rev is not newer than the one held for
// their key are ignored (replays, late publishes); invalid ones are rejected with a log
// line and tollgate_edge_config_rejected_total, and the tenant keeps its config. Before
// Loaded, entries only accumulate; afterwards the tenant recompiles within CompileDelay.
// Apply is safe to call from any goroutine, but entries must arrive in KV order.
func (e *Edge) Apply(key string, value []byte, kvRevision uint64) {
	if kvRevision > 0 {
		e.m.kvRevision.Set(float64(kvRevision))
	}
	if value == nil {
		e.applyDelete(key)
		return
	}
	pk, ent, err := tenants.DecodeEntry(key, value)
	if err == nil {
		err = validateEntry(pk, ent)
	}
	var dom domainEntry
	if err == nil && pk.Kind == tenants.KindDomain {
		dom, err = parseDomain(ent.Domain) // outside the lock: parsing a key takes a while
	}
	if err != nil {
		e.reject(key, pk.Kind, err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if pk.Kind == tenants.KindTenant {
		if tomb, ok := e.tombs[pk.TenantID]; ok && ent.Rev <= tomb {
			e.m.configIgnored.Inc()
			return
		}
	}
	ts := e.state[pk.TenantID]
	if ts == nil {
		ts = newTenantState(pk.TenantID)
		e.state[pk.TenantID] = ts
	}
	if held, ok := ts.revs[key]; ok && ent.Rev <= held {
		e.m.configIgnored.Inc()
		return
	}
	ts.revs[key] = ent.Rev
	ts.maxRev = max(ts.maxRev, ent.Rev)
	switch pk.Kind {
	case tenants.KindTenant:
		ts.tenant = ent.Tenant
	case tenants.KindRoute:
		ts.routes[pk.ID] = ent.Route
	case tenants.KindConsumer:
		ts.consumers[pk.ID] = ent.Consumer
	case tenants.KindKey:
		sum, _ := decodeKeyHash(ent.Key.Hash) // checked by validateEntry
		ts.keys[pk.ID] = keyEntry{id: ent.Key.ID, consumerID: ent.Key.ConsumerID, sum: sum}
	case tenants.KindPlan:
		ts.plans[pk.ID] = ent.Plan
	case tenants.KindJWTIssuer:
		ts.issuers[pk.ID] = ent.JWTIssuer
	case tenants.KindPolicy:
		ts.accessRules = ent.AccessRules
	case tenants.KindDomain:
		ts.domains[pk.ID] = dom
		ts.domainsDirty = true
	}
	e.m.configApplied.Inc()
	e.markDirtyLocked(pk.TenantID)
}

func (e *Edge) applyDelete(key string) {
	pk, err := tenants.ParseKey(key)
	if err != nil {
		e.reject(key, "", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ts := e.state[pk.TenantID]
	if ts == nil {
		return // nothing held: a replayed delete
	}
	if pk.Kind == tenants.KindTenant {
		// The tenant goes with everything it owns; its children's deletes follow and
		// find nothing. The tombstone keeps a late put of the old entry from reviving it.
		e.tombs[pk.TenantID] = ts.revs[key]
		delete(e.state, pk.TenantID)
		delete(e.dirty, pk.TenantID)
		e.removed = append(e.removed, ts)
		e.m.configApplied.Inc()
		e.kickLocked()
		return
	}
	switch pk.Kind {
	case tenants.KindRoute:
		delete(ts.routes, pk.ID)
	case tenants.KindConsumer:
		delete(ts.consumers, pk.ID)
	case tenants.KindKey:
		delete(ts.keys, pk.ID)
	case tenants.KindPlan:
		delete(ts.plans, pk.ID)
	case tenants.KindJWTIssuer:
		delete(ts.issuers, pk.ID)
	case tenants.KindPolicy:
		ts.accessRules = nil
	case tenants.KindDomain:
		delete(ts.domains, pk.ID)
		ts.domainsDirty = true
	}
	e.m.configApplied.Inc()
	e.markDirtyLocked(pk.TenantID)
}

// validateEntry checks the object beyond its JSON shape, so an entry the api would never
// have written cannot break a tenant's snapshot. Upstream addresses are not judged here:
// the dialer checks them on every connect, so a target the operator's address rule refuses
// answers 502 with a clear code instead of the route vanishing.
func validateEntry(pk tenants.ParsedKey, ent *tenants.Entry) error {
	switch pk.Kind {
	case tenants.KindTenant:
		t := *ent.Tenant
		if err := t.Validate(); err != nil {
			return err
		}
		ent.Tenant = &t
	case tenants.KindRoute:
		r := *ent.Route
		r.Paths = append([]string(nil), r.Paths...)
		r.Methods = append([]string(nil), r.Methods...)
		r.Upstream.Targets = append([]tenants.Target(nil), r.Upstream.Targets...)
		if err := r.Validate(anyUpstream); err != nil {
			return err
		}
		ent.Route = &r
	case tenants.KindConsumer:
		c := *ent.Consumer
		if err := c.Validate(); err != nil {
			return err
		}
	case tenants.KindKey:
		if ent.Key.ConsumerID == "" {
			return errors.New("key entry has no consumer_id")
		}
		if _, err := decodeKeyHash(ent.Key.Hash); err != nil {
			return err
		}
	case tenants.KindPlan:
		p := *ent.Plan
		if err := p.Validate(); err != nil {
			return err
		}
		ent.Plan = &p
	case tenants.KindJWTIssuer:
		// The issuer's shape. Whether its jwks_url may be http:// (a test setting) is
		// judged when the tenant compiles, which leaves out an issuer it cannot use.
		is := *ent.JWTIssuer
		if err := is.ValidateWithLoopback(true); err != nil {
			return err
		}
		ent.JWTIssuer = &is
	case tenants.KindPolicy:
		// Compiled, and so checked, when the tenant compiles: access rules that do not
		// compile deny every call of the routes that check access, rather than older ones
		// staying in force.
	}
	return nil
}

// anyUpstream admits every unicast address, for validating a route's shape at the edge.
var anyUpstream = &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"),
}}

func (e *Edge) reject(key, kind string, err error) {
	if kind == "" {
		kind = "unknown"
	}
	e.m.configRejected.WithLabelValues(kind).Inc()
	e.log.Warn("edge: config entry rejected; the tenant keeps its last good config", "key", key, "err", err)
}

func (e *Edge) markDirtyLocked(tenantID string) {
	if _, ok := e.dirty[tenantID]; !ok {
		e.dirty[tenantID] = time.Now()
	}
	if e.loaded {
		e.kickLocked()
	}
}

func (e *Edge) kickLocked() {
	if !e.loaded {
		return
	}
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Loaded tells the edge the initial load is complete: every tenant compiles once and the
// edge starts serving (and /readyz answers 200). Later calls do nothing.
func (e *Edge) Loaded() {
	e.mu.Lock()
	if e.loaded {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	start := time.Now()
	n := e.compileDirty()
	e.mu.Lock()
	e.loaded = true
	if len(e.dirty) > 0 || len(e.removed) > 0 {
		e.kickLocked() // entries that arrived during the initial compile
	}
	e.mu.Unlock()
	if !e.draining.Load() {
		e.ready.Store(true)
		e.m.ready.Set(1)
	}
	e.log.Info("edge: initial config loaded", "tenants", n, "took", time.Since(start).Round(time.Millisecond))
}

// compiler recompiles changed tenants after Loaded: it waits CompileDelay after the first
// change of a burst, so a burst (5,000 route creations) costs a few compiles of its
// tenant, not one per entry.
func (e *Edge) compiler() {
	defer close(e.stopped)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-e.kick:
		}
		t.Reset(e.cfg.CompileDelay)
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.compileDirty()
	}
}

// compileDirty compiles every changed tenant and unpublishes deleted ones, then rebuilds
// the host map when the set of tenants or their slugs changed. It returns the number of
// tenants compiled.
func (e *Edge) compileDirty() int {
	e.compileMu.Lock()
	defer e.compileMu.Unlock()

	type job struct {
		ts    *tenantState
		view  *tenantView
		since time.Time
	}
	e.mu.Lock()
	loaded := e.loaded
	jobs := make([]job, 0, len(e.dirty))
	hostsChanged := false
	for id, since := range e.dirty {
		ts := e.state[id]
		if ts == nil {
			continue
		}
		if ts.domainsDirty {
			ts.domainsDirty = false
			hostsChanged = true
		}
		jobs = append(jobs, job{ts: ts, view: ts.viewLocked(), since: since})
	}
	clear(e.dirty)
	removed := e.removed
	e.removed = nil
	e.mu.Unlock()

	for _, ts := range removed {
		if ts.published != "" {
			hostsChanged = true
		}
		e.unpublish(ts)
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ts.id < jobs[j].ts.id })
	now := time.Now()
	for _, j := range jobs {
		ts, v := j.ts, j.view
		if v.tenant == nil {
			// Entries of a tenant whose tenant entry has not arrived (yet): nothing to serve.
			continue
		}
		start := time.Now()
		if ts.labels == nil || ts.labels.value != v.tenant.Slug && ts.labels.own {
			ts.labels = e.labels.tenant(ts.id, v.tenant.Slug)
		}
		snap, unused := e.compile(v, ts.labels, &ts.compiled)
		ts.slot.snap.Store(snap)
		for _, hc := range unused {
			hc.CloseIdleConnections()
		}
		e.m.compiles.Inc()
		e.m.compileSeconds.Observe(time.Since(start).Seconds())
		if ts.published != snap.Slug {
			hostsChanged = true
			ts.published = snap.Slug
		}
		if loaded {
			e.m.applyDelay.Observe(now.Sub(j.since).Seconds())
		}
	}
	if hostsChanged || !loaded {
		e.rebuildHosts()
	}
	return len(jobs)
}

func (ts *tenantState) viewLocked() *tenantView {
	v := &tenantView{tenant: ts.tenant, rev: ts.maxRev}
	v.routes = make([]*tenants.Route, 0, len(ts.routes))
	for _, r := range ts.routes {
		v.routes = append(v.routes, r)
	}
	v.consumers = make([]*tenants.Consumer, 0, len(ts.consumers))
	for _, c := range ts.consumers {
		v.consumers = append(v.consumers, c)
	}
	v.keys = make([]keyEntry, 0, len(ts.keys))
	for _, k := range ts.keys {
		v.keys = append(v.keys, k)
	}
	v.plans = make([]*tenants.Plan, 0, len(ts.plans))
	for _, p := range ts.plans {
		v.plans = append(v.plans, p)
	}
	v.issuers = make([]*tenants.Issuer, 0, len(ts.issuers))
	for _, is := range ts.issuers {
		v.issuers = append(v.issuers, is)
	}
	v.accessRules = ts.accessRules
	return v
}

// unpublish forgets a deleted tenant: requests stop finding it once the host map is
// rebuilt, and its idle upstream connections close.
func (e *Edge) unpublish(ts *tenantState) {
	ts.slot.snap.Store(nil)
	ts.compiled.closeUpstreams()
	for _, hc := range ts.compiled.pools {
		hc.CloseIdleConnections()
	}
	e.dropCaches(ts.id, ts.compiled.caches, nil)
	ts.compiled = compiled{}
	e.labels.drop(ts.id)
}

// rebuildHosts publishes a new host map from the compiled tenants. Two tenants claiming
// one slug (only possible with inconsistent config) resolve to the smaller tenant id.
func (e *Edge) rebuildHosts() {
	e.mu.Lock()
	hosts := make(map[string]*tenantSlot, len(e.state))
	owner := make(map[string]string, len(e.state))
	routes := 0
	for id, ts := range e.state {
		snap := ts.slot.snap.Load()
		if snap == nil || ts.published == "" {
			continue
		}
		if prev, ok := owner[ts.published]; ok {
			e.log.Warn("edge: two tenants claim one slug", "slug", ts.published, "tenants", []string{prev, id})
			if prev < id {
				continue
			}
		}
		hosts[ts.published] = ts.slot
		owner[ts.published] = id
		routes += snap.routes.Len()
	}
	custom := e.buildCustomHostsLocked(hosts)
	e.mu.Unlock()
	e.hosts.Store(&hosts)
	e.custom.Store(custom)
	e.m.tenants.Set(float64(len(hosts)))
	e.m.routes.Set(float64(routes))
}

// Snapshot returns the snapshot serving a tenant slug, or nil.
func (e *Edge) Snapshot(slug string) *Snapshot {
	if slot := (*e.hosts.Load())[strings.ToLower(slug)]; slot != nil {
		return slot.snap.Load()
	}
	return nil
}

// Shutdown stops the edge gracefully: /readyz turns 503 at once, the public listener
// stops accepting, in-flight requests finish (each on the snapshot it started with) and
// idle connections close; then the admin listener stops, the compiler and the access log
// writer finish. It returns ctx's error if requests were still running when ctx ended.
func (e *Edge) Shutdown(ctx context.Context) error {
	e.draining.Store(true)
	e.ready.Store(false)
	e.m.ready.Set(0)
	err := e.public.ShutdownWithContext(ctx)
	if werr := e.ws.shutdown(ctx); err == nil {
		err = werr
	}
	if aerr := e.admin.Shutdown(ctx); err == nil && !errors.Is(aerr, http.ErrServerClosed) {
		err = aerr
	}
	e.stopOnce.Do(func() {
		close(e.stop)
		<-e.stopped
		if e.access != nil {
			e.access.close()
		}
		if e.ownLim {
			_ = e.lim.Close()
		}
		e.compileMu.Lock()
		e.mu.Lock()
		for _, ts := range e.state {
			ts.compiled.closeUpstreams()
			for _, hc := range ts.compiled.pools {
				hc.CloseIdleConnections()
			}
		}
		e.mu.Unlock()
		e.compileMu.Unlock()
		if werr := e.checkers.wait(ctx); err == nil {
			err = werr
		}
		close(e.shutDown)
	})
	return err
}
