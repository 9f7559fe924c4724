// Package edgecmd is the edge's process: it wires an edge to its NATS bucket, its
// limiter (Redis or local) and its usage meter, and serves until the process is told to
// stop. tollgate's edge and dev commands run it, and so does the tollgate-edge binary
// (cmd/tollgate-edge), which links nothing else: none of the api's, the console's or
// billing's packages, so an edge process maps and initialises only what the edge uses.
package edgecmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"tollgate/edge"
	"tollgate/edge/configfile"
	"tollgate/edge/function"
	"tollgate/edge/memory"
	"tollgate/edge/meter"
	"tollgate/edge/reqlog"
	"tollgate/edge/upstreamclient"
	"tollgate/infra/cmdline"
	"tollgate/infra/config"
	"tollgate/infra/natsconn"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// Command is `tollgate edge` (and, renamed, the tollgate-edge binary), built around Run.
func Command() *cobra.Command {
	c := &cobra.Command{
		Use:   "edge",
		Short: "the data plane: proxies tenant traffic from the KV config",
		Long: `The edge serves tenants' traffic at <slug>.<TOLLGATE_EDGE_DOMAIN>, from the config
the api publishes to the NATS KV bucket. It limits through Redis when TOLLGATE_REDIS_URL
is set (locally otherwise), meters usage to NATS for billing, and starts from its last
config snapshot while NATS is unreachable. It stops on SIGINT or SIGTERM, after draining.`,
		Args: cobra.NoArgs,
		RunE: cmdline.Run(Run),
	}
	cmdline.Env(c, "TOLLGATE_NATS_URL", "TOLLGATE_NATS_PREFIX", "TOLLGATE_NATS_CREDS",
		"TOLLGATE_REDIS_URL", "TOLLGATE_REDIS_PREFIX", "TOLLGATE_EDGE_ADDR", "TOLLGATE_EDGE_ADMIN_ADDR",
		"TOLLGATE_EDGE_DOMAIN", "TOLLGATE_EDGE_TLS_ADDR", "TOLLGATE_EDGE_TLS_CERT", "TOLLGATE_EDGE_ID",
		"TOLLGATE_EDGE_HTTP2", "TOLLGATE_EDGE_CONFIG_STORE", "TOLLGATE_EDGE_TENANT_MEMORY",
		"TOLLGATE_METER", "TOLLGATE_METER_SPOOL_DIR", "TOLLGATE_UPSTREAM_ALLOW_CIDRS",
		"TOLLGATE_TRUSTED_PROXIES", "TOLLGATE_EDGE_CELL", "TOLLGATE_CELLS", "TOLLGATE_OTEL_ENDPOINT", "TOLLGATE_LOG_LEVEL")
	return c
}

// Run is the edge command: it serves tenant traffic from the KV bucket until ctx ends.
func Run(ctx context.Context, _ []string) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	log := config.NewLogger(cfg.LogLevel, "edge")
	// The edge's NATS is its cell's (TOLLGATE_EDGE_CELL), which holds the bucket it follows.
	natsURL := cfg.EdgeNATSURL()
	// The public port is bound once the edge is ready (Serve); a port already in use
	// still fails here, at start, rather than after the config is loaded.
	probe, err := net.Listen("tcp", cfg.EdgeAddr)
	if err != nil {
		return fmt.Errorf("edge listen: %w", err)
	}
	_ = probe.Close()
	adm, err := net.Listen("tcp", cfg.EdgeAdmin)
	if err != nil {
		return fmt.Errorf("edge admin listen: %w", err)
	}
	return Serve(ctx, cfg, natsURL, nil, adm, log, nil)
}

// coldStartWait bounds how long a starting edge waits for the bucket's initial load
// before it serves its config snapshot instead (when NATS is unreachable outright it
// does not wait). A slow load is no harm: the edge catches up from the snapshot.
const coldStartWait = 5 * time.Second

