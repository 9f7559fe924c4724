// Package config reads Tollgate's environment (the contract's TOLLGATE_* variables) into
// one struct. It validates what it can at start, so a bad setting stops the process with a
// message instead of failing later.
package config

import (
	"fmt"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tollgate/infra/natsconn"
	"tollgate/infra/netaddr"
	"tollgate/infra/tracing"
)

// DefaultNATSURL is the NATS of the api, the edge and billing when TOLLGATE_NATS_URL is
// unset (dev embeds its own instead).
const DefaultNATSURL = "nats://127.0.0.1:4222"

// ShutdownGrace bounds draining in-flight requests on SIGTERM.
const ShutdownGrace = 25 * time.Second

// Config is the process configuration. Field comments give the variable and its default.
type Config struct {
	DatabaseURL  string // TOLLGATE_DATABASE_URL [postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable]
	NATSURL      string // TOLLGATE_NATS_URL [nats://127.0.0.1:4222; embedded in dev]
	RedisURL     string // TOLLGATE_REDIS_URL [unset: local limits only]
	AdminToken   string // TOLLGATE_ADMIN_TOKEN [dev: generated and printed]
	APIAddr      string // TOLLGATE_API_ADDR [127.0.0.1:8080]
	EdgeAddr     string // TOLLGATE_EDGE_ADDR [127.0.0.1:8000]
	EdgeAdmin    string // TOLLGATE_EDGE_ADMIN_ADDR [127.0.0.1:9000]
	EdgeDomain   string // TOLLGATE_EDGE_DOMAIN [localhost]
	EdgeTLSAddr  string // TOLLGATE_EDGE_TLS_ADDR [unset: no TLS listener]
	EdgeTLSCert  string // TOLLGATE_EDGE_TLS_CERT
	EdgeTLSKey   string // TOLLGATE_EDGE_TLS_KEY
	NATSPrefix   string // TOLLGATE_NATS_PREFIX [tollgate]
	RedisPrefix  string // TOLLGATE_REDIS_PREFIX [tollgate]
	AllowCIDRs   []netip.Prefix
	TrustedProxy []netip.Prefix // TOLLGATE_TRUSTED_PROXIES [empty: X-Forwarded-* from clients ignored]
	RedisTimeout time.Duration  // TOLLGATE_REDIS_TIMEOUT [50ms: a slower Redis call counts as failed]
	EdgeID       string         // TOLLGATE_EDGE_ID [hostname]
	Pprof        bool           // TOLLGATE_PPROF [false: /debug/pprof on the edge admin port]
	LogLevel     string         // TOLLGATE_LOG_LEVEL [info]
	AccessLog    bool           // TOLLGATE_ACCESS_LOG [false]
	// Metering and billing.
	Meter             bool   // TOLLGATE_METER [on; off: the edge meters nothing, for benchmarks only]
	MeterSpoolReserve bool   // TOLLGATE_METER_SPOOL_RESERVE [on: the spool's 256 MiB are allocated at start; off: taken from the disk as batches come]
	MeterSpoolDir     string // TOLLGATE_METER_SPOOL_DIR [$XDG_STATE_HOME (else os.TempDir())/tollgate-meter-<edge id>-<edge port>]
	StripeKey         string // TOLLGATE_STRIPE_KEY [unset: billing pushes nothing to Stripe]
	StripeURL         string // TOLLGATE_STRIPE_URL [Stripe's API; e.g. a stripe-mock]
	StripeEvent       string // TOLLGATE_STRIPE_EVENT [tollgate_requests: the Billing Meter's event name]
	// StripeWebhookSecret: TOLLGATE_STRIPE_WEBHOOK_SECRET [unset: the api serves no webhook]
	StripeWebhookSecret string
	// The fleet: NATS clusters and credentials, admin listeners of the api and billing.
	NATSReplicas     int    // TOLLGATE_NATS_REPLICAS [1: replicas of every stream and bucket Tollgate creates]
	NATSCreds        string // TOLLGATE_NATS_CREDS [unset: a NATS credentials (JWT + seed) file]
	NATSNKey         string // TOLLGATE_NATS_NKEY [unset: a file holding an NKey seed]
	NATSTLSCA        string // TOLLGATE_NATS_TLS_CA [unset: the system's roots when the URL is tls://]
	NATSTLSCert      string // TOLLGATE_NATS_TLS_CERT [unset: no client certificate]
	NATSTLSKey       string // TOLLGATE_NATS_TLS_KEY
	APIAdminAddr     string // TOLLGATE_API_ADMIN_ADDR [127.0.0.1:9080: /metrics, /healthz, /readyz of the api]
	BillingAdminAddr string // TOLLGATE_BILLING_ADMIN_ADDR [127.0.0.1:9090: the same for billing]
	DevUpstreamAddr  string // TOLLGATE_DEV_UPSTREAM_ADDR [127.0.0.1:8090: dev's demo upstream]
	// Trust: mail, DNS proofs and the edge's shared cache.
	SMTPURL        string // TOLLGATE_SMTP_URL [unset: mail is logged with its links, not sent]
	SMTPFrom       string // TOLLGATE_SMTP_FROM [Tollgate <no-reply@<edge domain>>]
	PublicURL      string // TOLLGATE_PUBLIC_URL [http://<api addr>: the console's address in mailed links]
	EdgePublicURL  string // TOLLGATE_EDGE_PUBLIC_URL [unset: http://<slug>.<edge domain>:<edge port>; scheme://host[:port] of the edges' load balancer, for the console's examples]
	DNSResolver    string // TOLLGATE_DNS_RESOLVER [unset: the system's resolver; host:port of a DNS server]
	EdgeCacheBytes int64  // TOLLGATE_EDGE_CACHE_BYTES [256 MiB: the edge's whole response-cache budget]

	// Tenants' functions at the edge (functions.go).
	EdgeFunctionTimeout     time.Duration // TOLLGATE_EDGE_FUNCTION_TIMEOUT [5ms: guest time per callback; a plan may lower it]
	EdgeFunctionMemory      int64         // TOLLGATE_EDGE_FUNCTION_MEMORY [16 MiB: linear memory of one instance, in bytes]
	EdgeFunctionWallFactor  int           // TOLLGATE_EDGE_FUNCTION_WALL_FACTOR [4: a run of callbacks is cut off after 4× its time budget of wall time; its guest work is bounded by fuel at about the budget]
	EdgeFunctionConcurrency int           // TOLLGATE_EDGE_FUNCTION_CONCURRENCY [half the edge's cores, at least 1: one tenant's guest runs at once; a plan may lower it]
	EdgeFunctionCacheDir    string        // TOLLGATE_EDGE_FUNCTION_CACHE_DIR [<spool dir>/functions: modules and their compiled code]
	EdgeFunctionCacheGrace  time.Duration // TOLLGATE_EDGE_FUNCTION_CACHE_GRACE [1h: how long a module no route names stays in the cache dir]

	// HTTP/2 at the edge's front door (docs/http2.md).
	EdgeHTTP2 bool // TOLLGATE_EDGE_HTTP2 [on: ALPN h2 on the TLS listener and h2c with prior knowledge on the plain one; off: HTTP/1.1 only]
	// EdgeHTTP2BatchWrites: TOLLGATE_EDGE_HTTP2_BATCH_WRITES [on: an HTTP/2 connection's writes, a client's or an upstream's, ready in one pass of the scheduler go out in one system call (edge.SetHTTP2BatchWrites); off: each flush of Go's HTTP/2 server or transport is a write of its own]
	EdgeHTTP2BatchWrites bool
	// EdgeHTTP2OwnServer: TOLLGATE_EDGE_HTTP2_OWN_SERVER [on: HTTP/2 connections are served by the door's own server, which frames HTTP/2 itself (h2door.Server); off: by Go's net/http server, as before 7 December 2026]
	EdgeHTTP2OwnServer bool
	// EdgeH2UpstreamOwnClient: TOLLGATE_EDGE_H2_UPSTREAM_OWN_CLIENT [on: requests to HTTP/2 upstreams (gRPC) go through the edge's own client, which frames HTTP/2 itself (upstreamh2's client.go); off: through Go's net/http HTTP/2 transport, as before 8 December 2026]
	EdgeH2UpstreamOwnClient bool
	// EdgeHTTP2Workers: TOLLGATE_EDGE_HTTP2_WORKERS [on: HTTP/2 streams run the chain on pooled goroutines whose stacks have grown; off: each on the goroutine Go's HTTP/2 server starts for it]
	EdgeHTTP2Workers bool
	// EdgeHTTP2MaxStreams: TOLLGATE_EDGE_HTTP2_MAX_STREAMS [250: streams one HTTP/2 connection may have open at once; 1 to 10000]
	EdgeHTTP2MaxStreams uint32
	// EdgeHTTP2HeaderTable: TOLLGATE_EDGE_HTTP2_HEADER_TABLE [0: the header blocks the edge sends over HTTP/2, to clients and to upstreams, use HPACK's static table and literals only, as nginx's do; 1 to 65536: a dynamic table of up to that many bytes, as the peer allows (4096: Go's default)]
	EdgeHTTP2HeaderTable uint32

	// Edge performance: how the edge reads and writes its sockets.
	EdgeRawIO bool // TOLLGATE_EDGE_RAW_IO [on: raw system calls (edge.SetRawIO); off: through net.Conn; always off in race-detector builds]
	// EdgeYieldReads: TOLLGATE_EDGE_YIELD_READS [on: at GOMAXPROCS=1 the edge yields between writing and reading a socket (edge.SetYieldReads); off: it reads at once]
	EdgeYieldReads bool
	// EdgeShortReadWait: TOLLGATE_EDGE_SHORT_READ_WAIT [default off; on: a WebSocket tunnel whose read left its socket empty (TCP_INQ) waits for the poller before reading again (edge.SetShortReadWait); off: it reads until EAGAIN; only with raw I/O]
	EdgeShortReadWait bool
	// EdgeReuseCheck: TOLLGATE_EDGE_REUSE_CHECK [on: a pooled upstream connection is checked with one peek before reuse and closed when bytes arrived on it or its upstream closed it (upstreamclient.SetReuseCheck); off: it is reused unchecked]
	EdgeReuseCheck bool
	// EdgeKeyLastUse: TOLLGATE_EDGE_KEY_LAST_USE [on: the edge notes each key's use once per interval for keys.last_used_at; off: it does not, and the key step reads no clock for it]
	EdgeKeyLastUse bool
	// MeterSparseLatency: TOLLGATE_METER_SPARSE_LATENCY [on: a route's latency bins are made in chunks as its times fall in them (meter.Config.DenseLatency false); off: all of them at its first record]
	MeterSparseLatency bool
	// EdgeJSONOnePass: TOLLGATE_EDGE_JSON_ONE_PASS [on: request JSON rewrites in one pass into a pooled buffer (edge.SetJSONOnePass); off: through sjson, a copy per edit]
	EdgeJSONOnePass bool
	// EdgeFunctionSkipIdleCap: TOLLGATE_EDGE_FUNCTION_SKIP_IDLE_CAP [on: a tenant whose function concurrency cap is at least GOMAXPROCS takes no slot of it per run of callbacks (function.SetSkipIdleCap); off: it always does]
	EdgeFunctionSkipIdleCap bool
	// EdgeFunctionEndWithLastCallback: TOLLGATE_EDGE_FUNCTION_END_WITH_LAST_CALLBACK [on: a function's request context ends (proxy_on_done, proxy_on_log, proxy_on_delete) in the run of its last response callback (function.SetEndWithLastCallback); off: in a run of its own when the request ends]
	EdgeFunctionEndWithLastCallback bool
	// EdgeFunctionMergedEntries: TOLLGATE_EDGE_FUNCTION_MERGED_ENTRIES [on: the edge enters a function's guest once for callbacks that run back to back (its context's creation with the request headers', the last response callback with the context's end) through entries added when it compiles (function.SetMergedEntries); off: once per callback]
	EdgeFunctionMergedEntries bool
	// EdgeFunctionLockFreeRuns: TOLLGATE_EDGE_FUNCTION_LOCKFREE_RUNS [on: a run of callbacks begins and ends against the watchdog with atomics alone (function.SetLockFreeRuns); off: under a lock per instance, with a count of running guests]
	EdgeFunctionLockFreeRuns bool
	// EdgeFunctionReuseCalls: TOLLGATE_EDGE_FUNCTION_REUSE_CALLS [on: a request's function call state is reused from its instance's free list (function.SetReuseCalls); off: allocated per request]
	EdgeFunctionReuseCalls bool
	// EdgeFunctionOwnContext: TOLLGATE_EDGE_FUNCTION_OWN_CONTEXT [on: guest calls run with a context type of the host's own (function.SetOwnContext); off: with a context.WithValue]
	EdgeFunctionOwnContext bool
	// EdgeReturnMemory: TOLLGATE_EDGE_RETURN_MEMORY [on: after a burst the edge hands its freed heap back to the OS (edge/memory.Returner); off: the runtime's own pace]
	EdgeReturnMemory bool
	// EdgeReturnAside: TOLLGATE_EDGE_RETURN_ASIDE [on: that return runs with one processor more than the edge's, so it never stops the one that serves (edge/memory.Returner.Inline); off: on the edge's own]
	EdgeReturnAside bool
	// EdgePackConfig: TOLLGATE_EDGE_PACK_CONFIG [on: the edge keeps its copy of the config (for the snapshot file) compressed per kind of entry (configfile.Config.RawValues); off: as delivered]
	EdgePackConfig bool
	// EdgeSnapshotYield: TOLLGATE_EDGE_SNAPSHOT_YIELD [on: writing the config snapshot file yields the processor every few hundred entries (configfile.Config.Hog); off: it runs until preempted]
	EdgeSnapshotYield bool
	// EdgeIncremental: TOLLGATE_EDGE_INCREMENTAL [on: a change of routes compiles only those routes (edge.SetIncrementalCompiles); off: the whole tenant]
	EdgeIncremental bool
	// EdgeShareUpstreams: TOLLGATE_EDGE_SHARE_UPSTREAMS [on: a tenant's routes with the same plain upstream share one (edge.SetShareUpstreams); off: one per route]
	EdgeShareUpstreams bool
	// EdgeParallelCompiles: TOLLGATE_EDGE_PARALLEL_COMPILES [on: tenants that compile at once do so on every core (edge.SetParallelCompiles); off: one after the other]
	EdgeParallelCompiles bool

	// Surviving faults: the edge's local config snapshot, bounded database calls.
	EdgeSnapshotMaxAge time.Duration // TOLLGATE_EDGE_SNAPSHOT_MAX_AGE [24h: the oldest config snapshot (in the spool directory) an edge starts from while NATS is unreachable; 0: never]
	// EdgeConfigStore: TOLLGATE_EDGE_CONFIG_STORE [memory: the edge holds every tenant's entries and compiled snapshot in memory; disk: it keeps the entries in an indexed store in the spool directory and compiles a tenant when its traffic first needs it (docs/edge-scale.md)]
	EdgeConfigStore string
	// EdgeTenantMemory: TOLLGATE_EDGE_TENANT_MEMORY [128MiB: with the disk store, the estimated memory of compiled tenants above which those idle longest are evicted; bytes, or with KiB, MiB or GiB]
	EdgeTenantMemory int64
	// EdgeFastStart: TOLLGATE_EDGE_FAST_START [on: with the disk store, an edge whose store is empty or half-filled is ready once it holds every tenant's host entries, backfills the rest behind that and fetches a tenant a request needs before the backfill reached it (docs/edge-scale.md); off: ready once the whole bucket is in its store]
	EdgeFastStart bool
	DBTimeout     time.Duration // TOLLGATE_DB_TIMEOUT [5s: the bound of one database call of the api and billing]
	// APIHeavyCalls: TOLLGATE_API_HEAVY_CALLS [2: a tenant's imports, config applies and exports in flight at once on one api process (api.Config.HeavyCalls), the next is 429 with Retry-After; 0: no cap]
	APIHeavyCalls int
	// Write rates of the api (docs/performance.md, "Management API writes").
	APIHeavyTimeout     time.Duration // TOLLGATE_API_HEAVY_TIMEOUT [60s: the bound of one import, config apply or export, instead of TOLLGATE_DB_TIMEOUT]
	APIConfigBodyLimit  int           // TOLLGATE_API_CONFIG_BODY_LIMIT [67108864: the largest config document a PUT …/config takes, in bytes; other bodies stay at 1 MB]
	DBSharedLimitChecks bool          // TOLLGATE_DB_SHARED_LIMIT_CHECKS [on: creations far below a plan limit do not wait for each other's commits; off: every limit check locks the tenant]
	DBSharedRevLock     bool          // TOLLGATE_DB_SHARED_REV_LOCK [on: writes draw their revs under a shared lock and the relay waits for them; off: exclusive, writes that emit commit one at a time]
	DBNotifyAfterCommit bool          // TOLLGATE_DB_NOTIFY_AFTER_COMMIT [on: writes wake the relay after they commit, folded into one notification; off: each write notifies in its transaction]
	DBFoldRoundTrips    bool          // TOLLGATE_DB_FOLD_ROUND_TRIPS [on: a write's revs, its COMMIT and an apply's limit counts ride with its other statements; off: round trips of their own]

	// Traces (infra/tracing): OTLP over HTTP, head-sampled.
	OTELEndpoint string  // TOLLGATE_OTEL_ENDPOINT [unset: no spans are made; e.g. http://collector:4318]
	OTELSample   float64 // TOLLGATE_OTEL_SAMPLE [0.01: the share of traces started here that are recorded; a caller's traceparent decides for its own]

	// When custom domains' DNS proofs are checked (tenants.DomainSchedule's PendingMin,
	// PendingMax and Recheck; the rest take defaults). Zero is unset: the default.
	DomainCheckMin time.Duration // TOLLGATE_DOMAIN_CHECK_MIN [10s]
	DomainCheckMax time.Duration // TOLLGATE_DOMAIN_CHECK_MAX [10m]
	DomainRecheck  time.Duration // TOLLGATE_DOMAIN_RECHECK [1h]

	// Cells (cells.go): edge pools, each following the config of the tenants placed on it.
	Cells    []Cell // TOLLGATE_CELLS [unset: one cell, default, on the main NATS]
	EdgeCell string // TOLLGATE_EDGE_CELL [default: the cell whose bucket an edge follows]
}

