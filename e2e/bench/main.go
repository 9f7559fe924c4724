// Command bench measures Tollgate against nginx on the seeds' scenarios (README,
// "Benchmarks"): the primary figure is the gateway process's CPU time per request, with
// QPS and p50/p99 beside it, each run pinned with taskset (gateway on CPU 0, wrk and the
// upstream on CPU 1) at GOMAXPROCS / nginx workers 1 and 2, and Tollgate's config fan-out
// latency and idle RSS with many routes.
//
//	go run ./e2e/bench [-scenarios S1,S2,S2j,S4r,config,rss10k] [-duration 10s] [-cores 1,2] [-rounds 5] [-out bench-results.md]
//	go run ./e2e/bench -scenarios S1,S2,S2j,S4r -cores 1 -duration 5s -rounds 5   (README, "Performance")
//	go run ./e2e/bench -scenarios S3,S4,S5,S6,S9 -cores 1 -duration 5s
//	go run ./e2e/bench -scenarios S1h2,S1grpc -gateways nginx,tollgate -cores 1 -rounds 5 -duration 5s   (HTTP/2, h2.go)
//	go tool task bench -- -duration 3s -scenarios S1
//	go run ./e2e/bench -scenarios soak -duration 30m -out soak.md
//	go run ./e2e/bench -scenarios scale -scale-tenants 100000 -scale-routes 10 -cores 1   (tenants at scale, e2e/bench/tenantscale)
//	go run ./e2e/bench -compare HEAD~1 -scenarios S1,S2 -cores 1   (another revision against the working tree, compare.go)
//
// It is a command, not a test: it needs the machine's Postgres and NATS, installs nginx and
// wrk from Debian's packages when they are missing, and leaves nothing behind — every
// process it starts is killed with its process group, its database is dropped, its NATS
// streams deleted and its temp directory removed, on success, failure or Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tollgate/e2e/bench/grpchealth"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/soak"
	"tollgate/e2e/bench/wsload"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
)

// bench holds the settings and shared state of one sweep.
type bench struct {
	*harness.Env        // the run's directory, cleanups, services and binaries, shared with every stack
	root         string // repository root
	tick         int64  // clock ticks per second, the unit of /proc/PID/stat times
	gateways     []string
	cores        []int
	threads      int
	conns        int
	warmup       time.Duration
	duration     time.Duration
	routes       int // S4r
	cfgN         int // config: sequential changes
	burst        int // config: concurrent changes
	workers      int // concurrent management API clients
	s2Limit      bool
	traceSamples []float64  // -traces: the perf scenarios again with the edge exporting traces at each rate (traces.go)
	sink         *traceSink // where those traces go, once started
	s7Rate       int        // S7: the base rate (the burst is 10×)
	noisyLimit   int        // noisy: tenant A's rate limit (flooded at 10×)
	noisyRate    int        // noisy: tenant B's rate
	perfAdmin    string     // the perf edge's admin address (its /metrics)
	edgeBinary   string     // -edge-binary
	edgeInConfig bool
	upPort       int           // the shared upstream, once started
	wsConns      int           // S6: tunnels held open
	wsRate       int           // S6: messages per second over all tunnels
	wsSettle     time.Duration // S6: idle wait between the upgrades and the trickle
	s3Seen       s3Seen
	soakDuration time.Duration // soak: -duration when given, else soak.DefaultDuration
	soakRate     int           // soak: requests per second

	cmp   compareSettings // -compare: another revision against the working tree (compare.go)
	rnd   roundSettings   // -rounds: interleaved rounds of the request scenarios, for the sweep and -compare (rounds.go)
	scale scaleSettings   // rss10k, hotupdate, cold and scale (scale.go)
	tail  tailSettings    // the tail scenario's flags (tail.go)
	h2    h2Settings      // S1h2 and S1grpc's h2load flags (h2.go)
}

