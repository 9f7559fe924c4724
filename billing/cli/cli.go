// Package cli is `tollgate billing`: it wires billing's Postgres store, the JetStream
// usage reader and (when a Stripe key is set) the Stripe pusher into a process, and
// provides the finance subcommands. The tollgate command mounts Command; `tollgate dev`
// calls Run to run billing inside its own process.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"tollgate/billing"
	billingnats "tollgate/billing/nats"
	billingpg "tollgate/billing/postgres"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/admin"
	"tollgate/infra/cmdline"
	"tollgate/infra/config"
	"tollgate/infra/devstate"
	"tollgate/infra/natsconn"
	"tollgate/infra/usage"
	"tollgate/tenants/postgres"
)

// Options are what billing needs to run.
type Options struct {
	DatabaseURL string
	NATSURL     string
	NATSPrefix  string
	// NATSAuth and NATSReplicas: sign-in and TLS, and the usage stream's replicas, as
	// every process has them (TOLLGATE_NATS_CREDS…, TOLLGATE_NATS_REPLICAS).
	NATSAuth     natsconn.Auth
	NATSReplicas int
	// CellNATS are the NATS URLs of the cells that have their own (TOLLGATE_CELLS), by
	// cell name: their edges meter to those clusters, whose usage and request log
	// streams billing reads beside the main one's.
	CellNATS    map[string]string
	StripeKey   string // empty: no Stripe push
	StripeURL   string
	StripeEvent string
	// StripeFunctionEvent is the event name of function time's meter events (µs); empty:
	// billingstripe.DefaultFunctionEventName.
	StripeFunctionEvent string
	// StripeMeter is the Billing Meter the subscriptions' usage prices charge (mtr_…);
	// empty: the active meter of StripeEvent, made when there is none.
	StripeMeter string
	// PushInterval is how often settled usage is pushed to Stripe. Default: 1m.
	PushInterval time.Duration
	// AdminAddr, when set, is where Run serves /metrics, /healthz and /readyz.
	AdminAddr string
	// Registry, when set, takes billing's series instead of a registry of its own (the
	// dev stack serves them with the api's).
	Registry *prometheus.Registry
	Logger   *slog.Logger
	Stdout   io.Writer
	// Tracer, when set, makes a span of every usage batch's fold.
	Tracer trace.Tracer
}

// OptionsFromEnv reads the TOLLGATE_* environment.
func OptionsFromEnv(getenv func(string) string) (Options, *config.Config, error) {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return Options{}, nil, err
	}
	o := Options{
		DatabaseURL: cfg.DatabaseURL,
		NATSURL:     cfg.NATSURL,
		NATSPrefix:  cfg.NATSPrefix,
		NATSAuth: natsconn.Auth{
			Creds: cfg.NATSCreds, NKey: cfg.NATSNKey,
			TLSCA: cfg.NATSTLSCA, TLSCert: cfg.NATSTLSCert, TLSKey: cfg.NATSTLSKey,
		},
		NATSReplicas:        cfg.NATSReplicas,
		CellNATS:            cellNATS(cfg),
		StripeKey:           getenv("TOLLGATE_STRIPE_KEY"),
		StripeURL:           getenv("TOLLGATE_STRIPE_URL"),
		StripeEvent:         getenv("TOLLGATE_STRIPE_EVENT"),
		StripeFunctionEvent: getenv("TOLLGATE_STRIPE_FUNCTION_EVENT"),
		StripeMeter:         getenv("TOLLGATE_STRIPE_METER"),
	}
	if o.NATSURL == "" {
		// A running `tollgate dev` serves its own NATS: its usage is there, not in the
		// machine's.
		if dev, ok := devstate.Running(getenv); ok && dev.NATSURL != "" {
			o.NATSURL = dev.NATSURL
			fmt.Fprintf(os.Stderr, "tollgate billing: using the running dev stack's NATS at %s (TOLLGATE_NATS_URL names another)\n", dev.NATSURL)
		} else {
			o.NATSURL = config.DefaultNATSURL
		}
	}
	return o, cfg, nil
}

