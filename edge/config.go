package edge

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"tollgate/edge/fnchain"
	"tollgate/edge/jwtauth"
	"tollgate/edge/limit"
	"tollgate/edge/meter"
	"tollgate/edge/reqlog"
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

	// Metric label bounds (see edge/edgemetrics). Defaults: 500 tenants, 100 routes per
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
	// DisableHTTP2 serves HTTP/1.1 only: no h2 in the TLS listener's ALPN, no h2c with
	// prior knowledge on the plain one. Default: false, both served (h2.go).
	DisableHTTP2 bool
	// HTTP2MaxStreams is how many streams one HTTP/2 connection may have open at once.
	// Default: 250.
	HTTP2MaxStreams uint32
	// HTTP2GoServer serves HTTP/2 with Go's net/http server rather than the door's own
	// (h2door.Server), as before 7 December 2026.
	HTTP2GoServer bool
	// HTTP2GoClient speaks HTTP/2 to upstreams (upstream.protocol h2) through Go's
	// net/http transport rather than the edge's own client (upstreamh2's client.go), as
	// before 8 December 2026.
	HTTP2GoClient bool
	// HTTP2NoWorkers runs each HTTP/2 stream on the goroutine Go's server starts for it
	// rather than on a pooled one whose stack has grown (h2door's workers). Default:
	// false, pooled.
	HTTP2NoWorkers bool
	// HTTP2HeaderTable is the HPACK dynamic table, in bytes, of the header blocks the
	// edge sends over HTTP/2: its answers to clients and its requests to HTTP/2
	// upstreams. Default: 0, none: the static table and literals only, as nginx encodes.
	// A dynamic table saves bytes on fields that repeat, and costs CPU on every field
	// that does not (each request's own X-Request-Id enters the table and evicts another).
	HTTP2HeaderTable uint32
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

	// Logs is the request log (edge/reqlog); the caller closes it after Shutdown.
	// Default: nil, nothing is logged.
	Logs *reqlog.Recorder

	// JWKS configures the fetching of the key sets of jwks_url issuers (one cache for
	// the process). Defaults: jwtauth's, with CheckAddr = AddressRule.CheckAddr (a key set URL
	// can reach no address an upstream may not) and Logger = Logger.
	JWKS jwtauth.JWKSConfig

	// AuthorizerRootCAs are the authorities external authorizers' certificates are
	// checked against (authenticate_external.go). Default: the system's roots
	// (SSL_CERT_FILE, SSL_CERT_DIR).
	AuthorizerRootCAs *x509.CertPool
	// AuthCacheEntries bounds the cached answers of external authorizers on the edge,
	// AuthCacheEntriesPerTenant those of one tenant; answers past a full budget are
	// not cached. Defaults: 100,000 and 10,000.
	AuthCacheEntries          int
	AuthCacheEntriesPerTenant int

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

	// Tracing, when set, makes a span of every recorded request and of every traced
	// config change's apply (trace.go). Default: nil, no spans; a caller's traceparent
	// goes upstream unchanged.
	Tracing *Tracing

	// Functions configures the runtime of tenants' functions (edge/fnchain); the edge
	// sets its Registry, Logger and OnReady. Default: fnchain's defaults, no module store.
	Functions fnchain.Config
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
	def(&c.AuthCacheEntries, 100_000)
	def(&c.AuthCacheEntriesPerTenant, 10_000)
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
	if c.HTTP2MaxStreams == 0 {
		c.HTTP2MaxStreams = 250
	}
	defD(&c.WebSocketIdleTimeout, 10*time.Minute)
	defD(&c.WebSocketMaxLifetime, 24*time.Hour)
	if c.CacheBytes == 0 {
		c.CacheBytes = 256 << 20
	}
	if c.Tracing != nil {
		if c.Tracing.Tracer == nil {
			return errors.New("edge: Config.Tracing needs a Tracer")
		}
		c.Tracing.setDefaults()
	}
	return nil
}