func main() {
	if os.Getenv("TOLLGATE_BENCH_LOADGEN") == "1" {
		os.Exit(runLoadgen()) // the bench as its own load generator (flow.go)
	}
	if addr := os.Getenv("TOLLGATE_BENCH_WSECHO"); addr != "" {
		os.Exit(wsload.RunEcho(addr)) // S6's upstream (e2e/bench/wsload)
	}
	if addr := os.Getenv("TOLLGATE_BENCH_GRPC"); addr != "" {
		os.Exit(grpchealth.Serve(addr)) // S1grpc's upstream with -grpc-upstream grpc-go (e2e/bench/grpchealth)
	}
	if addr := os.Getenv("TOLLGATE_BENCH_GRPC_LEAN"); addr != "" {
		os.Exit(grpchealth.ServeLean(addr)) // S1grpc's upstream by default
	}
	os.Exit(run())
}

func run() int {
	b := &bench{Env: &harness.Env{Clean: &harness.Cleanups{}}}
	var (
		scenarios = flag.String("scenarios", "S1,S2,S2j,S4r,config,rss10k", "comma-separated: S1 (1 route), S1f/S1h (S1 + a no-op / header-adding proxy-wasm filter), S2 (key auth), S2hmac (HMAC signature auth as a filter), S2j (JWT RS256 + policy + rate limit), S2l/S2x/S2a (key auth + a never-reached limit: local, exact, approximate), "+
			"S3 (1 KB JSON POST rewritten, with its plain-POST baseline S3b), S4 (5% canary: split counted at the upstreams), S4r (many routes, hit one), S5 (1 MiB responses: CPU and peak RSS), "+
			"S6 (-ws-conns WebSocket tunnels: RSS per tunnel, CPU per message), S7 (burst 10× for 1 s), S9 (TLS 1.3: keep-alive and a handshake per request, with the plain baseline S9p), "+
			"S1h2 (S1 over TLS with ALPN h2, h2load), S1grpc (gRPC Health/Check over h2c to a gRPC upstream, h2load; Tollgate needs upstream.protocol h2), "+
			"noisy (noisy neighbour), config (commit-to-bucket latency), rss10k (edge RSS with -rss-routes routes), "+
			"hotupdate (a route changed under load with -hot-routes routes over -hot-tenants tenants: 200 → new upstream, failed calls, RSS), cold (a fresh edge started from a bucket of -cold-routes routes), "+
			"scale (-scale-tenants tenants of -scale-routes routes: api write rates and relay lag, an edge's ready time, restart and RSS idle and after serving 1%/10% of the tenants, first requests of cold tenants, a route change; -scale-*), "+
			"tail (S1's latency at fixed open-loop rates of nginx's maximum, nginx and Tollgate interleaved: p50/p99/p99.9; -tail-*), soak (-duration of mixed traffic, route changes and key rotations through api, billing and a metered edge: drift, and billed = served; -duration defaults to 10m for it)")
		gateways = flag.String("gateways", "nginx,tollgate", "gateways to measure: nginx, tollgate")
		cores    = flag.String("cores", "1,2", "GOMAXPROCS / nginx workers per run; the gateway gets CPUs 0..n-1")
		out      = flag.String("out", "bench-results.md", "also write the markdown report here (empty: stdout only)")
		keep     = flag.Bool("keep", false, "keep the temp directory (configs, logs) for inspection")
	)
	flag.DurationVar(&b.duration, "duration", 10*time.Second, "measured window per run")
	flag.DurationVar(&b.warmup, "warmup", 2*time.Second, "warmup before each measured window")
	flag.StringVar(&b.LoadCPUs, "load-cpus", "1", "CPUs for wrk and the upstream")
	flag.IntVar(&b.threads, "threads", 2, "wrk threads")
	flag.IntVar(&b.conns, "conns", 64, "wrk connections")
	flag.IntVar(&b.routes, "routes", 5000, "routes of S4r")
	flag.IntVar(&b.cfgN, "config-n", 200, "config: sequential route creations")
	flag.IntVar(&b.burst, "burst", 5000, "config: route creations fired concurrently")
	flag.IntVar(&b.workers, "workers", 32, "concurrent management API clients for bulk creation")
	flag.BoolVar(&b.edgeInConfig, "config-edge", true, "config: also time until the edge serves each new route")
	flag.DurationVar(&b.ReadyTimeout, "ready-timeout", 2*time.Minute, "how long to wait for a process or config to be ready")
	flag.StringVar(&b.NatsURL, "nats", "nats://127.0.0.1:4222", "NATS (JetStream) the stacks use")
	flag.StringVar(&b.PGAdmin, "pg", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres to create the run's databases on")
	flag.StringVar(&b.RedisURL, "redis", "", "TOLLGATE_REDIS_URL for the edges (empty: local limits only)")
	flag.BoolVar(&b.MeterOff, "meter-off", false, "start the edges with TOLLGATE_METER=off (no usage metering); metering's cost is S1/S2 of a run without it minus a run with it")
	flag.BoolVar(&b.NginxForward, "nginx-forward", true, "nginx proxies as Tollgate does on the wire: it sends the upstream X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host and an X-Request-Id, and returns the id to the client (false: nginx's bare proxy_pass, which sends and returns neither)")
	flag.BoolVar(&b.s2Limit, "s2-ratelimit", false, "S2: add a rate limit that is never reached (rps=burst=1e6) to the route, and limit_req to nginx")
	flag.IntVar(&b.s7Rate, "s7-rate", 1000, "S7: base request rate; the burst is 10× it for 1 s")
	flag.IntVar(&b.noisyLimit, "noisy-limit", 500, "noisy: tenant A's platform-plan rate limit (it is flooded at 10×)")
	flag.IntVar(&b.noisyRate, "noisy-rate", 1000, "noisy: tenant B's request rate")
	flag.IntVar(&b.wsConns, "ws-conns", 2000, "S6: WebSocket tunnels held open through the gateway")
	flag.IntVar(&b.wsRate, "ws-rate", 2000, "S6: messages per second, spread over all tunnels (each echoed back)")
	flag.DurationVar(&b.wsSettle, "ws-settle", 12*time.Second, "S6: how long the tunnels stay open and idle between the upgrades and the trickle; the gateway's CPU meanwhile is reported apart, not counted per message")
	flag.IntVar(&b.soakRate, "soak-rate", 500, "soak: requests per second of the mixed traffic")
	flag.StringVar(&b.Bin, "bin", "", "tollgate binary to run (default: go build from the repository root); with -compare, side B")
	flag.StringVar(&b.edgeBinary, "edge-binary", "tollgate-edge", "what the edges run: tollgate-edge (the edge-only binary, go build ./cmd/tollgate-edge, as the deploy files run it) or tollgate (`tollgate edge`); with -bin or -compare, always tollgate")
	traces := flag.String("traces", "off", "also measure the HTTP scenarios with the edge exporting traces to an in-process sink, at these sample rates (e.g. off,0.01,1)")
	b.cmp.register(flag.CommandLine)
	b.rnd.register(flag.CommandLine)
	b.scale.register(flag.CommandLine)
	b.tail.register(flag.CommandLine)
	b.h2.register(flag.CommandLine)
	flag.Parse()
	b.EdgeEnv = edgeEnvList()
	var terr error
	if b.traceSamples, terr = parseTraceSamples(*traces); terr != nil {
		return fail(terr)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills at once

	b.gateways = splitList(*gateways)
	for _, g := range b.gateways {
		if g != "nginx" && g != "tollgate" {
			return fail(fmt.Errorf("-gateways: unknown gateway %q (nginx, tollgate)", g))
		}
	}
	for _, c := range splitList(*cores) {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 || n > runtime.NumCPU() {
			return fail(fmt.Errorf("-cores: %q is not between 1 and %d", c, runtime.NumCPU()))
		}
		b.cores = append(b.cores, n)
	}
	scs := splitList(*scenarios)
	for _, s := range scs {
		if !slices.Contains([]string{"S1", "S1f", "S1h", "S2hmac", "S2", "S2j", "S2l", "S2x", "S2a", "S3", "S4", "S4r", "S5", "S6", "S7", "S9", "S1h2", "S1grpc", "noisy", "config", "rss10k", "hotupdate", "cold", "scale", "soak", "tail"}, s) {
			return fail(fmt.Errorf("-scenarios: unknown scenario %q", s))
		}
	}
	if err := b.rnd.check(); err != nil {
		return fail(err)
	}
	if err := b.h2.check(); err != nil {
		return fail(err)
	}
	scs, cerr := b.cmp.setup(b, scs) // -compare's scenarios and gateways (compare.go)
	if cerr != nil {
		return fail(cerr)
	}
	if b.routes < 1 || b.cfgN < 1 || b.burst < 1 || b.workers < 1 {
		return fail(fmt.Errorf("-routes, -config-n, -burst and -workers must be at least 1"))
	}
	if err := b.scale.check(); err != nil {
		return fail(err)
	}
	if b.edgeBinary != "tollgate-edge" && b.edgeBinary != "tollgate" {
		return fail(fmt.Errorf("-edge-binary: %q is neither tollgate-edge nor tollgate", b.edgeBinary))
	}
	if needsRedis(scs) && b.RedisURL == "" {
		b.RedisURL = "redis://127.0.0.1:6379"
		fmt.Fprintf(os.Stderr, "bench: S2x/S2a count in Redis: the edges use %s (-redis to choose)\n", b.RedisURL)
	}
	b.soakDuration = soak.DefaultDuration
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "duration" {
			b.soakDuration = b.duration
		}
	})
	if slices.Contains(scs, "soak") && (b.soakRate < 1 || b.soakDuration < time.Minute) {
		return fail(fmt.Errorf("-soak-rate must be at least 1 and a soak's -duration at least 1m"))
	}
	if b.s7Rate < 1 || b.noisyLimit < 1 || b.noisyRate < 1 || b.wsConns < 1 || b.wsRate < 1 {
		return fail(fmt.Errorf("-s7-rate, -noisy-limit, -noisy-rate, -ws-conns and -ws-rate must be at least 1"))
	}
	if runtime.NumCPU() < 2 {
		fmt.Fprintln(os.Stderr, "bench: only one CPU: gateway and load share it, figures are not comparable")
		b.LoadCPUs = "0"
	}

	var err error
	if b.root, err = repoRoot(); err != nil {
		return fail(err)
	}
	if b.Dir, err = os.MkdirTemp("", "tollgate-bench-"); err != nil {
		return fail(err)
	}
	if *keep {
		fmt.Fprintf(os.Stderr, "bench: keeping %s\n", b.Dir)
	} else {
		b.Clean.Add(func() { os.RemoveAll(b.Dir) })
	}
	defer b.Clean.Run()
	b.tick = harness.ClockTicks()
	b.HTTP = &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second},
	}

	sweep := b.sweep // each takes the machine (lockMachine) once its builds are done
	if b.cmp.ref != "" {
		sweep = b.compareSweep
	}
	rep, err := sweep(ctx, scs)
	if rep != nil {
		md := rep.markdown()
		fmt.Print(md)
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(md), 0o644); werr != nil {
				fmt.Fprintf(os.Stderr, "bench: writing %s: %v\n", *out, werr)
			} else {
				fmt.Fprintf(os.Stderr, "bench: report written to %s\n", *out)
			}
		}
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	return 1
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run the bench inside the tollgate module")
	}
	return filepath.Dir(mod), nil
}