// cellNATS are the NATS URLs of the cells that have one of their own.
func cellNATS(cfg *config.Config) map[string]string {
	var m map[string]string
	for _, c := range cfg.Cells {
		if c.NATSURL != "" {
			if m == nil {
				m = map[string]string{}
			}
			m[c.Name] = c.NATSURL
		}
	}
	return m
}

// Command is `tollgate billing`: alone, the usage reader; with a subcommand, one
// finance task that exits. Each reads the environment when it runs, not for its help.
func Command() *cobra.Command {
	c := &cobra.Command{
		Use:   "billing",
		Short: "folds usage batches into Postgres rollups; finance subcommands",
		Long: `Alone, billing runs the usage reader: it folds the edges' usage batches from NATS
into Postgres rollups and, when TOLLGATE_STRIPE_KEY is set, pushes settled usage to
Stripe every minute and keeps paying tenants' subscriptions in line with their plans.
Its subcommands do one finance task and exit.`,
		Args: cobra.NoArgs,
		RunE: cmdline.Run(consume),
	}
	cmdline.Env(c, "TOLLGATE_DATABASE_URL", "TOLLGATE_NATS_URL", "TOLLGATE_NATS_PREFIX", "TOLLGATE_NATS_REPLICAS",
		"TOLLGATE_NATS_CREDS", "TOLLGATE_CELLS", "TOLLGATE_BILLING_ADMIN_ADDR", "TOLLGATE_STRIPE_KEY", "TOLLGATE_STRIPE_URL",
		"TOLLGATE_STRIPE_EVENT", "TOLLGATE_STRIPE_FUNCTION_EVENT", "TOLLGATE_STRIPE_METER", "TOLLGATE_OTEL_ENDPOINT", "TOLLGATE_LOG_LEVEL")
	c.AddCommand(reconcileCommand(), exportCommand(), enableCommand(), pushCommand(), subscribeCommand())
	return c
}

// fromEnv is every billing command's start: the options from the environment, and the
// database migrated.
func fromEnv(ctx context.Context) (Options, *config.Config, error) {
	o, cfg, err := OptionsFromEnv(os.Getenv)
	if err != nil {
		return Options{}, nil, err
	}
	o.Logger = config.NewLogger(cfg.LogLevel, "billing")
	o.Stdout = os.Stdout
	o.AdminAddr = cfg.BillingAdminAddr
	if err := postgres.Migrate(ctx, o.DatabaseURL); err != nil {
		return Options{}, nil, err
	}
	return o, cfg, nil
}

// consume is `tollgate billing` alone: Run, configured from the environment.
func consume(ctx context.Context, _ []string) error {
	o, cfg, err := fromEnv(ctx)
	if err != nil {
		return err
	}
	tp, err := cfg.Tracing("tollgate-billing", false)
	if err != nil {
		return err
	}
	if tp != nil {
		defer tp.Shutdown(context.WithoutCancel(ctx))
		o.Tracer = tp.Tracer("tollgate/billing")
	}
	return Run(ctx, o)
}

// task is a billing subcommand's work, given the options from the environment.
func task(f func(context.Context, Options) error) func(*cobra.Command, []string) error {
	return cmdline.Run(func(ctx context.Context, _ []string) error {
		o, _, err := fromEnv(ctx)
		if err != nil {
			return err
		}
		return f(ctx, o)
	})
}