// Serve watches the bucket into a new edge and serves until ctx ends. ready, if not
// nil, is called once the edge is ready. The admin listener serves at once; the public
// one, pub, or when pub is nil a listener on cfg.EdgeAddr (and the TLS one) is opened
// only when the edge is ready: from the bucket's initial load or, when NATS is
// unreachable, from its config snapshot (configfile.File).
//
// The deferred closes run in reverse: the edge drains, then the meter flushes its last
// counts and the spool while NATS is still connected, then NATS and the limiter close.
func Serve(ctx context.Context, cfg *config.Config, natsURL string, pub, adm net.Listener, log *slog.Logger, ready func()) error {
	fc, err := openLimiter(cfg, log)
	if err != nil {
		return err
	}
	defer fc.close()
	// Connect does not fail on an unreachable server: it keeps trying in the background
	// (natsconn.Connect sets nats.go's RetryOnFailedConnect), so the edge can start from its
	// snapshot and follow the bucket once NATS is back.
	nc, err := natsconn.ConnectAuth(natsURL, "tollgate-edge-"+cfg.EdgeID, cfg.NATSAuth())
	if err != nil {
		return err
	}
	defer nc.Close()
	m, err := openMeter(cfg, nc, fc.reg, log)
	if err != nil {
		return err
	}
	defer closeMeter(m, log)
	logs, err := openLogs(cfg, nc, fc.reg, log)
	if err != nil {
		return err
	}
	defer closeLogs(logs)
	e, closeTraces, err := newEdge(cfg, m, logs, fc, nc, log)
	if err != nil {
		return err
	}
	defer closeTraces()
	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), config.ShutdownGrace)
		defer cancel()
		return e.Shutdown(sctx)
	}
	defer func() { _ = shutdown() }() // on an early return; a no-op after the one below
	serveErr := make(chan error, 3)
	go func() { serveErr <- e.ServeAdmin(adm) }()
	if cfg.EdgeReturnMemory {
		go memory.Returner{Inline: !cfg.EdgeReturnAside, Returned: func(before, after uint64) {
			log.Debug("memory returned to the OS after a burst", "held_before", before, "held_after", after)
		}}.Run(ctx)
	}

	var current <-chan struct{}
	var restore func() (time.Duration, bool, error)
	if cfg.EdgeConfigStore == "disk" {
		var stopWatch func()
		if current, restore, stopWatch, err = followStore(ctx, cfg, e, nc, log); err != nil {
			return err
		}
		defer stopWatch()
	} else {
		cf, cur, stopWatch, err := followBucket(ctx, cfg, e, nc, fc, log)
		if err != nil {
			return err
		}
		defer cf.Close() // its last write, after the watch has stopped
		defer stopWatch()
		current = cur
		restore = func() (time.Duration, bool, error) {
			ok, err := cf.Restore(cfg.EdgeSnapshotMaxAge)
			_, asOf := cf.Serving()
			return time.Since(asOf), ok, err
		}
	}
	fromSnapshot, err := waitForConfig(ctx, nc, restore, current, serveErr, log)
	if err != nil {
		if errors.Is(err, errStopped) {
			return nil
		}
		return err
	}
	pub, tlsLn, err := listenPublic(cfg, pub)
	if err != nil {
		return err
	}
	disk := cfg.EdgeConfigStore == "disk"
	if fromSnapshot && disk {
		e.StoreBehind(true)
	}
	e.Loaded()
	if fromSnapshot {
		go func() {
			select {
			case <-current:
				if disk {
					e.StoreBehind(false)
				}
				log.Info("edge: caught up with the bucket; the snapshot's config is replaced", "bucket", cfg.KVBucket())
			case <-ctx.Done():
			}
		}()
	} else {
		log.Info("edge config loaded", "bucket", cfg.KVBucket())
	}
	if ready != nil {
		ready()
	}
	go func() { serveErr <- e.ServePublic(pub) }()
	if tlsLn != nil {
		go func() { serveErr <- e.ServeTLS(tlsLn) }()
		log.Info("edge listening for TLS", "addr", tlsLn.Addr().String())
	}
	// procs is GOMAXPROCS: since Go 1.25 the runtime sets it from the container's CPU limit
	// (and follows a change of it), which is what sizes a node.
	log.Info("edge listening", "addr", pub.Addr().String(), "admin", adm.Addr().String(), "domain", cfg.EdgeDomain, "procs", runtime.GOMAXPROCS(0))
	for ctx.Err() == nil {
		select {
		case err := <-serveErr:
			if err != nil {
				return err
			}
		case <-ctx.Done():
		}
	}
	return shutdown()
}