// gatewayCPUs is the CPU list a gateway with n procs is pinned to: 0..n-1.
func gatewayCPUs(n int) string {
	if n == 1 {
		return "0"
	}
	return fmt.Sprintf("0-%d", n-1)
}

func (b *bench) has(gw string) bool { return slices.Contains(b.gateways, gw) }

// sweep runs everything asked for and returns the report, partial when an error stopped it.
func (b *bench) sweep(ctx context.Context, scs []string) (*report, error) {
	rep := newReport(b)
	if err := harness.EnsureTools(); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(scs, isH2) {
		if err := harness.EnsureH2load(); err != nil {
			return nil, err
		}
		rep.h2load = true
	}
	rep.describeTools()
	needTollgate := b.has("tollgate")
	if !needTollgate {
		for _, s := range scs {
			if !isPerf(s) {
				fmt.Fprintf(os.Stderr, "bench: %s needs -gateways tollgate; skipped\n", s)
			}
		}
	}
	if needTollgate {
		if err := checkServices(ctx, b); err != nil {
			return nil, err
		}
		if err := b.buildTollgate(ctx); err != nil {
			return nil, err
		}
	}
	if err := b.lockMachine(ctx); err != nil {
		return nil, err
	}

	var perf []string
	for _, s := range scs {
		if isPerf(s) {
			perf = append(perf, s)
		}
	}
	if len(perf) > 0 {
		if err := b.perfSweep(ctx, perf, rep); err != nil {
			return rep, err
		}
	}
	if needTollgate && slices.Contains(scs, "config") {
		r, err := b.configLatency(ctx)
		rep.config = r
		if err != nil {
			return rep, fmt.Errorf("config: %w", err)
		}
	}
	if needTollgate && slices.Contains(scs, "rss10k") {
		r, err := b.rssRoutesRun(ctx)
		rep.rss = r
		if err != nil {
			return rep, fmt.Errorf("rss10k: %w", err)
		}
	}
	if needTollgate && slices.Contains(scs, "hotupdate") {
		r, err := b.hotScenario(ctx)
		rep.hot = r
		if err != nil {
			return rep, fmt.Errorf("hotupdate: %w", err)
		}
	}
	if needTollgate && slices.Contains(scs, "cold") {
		r, err := b.coldScenario(ctx)
		rep.cold = r
		if err != nil {
			return rep, fmt.Errorf("cold: %w", err)
		}
	}
	if needTollgate && slices.Contains(scs, "scale") {
		r, err := b.tenantScale(ctx)
		rep.scale = r
		if err != nil {
			return rep, fmt.Errorf("scale: %w", err)
		}
	}
	if needTollgate && (slices.Contains(scs, "S7") || slices.Contains(scs, "noisy")) {
		r, err := b.flowScenarios(ctx, scs)
		rep.flow = r
		if err != nil {
			return rep, fmt.Errorf("S7/noisy: %w", err)
		}
	}
	if needTollgate && slices.Contains(scs, "tail") {
		r, err := b.tailScenario(ctx)
		rep.tail = r
		if err != nil {
			return rep, fmt.Errorf("tail: %w", err)
		}
	}
	if needTollgate && slices.Contains(scs, "soak") {
		r, err := soak.Run(ctx, b.Env, b.soakDuration, b.soakRate)
		rep.soak = r
		if err != nil {
			return rep, fmt.Errorf("soak: %w", err)
		}
	}
	return rep, nil
}