// FromEnv reads the environment. getenv is os.Getenv in production, a map in tests.
func FromEnv(getenv func(string) string) (*Config, error) {
	get := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	c := &Config{
		DatabaseURL: get("TOLLGATE_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable"),
		NATSURL:     getenv("TOLLGATE_NATS_URL"),
		RedisURL:    getenv("TOLLGATE_REDIS_URL"),
		AdminToken:  getenv("TOLLGATE_ADMIN_TOKEN"),
		APIAddr:     get("TOLLGATE_API_ADDR", "127.0.0.1:8080"),
		EdgeAddr:    get("TOLLGATE_EDGE_ADDR", "127.0.0.1:8000"),
		EdgeAdmin:   get("TOLLGATE_EDGE_ADMIN_ADDR", "127.0.0.1:9000"),
		EdgeDomain:  strings.ToLower(get("TOLLGATE_EDGE_DOMAIN", "localhost")),
		EdgeTLSAddr: getenv("TOLLGATE_EDGE_TLS_ADDR"),
		EdgeTLSCert: getenv("TOLLGATE_EDGE_TLS_CERT"),
		EdgeTLSKey:  getenv("TOLLGATE_EDGE_TLS_KEY"),
		NATSPrefix:  get("TOLLGATE_NATS_PREFIX", "tollgate"),
		RedisPrefix: get("TOLLGATE_REDIS_PREFIX", "tollgate"),
		EdgeID:      getenv("TOLLGATE_EDGE_ID"),
		LogLevel:    get("TOLLGATE_LOG_LEVEL", "info"),

		MeterSpoolDir: getenv("TOLLGATE_METER_SPOOL_DIR"),
		StripeKey:     getenv("TOLLGATE_STRIPE_KEY"),
		StripeURL:     getenv("TOLLGATE_STRIPE_URL"),
		StripeEvent:   get("TOLLGATE_STRIPE_EVENT", "tollgate_requests"),

		StripeWebhookSecret: getenv("TOLLGATE_STRIPE_WEBHOOK_SECRET"),

		NATSReplicas:     1,
		NATSCreds:        getenv("TOLLGATE_NATS_CREDS"),
		NATSNKey:         getenv("TOLLGATE_NATS_NKEY"),
		NATSTLSCA:        getenv("TOLLGATE_NATS_TLS_CA"),
		NATSTLSCert:      getenv("TOLLGATE_NATS_TLS_CERT"),
		NATSTLSKey:       getenv("TOLLGATE_NATS_TLS_KEY"),
		APIAdminAddr:     get("TOLLGATE_API_ADMIN_ADDR", "127.0.0.1:9080"),
		BillingAdminAddr: get("TOLLGATE_BILLING_ADMIN_ADDR", "127.0.0.1:9090"),
		DevUpstreamAddr:  get("TOLLGATE_DEV_UPSTREAM_ADDR", "127.0.0.1:8090"),

		SMTPURL:        getenv("TOLLGATE_SMTP_URL"),
		SMTPFrom:       getenv("TOLLGATE_SMTP_FROM"),
		PublicURL:      strings.TrimSuffix(getenv("TOLLGATE_PUBLIC_URL"), "/"),
		EdgePublicURL:  strings.TrimSuffix(getenv("TOLLGATE_EDGE_PUBLIC_URL"), "/"),
		DNSResolver:    getenv("TOLLGATE_DNS_RESOLVER"),
		EdgeCacheBytes: DefaultEdgeCacheBytes,

		EdgeSnapshotMaxAge: 24 * time.Hour,
		EdgeConfigStore:    "memory",
		EdgeTenantMemory:   DefaultEdgeTenantMemory,
		DBTimeout:          5 * time.Second,
		APIHeavyCalls:      2,
		APIHeavyTimeout:    60 * time.Second,
		APIConfigBodyLimit: 64 << 20,
	}
	for _, o := range []struct {
		name string
		on   *bool
		def  bool // unset
	}{{"TOLLGATE_EDGE_JSON_ONE_PASS", &c.EdgeJSONOnePass, true},
		{"TOLLGATE_EDGE_FUNCTION_SKIP_IDLE_CAP", &c.EdgeFunctionSkipIdleCap, true},
		{"TOLLGATE_EDGE_FUNCTION_END_WITH_LAST_CALLBACK", &c.EdgeFunctionEndWithLastCallback, true},
		{"TOLLGATE_EDGE_FUNCTION_MERGED_ENTRIES", &c.EdgeFunctionMergedEntries, true},
		{"TOLLGATE_EDGE_FUNCTION_LOCKFREE_RUNS", &c.EdgeFunctionLockFreeRuns, true},
		{"TOLLGATE_EDGE_FUNCTION_REUSE_CALLS", &c.EdgeFunctionReuseCalls, true},
		{"TOLLGATE_EDGE_FUNCTION_OWN_CONTEXT", &c.EdgeFunctionOwnContext, true}, {"TOLLGATE_EDGE_RETURN_MEMORY", &c.EdgeReturnMemory, true},
		{"TOLLGATE_EDGE_RETURN_ASIDE", &c.EdgeReturnAside, true},
		{"TOLLGATE_EDGE_PACK_CONFIG", &c.EdgePackConfig, true}, {"TOLLGATE_EDGE_SNAPSHOT_YIELD", &c.EdgeSnapshotYield, true},
		{"TOLLGATE_EDGE_SHORT_READ_WAIT", &c.EdgeShortReadWait, false}, {"TOLLGATE_EDGE_REUSE_CHECK", &c.EdgeReuseCheck, true},
		{"TOLLGATE_EDGE_YIELD_READS", &c.EdgeYieldReads, true}, {"TOLLGATE_EDGE_RAW_IO", &c.EdgeRawIO, true},
		{"TOLLGATE_EDGE_KEY_LAST_USE", &c.EdgeKeyLastUse, true}, {"TOLLGATE_EDGE_HTTP2", &c.EdgeHTTP2, true},
		{"TOLLGATE_EDGE_HTTP2_BATCH_WRITES", &c.EdgeHTTP2BatchWrites, true},
		{"TOLLGATE_EDGE_HTTP2_WORKERS", &c.EdgeHTTP2Workers, true}, {"TOLLGATE_EDGE_HTTP2_OWN_SERVER", &c.EdgeHTTP2OwnServer, true},
		{"TOLLGATE_EDGE_H2_UPSTREAM_OWN_CLIENT", &c.EdgeH2UpstreamOwnClient, true},
		{"TOLLGATE_EDGE_INCREMENTAL", &c.EdgeIncremental, true}, {"TOLLGATE_EDGE_SHARE_UPSTREAMS", &c.EdgeShareUpstreams, true},
		{"TOLLGATE_EDGE_PARALLEL_COMPILES", &c.EdgeParallelCompiles, true}, {"TOLLGATE_EDGE_FAST_START", &c.EdgeFastStart, true}, {"TOLLGATE_METER", &c.Meter, true},
		{"TOLLGATE_METER_SPOOL_RESERVE", &c.MeterSpoolReserve, true}, {"TOLLGATE_METER_SPARSE_LATENCY", &c.MeterSparseLatency, true},
		{"TOLLGATE_DB_SHARED_LIMIT_CHECKS", &c.DBSharedLimitChecks, true}, {"TOLLGATE_DB_NOTIFY_AFTER_COMMIT", &c.DBNotifyAfterCommit, true},
		{"TOLLGATE_DB_SHARED_REV_LOCK", &c.DBSharedRevLock, true}, {"TOLLGATE_DB_FOLD_ROUND_TRIPS", &c.DBFoldRoundTrips, true}} {
		switch v := strings.ToLower(getenv(o.name)); v {
		case "":
			*o.on = o.def
		case "on", "true", "1":
			*o.on = true
		case "off", "false", "0":
		default:
			return nil, fmt.Errorf("%s: %q is not on or off", o.name, v)
		}
	}
	var err error
	if c.AllowCIDRs, err = netaddr.ParseCIDRs(getenv("TOLLGATE_UPSTREAM_ALLOW_CIDRS")); err != nil {
		return nil, fmt.Errorf("TOLLGATE_UPSTREAM_ALLOW_CIDRS: %v", err)
	}
	if c.TrustedProxy, err = netaddr.ParseCIDRs(getenv("TOLLGATE_TRUSTED_PROXIES")); err != nil {
		return nil, fmt.Errorf("TOLLGATE_TRUSTED_PROXIES: %v", err)
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"TOLLGATE_PPROF", &c.Pprof}, {"TOLLGATE_ACCESS_LOG", &c.AccessLog}} {
		if v := getenv(b.name); v != "" {
			if *b.dst, err = strconv.ParseBool(v); err != nil {
				return nil, fmt.Errorf("%s: %q is not a boolean", b.name, v)
			}
		}
	}
	if err := netaddr.CheckLabel(strings.Split(c.EdgeDomain, ".")[0]); err != nil && c.EdgeDomain != "localhost" {
		// The edge domain's labels follow host name rules; reuse the slug check on the first.
		return nil, fmt.Errorf("TOLLGATE_EDGE_DOMAIN %q: %v", c.EdgeDomain, err)
	}
	for _, a := range []struct{ name, v string }{
		{"TOLLGATE_API_ADDR", c.APIAddr}, {"TOLLGATE_EDGE_ADDR", c.EdgeAddr}, {"TOLLGATE_EDGE_ADMIN_ADDR", c.EdgeAdmin},
	} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return nil, fmt.Errorf("%s: %q is not host:port", a.name, a.v)
		}
	}
	if v := getenv("TOLLGATE_REDIS_TIMEOUT"); v != "" {
		if c.RedisTimeout, err = time.ParseDuration(v); err != nil || c.RedisTimeout <= 0 || c.RedisTimeout > 10*time.Second {
			return nil, fmt.Errorf("TOLLGATE_REDIS_TIMEOUT: %q is not a duration between 1ms and 10s (like 50ms)", v)
		}
	}
	if err := c.faults(getenv); err != nil {
		return nil, err
	}
	if err := c.fleet(getenv); err != nil {
		return nil, err
	}
	if err := c.cells(getenv); err != nil {
		return nil, err
	}
	if err := c.trust(getenv); err != nil {
		return nil, err
	}
	if err := c.traces(getenv); err != nil {
		return nil, err
	}
	if c.EdgeID == "" {
		c.EdgeID, _ = os.Hostname()
	}
	if c.MeterSpoolDir == "" {
		base := getenv("XDG_STATE_HOME")
		if base == "" {
			base = os.TempDir()
		}
		// The edge's port too: edges sharing a host (and its name) need a spool each.
		_, port, _ := net.SplitHostPort(c.EdgeAddr)
		c.MeterSpoolDir = filepath.Join(base, "tollgate-meter-"+c.EdgeID+"-"+port)
	}
	if err := c.functions(getenv); err != nil {
		return nil, err
	}
	return c, nil
}

