// Package fnchain runs tenants' functions (proxy-wasm filters, package edge/function) in
// the edge's request chain: it gets each module a route names onto the edge (memory, the
// edge's disk, or the module store on NATS) and compiles it once per digest, builds a
// route's filters when its tenant compiles, and drives one request through them over the
// request and response fasthttp holds. Package edge decides where in the chain that
// happens and turns the outcomes into its envelopes.
package fnchain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/function"
	"tollgate/tenants"
)

// Config configures a Host. Zero fields take the default in their comment.
type Config struct {
	// Timeout is the guest time one callback may take (TOLLGATE_EDGE_FUNCTION_TIMEOUT); a
	// tenant's plan (function_timeout_ms) may lower it, never raise it. Default: 5ms.
	Timeout time.Duration
	// WallFactor is how many times Timeout a run of callbacks may take in wall time
	// (TOLLGATE_EDGE_FUNCTION_WALL_FACTOR); see function.Config. Default: 4.
	WallFactor int
	// MemoryBytes bounds one instance's linear memory (TOLLGATE_EDGE_FUNCTION_MEMORY),
	// rounded down to 64 KiB pages. Default: 16 MiB.
	MemoryBytes int64
	// Concurrency is how many guest runs of one tenant this edge holds at once
	// (TOLLGATE_EDGE_FUNCTION_CONCURRENCY); the plan's function_concurrency may lower it.
	// Default: package function's (half the cores, at least 1).
	Concurrency int
	// CacheDir keeps modules' bytes and their compiled code across restarts
	// (TOLLGATE_EDGE_FUNCTION_CACHE_DIR). Default: "", memory only.
	CacheDir string
	// CacheGrace is how long a module no route names stays in CacheDir: a route rolled
	// back to it within that time finds it there. The edge sweeps the directory every
	// quarter of it. Default: 1h.
	CacheGrace time.Duration
	// Source fetches the modules the edge has not got. Default: nil, disk only.
	Source Source
	// FetchTimeout bounds one fetch from Source. Default: 2s.
	FetchTimeout time.Duration
	// Publish sends one function log line (JSON) on a NATS subject, without waiting;
	// LogSubject is the subjects' prefix (<natsPrefix>.fnlog; the tenant id is
	// appended). Default: nil, lines go to Logger at debug level only.
	Publish    func(subject string, data []byte) error
	LogSubject string
	// LogRate is how many log lines a second one tenant's functions may publish (and the
	// burst). Default: 50.
	LogRate int
	// Callout makes the HTTP callouts of proxy_http_call; the edge checks the operator's
	// address rules in it. Default: nil, callouts fail.
	Callout func(ctx context.Context, req *function.CalloutRequest) (*function.CalloutResponse, error)
	// OnReady is called, off any request, when modules that routes were waiting for have
	// arrived: the tenants named recompile so their routes pick them up.
	OnReady func(tenantIDs []string)
	// Registry takes the metrics. Default: none registered.
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Host is one edge's function runtime and its modules.
type Host struct {
	cfg  Config
	rt   *function.Runtime
	mods *modules
	logs *logPublisher
	log  *slog.Logger
	m    *hostMetrics
}

// New starts a Host.
func New(ctx context.Context, cfg Config) (*Host, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Millisecond
	}
	if cfg.MemoryBytes <= 0 {
		cfg.MemoryBytes = 16 << 20
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 2 * time.Second
	}
	if cfg.CacheGrace <= 0 {
		cfg.CacheGrace = time.Hour
	}
	if cfg.LogRate <= 0 {
		cfg.LogRate = 50
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Concurrency <= 0 {
		// The edge's own cap, resolved here so that a plan's may only lower it.
		cfg.Concurrency = function.DefaultTenantConcurrency()
	}
	pages := uint32(max(1, cfg.MemoryBytes>>16))
	rc := function.Config{MemoryLimitPages: pages, Timeout: cfg.Timeout, WallFactor: cfg.WallFactor, TenantConcurrency: cfg.Concurrency, Callout: cfg.Callout}
	logs := &logPublisher{}
	rc.Log = func(tenant, fn string, level function.LogLevel, msg []byte) {
		logs.log(&LogLine{TenantID: tenant, Function: fn, Level: level.String(), Message: string(msg)})
	}
	modDir := ""
	if cfg.CacheDir != "" {
		rc.CacheDir = filepath.Join(cfg.CacheDir, "compiled")
		modDir = filepath.Join(cfg.CacheDir, "modules")
		for _, d := range []string{rc.CacheDir, modDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return nil, fmt.Errorf("fnchain: cache dir: %w", err)
			}
		}
	}
	m, err := newHostMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	rt, err := function.NewRuntime(ctx, rc)
	if err != nil {
		return nil, fmt.Errorf("fnchain: %w", err)
	}
	h := &Host{cfg: cfg, rt: rt, log: cfg.Logger, m: m}
	h.mods = &modules{rt: rt, src: cfg.Source, dir: modDir, fetchTimeout: cfg.FetchTimeout, retryMax: 5 * time.Second,
		onReady: cfg.OnReady, stop: make(chan struct{}), m: map[string]*moduleEntry{}}
	*logs = logPublisher{publish: cfg.Publish, prefix: cfg.LogSubject, rate: float64(cfg.LogRate),
		dropped: m.logsDropped, buckets: map[string]*logBucket{}}
	h.logs = logs
	return h, nil
}

