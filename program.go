package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"tollgate/api"
	billingcli "tollgate/billing/cli"
	billingpg "tollgate/billing/postgres"
	"tollgate/edge"
	"tollgate/infra/config"
	"tollgate/infra/tracing"
	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
	tgnats "tollgate/tenants/nats"
	"tollgate/tenants/postgres"
)

// shutdownGrace bounds draining in-flight requests on SIGTERM.
const shutdownGrace = 25 * time.Second

const defaultNATSURL = "nats://127.0.0.1:4222"

func loadConfig() (*config.Config, error) { return config.FromEnv(os.Getenv) }

// Migrate applies the database migrations, creating the database if needed.
func Migrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	if err := postgres.Migrate(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	fmt.Println("database migrated")
	return nil
}

// Billing is `tollgate billing`: the usage consumer, and the finance subcommands
// (reconcile, export, enable, push). See billing/cli.
func Billing(ctx context.Context, args []string) error {
	return billingcli.Main(ctx, args)
}

// controlPlane is the api's half of the stack: store, relay and the bucket it feeds.
type controlPlane struct {
	db    *postgres.DB
	nc    *nats.Conn
	relay *postgres.Relay
	mail  tenants.Mailer

	// The admin listener's registry and the api's series (admin.go); adminLn is nil
	// when the process serves no admin listener of its own.
	reg     *prometheus.Registry
	metrics *api.Metrics
	adminLn net.Listener

	traces *tracing.Provider // nil: TOLLGATE_OTEL_ENDPOINT unset
}

func openControlPlane(ctx context.Context, cfg *config.Config, natsURL string, log *slog.Logger) (*controlPlane, error) {
	if err := postgres.Migrate(ctx, cfg.DatabaseURL); err != nil {
		return nil, err
	}
	db, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.WithUpstreamAddressRule(cfg.UpstreamAddressRule()), postgres.WithTimeout(cfg.DBTimeout))
	if err != nil {
		return nil, err
	}
	nc, err := connectNATS(cfg, natsURL, "tollgate-api")
	if err != nil {
		db.Close()
		return nil, err
	}
	pub, err := tgnats.NewPublisher(nc, cfg.KVBucket(), 0)
	if err != nil {
		nc.Close()
		db.Close()
		return nil, err
	}
	mail, err := openMailer(cfg, log)
	if err != nil {
		nc.Close()
		db.Close()
		return nil, err
	}
	reg, metrics, err := apiMetrics()
	if err != nil {
		nc.Close()
		db.Close()
		return nil, err
	}
	traces, err := cfg.Tracing("tollgate-api", false)
	if err != nil {
		nc.Close()
		db.Close()
		return nil, err
	}
	if traces != nil {
		pub.SetTracer(traces.Tracer("tollgate/relay"))
	}
	cp := &controlPlane{db: db, nc: nc, relay: postgres.NewRelay(db, pub, log), mail: mail, reg: reg, metrics: metrics, traces: traces}
	cp.relay.SetObserver(metrics)
	return cp, nil
}

// bucket creates the KV bucket, retrying while NATS is unreachable (the api serves
// meanwhile; the relay keeps the outbox until the bucket is there).
func (cp *controlPlane) bucket(ctx context.Context, name string, replicas int) (jetstream.KeyValue, error) {
	js, err := jetstream.New(cp.nc)
	if err != nil {
		return nil, err
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := tgnats.EnsureBucket(cctx, js, name, replicas)
		cancel()
		if err == nil {
			return kv, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("nats: config bucket %s: %w", name, err)
		case <-time.After(time.Second):
		}
	}
}

// resync rebuilds the bucket from Postgres.
func (cp *controlPlane) resync(ctx context.Context, kv jetstream.KeyValue) (postgres.ResyncResult, error) {
	return cp.relay.Resync(ctx, func(ctx context.Context, live []tenants.Change) error {
		return tgnats.Resync(ctx, kv, live)
	})
}

