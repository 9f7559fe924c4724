package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	billingcli "tollgate/billing/cli"
	"tollgate/edge/edgecmd"
	"tollgate/infra/cmdline"
	"tollgate/infra/config"
	"tollgate/infra/devstate"
	"tollgate/infra/natsserver"
	"tollgate/infra/tracing"
	"tollgate/tenants"
)

func devCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "dev",
		Short: "the whole stack in one process: api + console, edge, billing, embedded NATS",
		Long: `dev runs the whole stack in one process: an embedded NATS server (unless
TOLLGATE_NATS_URL is set), the api with its relay and console, one edge and billing,
on Postgres from TOLLGATE_DATABASE_URL (created and migrated if missing). It makes a
demo tenant "demo" with a demo upstream, a consumer and a key, then prints the curl
lines that call them. The demo upstream keeps its port, and the admin token and the demo
key are kept in TOLLGATE_DEV_STATE, so a restart changes none of them. Ctrl-C stops
everything.`,
		Args: cobra.NoArgs,
		RunE: cmdline.Run(Dev),
	}
	cmdline.Env(c, "TOLLGATE_DATABASE_URL", "TOLLGATE_NATS_URL", "TOLLGATE_REDIS_URL", "TOLLGATE_ADMIN_TOKEN",
		"TOLLGATE_API_ADDR", "TOLLGATE_API_ADMIN_ADDR", "TOLLGATE_EDGE_ADDR", "TOLLGATE_EDGE_ADMIN_ADDR",
		"TOLLGATE_EDGE_DOMAIN", "TOLLGATE_UPSTREAM_ALLOW_CIDRS", "TOLLGATE_SMTP_URL", "TOLLGATE_STRIPE_KEY",
		"TOLLGATE_DEV_UPSTREAM_ADDR", "TOLLGATE_DEV_STATE", "TOLLGATE_LOG_LEVEL")
	return c
}

// Dev runs the whole stack in one process: an embedded NATS server (unless
// TOLLGATE_NATS_URL is set), the api with its relay, one edge, and a demo tenant with a
// demo upstream, a consumer and a key; then it prints the curl lines that call them.
func Dev(ctx context.Context, _ []string) error {
	statePath := devstate.Path(os.Getenv)
	state, err := devstate.Load(statePath)
	if err != nil {
		return err
	}
	cfg, err := devConfig(&state)
	if err != nil {
		return err
	}
	log := config.NewLogger(cfg.LogLevel, "dev")
	ports, err := bindDevPorts(cfg)
	if err != nil {
		return err
	}
	natsURL, stopNATS, err := startDevNATS(cfg)
	if err != nil {
		return err
	}
	defer stopNATS()
	cp, err := openControlPlane(ctx, cfg, natsURL, log)
	if err != nil {
		return err
	}
	defer cp.close()
	cp.adminLn = ports.apiAdmin
	if err := rebuildBucket(ctx, cfg, cp); err != nil {
		return err
	}
	stopUpstream := startDemoUpstream(ports.upstream)
	defer stopUpstream()
	upstream := ports.upstream.Addr().String()
	var keep string
	if state.Database == cfg.DatabaseURL {
		keep = state.DemoKey
	}
	key, err := seedDemo(ctx, cp, upstream, keep)
	if err != nil {
		return fmt.Errorf("demo tenant: %w", err)
	}
	state.Database, state.DemoKey = cfg.DatabaseURL, key

	s, err := startDevServices(ctx, cfg, cp, natsURL, ports, log)
	if err != nil {
		return err
	}
	defer s.close()
	if err := waitDemo(ctx, s.edgeReady, ports.edge.Addr().String()); err != nil {
		log.Warn("demo route not served yet", "err", err)
	}
	state.PID, state.APIURL, state.NATSURL = os.Getpid(), "http://"+ports.api.Addr().String(), ""
	if cfg.NATSURL == "" {
		state.NATSURL = natsURL
	}
	if err := devstate.Save(statePath, state); err != nil {
		log.Warn("dev state not saved: the next run makes a new admin token and demo key", "path", statePath, "err", err)
	}
	defer func() {
		// Stopped: the other commands no longer find this stack.
		state.PID, state.APIURL, state.NATSURL = 0, "", ""
		_ = devstate.Save(statePath, state)
	}()
	printBanner(cfg, ports.api.Addr().String(), portOf(ports.edge), ports.edgeAdmin.Addr().String(), natsURL, upstream, statePath, key)
	return s.wait(ctx)
}