// faults reads the settings that bound what a fault costs.
func (c *Config) faults(getenv func(string) string) error {
	if v := getenv("TOLLGATE_EDGE_SNAPSHOT_MAX_AGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("TOLLGATE_EDGE_SNAPSHOT_MAX_AGE: %q is not a duration of 0 or more (like 24h; 0 never starts from a snapshot)", v)
		}
		c.EdgeSnapshotMaxAge = d
	}
	switch v := getenv("TOLLGATE_EDGE_CONFIG_STORE"); v {
	case "":
	case "memory", "disk":
		c.EdgeConfigStore = v
	default:
		return fmt.Errorf("TOLLGATE_EDGE_CONFIG_STORE: %q is neither memory nor disk", v)
	}
	if v := getenv("TOLLGATE_EDGE_TENANT_MEMORY"); v != "" {
		n, err := ParseBytes(v)
		if err != nil || n < 1<<20 {
			return fmt.Errorf("TOLLGATE_EDGE_TENANT_MEMORY: %q is not a size of 1MiB or more (like 128MiB)", v)
		}
		c.EdgeTenantMemory = n
	}
	if v := getenv("TOLLGATE_DB_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond || d > 5*time.Minute {
			return fmt.Errorf("TOLLGATE_DB_TIMEOUT: %q is not a duration between 100ms and 5m (like 5s)", v)
		}
		c.DBTimeout = d
	}
	if v := getenv("TOLLGATE_API_HEAVY_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > time.Hour {
			return fmt.Errorf("TOLLGATE_API_HEAVY_TIMEOUT: %q is not a duration between 1s and 1h (like 60s)", v)
		}
		c.APIHeavyTimeout = d
	}
	if v := getenv("TOLLGATE_API_CONFIG_BODY_LIMIT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1<<20 || n > 1<<30 {
			return fmt.Errorf("TOLLGATE_API_CONFIG_BODY_LIMIT: %q is not a size in bytes from 1048576 to 1073741824 (like 67108864)", v)
		}
		c.APIConfigBodyLimit = n
	}
	if v := getenv("TOLLGATE_API_HEAVY_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return fmt.Errorf("TOLLGATE_API_HEAVY_CALLS: %q is not a count from 0 to 1000 (like 2; 0 turns the cap off)", v)
		}
		c.APIHeavyCalls = n
	}
	return nil
}