func isPerf(s string) bool {
	return slices.Contains([]string{"S1", "S2", "S2j", "S3", "S4", "S4r", "S5", "S6", "S9"}, s) || isFlowPerf(s) || slices.Contains(functionScenarios, s) || isH2(s)
}

// checkServices fails early, with the remedy, when Postgres or NATS is not there.
func checkServices(ctx context.Context, b *bench) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, b.PGAdmin)
	if err != nil {
		return fmt.Errorf("postgres at %s is not reachable (bash .ci/services starts it): %v", b.PGAdmin, err)
	}
	conn.Close(cctx)
	nc, err := nats.Connect(b.NatsURL, nats.Timeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("NATS at %s is not reachable (bash .ci/services starts it): %v", b.NatsURL, err)
	}
	defer nc.Close()
	if _, err := nc.JetStream(); err != nil {
		return fmt.Errorf("NATS at %s: JetStream: %v", b.NatsURL, err)
	}
	return nil
}

// buildTollgate builds the binaries under test from the repository root: tollgate and,
// unless -edge-binary says otherwise, tollgate-edge for the edges.
func (b *bench) buildTollgate(ctx context.Context) error {
	if b.Bin != "" {
		return nil
	}
	b.Bin = filepath.Join(b.Dir, "tollgate")
	fmt.Fprintf(os.Stderr, "bench: go build -o %s .\n", b.Bin)
	if err := goBuild(ctx, b.root, b.Bin); err != nil {
		return fmt.Errorf("building tollgate: %w", err)
	}
	if b.edgeBinary == "tollgate" {
		return nil
	}
	b.EdgeBin = filepath.Join(b.Dir, "tollgate-edge")
	fmt.Fprintf(os.Stderr, "bench: go build -o %s ./cmd/tollgate-edge\n", b.EdgeBin)
	if err := goBuild(ctx, filepath.Join(b.root, "cmd", "tollgate-edge"), b.EdgeBin); err != nil {
		return fmt.Errorf("building tollgate-edge: %w", err)
	}
	return nil
}