// devConfig is the environment's config with dev's defaults: the admin token of the
// last run (generated the first time, and kept in state), and loopback upstreams allowed
// (the demo upstream runs there). A token set in the environment is used and not kept.
func devConfig(state *devstate.State) (*config.Config, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	if cfg.AdminToken == "" {
		if state.AdminToken == "" {
			state.AdminToken, _, _ = tenants.NewSecret("tgadm_")
		}
		cfg.AdminToken = state.AdminToken
	}
	if len(cfg.AllowCIDRs) == 0 {
		cfg.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	return cfg, nil
}

// devPorts are the dev stack's listeners.
type devPorts struct {
	api, edge, edgeAdmin net.Listener
	// One admin listener for the api and billing, which share a process here.
	apiAdmin net.Listener
	// The demo upstream's, on a fixed port so the demo route stays right across restarts.
	upstream net.Listener
}

// bindDevPorts binds every port first, so a port already in use fails before anything
// starts.
func bindDevPorts(cfg *config.Config) (p devPorts, err error) {
	if p.api, err = listen("TOLLGATE_API_ADDR", cfg.APIAddr); err != nil {
		return p, err
	}
	if p.edge, err = listen("TOLLGATE_EDGE_ADDR", cfg.EdgeAddr); err != nil {
		return p, err
	}
	// The console's examples name the port the edge really got (":0" picks one).
	cfg.EdgeAddr = p.edge.Addr().String()
	if p.edgeAdmin, err = listen("TOLLGATE_EDGE_ADMIN_ADDR", cfg.EdgeAdmin); err != nil {
		return p, err
	}
	if p.apiAdmin, err = listen("TOLLGATE_API_ADMIN_ADDR", cfg.APIAdminAddr); err != nil {
		return p, err
	}
	p.upstream, err = listen("TOLLGATE_DEV_UPSTREAM_ADDR", cfg.DevUpstreamAddr)
	return p, err
}

// startDevNATS starts the embedded NATS server, unless cfg names one; stop shuts it down.
func startDevNATS(cfg *config.Config) (url string, stop func(), err error) {
	if cfg.NATSURL != "" {
		return cfg.NATSURL, func() {}, nil
	}
	// A fresh store each run: the bucket is rebuilt from Postgres, which is the source of
	// truth, so nothing is lost by starting NATS empty.
	dir, err := os.MkdirTemp("", "tollgate-nats-")
	if err != nil {
		return "", nil, err
	}
	ns, err := natsserver.Start(natsserver.Options{StoreDir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	// The embedded server is one node with no sign-in: cluster settings meant for an
	// external NATS would only make it refuse the stack.
	cfg.NATSReplicas = 1
	cfg.NATSCreds, cfg.NATSNKey, cfg.NATSTLSCA, cfg.NATSTLSCert, cfg.NATSTLSKey = "", "", "", "", ""
	return ns.ClientURL(), func() {
		ns.Shutdown()
		os.RemoveAll(dir)
	}, nil
}

// rebuildBucket makes the config bucket and fills it from Postgres.
func rebuildBucket(ctx context.Context, cfg *config.Config, cp *controlPlane) error {
	kvs, err := cp.buckets(ctx, cfg.NATSReplicas)
	if err != nil {
		return err
	}
	if _, err := cp.resync(ctx, kvs); err != nil {
		return fmt.Errorf("rebuild config bucket: %w", err)
	}
	return nil
}

// devServices are the api, the edge and billing, each running in its goroutine.
type devServices struct {
	apiDone, edgeDone, billingDone chan error
	edgeReady                      chan struct{}
	stopBilling                    context.CancelFunc
	billingTraces                  *tracing.Provider
}

// startDevServices starts the api and the edge, which stop when ctx ends, and billing,
// which folds the edge's usage (so the dev stack's usage and export count) and stops
// only when told to, after the edge has drained its meter.
func startDevServices(ctx context.Context, cfg *config.Config, cp *controlPlane, natsURL string, ports devPorts, log *slog.Logger) (*devServices, error) {
	billingTraces, err := cfg.Tracing("tollgate-billing", false)
	if err != nil {
		return nil, err
	}
	billingCtx, stopBilling := context.WithCancel(context.Background())
	s := &devServices{
		apiDone: make(chan error, 1), edgeDone: make(chan error, 1), billingDone: make(chan error, 1),
		edgeReady: make(chan struct{}), stopBilling: stopBilling, billingTraces: billingTraces,
	}
	go func() { s.apiDone <- runAPI(ctx, cfg, cp, ports.api, log) }()
	go func() {
		s.edgeDone <- edgecmd.Serve(ctx, cfg, natsURL, ports.edge, ports.edgeAdmin, log, func() { close(s.edgeReady) })
	}()
	go func() {
		s.billingDone <- billingcli.Run(billingCtx, billingcli.Options{
			DatabaseURL: cfg.DatabaseURL, NATSURL: natsURL, NATSPrefix: cfg.NATSPrefix,
			NATSAuth: cfg.NATSAuth(), NATSReplicas: cfg.NATSReplicas,
			StripeKey: cfg.StripeKey, StripeURL: cfg.StripeURL, StripeEvent: cfg.StripeEvent,
			Registry: cp.reg,
			Logger:   log.With("component", "billing"),
			Tracer:   tracer(billingTraces, "tollgate/billing"),
		})
	}()
	return s, nil
}

// wait returns when ctx ends and the services have stopped (or had their grace), with
// the first error any of them stopped with.
func (s *devServices) wait(ctx context.Context) error {
	var first error
	select {
	case first = <-s.apiDone:
	case first = <-s.edgeDone:
	case <-ctx.Done():
	}
	// Both stop on ctx; wait for them so the deferred closes run after.
	<-ctx.Done()
	for _, ch := range []chan error{s.apiDone, s.edgeDone} {
		select {
		case err := <-ch:
			if first == nil {
				first = err
			}
		case <-time.After(config.ShutdownGrace):
		}
	}
	s.stopBilling()
	select {
	case err := <-s.billingDone:
		if first == nil && err != nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	case <-time.After(config.ShutdownGrace):
	}
	return first
}

func (s *devServices) close() {
	s.stopBilling()
	s.billingTraces.Close()
}

func listen(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w (set %s to another address)", name, addr, err, name)
	}
	return ln, nil
}

func portOf(ln net.Listener) string {
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

// Demo objects. The route is created or updated to point at this run's demo upstream.
// The consumer keeps the key of the last run when dev kept its plaintext (the database
// holds only hashes); otherwise its old keys are removed and a fresh key is made.
const (
	demoSlug     = "demo"
	demoRoute    = "hello"
	demoConsumer = "demo-client"
)

func seedDemo(ctx context.Context, cp *controlPlane, upstreamAddr, keep string) (string, error) {
	db := cp.db
	t, err := db.FindTenant(ctx, demoSlug)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		t = &tenants.Tenant{Slug: demoSlug, Name: "Demo", PlatformPlan: tenants.PlatformUnlimited}
		err = db.CreateTenant(ctx, t)
	}
	if err != nil {
		return "", err
	}
	c, err := findByName(ctx, demoConsumer, func(p tenants.Page) ([]*tenants.Consumer, string, error) { return db.ListConsumers(ctx, t.ID, p) },
		func(c *tenants.Consumer) string { return c.Name })
	if err != nil {
		return "", err
	}
	if c == nil {
		c = &tenants.Consumer{TenantID: t.ID, Name: demoConsumer}
		if err := db.CreateConsumer(ctx, c); err != nil {
			return "", err
		}
	}
	old, _, err := db.ListKeys(ctx, t.ID, c.ID, tenants.Page{Limit: tenants.MaxPageLimit})
	if err != nil {
		return "", err
	}
	plain := ""
	for _, k := range old {
		if keep != "" && k.Hash == tenants.HashSecret(keep) && (k.ExpiresAt == nil || k.ExpiresAt.After(time.Now())) {
			plain = keep
		}
	}
	if plain == "" {
		for _, k := range old {
			if err := db.DeleteKey(ctx, t.ID, c.ID, k.ID); err != nil {
				return "", err
			}
		}
		var hash, prefix string
		plain, hash, prefix = tenants.NewSecret(tenants.KeyPrefix)
		if err := db.CreateKey(ctx, &tenants.Key{TenantID: t.ID, ConsumerID: c.ID, Hash: hash, Prefix: prefix, Label: "tollgate dev"}); err != nil {
			return "", err
		}
	}
	// The route is written last: an edge that serves its new version has the consumer's
	// key too (entries reach the edges in the order they were written), which is what
	// waitDemo relies on.
	want := tenants.Route{
		TenantID: t.ID,
		Name:     demoRoute,
		Paths:    []string{"/hello"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://" + upstreamAddr, Weight: 1}}},
		Auth:     tenants.AuthKey,
		// Shows the RateLimit-* headers without getting in the way of trying things.
		RateLimit: &tenants.RateLimit{RPS: 100, Burst: 200},
	}
	r, err := findByName(ctx, demoRoute, func(p tenants.Page) ([]*tenants.Route, string, error) { return db.ListRoutes(ctx, t.ID, p) },
		func(r *tenants.Route) string { return r.Name })
	if err != nil {
		return "", err
	}
	if r == nil {
		if err := db.CreateRoute(ctx, &want); err != nil {
			return "", err
		}
	} else {
		want.ID, want.Version = r.ID, r.Version
		if err := db.UpdateRoute(ctx, &want); err != nil {
			return "", err
		}
	}
	// The demo's developer portal is on, so a first look finds one; a portal its owner
	// has set up since (or turned off) is left as it is.
	if p, err := db.FindPortal(ctx, t.ID); err != nil {
		return "", err
	} else if p.UpdatedAt.IsZero() {
		if err := db.PutPortal(ctx, &tenants.PortalSettings{TenantID: t.ID, Enabled: true, DisplayName: "Demo API"}); err != nil {
			return "", err
		}
	}
	return plain, nil
}

func findByName[T any](ctx context.Context, name string, list func(tenants.Page) ([]T, string, error), nameOf func(T) string) (T, error) {
	var zero T
	page := tenants.Page{Limit: tenants.MaxPageLimit}
	for {
		items, next, err := list(page)
		if err != nil {
			return zero, err
		}
		for _, it := range items {
			if nameOf(it) == name {
				return it, nil
			}
		}
		if next == "" {
			return zero, nil
		}
		page.Cursor = next
	}
}

// waitDemo waits until the edge serves the demo route, so the printed curl lines work the
// moment they appear. It calls with a key that is not valid: the edge's own 401 says the
// route (written after the demo key) is live, and, unlike a call the upstream answers, is
// not billable: the demo tenant's usage starts with the newcomer's first call.
func waitDemo(ctx context.Context, edgeReady <-chan struct{}, edgeAddr string) error {
	select {
	case <-edgeReady:
	case <-time.After(30 * time.Second):
		return errors.New("edge did not load its config within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+edgeAddr+"/hello", nil)
		req.Host = demoSlug + ".localhost"
		req.Header.Set("X-API-Key", tenants.KeyPrefix+"dev_start_probe")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func printBanner(cfg *config.Config, apiAddr, edgePort, adminAddr, natsURL, upstream, statePath, key string) {
	host := demoSlug + "." + cfg.EdgeDomain
	var b strings.Builder
	fmt.Fprintf(&b, "\nTollgate dev stack is up.\n\n")
	fmt.Fprintf(&b, "  console          http://%s/console/  (sign up to create your own tenant)\n", apiAddr)
	fmt.Fprintf(&b, "  management api   http://%s          (admin token below)\n", apiAddr)
	fmt.Fprintf(&b, "  edge             http://%s:%s\n", host, edgePort)
	fmt.Fprintf(&b, "  developer portal http://%s/portal/%s/  (the demo tenant's, for its API consumers)\n", apiAddr, demoSlug)
	fmt.Fprintf(&b, "  edge metrics     http://%s/metrics\n", adminAddr)
	fmt.Fprintf(&b, "  demo upstream    http://%s          (the demo route's target; TOLLGATE_DEV_UPSTREAM_ADDR moves it)\n", upstream)
	fmt.Fprintf(&b, "  nats             %s   bucket %s\n", natsURL, cfg.KVBucket())
	fmt.Fprintf(&b, "  database         %s\n", redactURL(cfg.DatabaseURL))
	if cfg.SMTPURL != "" {
		fmt.Fprintf(&b, "  mail             sent through %s\n", redactURL(cfg.SMTPURL))
	} else {
		fmt.Fprintf(&b, "  mail             not sent: each message's links are logged (set TOLLGATE_SMTP_URL to send)\n")
	}
	if cfg.RedisURL != "" {
		fmt.Fprintf(&b, "  flow control     cluster-wide in Redis %s (prefix %s)\n\n", redactURL(cfg.RedisURL), cfg.RedisPrefix)
	} else {
		fmt.Fprintf(&b, "  flow control     local to the edge (set TOLLGATE_REDIS_URL for cluster-wide limits)\n\n")
	}
	fmt.Fprintf(&b, "Call the demo API through the edge (tenant %q, route /hello, key auth):\n\n", demoSlug)
	fmt.Fprintf(&b, "  curl -i -H 'X-API-Key: %s' http://%s:%s/hello\n", key, host, edgePort)
	fmt.Fprintf(&b, "  curl -i http://%s:%s/hello                # no key: 401 envelope\n\n", host, edgePort)
	if cfg.EdgeDomain != "localhost" {
		fmt.Fprintf(&b, "(if %s does not resolve here, add -H 'Host: %s' and call 127.0.0.1 instead)\n\n", host, host)
	}
	fmt.Fprintf(&b, "Manage it:\n\n")
	fmt.Fprintf(&b, "  export TOLLGATE_ADMIN_TOKEN=%s\n", cfg.AdminToken)
	fmt.Fprintf(&b, "  curl -s -H \"Authorization: Bearer $TOLLGATE_ADMIN_TOKEN\" http://%s/v1/tenants/demo/routes\n", apiAddr)
	fmt.Fprintf(&b, "  curl -s -H \"Authorization: Bearer $TOLLGATE_ADMIN_TOKEN\" http://%s/v1/openapi.json\n\n", apiAddr)
	if statePath != "" {
		fmt.Fprintf(&b, "The admin token and the demo key stay the same across restarts (kept in %s),\n", statePath)
		fmt.Fprintf(&b, "and tollgate's other commands (billing, config) find this stack while it runs.\n\n")
	}
	fmt.Fprintf(&b, "Ctrl-C stops everything.\n")
	fmt.Print(b.String())
}

func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if at := strings.Index(u[i+3:], "@"); at >= 0 {
			creds := u[i+3 : i+3+at]
			if c := strings.Index(creds, ":"); c >= 0 {
				return u[:i+3] + creds[:c] + ":***" + u[i+3+at:]
			}
		}
	}
	return u
}