// fleet reads and checks the settings of NATS clusters and the admin listeners.
func (c *Config) fleet(getenv func(string) string) error {
	if v := getenv("TOLLGATE_NATS_REPLICAS"); v != "" {
		n, err := strconv.Atoi(v)
		// JetStream allows 1 to 5 replicas; an even count buys no extra fault tolerance.
		if err != nil || n < 1 || n > 5 {
			return fmt.Errorf("TOLLGATE_NATS_REPLICAS: %q is not a replica count from 1 to 5 (3 for a cluster)", v)
		}
		c.NATSReplicas = n
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		return fmt.Errorf("TOLLGATE_NATS_TLS_CERT and TOLLGATE_NATS_TLS_KEY go together: set both or neither")
	}
	if c.NATSCreds != "" && c.NATSNKey != "" {
		return fmt.Errorf("TOLLGATE_NATS_CREDS and TOLLGATE_NATS_NKEY are two ways to sign in: set one")
	}
	for _, a := range []struct{ name, v string }{
		{"TOLLGATE_API_ADMIN_ADDR", c.APIAdminAddr}, {"TOLLGATE_BILLING_ADMIN_ADDR", c.BillingAdminAddr},
		{"TOLLGATE_DEV_UPSTREAM_ADDR", c.DevUpstreamAddr},
	} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s: %q is not host:port", a.name, a.v)
		}
	}
	return nil
}