func (cp *controlPlane) close() {
	cp.nc.Close()
	cp.db.Close()
	shutdownTraces(cp.traces)
}

// tracer is p's tracer of scope; nil (no spans) when traces are not exported.
func tracer(p *tracing.Provider, scope string) trace.Tracer {
	if p == nil {
		return nil
	}
	return p.Tracer(scope)
}

// shutdownTraces exports the spans still queued, for a few seconds at most.
func shutdownTraces(p *tracing.Provider) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
}

func (cp *controlPlane) server(cfg *config.Config, log *slog.Logger) *api.Server {
	stripe := newStripeSide(cp, cfg, log)
	srv := api.New(api.Config{
		People:     cp.db,
		Audit:      cp.db,
		Tenants:    cp.db,
		Routes:     cp.db,
		Consumers:  cp.db,
		Plans:      cp.db,
		Tokens:     cp.db,
		JWTIssuers: cp.db,
		Policies:   cp.db,
		Domains:    cp.db,
		APIDocs:    cp.db,
		EdgeDomain: cfg.EdgeDomain,

		// The same checker and schedule as runAPI's automatic checks.
		Proofs:       dnsproof.New(cfg.DNSResolver),
		DomainChecks: cfg.DomainChecks,

		Usage:  billingpg.New(cp.db.Pool()), // rollups folded by `tollgate billing`, same database
		Prices: billingpg.New(cp.db.Pool()),
		// Stripe's side of the bill; nil handlers answer 404.
		Invoices:      stripe.invoices,
		StripeWebhook: stripe.webhook,
		AdminToken:    cfg.AdminToken,
		Upstreams:     cfg.UpstreamAddressRule(),
		Mailer:        cp.mail,
		PublicURL:     cfg.PublicURL,
		Logger:        log,
		Metrics:       cp.metrics,
		Tracer:        tracer(cp.traces, "tollgate/api"),
		// Each request's store work is bounded; the driver's errors tell an unreachable
		// database (503 not_ready) from a bug (500).
		RequestTimeout: cfg.DBTimeout,
		Unavailable:    postgres.Unavailable,
		Ready: func(ctx context.Context) error {
			if err := cp.db.Ping(ctx); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			return nil
		},
	})
	mountConsole(srv, cp, cfg, log)
	mountPortal(srv, cp, cfg, log, stripe.checkout)
	return srv
}

// API serves the management API and runs the outbox relay. With --resync it rebuilds the
// KV bucket from Postgres and exits.
func API(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	resync := fs.Bool("resync", false, "rebuild the KV bucket from Postgres, then exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := config.NewLogger(cfg.LogLevel, "api")
	if cfg.AdminToken == "" {
		return errors.New("TOLLGATE_ADMIN_TOKEN must be set (the operator's token for the management API)")
	}
	natsURL := cfg.NATSURL
	if natsURL == "" {
		natsURL = defaultNATSURL
	}
	cp, err := openControlPlane(ctx, cfg, natsURL, log)
	if err != nil {
		return err
	}
	defer cp.close()
	if *resync {
		kv, err := cp.bucket(ctx, cfg.KVBucket(), cfg.NATSReplicas)
		if err != nil {
			return err
		}
		// When an api is running, its relay does the work; give it time, not forever.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		res, err := cp.resync(rctx, kv)
		if err != nil {
			return err
		}
		fmt.Printf("bucket %s rebuilt: %d entries (revs %d..%d), %d pending outbox rows superseded\n",
			cfg.KVBucket(), res.Entries, res.FirstRev, res.FirstRev+int64(res.Entries)-1, res.Superseded)
		return nil
	}
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("api listen: %w", err)
	}
	if cp.adminLn, err = listenAdmin("TOLLGATE_API_ADMIN_ADDR", cfg.APIAdminAddr); err != nil {
		ln.Close()
		return err
	}
	return runAPI(ctx, cfg, cp, ln, log)
}