// Run is the billing process: the usage reader folding into Postgres and, with
// a Stripe key, the Stripe push every PushInterval, until ctx ends.
func Run(ctx context.Context, o Options) error {
	log := o.logger()
	reg := o.Registry
	if reg == nil {
		reg = admin.NewRegistry()
	}
	metrics, err := billing.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("billing: registering metrics: %w", err)
	}
	var adminLn net.Listener
	if o.AdminAddr != "" {
		// Bound first, so a port in use fails before anything starts.
		if adminLn, err = net.Listen("tcp", o.AdminAddr); err != nil {
			return fmt.Errorf("TOLLGATE_BILLING_ADMIN_ADDR: %w", err)
		}
		defer adminLn.Close() // for the early returns; closing it twice is harmless
	}
	store, err := billingpg.Open(ctx, o.DatabaseURL)
	if err != nil {
		return err
	}
	defer store.Close()
	nc, err := natsconn.ConnectAuth(o.NATSURL, "tollgate-billing", o.NATSAuth)
	if err != nil {
		return err
	}
	defer nc.Close()
	if adminLn != nil {
		srv := admin.Serve(adminLn, reg, log, store.Ping, func(context.Context) error {
			if !nc.IsConnected() {
				return errors.New("nats: not connected")
			}
			return nil
		})
		log.Info("billing admin listening", "addr", adminLn.Addr().String())
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// A cell with a NATS of its own keeps its edges' usage and request log there: read
	// those too. A batch is folded once whichever reader brings it (by its id).
	cellJS := map[string]jetstream.JetStream{}
	for cell, url := range o.CellNATS {
		cnc, err := natsconn.ConnectAuth(url, "tollgate-billing-cell-"+cell, o.NATSAuth)
		if err != nil {
			return fmt.Errorf("cell %s: %w", cell, err)
		}
		defer cnc.Close()
		if cellJS[cell], err = jetstream.New(cnc); err != nil {
			return fmt.Errorf("cell %s: %w", cell, err)
		}
	}
	var wg sync.WaitGroup
	if o.StripeKey != "" {
		p, err := o.pusher(store, metrics)
		if err != nil {
			return err
		}
		sub, err := billingstripe.NewSubscriber(billingstripe.SubscriberConfig{Pusher: p, Store: store, Prices: store, Meter: o.StripeMeter})
		if err != nil {
			return err
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			p.Run(ctx, o.PushInterval)
		}()
		go func() {
			defer wg.Done()
			sub.Run(ctx, 10*time.Minute) // plans and prices change rarely; a price version starts a month
		}()
	} else {
		log.Info("billing: TOLLGATE_STRIPE_KEY not set; usage is not pushed to Stripe")
	}
	lr := billingnats.NewLogReader(js, store, billingnats.LogReaderConfig{Prefix: o.NATSPrefix, Replicas: o.NATSReplicas, Logger: log})
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = lr.Run(ctx) // returns when ctx ends
	}()
	for cell, cjs := range cellJS {
		clog := log.With("cell", cell)
		clr := billingnats.NewLogReader(cjs, store, billingnats.LogReaderConfig{Prefix: o.NATSPrefix, Replicas: o.NATSReplicas, Logger: clog})
		cur := billingnats.NewUsageReader(cjs, store, billingnats.UsageReaderConfig{Prefix: o.NATSPrefix, Replicas: o.NATSReplicas, Logger: clog, Metrics: metrics, Tracer: o.Tracer})
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = clr.Run(ctx)
		}()
		go func() {
			defer wg.Done()
			if err := cur.Run(ctx); err != nil && ctx.Err() == nil {
				clog.Error("billing: the cell's usage reader stopped", "err", err)
			}
		}()
		clog.Info("billing: consuming the cell's usage", "stream", usage.Stream(o.NATSPrefix))
	}
	c := billingnats.NewUsageReader(js, store, billingnats.UsageReaderConfig{Prefix: o.NATSPrefix, Replicas: o.NATSReplicas, Logger: log, Metrics: metrics, Tracer: o.Tracer})
	log.Info("billing: consuming usage", "stream", usage.Stream(o.NATSPrefix))
	err = c.Run(ctx)
	wg.Wait()
	return err
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

func (o Options) stdout() io.Writer {
	if o.Stdout != nil {
		return o.Stdout
	}
	return os.Stdout
}