// DefaultOTELSample is TOLLGATE_OTEL_SAMPLE when unset: one trace in a hundred shows
// where time goes without the edge paying for a span on every request.
const DefaultOTELSample = 0.01

// traces reads and checks the trace export settings.
func (c *Config) traces(getenv func(string) string) error {
	c.OTELSample = DefaultOTELSample
	if c.OTELEndpoint = getenv("TOLLGATE_OTEL_ENDPOINT"); c.OTELEndpoint != "" {
		if _, err := tracing.ExportURL(c.OTELEndpoint); err != nil {
			return fmt.Errorf("TOLLGATE_OTEL_ENDPOINT: %q is not an http:// or https:// URL (like http://collector:4318)", c.OTELEndpoint)
		}
	}
	if v := getenv("TOLLGATE_OTEL_SAMPLE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 1) {
			return fmt.Errorf("TOLLGATE_OTEL_SAMPLE: %q is not a number from 0 to 1 (like 0.01)", v)
		}
		c.OTELSample = f
	}
	return nil
}

// Tracing is the trace export of service (tollgate-edge, tollgate-api,
// tollgate-billing); nil when TOLLGATE_OTEL_ENDPOINT is unset.
func (c *Config) Tracing(service string, rootsSampled bool) (*tracing.Provider, error) {
	if c.OTELEndpoint == "" {
		return nil, nil
	}
	return tracing.New(tracing.Config{Endpoint: c.OTELEndpoint, Sample: c.OTELSample, Service: service, RootsSampled: rootsSampled})
}