// runAPI serves until ctx ends, with the relay beside it once the bucket exists.
func runAPI(ctx context.Context, cfg *config.Config, cp *controlPlane, ln net.Listener, log *slog.Logger) error {
	srv := cp.server(cfg, log)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		kv, err := cp.bucket(ctx, cfg.KVBucket(), cfg.NATSReplicas)
		if err != nil {
			return
		}
		// `tollgate api --resync` run beside this api asks this relay to do it.
		cp.relay.SetResyncApply(func(ctx context.Context, live []tenants.Change) error {
			return tgnats.Resync(ctx, kv, live)
		})
		if err := cp.relay.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("relay stopped", "err", err)
		}
	}()
	// Custom domains' DNS proofs are checked beside the api; every replica runs the
	// checks, which share the due domains through the store (no lock to hold).
	checksCtx, stopChecks := context.WithCancel(ctx)
	checksDone := make(chan struct{})
	go func() {
		defer close(checksDone)
		checks := &dnsproof.Loop{Store: cp.db, Checker: dnsproof.New(cfg.DNSResolver), Schedule: cfg.DomainChecks, Logger: log}
		_ = checks.Run(checksCtx)
	}()
	defer func() { stopChecks(); <-checksDone }()
	drainAdmin, stopAdmin := cp.serveAdmin(ctx, log)
	defer stopAdmin()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("api listening", "addr", ln.Addr().String(), "bucket", cfg.KVBucket())
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	drainAdmin()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-relayDone
	return err
}

// Edge serves tenant traffic from the KV bucket.
func Edge(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := config.NewLogger(cfg.LogLevel, "edge")
	natsURL := cfg.NATSURL
	if natsURL == "" {
		natsURL = defaultNATSURL
	}
	// The public port is bound once the edge is ready (runEdge); a port already in use
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
	return runEdge(ctx, cfg, natsURL, nil, adm, log, nil)
}

// coldStartWait bounds how long a starting edge waits for the bucket's initial load
// before it serves its config snapshot instead (when NATS is unreachable outright it
// does not wait). A slow load is no harm: the edge catches up from the snapshot.
const coldStartWait = 5 * time.Second

// runEdge watches the bucket into a new edge and serves until ctx ends. ready, if not
// nil, is called once the edge is ready. The admin listener serves at once; the public
// one, pub, or when pub is nil a listener on cfg.EdgeAddr (and the TLS one) is opened
// only when the edge is ready: from the bucket's initial load or, when NATS is
// unreachable, from its config snapshot (edge.ConfigFile).
func runEdge(ctx context.Context, cfg *config.Config, natsURL string, pub, adm net.Listener, log *slog.Logger, ready func()) error {
	fc, err := openLimiter(cfg, log)
	if err != nil {
		return err
	}
	defer fc.close() // after the edge has drained: the deferred calls below run first
	// Connect does not fail on an unreachable server: it keeps trying in the background
	// (tgnats.Connect sets nats.go's RetryOnFailedConnect), so the edge can start from its
	// snapshot and follow the bucket once NATS is back.
	nc, err := connectNATS(cfg, natsURL, "tollgate-edge-"+cfg.EdgeID)
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
		defer shutdownTraces(traces) // after the edge has drained (deferred below)
		tr = &edge.Tracing{Tracer: traces.Tracer("tollgate/edge"), Sample: cfg.OTELSample}
	}
	edge.SetRawIO(cfg.EdgeRawIO)
	edge.SetYieldReads(cfg.EdgeYieldReads)
	edge.SetJSONOnePass(cfg.EdgeJSONOnePass)
	e, err := edge.New(edge.Config{
		Tracing:        tr,
		CacheBytes:     cacheBytes,
		TLSCertificate: wildcard,
		Meter:          m,
		Registry:       fc.reg,
		Limiter:        fc.lim,
		Domain:         cfg.EdgeDomain,
		AddressRule:    cfg.UpstreamAddressRule(),
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
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
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