// Close stops background fetches and the runtime.
func (h *Host) Close(ctx context.Context) error {
	close(h.mods.stop)
	h.mods.wg.Wait()
	return h.rt.Close(ctx)
}

// SweepCache removes from the cache directory the modules inUse does not name and has not
// named for the host's CacheGrace (a file's time is when a sweep last saw it named), and
// returns their digests. The compiled code in the directory is wazero's, under its own
// names, and is left alone.
func (h *Host) SweepCache(inUse func(sha string) bool) ([]string, error) {
	return h.mods.sweep(inUse, h.cfg.CacheGrace)
}

// SweepCacheEvery runs SweepCache at once and then every quarter of CacheGrace until the
// host closes. inUse returns the digests the edge's routes name; call it only once the
// edge has its config, or every module looks unused.
func (h *Host) SweepCacheEvery(inUse func() map[string]bool) {
	if h.mods.dir == "" {
		return
	}
	h.mods.wg.Add(1)
	go func() {
		defer h.mods.wg.Done()
		for {
			used := inUse()
			removed, err := h.SweepCache(func(sha string) bool { return used[sha] })
			if len(removed) > 0 {
				h.log.Info("edge: removed function modules no route has named for a while from the cache", "modules", len(removed), "grace", h.cfg.CacheGrace)
			}
			if err != nil {
				h.log.Warn("edge: function cache sweep", "err", err)
			}
			select {
			case <-h.mods.stop:
				return
			case <-time.After(h.cfg.CacheGrace / 4):
			}
		}
	}()
}

// RouteSpec is what a route's functions are built from.
type RouteSpec struct {
	TenantID    string
	TenantLabel string // the tenant's metric label (bounded by the edge's labeler)
	RouteID     string
	Functions   []tenants.FunctionRef
	// Auth: Functions[0] authenticates the caller (route "auth": "function").
	Auth bool
	// Plan is the tenant's platform plan's resources; nil: the edge's defaults.
	Plan *tenants.ResourceLimits
}

// Chain is a route's functions, built when its tenant compiles.
type Chain struct {
	h       *Host
	spec    RouteSpec
	filters []*filter
	// Unavailable says why the chain cannot run (a module is missing, or a filter
	// could not start); every request of the route is then refused, never let through.
	Unavailable error
	// AuthReqBody: the authenticator reads the request body; ReqBody: a function after
	// it does. RespHeaders, RespBody: some function (the authenticator too) has response
	// callbacks, or reads the response body. The edge buffers a body only for these.
	AuthReqBody, ReqBody, RespHeaders, RespBody bool
	// After: the route has functions after the authenticator (or no authenticator).
	After    bool
	outcomes [numOutcomes]prometheus.Counter
	seconds  prometheus.Observer
}

type filter struct {
	f                              *function.Filter
	name, sha                      string
	reqBody, respHeaders, respBody bool
}