// DefaultEdgeTenantMemory is the disk store's budget of compiled tenants: about 2,500
// tenants of 10 routes compiled at once, more than take an edge's traffic within a few
// minutes on most fleets, while the whole edge stays within a 512 MiB container beside
// its response cache.
const DefaultEdgeTenantMemory = 128 << 20

// ParseBytes reads a byte count: digits, optionally followed by KiB, MiB or GiB.
func ParseBytes(v string) (int64, error) {
	mult := int64(1)
	for suf, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if strings.HasSuffix(v, suf) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, suf)), m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a byte count", v)
	}
	return n * mult, nil
}

// DefaultEdgeCacheBytes is the edge's response-cache budget when TOLLGATE_EDGE_CACHE_BYTES
// is unset.
const DefaultEdgeCacheBytes = 256 << 20

// trust reads and checks the settings of mail, DNS proofs and the edge's cache budget.
func (c *Config) trust(getenv func(string) string) error {
	if c.SMTPURL != "" {
		u, err := url.Parse(c.SMTPURL)
		if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Host == "" || u.Port() == "" {
			return fmt.Errorf("TOLLGATE_SMTP_URL: %q is not smtp://[user:pass@]host:port (or smtps://)", redactURL(c.SMTPURL))
		}
	}
	if c.SMTPFrom == "" {
		c.SMTPFrom = "Tollgate <no-reply@" + c.EdgeDomain + ">"
	}
	if _, err := mail.ParseAddress(c.SMTPFrom); err != nil {
		return fmt.Errorf("TOLLGATE_SMTP_FROM: %q is not a mail address: %v", c.SMTPFrom, err)
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.APIAddr
	} else if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("TOLLGATE_PUBLIC_URL: %q is not an http(s) URL", c.PublicURL)
	}
	if u, err := url.Parse(c.EdgePublicURL); c.EdgePublicURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "") {
		return fmt.Errorf("TOLLGATE_EDGE_PUBLIC_URL: %q is not an http(s) URL without a path", c.EdgePublicURL)
	}
	if c.DNSResolver != "" {
		if _, _, err := net.SplitHostPort(c.DNSResolver); err != nil {
			return fmt.Errorf("TOLLGATE_DNS_RESOLVER: %q is not host:port (like 127.0.0.1:53)", c.DNSResolver)
		}
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{
		{"TOLLGATE_DOMAIN_CHECK_MIN", &c.DomainCheckMin},
		{"TOLLGATE_DOMAIN_CHECK_MAX", &c.DomainCheckMax},
		{"TOLLGATE_DOMAIN_RECHECK", &c.DomainRecheck},
	} {
		if v := getenv(d.name); v != "" {
			n, err := time.ParseDuration(v)
			if err != nil || n < 10*time.Millisecond || n > 24*time.Hour {
				return fmt.Errorf("%s: %q is not a duration between 10ms and 24h (like 10s)", d.name, v)
			}
			*d.dst = n
		}
	}
	c.EdgeHTTP2MaxStreams = 250
	if v := getenv("TOLLGATE_EDGE_HTTP2_MAX_STREAMS"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n < 1 || n > 10000 {
			return fmt.Errorf("TOLLGATE_EDGE_HTTP2_MAX_STREAMS: %q is not a number of streams between 1 and 10000", v)
		}
		c.EdgeHTTP2MaxStreams = uint32(n)
	}
	c.EdgeHTTP2HeaderTable = 0
	if v := getenv("TOLLGATE_EDGE_HTTP2_HEADER_TABLE"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n > 65536 {
			return fmt.Errorf("TOLLGATE_EDGE_HTTP2_HEADER_TABLE: %q is not a number of bytes between 0 and 65536", v)
		}
		c.EdgeHTTP2HeaderTable = uint32(n)
	}
	if v := getenv("TOLLGATE_EDGE_CACHE_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("TOLLGATE_EDGE_CACHE_BYTES: %q is not a byte count (0 turns the response cache off)", v)
		}
		c.EdgeCacheBytes = n
	}
	return nil
}

