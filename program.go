package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"tollgate/api"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/cmdline"
	"tollgate/infra/config"
	"tollgate/infra/functionstore"
	"tollgate/infra/natsconn"
	"tollgate/infra/tracing"
	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
	tgnats "tollgate/tenants/nats"
	"tollgate/tenants/postgres"
)

func loadConfig() (*config.Config, error) { return config.FromEnv(os.Getenv) }

func migrateCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate",
		Short: "applies database migrations and exits",
		Long:  "Migrate applies the database migrations, creating the database if needed, and exits.",
		Args:  cobra.NoArgs,
		RunE:  cmdline.Run(Migrate),
	}
	cmdline.Env(c, "TOLLGATE_DATABASE_URL")
	return c
}

// Migrate applies the database migrations, creating the database if needed.
func Migrate(ctx context.Context, _ []string) error {
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

// controlPlane is the api's half of the stack: store, relay and the bucket it feeds.
type controlPlane struct {
	db    *postgres.DB
	nc    *nats.Conn
	cells []cellConn // the declared cells' buckets and connections, in TOLLGATE_CELLS order
	relay *postgres.Relay
	mail  tenants.Mailer

	// The admin listener's registry and the api's series (admin.go); adminLn is nil
	// when the process serves no admin listener of its own.
	reg     *prometheus.Registry
	metrics *api.Metrics
	adminLn net.Listener

	traces *tracing.Provider // nil: TOLLGATE_OTEL_ENDPOINT unset

	// modules is the object store of tenants' function modules, opened on first use.
	modules *functionstore.Lazy
}

func openControlPlane(ctx context.Context, cfg *config.Config, natsURL string, log *slog.Logger) (*controlPlane, error) {
	if err := postgres.Migrate(ctx, cfg.DatabaseURL); err != nil {
		return nil, err
	}
	db, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.WithUpstreamAddressRule(upstreamRule(cfg)), postgres.WithTimeout(cfg.DBTimeout),
		postgres.WithCells(cfg.CellNames()),
		postgres.WithSharedLimitChecks(cfg.DBSharedLimitChecks), postgres.WithNotifyInTransaction(!cfg.DBNotifyAfterCommit), postgres.WithSharedRevLock(cfg.DBSharedRevLock),
		postgres.WithFoldedRoundTrips(cfg.DBFoldRoundTrips))
	if err != nil {
		return nil, err
	}
	if err := db.CheckCells(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("TOLLGATE_CELLS: %w", err)
	}
	nc, err := natsconn.ConnectAuth(natsURL, "tollgate-api", cfg.NATSAuth())
	if err != nil {
		db.Close()
		return nil, err
	}
	cells, err := connectCells(cfg, nc)
	closeAll := func() {
		closeCells(cells, nc)
		nc.Close()
		db.Close()
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	mail, err := openMailer(cfg, log)
	if err != nil {
		closeAll()
		return nil, err
	}
	reg, metrics, err := apiMetrics()
	if err != nil {
		closeAll()
		return nil, err
	}
	traces, err := cfg.Tracing("tollgate-api", false)
	if err != nil {
		closeAll()
		return nil, err
	}
	pubs := make(map[string]*tgnats.Publisher, len(cells))
	for _, c := range cells {
		if traces != nil {
			c.pub.SetTracer(traces.Tracer("tollgate/relay"))
		}
		pubs[c.name] = c.pub
	}
	cp := &controlPlane{db: db, nc: nc, cells: cells, relay: postgres.NewRelay(db, tgnats.NewCellPublisher(pubs), log), mail: mail, reg: reg, metrics: metrics, traces: traces}
	cp.relay.SetObserver(metrics)
	return cp, nil
}

// cellConn is a cell as the api sees it: the bucket its edges follow, on its NATS.
type cellConn struct {
	name, bucket string
	nc           *nats.Conn // the main connection unless the cell has a NATS of its own
	pub          *tgnats.Publisher
}

// connectCells connects to each declared cell's NATS (main, the main connection, serves
// the cells without one) and makes a publisher of its bucket.
func connectCells(cfg *config.Config, main *nats.Conn) ([]cellConn, error) {
	declared := cfg.Cells
	if len(declared) == 0 { // a Config not read by FromEnv
		declared = []config.Cell{{Name: config.DefaultCell}}
	}
	var cells []cellConn
	for _, c := range declared {
		cc := cellConn{name: c.Name, bucket: cfg.CellBucket(c.Name), nc: main}
		if c.NATSURL != "" {
			nc, err := natsconn.ConnectAuth(c.NATSURL, "tollgate-api-cell-"+c.Name, cfg.NATSAuth())
			if err != nil {
				closeCells(cells, main)
				return nil, fmt.Errorf("cell %s: %w", c.Name, err)
			}
			cc.nc = nc
		}
		pub, err := tgnats.NewPublisher(cc.nc, cc.bucket, 0)
		if err != nil {
			if cc.nc != main {
				cc.nc.Close()
			}
			closeCells(cells, main)
			return nil, fmt.Errorf("cell %s: %w", c.Name, err)
		}
		cc.pub = pub
		cells = append(cells, cc)
	}
	return cells, nil
}

// closeCells closes the cells' own connections (not main).
func closeCells(cells []cellConn, main *nats.Conn) {
	for _, c := range cells {
		if c.nc != main {
			c.nc.Close()
		}
	}
}

// buckets creates every cell's KV bucket (see bucket), by cell name.
func (cp *controlPlane) buckets(ctx context.Context, replicas int) (map[string]jetstream.KeyValue, error) {
	kvs := make(map[string]jetstream.KeyValue, len(cp.cells))
	for _, c := range cp.cells {
		kv, err := bucketOn(ctx, c.nc, c.bucket, replicas)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.name, err)
		}
		kvs[c.name] = kv
	}
	return kvs, nil
}