// Build compiles a route's functions. It never fails: a chain that cannot run says why in
// Unavailable (and logs it for the tenant), so the route refuses requests until a
// recompile finds its modules.
func (h *Host) Build(spec RouteSpec) *Chain {
	c := &Chain{h: h, spec: spec, seconds: h.m.seconds, After: len(spec.Functions) > 1 || !spec.Auth}
	if spec.Auth && len(spec.Functions) == 0 {
		c.Unavailable = errors.New(`"auth": "function" needs a function`)
	}
	for i, o := range outcomeNames {
		c.outcomes[i] = h.m.calls.WithLabelValues(spec.TenantLabel, o)
	}
	lim := function.Limits{}
	if p := spec.Plan; p != nil {
		if p.FunctionTimeoutMS > 0 {
			lim.Timeout = min(h.cfg.Timeout, time.Duration(p.FunctionTimeoutMS)*time.Millisecond)
		}
		if p.FunctionConcurrency > 0 {
			lim.Concurrency = p.FunctionConcurrency
			if h.cfg.Concurrency > 0 {
				lim.Concurrency = min(lim.Concurrency, h.cfg.Concurrency)
			}
		}
	}
	for i, ref := range spec.Functions {
		mod, err := h.mods.get(ref.SHA256, spec.TenantID)
		if err == nil {
			var f *function.Filter
			f, err = h.rt.NewFilter(mod, spec.TenantID, ref.Name, []byte(ref.Config), lim)
			if err == nil {
				reqBody, respHeaders, respBody := f.Exports()
				c.filters = append(c.filters, &filter{f: f, name: ref.Name, sha: ref.SHA256, reqBody: reqBody, respHeaders: respHeaders, respBody: respBody})
				if i == 0 && spec.Auth {
					c.AuthReqBody = reqBody
				} else {
					c.ReqBody = c.ReqBody || reqBody
				}
				c.RespHeaders = c.RespHeaders || respHeaders || respBody
				c.RespBody = c.RespBody || respBody
				continue
			}
		}
		c.Unavailable = fmt.Errorf("function %q (sha256 %s): %w", ref.Name, ref.SHA256, err)
		h.logs.log(&LogLine{TenantID: spec.TenantID, RouteID: spec.RouteID, Function: ref.Name, SHA256: ref.SHA256,
			Level: "error", Message: "the function is not available on this edge yet: " + err.Error()})
		if !errors.Is(err, ErrUnavailable) {
			h.log.Warn("edge: function not started", "tenant", spec.TenantID, "route", spec.RouteID, "function", ref.Name, "err", err)
		}
		c.Close()
		c.filters = nil
		break
	}
	return c
}

// Close releases the chain's filters (their pooled instances).
func (c *Chain) Close() {
	for _, f := range c.filters {
		f.f.Close()
	}
}

// SameSpec reports whether c was built from spec, so a recompile can keep it.
func (c *Chain) SameSpec(spec RouteSpec) bool {
	if c == nil || c.Unavailable != nil || c.spec.Auth != spec.Auth || c.spec.TenantLabel != spec.TenantLabel || len(c.spec.Functions) != len(spec.Functions) {
		return false
	}
	for i := range spec.Functions {
		if c.spec.Functions[i] != spec.Functions[i] {
			return false
		}
	}
	a, b := c.spec.Plan, spec.Plan
	return a == b || a != nil && b != nil && a.FunctionTimeoutMS == b.FunctionTimeoutMS && a.FunctionConcurrency == b.FunctionConcurrency
}

// Outcomes of a function run, the values of tollgate_function_calls_total's outcome.
const (
	outcomeOK = iota
	outcomeReply
	outcomeFailed
	outcomeBusy
	outcomeUnavailable
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "local_reply", "failed", "busy", "unavailable"}

type hostMetrics struct {
	calls       *prometheus.CounterVec
	seconds     prometheus.Histogram
	logsDropped prometheus.Counter
}

func newHostMetrics(reg prometheus.Registerer) (*hostMetrics, error) {
	m := &hostMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_function_calls_total",
			Help: "Requests that ran tenants' functions, by tenant (bounded as the edge's other tenant labels) and outcome (ok, local_reply, failed, busy, unavailable).",
		}, []string{"tenant", "outcome"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_function_seconds",
			Help:    "Guest time of one request's functions (all callbacks).",
			Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2},
		}),
		logsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_function_logs_dropped_total",
			Help: "Function log lines not published: over a tenant's log rate, or the bus refused them.",
		}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.seconds, m.logsDropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("fnchain: metrics: %w", err)
		}
	}
	return m, nil
}
