// Package edgecmd is the edge's process: it wires an edge to its NATS bucket, its
// limiter (Redis or local) and its usage meter, and serves until the process is told to
// stop. tollgate's edge and dev commands run it, and so does the tollgate-edge binary
// (cmd/tollgate-edge), which links nothing else: none of the api's, the console's or
// billing's packages, so an edge process maps and initialises only what the edge uses.
package edgecmd

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge"
	"tollgate/infra/config"
	"tollgate/infra/natsconn"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// Run is the edge command: it serves tenant traffic from the KV bucket until ctx ends.
func Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	log := config.NewLogger(cfg.LogLevel, "edge")
	natsURL := cfg.NATSURL
	if natsURL == "" {
		natsURL = config.DefaultNATSURL
	}
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
// unreachable, from its config snapshot (edge.ConfigFile).
func Serve(ctx context.Context, cfg *config.Config, natsURL string, pub, adm net.Listener, log *slog.Logger, ready func()) error {
	fc, err := openLimiter(cfg, log)
	if err != nil {
		return err
	}
	defer fc.close() // after the edge has drained: the deferred calls below run first
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
	// Deferred after nc.Close, so it runs first: after the edge has drained (below), the
	// meter flushes its last counts and the spool while NATS is still connected.
	defer closeMeter(m, log)
	var wildcard *tls.Certificate
	if cfg.EdgeTLSCert != "" || cfg.EdgeTLSKey != "" {
		c, err := tls.LoadX509KeyPair(cfg.EdgeTLSCert, cfg.EdgeTLSKey)
		if err != nil {
			return fmt.Errorf("TOLLGATE_EDGE_TLS_CERT / TOLLGATE_EDGE_TLS_KEY: %w", err)
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
		return err
	}
	var tr *edge.Tracing
	if traces != nil {
		defer traces.Close() // after the edge has drained (deferred below)
		tr = &edge.Tracing{Tracer: traces.Tracer("tollgate/edge"), Sample: cfg.OTELSample}
	}
	edge.SetRawIO(cfg.EdgeRawIO)
	edge.SetYieldReads(cfg.EdgeYieldReads)
	edge.SetShortReadWait(cfg.EdgeShortReadWait)
	edge.SetReuseCheck(cfg.EdgeReuseCheck)
	edge.SetJSONOnePass(cfg.EdgeJSONOnePass)
	edge.SetIncrementalCompiles(cfg.EdgeIncremental)
	edge.SetShareUpstreams(cfg.EdgeShareUpstreams)
	edge.SetParallelCompiles(cfg.EdgeParallelCompiles)
	e, err := edge.New(edge.Config{
		Tracing:        tr,
		CacheBytes:     cacheBytes,
		TLSCertificate: wildcard,
		Meter:          m,
		Registry:       fc.reg,
		Limiter:        fc.lim,
		Domain:         cfg.EdgeDomain,
		AddressRule:    &tenants.UpstreamAddressRule{AllowCIDRs: cfg.AllowCIDRs, EdgeDomain: cfg.EdgeDomain, GatewayPorts: cfg.GatewayPorts()},
		TrustedProxies: cfg.TrustedProxy,
		Logger:         log,
		AccessLog:      cfg.AccessLog,
		EdgeID:         cfg.EdgeID,
		Pprof:          cfg.Pprof,
	})
	if err != nil {
		return err
	}
	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), config.ShutdownGrace)
		defer cancel()
		return e.Shutdown(sctx)
	}
	defer func() { _ = shutdown() }() // on an early return; a no-op after the one below
	serveErr := make(chan error, 3)
	go func() { serveErr <- e.ServeAdmin(adm) }()
	if cfg.EdgeReturnMemory {
		go edge.MemoryReturner{Inline: !cfg.EdgeReturnAside, Returned: func(before, after uint64) {
			log.Debug("memory returned to the OS after a burst", "held_before", before, "held_after", after)
		}}.Run(ctx)
	}

	// The config snapshot lives beside the meter's spool: the edge's one local state
	// directory. Closed (its last write) after the watch has stopped.
	cf, err := edge.OpenConfigFile(edge.ConfigFileConfig{
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
		return err
	}
	defer cf.Close()
	e.UseConfigFile(cf)
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	current := make(chan struct{})
	w, err := tgnats.Watch(ctx, js, cfg.KVBucket(), tgnats.WatchConfig{
		OnUpdate: func(u tgnats.Update) { cf.Update(u.Key, u.Value, u.Revision) },
		OnReady: func() {
			if n := cf.Current(); n > 0 {
				log.Info("edge: keys of the snapshot the bucket no longer has were deleted", "keys", n)
			}
			close(current)
		},
		OnError: func(err error) { log.Warn("config watch", "err", err) },
	})
	if err != nil {
		return err
	}
	defer w.Stop()

	// Wait for the bucket, or serve the snapshot while NATS is unreachable.
	wait := coldStartWait
	if !nc.IsConnected() {
		wait = 0
	}
	fromSnapshot := false
	select {
	case <-current:
	case <-ctx.Done():
		return nil
	case err := <-serveErr: // the admin listener failed
		return err
	case <-time.After(wait):
		ok, err := cf.Restore(cfg.EdgeSnapshotMaxAge)
		switch {
		case ok:
			fromSnapshot = true
			_, asOf := cf.Serving()
			log.Warn("edge: NATS unreachable; serving the config snapshot until the bucket's initial load is in",
				"age", time.Since(asOf).Round(time.Second), "dir", cfg.MeterSpoolDir)
		case err != nil:
			log.Warn("edge: NATS unreachable and no usable config snapshot; not ready until the bucket's initial load is in", "why", err)
		}
		if !ok {
			select {
			case <-current:
			case <-ctx.Done():
				return nil
			case err := <-serveErr:
				return err
			}
		}
	}
	// Bound before Loaded, so /readyz answers 200 only with the port open; connections
	// made while the edge compiles wait in the listen queue, not for a 503.
	if pub == nil {
		if pub, err = net.Listen("tcp", cfg.EdgeAddr); err != nil {
			return fmt.Errorf("edge listen: %w", err)
		}
	}
	var tlsLn net.Listener
	if cfg.EdgeTLSAddr != "" {
		if tlsLn, err = net.Listen("tcp", cfg.EdgeTLSAddr); err != nil {
			_ = pub.Close()
			return fmt.Errorf("TOLLGATE_EDGE_TLS_ADDR: %w", err)
		}
	}
	e.Loaded()
	if fromSnapshot {
		go func() {
			select {
			case <-current:
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