// bucketOn creates the KV bucket, retrying while NATS is unreachable (the api serves
// meanwhile; the relay keeps the outbox until the bucket is there).
func bucketOn(ctx context.Context, nc *nats.Conn, name string, replicas int) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
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

// resync rebuilds every cell's bucket from Postgres.
func (cp *controlPlane) resync(ctx context.Context, kvs map[string]jetstream.KeyValue) (postgres.ResyncResult, error) {
	return cp.relay.Resync(ctx, func(ctx context.Context, live []tenants.Change) error {
		return tgnats.ResyncCells(ctx, kvs, live)
	})
}

// bucketNames lists the cells' buckets, for messages.
func (cp *controlPlane) bucketNames() string {
	names := make([]string, len(cp.cells))
	for i, c := range cp.cells {
		names[i] = c.bucket
	}
	return strings.Join(names, ", ")
}

func (cp *controlPlane) close() {
	closeCells(cp.cells, cp.nc)
	cp.nc.Close()
	cp.db.Close()
	cp.traces.Close()
}

// tracer is p's tracer of scope; nil (no spans) when traces are not exported.
func tracer(p *tracing.Provider, scope string) trace.Tracer {
	if p == nil {
		return nil
	}
	return p.Tracer(scope)
}

func (cp *controlPlane) server(cfg *config.Config, log *slog.Logger) *api.Server {
	stripe := newStripeSide(cp, cfg, log)
	var (
		modules api.ModuleStore
		logs    api.FunctionLogReader
	)
	if js, err := jetstream.New(cp.nc); err == nil {
		cp.modules = functionstore.NewLazy(js, functionstore.BucketName(cfg.NATSPrefix), cfg.NATSReplicas)
		modules, logs = cp.modules, functionstore.NewLogReader(js, cfg.NATSPrefix, cfg.NATSReplicas)
	}
	srv := api.New(api.Config{
		People:      cp.db,
		Audit:       cp.db,
		Tenants:     cp.db,
		Routes:      cp.db,
		Consumers:   cp.db,
		Plans:       cp.db,
		Tokens:      cp.db,
		JWTIssuers:  cp.db,
		AccessRules: cp.db,
		Domains:     cp.db,
		APIDocs:     cp.db,
		EdgeDomain:  cfg.EdgeDomain,
		// Tenants' modules go to the object store the edges fetch from, then Postgres.
		Functions:    cp.db,
		Modules:      modules,
		FunctionLogs: logs,

		// The same checker and schedule as runAPI's automatic checks.
		Proofs:       dnsproof.New(cfg.DNSResolver),
		DomainChecks: domainChecks(cfg),

		Usage:  billingpg.New(cp.db.Pool()), // rollups folded by `tollgate billing`, same database
		Logs:   billingpg.New(cp.db.Pool()), // the request log `tollgate billing` stores
		Prices: billingpg.New(cp.db.Pool()),
		// Stripe's side of the bill; nil handlers answer 404.
		Invoices:      stripe.invoices,
		StripeWebhook: stripe.webhook,
		Connect:       stripe.connect,
		AdminToken:    cfg.AdminToken,
		Upstreams:     upstreamRule(cfg),
		Mailer:        cp.mail,
		PublicURL:     cfg.PublicURL,
		Logger:        log,
		Metrics:       cp.metrics,
		Tracer:        tracer(cp.traces, "tollgate/api"),
		// Each request's store work is bounded; the driver's errors tell an unreachable
		// database (503 not_ready) from a bug (500).
		RequestTimeout:      cfg.DBTimeout,
		HeavyRequestTimeout: cfg.APIHeavyTimeout,
		ConfigBodyLimit:     cfg.APIConfigBodyLimit,
		HeavyCalls:          heavyCalls(cfg.APIHeavyCalls),
		Unavailable:         postgres.Unavailable,
		Ready: func(ctx context.Context) error {
			if err := cp.db.Ping(ctx); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			return nil
		},
	})
	mountConsole(srv, cp, cfg, log, stripe.connect)
	mountPortal(srv, cp, cfg, log, stripe.checkout)
	return srv
}