// newEdge builds the edge from cfg: its TLS certificate, cache budget, traces and
// performance switches. closeTraces flushes the traces; call it after the edge drained.
func newEdge(cfg *config.Config, m *meter.Meter, logs *reqlog.Recorder, fc *edgeLimiter, nc *nats.Conn, log *slog.Logger) (e *edge.Edge, closeTraces func(), err error) {
	var wildcard *tls.Certificate
	if cfg.EdgeTLSCert != "" || cfg.EdgeTLSKey != "" {
		c, err := tls.LoadX509KeyPair(cfg.EdgeTLSCert, cfg.EdgeTLSKey)
		if err != nil {
			return nil, nil, fmt.Errorf("TOLLGATE_EDGE_TLS_CERT / TOLLGATE_EDGE_TLS_KEY: %w", err)
		}
		wildcard = &c
	}
	if cfg.EdgeTLSAddr != "" && wildcard == nil {
		log.Warn("edge: TLS listener without TOLLGATE_EDGE_TLS_CERT/KEY: only custom domains will complete a handshake")
	}
	cacheBytes := cfg.EdgeCacheBytes
	if cacheBytes == 0 {
		cacheBytes = -1 // TOLLGATE_EDGE_CACHE_BYTES=0: no response cache
	}
	traces, err := cfg.Tracing("tollgate-edge", true) // the edge decides which requests it records
	if err != nil {
		return nil, nil, err
	}
	var tr *edge.Tracing
	if traces != nil {
		tr = &edge.Tracing{Tracer: traces.Tracer("tollgate/edge"), Sample: cfg.OTELSample}
	}
	edge.SetRawIO(cfg.EdgeRawIO)
	edge.SetYieldReads(cfg.EdgeYieldReads)
	edge.SetHTTP2BatchWrites(cfg.EdgeHTTP2BatchWrites)
	edge.SetShortReadWait(cfg.EdgeShortReadWait)
	upstreamclient.SetReuseCheck(cfg.EdgeReuseCheck)
	edge.SetJSONOnePass(cfg.EdgeJSONOnePass)
	function.SetSkipIdleCap(cfg.EdgeFunctionSkipIdleCap)
	function.SetEndWithLastCallback(cfg.EdgeFunctionEndWithLastCallback)
	function.SetMergedEntries(cfg.EdgeFunctionMergedEntries)
	function.SetLockFreeRuns(cfg.EdgeFunctionLockFreeRuns)
	function.SetReuseCalls(cfg.EdgeFunctionReuseCalls)
	function.SetOwnContext(cfg.EdgeFunctionOwnContext)
	edge.SetIncrementalCompiles(cfg.EdgeIncremental)
	edge.SetShareUpstreams(cfg.EdgeShareUpstreams)
	edge.SetParallelCompiles(cfg.EdgeParallelCompiles)
	e, err = edge.New(edge.Config{
		Tracing:          tr,
		Functions:        functionConfig(cfg, nc, log),
		CacheBytes:       cacheBytes,
		DisableHTTP2:     !cfg.EdgeHTTP2,
		HTTP2MaxStreams:  cfg.EdgeHTTP2MaxStreams,
		HTTP2NoWorkers:   !cfg.EdgeHTTP2Workers,
		HTTP2GoServer:    !cfg.EdgeHTTP2OwnServer,
		HTTP2GoClient:    !cfg.EdgeH2UpstreamOwnClient,
		HTTP2HeaderTable: cfg.EdgeHTTP2HeaderTable,
		TLSCertificate:   wildcard,
		Meter:            m,
		Logs:             logs,
		Registry:         fc.reg,
		Limiter:          fc.lim,
		Domain:           cfg.EdgeDomain,
		AddressRule:      &tenants.UpstreamAddressRule{AllowCIDRs: cfg.AllowCIDRs, EdgeDomain: cfg.EdgeDomain, GatewayPorts: cfg.GatewayPorts()},
		TrustedProxies:   cfg.TrustedProxy,
		Logger:           log,
		AccessLog:        cfg.AccessLog,
		EdgeID:           cfg.EdgeID,
		Pprof:            cfg.Pprof,
	})
	if err != nil {
		traces.Close()
		return nil, nil, err
	}
	return e, traces.Close, nil
}