func (o Options) pusher(store *billingpg.Store, m *billing.Metrics) (*billingstripe.Pusher, error) {
	if o.StripeKey == "" {
		return nil, errors.New("TOLLGATE_STRIPE_KEY is not set")
	}
	return billingstripe.New(billingstripe.Config{
		Key: o.StripeKey, URL: o.StripeURL, EventName: o.StripeEvent, FunctionEventName: o.StripeFunctionEvent,
		Store: store, Logger: o.logger(), Metrics: m,
	})
}

// Reconcile compares, for a period, the edges' totals in NATS with the rollups, the
// batches still in flight and the Stripe pushes in Postgres. settle is how long after an
// hour ends a difference in it stops being pending (0: billing.DefaultSettle).
func Reconcile(ctx context.Context, o Options, p billing.Period, settle time.Duration) (*billing.Reconciliation, error) {
	store, err := billingpg.Open(ctx, o.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	nc, err := natsconn.ConnectAuth(o.NATSURL, "tollgate-billing-reconcile", o.NATSAuth)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return billing.Reconcile(cctx, p, billing.ReconcileSources{
		Edges:    billingnats.NewTotals(js, o.NATSPrefix),
		Folded:   store,
		InFlight: billingnats.NewInFlight(js, o.NATSPrefix, "", store),
		Stripe:   store,
		Settle:   settle,
	})
}

// ErrDiscrepancies is returned by `billing reconcile` when the views disagree (pending
// differences do not count).
var ErrDiscrepancies = errors.New("reconciliation found discrepancies")

func reconcileCommand() *cobra.Command {
	var period string
	var asJSON bool
	var settle time.Duration
	c := &cobra.Command{
		Use:   "reconcile --period YYYY-MM",
		Short: "compare what the edges served with what was folded and pushed to Stripe",
		Long: `Reconcile compares, per tenant, hour and edge, what each edge served (its totals in
NATS) with what was folded from its batches, and what was pushed to Stripe. It names
each difference (loss, dropped, double_count, missing_totals, unattributed,
stripe_short, stripe_excess) and lists what is still pending. It exits 1 when anything
is wrong, usage an edge dropped included.`,
		Args: cobra.NoArgs,
		RunE: task(func(ctx context.Context, o Options) error { return reconcile(ctx, o, period, asJSON, settle) }),
	}
	c.Flags().StringVar(&period, "period", "", "the month to reconcile, YYYY-MM (UTC)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	c.Flags().DurationVar(&settle, "settle", billing.DefaultSettle, "how long after an hour ends a difference in it is no longer pending")
	_ = c.MarkFlagRequired("period")
	cmdline.Env(c, "TOLLGATE_DATABASE_URL", "TOLLGATE_NATS_URL", "TOLLGATE_NATS_PREFIX", "TOLLGATE_NATS_CREDS")
	return c
}

func reconcile(ctx context.Context, o Options, period string, asJSON bool, settle time.Duration) error {
	p, err := billing.ParsePeriod(period)
	if err != nil {
		return err
	}
	if settle <= 0 {
		return fmt.Errorf("--settle must be positive")
	}
	r, err := Reconcile(ctx, o, p, settle)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(o.stdout())
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = r.WriteText(o.stdout())
	}
	if err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("%w (%d)", ErrDiscrepancies, len(r.Discrepancies))
	}
	return nil
}

func exportCommand() *cobra.Command {
	var period, format string
	c := &cobra.Command{
		Use:   "export --period YYYY-MM [--format csv|json]",
		Short: "print the period's bill",
		Args:  cobra.NoArgs,
		RunE:  task(func(ctx context.Context, o Options) error { return export(ctx, o, period, format) }),
	}
	c.Flags().StringVar(&period, "period", "", "the month to export, YYYY-MM (UTC)")
	c.Flags().StringVar(&format, "format", "csv", "csv or json")
	_ = c.MarkFlagRequired("period")
	cmdline.Env(c, "TOLLGATE_DATABASE_URL")
	return c
}