// redactURL drops a URL's password, for error messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "<unparsable>"
}

// GatewayPorts are the ports of the gateway's own listeners, which no local upstream may
// use (tenants.UpstreamAddressRule.GatewayPorts, beside AllowCIDRs and EdgeDomain).
func (c *Config) GatewayPorts() []int {
	var ports []int
	for _, addr := range []string{c.APIAddr, c.EdgeAddr, c.EdgeAdmin, c.EdgeTLSAddr, c.APIAdminAddr, c.BillingAdminAddr} {
		if _, port, err := net.SplitHostPort(addr); err == nil {
			if n, err := strconv.Atoi(port); err == nil && n > 0 {
				ports = append(ports, n)
			}
		}
	}
	return ports
}

// KVBucket is the JetStream KV bucket of config entries an edge follows: its cell's
// (TOLLGATE_EDGE_CELL; without cells, the one bucket).
func (c *Config) KVBucket() string { return c.CellBucket(c.EdgeCell) }

// NATSAuth is the sign-in and TLS every process connects to NATS with.
func (c *Config) NATSAuth() natsconn.Auth {
	return natsconn.Auth{
		Creds:   c.NATSCreds,
		NKey:    c.NATSNKey,
		TLSCA:   c.NATSTLSCA,
		TLSCert: c.NATSTLSCert,
		TLSKey:  c.NATSTLSKey,
	}
}