// followBucket opens the edge's config snapshot and watches the bucket into it (and so
// into the edge). current is closed once the bucket's initial load is in. The snapshot
// lives beside the meter's spool: the edge's one local state directory.
func followBucket(ctx context.Context, cfg *config.Config, e *edge.Edge, nc *nats.Conn, fc *edgeLimiter, log *slog.Logger) (cf *configfile.File, current <-chan struct{}, stop func(), err error) {
	cf, err = configfile.Open(configfile.Config{
		Dir:       cfg.MeterSpoolDir,
		Bucket:    cfg.KVBucket(),
		Apply:     e.Apply,
		Connected: nc.IsConnected,
		RawValues: !cfg.EdgePackConfig,
		Hog:       !cfg.EdgeSnapshotYield,
		Registry:  fc.reg,
		Logger:    log,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	e.UseConfigFile(cf)
	js, err := jetstream.New(nc)
	if err != nil {
		cf.Close()
		return nil, nil, nil, err
	}
	loaded := make(chan struct{})
	w, err := tgnats.Watch(ctx, js, cfg.KVBucket(), tgnats.WatchConfig{
		OnUpdate: func(u tgnats.Update) { cf.Update(u.Key, u.Value, u.Revision) },
		OnReady: func() {
			if n := cf.Current(); n > 0 {
				log.Info("edge: keys of the snapshot the bucket no longer has were deleted", "keys", n)
			}
			close(loaded)
		},
		OnError: func(err error) { log.Warn("config watch", "err", err) },
	})
	if err != nil {
		cf.Close()
		return nil, nil, nil, err
	}
	return cf, loaded, w.Stop, nil
}

// errStopped: the edge was told to stop (or its admin listener closed) before it had a
// config to serve.
var errStopped = errors.New("stopped before ready")

// waitForConfig waits for the bucket's initial load or, while NATS is unreachable,
// restores the config snapshot (or the disk store's config) and serves that
// (fromSnapshot) until the load is in.
func waitForConfig(ctx context.Context, nc *nats.Conn, restore func() (age time.Duration, ok bool, err error), current <-chan struct{}, serveErr <-chan error, log *slog.Logger) (fromSnapshot bool, err error) {
	wait := coldStartWait
	if !nc.IsConnected() {
		wait = 0
	}
	select {
	case <-current:
		return false, nil
	case <-ctx.Done():
		return false, errStopped
	case err := <-serveErr: // the admin listener failed
		return false, orStopped(err)
	case <-time.After(wait):
	}
	age, ok, err := restore()
	switch {
	case ok:
		log.Warn("edge: NATS unreachable; serving the config snapshot until the bucket's initial load is in",
			"age", age.Round(time.Second))
		return true, nil
	case err != nil:
		log.Warn("edge: NATS unreachable and no usable config snapshot; not ready until the bucket's initial load is in", "why", err)
	}
	select {
	case <-current:
		return false, nil
	case <-ctx.Done():
		return false, errStopped
	case err := <-serveErr:
		return false, orStopped(err)
	}
}

func orStopped(err error) error {
	if err == nil {
		return errStopped
	}
	return err
}

// listenPublic binds the public listener (unless dev bound it already) and the TLS one.
// They are bound before the edge says it is loaded, so /readyz answers 200 only with the
// port open; connections made while the edge compiles wait in the listen queue, not for
// a 503.
func listenPublic(cfg *config.Config, pub net.Listener) (_ net.Listener, tlsLn net.Listener, err error) {
	if pub == nil {
		if pub, err = net.Listen("tcp", cfg.EdgeAddr); err != nil {
			return nil, nil, fmt.Errorf("edge listen: %w", err)
		}
	}
	if cfg.EdgeTLSAddr != "" {
		if tlsLn, err = net.Listen("tcp", cfg.EdgeTLSAddr); err != nil {
			_ = pub.Close()
			return nil, nil, fmt.Errorf("TOLLGATE_EDGE_TLS_ADDR: %w", err)
		}
	}
	return pub, tlsLn, nil
}