func export(ctx context.Context, o Options, period, format string) error {
	p, err := billing.ParsePeriod(period)
	if err != nil {
		return err
	}
	store, err := billingpg.Open(ctx, o.DatabaseURL)
	if err != nil {
		return err
	}
	defer store.Close()
	rows, err := store.Export(ctx, p)
	if err != nil {
		return err
	}
	switch format {
	case "csv":
		return billing.WriteCSV(o.stdout(), rows)
	case "json":
		return billing.WriteJSON(o.stdout(), p, rows)
	}
	return fmt.Errorf("--format must be csv or json")
}

func enableCommand() *cobra.Command {
	var slug string
	c := &cobra.Command{
		Use:   "enable --tenant SLUG",
		Short: "make the tenant a Stripe customer",
		Args:  cobra.NoArgs,
		RunE:  task(func(ctx context.Context, o Options) error { return enable(ctx, o, slug) }),
	}
	c.Flags().StringVar(&slug, "tenant", "", "the tenant's slug")
	_ = c.MarkFlagRequired("tenant")
	cmdline.Env(c, "TOLLGATE_DATABASE_URL", "TOLLGATE_STRIPE_KEY", "TOLLGATE_STRIPE_URL")
	return c
}

func enable(ctx context.Context, o Options, slug string) error {
	return o.withPusher(ctx, func(store *billingpg.Store, p *billingstripe.Pusher) error {
		id, name, err := store.TenantBySlug(ctx, slug)
		if err != nil {
			return err
		}
		cus, err := p.EnableTenant(ctx, id, slug, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.stdout(), "tenant %s is Stripe customer %s\n", slug, cus)
		return nil
	})
}

func pushCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "push",
		Short: "push settled usage to Stripe once and exit",
		Args:  cobra.NoArgs,
		RunE:  task(push),
	}
	cmdline.Env(c, "TOLLGATE_DATABASE_URL", "TOLLGATE_STRIPE_KEY", "TOLLGATE_STRIPE_URL", "TOLLGATE_STRIPE_EVENT",
		"TOLLGATE_STRIPE_FUNCTION_EVENT")
	return c
}

func push(ctx context.Context, o Options) error {
	return o.withPusher(ctx, func(_ *billingpg.Store, p *billingstripe.Pusher) error {
		n, err := p.PushDue(ctx)
		fmt.Fprintf(o.stdout(), "%d meter events pushed\n", n)
		return err
	})
}

// withPusher runs f with the billing store and a Stripe pusher over it: the one-shot
// Stripe commands' common start.
func (o Options) withPusher(ctx context.Context, f func(*billingpg.Store, *billingstripe.Pusher) error) error {
	store, err := billingpg.Open(ctx, o.DatabaseURL)
	if err != nil {
		return err
	}
	defer store.Close()
	p, err := o.pusher(store, nil)
	if err != nil {
		return err
	}
	return f(store, p)
}

func subscribeCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "subscribe",
		Short: "bring paying tenants' Stripe subscriptions in line with their plans' prices once",
		Long: `Subscribe brings paying tenants' Stripe subscriptions in line with their plans' prices
once and exits; the running billing process does it every 10 minutes.`,
		Args: cobra.NoArgs,
		RunE: task(subscribe),
	}
	cmdline.Env(c, "TOLLGATE_DATABASE_URL", "TOLLGATE_STRIPE_KEY", "TOLLGATE_STRIPE_URL", "TOLLGATE_STRIPE_METER")
	return c
}

func subscribe(ctx context.Context, o Options) error {
	return o.withPusher(ctx, func(store *billingpg.Store, p *billingstripe.Pusher) error {
		sub, err := billingstripe.NewSubscriber(billingstripe.SubscriberConfig{Pusher: p, Store: store, Prices: store, Meter: o.StripeMeter})
		if err != nil {
			return err
		}
		n, err := sub.Sync(ctx)
		fmt.Fprintf(o.stdout(), "%d subscriptions created, changed or cancelled\n", n)
		return err
	})
}
