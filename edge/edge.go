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
//	authenticate_external.go  the tenant's own authorizer → consumer (cached)
//	authorize.go           the tenant's access rules
//	limit.go               rate limits, quotas and concurrency (package limit)
//	cache.go               answers from the route's response cache
//	limit_body.go          the route's body limit
//	transform.go           request and response rewrites
//	websocket.go           upgrades, relayed as a tunnel (package websocket)
//	proxy.go               the upstream exchange; its targets: upstream.go, retry.go,
//	                       canary.go, with balancing, health, the retry budget and the
//	                       canary's split in package balancer; its connections: package
//	                       upstreamclient
//	meter.go               usage records for billing (package meter)
//	reply.go               the edge's own JSON answers
//
// And a config change's:
//
//	apply.go               KV entries in (Apply), dirty tenants recompiled off the request
//	                       path, snapshots swapped in with one atomic store
//	compile.go             one tenant's config → Snapshot (snapshot.go)
//	configfile.go          the last good config on disk, for a cold start without NATS
//	                       (package configfile), and what /readyz says of it
//	lazy.go                with TOLLGATE_EDGE_CONFIG_STORE=disk: config in a local store
//	                       (package tenantstore), tenants compiled on first use and
//	                       evicted beyond a budget (package lazy)
//	config.go              the edge's own settings (Config)
//
// The package must not import storage or transport of the control plane (tenants/postgres,
// tenants/nats); it knows only the domain types of package tenants.
package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tollgate/edge/accesslog"
	"tollgate/edge/balancer"
	"tollgate/edge/cache"
	"tollgate/edge/configfile"
	"tollgate/edge/edgemetrics"
	"tollgate/edge/entrycheck"
	"tollgate/edge/extauth"
	"tollgate/edge/fnchain"
	"tollgate/edge/jwtauth"
	"tollgate/edge/lazy"
	"tollgate/edge/limit"
	"tollgate/edge/upstreamclient"
	"tollgate/edge/websocket"
	"tollgate/tenants"
)

// Edge is the data plane of one process. Create it with New, feed it config with Apply
// and Loaded, run it with Serve and stop it with Shutdown.
type Edge struct {
	cfg    Config
	domain string
	log    *slog.Logger
	debug  bool
	m      *edgemetrics.Metrics
	labels *edgemetrics.Labeler
	dialer *upstreamclient.Dialer
	access *accesslog.Log

	upstreamErrs [numUpstreamErrKinds]prometheus.Counter

	lim    *limit.Limiter
	ownLim bool // lim is the edge's own: Shutdown closes it
	flow   *flowMetrics
	jwks   *jwtauth.JWKSCache // key sets of every tenant's jwks_url issuers (authenticate_jwt.go)
	cache  *cache.Budget      // the response caches' shared budget (edge/cache); nil: off
	auth   *authMetrics
	fn     *fnchain.Host    // tenants' functions (function.go)
	authz  *extauth.Metrics // external authorizers (authenticate_external.go)

	// Read by every request.
	hosts    atomic.Pointer[map[string]*tenantSlot]
	custom   atomic.Pointer[customHosts] // custom domains (tls.go)
	ready    atomic.Bool
	draining atomic.Bool
	cfile    atomic.Pointer[configfile.File] // where config comes from, for /readyz (configfile.go)

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
	ws     websocket.Set // open WebSocket tunnels (websocket.go)

	checkers balancer.Checkers // active health checks of upstreams

	lazy *lazy.Tenants[Snapshot] // nil: every tenant resident (lazy.go)
	// storeBehind: the store is served while NATS is unreachable (lazy.go)
	storeBehind atomic.Bool
}

// tenantSlot is a tenant's place in the host map: the map changes only when tenants come
// and go, the snapshot behind a slot on every change of the tenant. With the disk store
// (lazy.go) a slot's snapshot is nil until the tenant's first request loads it.
type tenantSlot = lazy.Slot[Snapshot]

// tenantState is a tenant's entries as received.
type tenantState struct {
	id          string
	revs        map[string]int64 // entry key → rev held (also kept after a delete)
	maxRev      int64
	tenant      *tenants.Tenant
	routes      map[string]*tenants.Route
	consumers   map[string]*tenants.Consumer
	keys        map[string]keyEntry
	plans       map[string]*tenants.ConsumerPlan
	issuers     map[string]*tenants.Issuer
	accessRules *tenants.AccessRules
	domains     map[string]entrycheck.Domain // custom domains (tls.go), by id
	// domainsDirty: domains changed since the host maps were last rebuilt.
	domainsDirty bool
	slot         *tenantSlot

	pending pendingChanges // since the last compile (apply.go)
	// compiler
	compiled  compiled
	published string // slug under which slot is in the host map, "" when not
	labels    *edgemetrics.TenantLabels
}

func newTenantState(id string, slot *tenantSlot) *tenantState {
	return &tenantState{
		id: id, revs: map[string]int64{},
		routes: map[string]*tenants.Route{}, consumers: map[string]*tenants.Consumer{},
		keys: map[string]keyEntry{}, plans: map[string]*tenants.ConsumerPlan{},
		issuers:  map[string]*tenants.Issuer{},
		domains:  map[string]entrycheck.Domain{},
		slot:     slot,
		compiled: compiled{pools: map[string]balancer.Transport{}},
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
	m, err := edgemetrics.New(cfg.Registry, cfg.EdgeID)
	if err != nil {
		return nil, fmt.Errorf("edge: registering metrics: %w", err)
	}
	e := &Edge{
		cfg:      cfg,
		domain:   cfg.Domain,
		log:      cfg.Logger.With("edge", cfg.EdgeID),
		m:        m,
		labels:   edgemetrics.NewLabeler(m, cfg.MaxTenantLabels, cfg.MaxRouteLabels, cfg.MaxRouteLabelsTotal),
		dialer:   &upstreamclient.Dialer{AddressRule: cfg.AddressRule, Resolver: net.DefaultResolver},
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
	if err := e.initExternalAuth(); err != nil {
		return nil, err
	}
	if err := e.initAuth(); err != nil {
		return nil, fmt.Errorf("edge: auth: %w", err)
	}
	if err := e.initCache(); err != nil {
		return nil, fmt.Errorf("edge: response cache: %w", err)
	}
	if e.fn, err = e.newFunctionHost(); err != nil {
		return nil, err
	}
	for i, k := range upstreamErrKinds {
		e.upstreamErrs[i] = m.UpstreamErrors.WithLabelValues(k)
	}
	empty := map[string]*tenantSlot{}
	e.hosts.Store(&empty)
	e.custom.Store(emptyCustomHosts)
	if cfg.AccessLog {
		e.access = accesslog.New(e.log, m.LogDropped)
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

// Snapshot returns the snapshot serving a tenant slug, or nil.
func (e *Edge) Snapshot(slug string) *Snapshot {
	if slot := (*e.hosts.Load())[strings.ToLower(slug)]; slot != nil {
		return e.snapshotOf(slot)
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
	e.m.Ready.Set(0)
	err := e.public.ShutdownWithContext(ctx)
	if werr := e.ws.Shutdown(ctx); err == nil {
		err = werr
	}
	if aerr := e.admin.Shutdown(ctx); err == nil && !errors.Is(aerr, http.ErrServerClosed) {
		err = aerr
	}
	e.stopOnce.Do(func() {
		close(e.stop)
		<-e.stopped
		if e.access != nil {
			e.access.Close()
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
		if werr := e.checkers.Wait(ctx); err == nil {
			err = werr
		}
		_ = e.fn.Close(ctx)
		close(e.shutDown)
	})
	return err
}