// heavyCalls is api.Config.HeavyCalls for TOLLGATE_API_HEAVY_CALLS, where 0 is no cap.
func heavyCalls(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func apiCommand() *cobra.Command {
	var resync bool
	c := &cobra.Command{
		Use:   "api [--resync]",
		Short: "the management API and the outbox relay",
		Long: `The api serves the management API, the console and the developer portals, and relays
the outbox to the NATS KV bucket the edges read. With --resync it rebuilds that bucket
from Postgres and exits (a running api's relay does the work when there is one).`,
		Args: cobra.NoArgs,
		RunE: cmdline.Run(func(ctx context.Context, _ []string) error { return API(ctx, resync) }),
	}
	c.Flags().BoolVar(&resync, "resync", false, "rebuild the KV bucket from Postgres, then exit")
	cmdline.Env(c, "TOLLGATE_ADMIN_TOKEN", "TOLLGATE_DATABASE_URL", "TOLLGATE_NATS_URL", "TOLLGATE_NATS_PREFIX",
		"TOLLGATE_NATS_CREDS", "TOLLGATE_API_ADDR", "TOLLGATE_API_ADMIN_ADDR", "TOLLGATE_EDGE_DOMAIN",
		"TOLLGATE_PUBLIC_URL", "TOLLGATE_UPSTREAM_ALLOW_CIDRS", "TOLLGATE_SMTP_URL", "TOLLGATE_STRIPE_KEY",
		"TOLLGATE_STRIPE_WEBHOOK_SECRET", "TOLLGATE_DB_TIMEOUT", "TOLLGATE_CELLS", "TOLLGATE_OTEL_ENDPOINT", "TOLLGATE_LOG_LEVEL")
	return c
}

// API serves the management API and runs the outbox relay. With resync it rebuilds the
// KV bucket from Postgres and exits.
func API(ctx context.Context, resync bool) error {
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
		natsURL = config.DefaultNATSURL
	}
	cp, err := openControlPlane(ctx, cfg, natsURL, log)
	if err != nil {
		return err
	}
	defer cp.close()
	if resync {
		kvs, err := cp.buckets(ctx, cfg.NATSReplicas)
		if err != nil {
			return err
		}
		// When an api is running, its relay does the work; give it time, not forever.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		res, err := cp.resync(rctx, kvs)
		if err != nil {
			return err
		}
		fmt.Printf("bucket %s rebuilt: %d entries (revs %d..%d), %d pending outbox rows superseded\n",
			cp.bucketNames(), res.Entries, res.FirstRev, res.FirstRev+int64(res.Entries)-1, res.Superseded)
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
// The object store's sweep of modules no tenant names: how often it runs, and how long
// after its upload a module is kept whatever names it, so an upload whose Postgres
// transaction has not committed yet (or failed) keeps its module meanwhile.
const (
	moduleSweepInterval = 10 * time.Minute
	moduleGrace         = time.Hour
)

func runAPI(ctx context.Context, cfg *config.Config, cp *controlPlane, ln net.Listener, log *slog.Logger) error {
	srv := cp.server(cfg, log)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		kvs, err := cp.buckets(ctx, cfg.NATSReplicas)
		if err != nil {
			return
		}
		// `tollgate api --resync` run beside this api asks this relay to do it.
		cp.relay.SetResyncApply(func(ctx context.Context, live []tenants.Change) error {
			return tgnats.ResyncCells(ctx, kvs, live)
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
		checks := &dnsproof.Loop{Store: cp.db, Checker: dnsproof.New(cfg.DNSResolver), Schedule: domainChecks(cfg), Logger: log}
		_ = checks.Run(checksCtx)
	}()
	defer func() { stopChecks(); <-checksDone }()
	// Every module a tenant keeps must be in the object store the edges fetch from: put
	// back what it lost (a bucket recreated, a NATS store lost) at start and every minute.
	// And it must not keep forever what no tenant names any more: a sweep deletes those
	// put more than moduleGrace ago (see functionstore.Sweep for why that is safe).
	if cp.modules != nil {
		go cp.modules.ReconcileEvery(checksCtx, cp.db, time.Minute, log)
		go cp.modules.SweepEvery(checksCtx, cp.db, moduleSweepInterval, moduleGrace, log)
		// A cell on a NATS of its own has its edges fetch modules there: the same
		// reconcile fills its object store (within a minute of an upload), the same
		// sweep empties it.
		for _, c := range cp.cells {
			if c.nc == cp.nc {
				continue
			}
			if js, err := jetstream.New(c.nc); err == nil {
				store := functionstore.NewLazy(js, functionstore.BucketName(cfg.NATSPrefix), cfg.NATSReplicas)
				clog := log.With("cell", c.name)
				go store.ReconcileEvery(checksCtx, cp.db, time.Minute, clog)
				go store.SweepEvery(checksCtx, cp.db, moduleSweepInterval, moduleGrace, clog)
			}
		}
	}
	defer sweepEntitlements(ctx, cfg, cp, log)()
	drainAdmin, stopAdmin := cp.serveAdmin(ctx, log)
	defer stopAdmin()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("api listening", "addr", ln.Addr().String(), "bucket", cp.bucketNames())
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	drainAdmin()
	sctx, cancel := context.WithTimeout(context.Background(), config.ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-relayDone
	return err
}

// upstreamRule is the address rule tenants' upstreams must follow, from the config.
func upstreamRule(cfg *config.Config) *tenants.UpstreamAddressRule {
	return &tenants.UpstreamAddressRule{AllowCIDRs: cfg.AllowCIDRs, EdgeDomain: cfg.EdgeDomain, GatewayPorts: cfg.GatewayPorts()}
}

// domainChecks is when custom domains' DNS proofs are checked, from the config.
func domainChecks(cfg *config.Config) tenants.DomainSchedule {
	return tenants.DomainSchedule{PendingMin: cfg.DomainCheckMin, PendingMax: cfg.DomainCheckMax, Recheck: cfg.DomainRecheck}.WithDefaults()
}
