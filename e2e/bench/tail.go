package main

// The tail scenario: latency at a fixed rate, free of coordinated omission.
//
// wrk's closed loop hides a gateway's stalls (the requests a stall should have delayed
// are never sent); the generator here, tailload's, is open loop and counts each request's
// latency from its due time, so a stall counts for every request it delays, and the
// generator's own lag is reported apart.
//
// The scenario first takes nginx's one-core maximum on S1 (closed-loop wrk, the median of
// tailRounds short runs), then runs nginx and Tollgate at fixed fractions of it (-tail-rates,
// 50% and 80%), in interleaved rounds whose order alternates, each run with its own
// warm-up, and reports p50/p99/p99.9/max of both and the per-round ratios Tollgate ÷ nginx.
// -tail-env adds Tollgate variants (an edge started with extra environment) measured in
// the same rounds, so a tail fix and its off switch are compared under the same drift.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/tailload"
)

// tailGen runs spec in a loadgen child pinned to the load CPUs.
func (b *bench) tailGen(ctx context.Context, spec tailload.Spec, tag string) (tailload.Result, error) {
	return runLoadgenChild[tailload.Result](ctx, b, lgSpec{Tail: &spec}, spec.Warmup+spec.Duration+time.Minute, "tail generator", "tail", tag)
}

// ---------------------------------------------------------------------------------------
// The scenario

// tailSettings are the tail scenario's flags.
type tailSettings struct {
	rounds int
	rates  string
	conns  int
	env    string
	trace  time.Duration
}

func (t *tailSettings) register(fs *flag.FlagSet) {
	fs.IntVar(&t.rounds, "tail-rounds", 3, "tail: interleaved rounds at each rate (nginx and Tollgate, the order alternating)")
	fs.StringVar(&t.rates, "tail-rates", "0.5,0.8", "tail: open-loop rates as fractions of nginx's closed-loop S1 maximum on -cores' first value")
	fs.IntVar(&t.conns, "tail-conns", 64, "tail: connections of the open-loop generator")
	fs.StringVar(&t.env, "tail-env", "", "tail: Tollgate variants measured beside the default edge in the same rounds, ';'-separated, each a ','-separated list of VAR=value for the edge (e.g. TOLLGATE_X=off)")
	fs.DurationVar(&t.trace, "tail-trace", 0, "tail: also record a runtime execution trace of this length from each Tollgate variant during its first run at the highest rate (kept in the run's directory: use -keep)")
}

// tailGateway is one gateway measured by the tail scenario: nginx, or a Tollgate edge
// with extra environment.
type tailGateway struct {
	name string
	env  []string
}

// tailRun is one gateway's run at one rate in one round.
type tailRun struct {
	gateway string
	frac    float64
	round   int
	res     tailload.Result
	busy    float64 // the gateway's CPU seconds ÷ wall seconds over the window (warm-up included)
	gcs     float64 // Tollgate: garbage collections during the run (warm-up included), from its /metrics
	gcPause float64 // Tollgate: their stop-the-world pauses in all, seconds
}

// tailReport is the tail scenario's outcome.
type tailReport struct {
	procs    int
	maxQPS   float64
	maxRuns  []float64
	gateways []string
	fracs    []float64
	runs     []tailRun
	traces   []string
	conns    int
	rounds   int
}

func parseTailRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(s) {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || x <= 0 || x > 2 {
			return nil, fmt.Errorf("-tail-rates: %q is not a fraction in (0, 2]", f)
		}
		out = append(out, x)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-tail-rates: none given")
	}
	return out, nil
}

func parseTailEnv(s string) []tailGateway {
	gws := []tailGateway{{name: "tollgate"}}
	for _, v := range strings.Split(s, ";") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		gws = append(gws, tailGateway{name: "tollgate " + v, env: splitList(v)})
	}
	return gws
}

// tailScenario runs the tail scenario on S1 at the first -cores value.
func (b *bench) tailScenario(ctx context.Context) (*tailReport, error) {
	fracs, err := parseTailRates(b.tail.rates)
	if err != nil {
		return nil, err
	}
	rounds := max(b.tail.rounds, 1)
	procs := b.cores[0]
	cpus := gatewayCPUs(procs)
	rep := &tailReport{procs: procs, fracs: fracs, conns: b.tail.conns, rounds: rounds}

	upPort, err := b.upstream(ctx)
	if err != nil {
		return nil, err
	}
	upURL := fmt.Sprintf("http://127.0.0.1:%d", upPort)
	scs := buildPerfScenarios(b, []string{"S1"})
	sc := scs[0]

	port, err := harness.FreePort()
	if err != nil {
		return nil, err
	}
	ngx, err := b.StartProxy(ctx, port, 0, upPort, procs, cpus, proxySites(scs))
	if err != nil {
		return nil, err
	}
	defer ngx.Stop()
	ngxBase := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := b.WaitServed(ctx, ngx, ngxBase, sc.host, sc.paths, nil); err != nil {
		return nil, fmt.Errorf("nginx: %w", err)
	}

	st, err := b.NewStack(ctx, "tail", b.LoadCPUs)
	if err != nil {
		return nil, err
	}
	if err := b.configureTollgate(ctx, st, upURL, scs); err != nil {
		return nil, err
	}
	variants := parseTailEnv(b.tail.env)
	// One edge per variant, all idle but the one measured: a restart per run would add
	// its start-up to every round.
	edges := map[string]*harness.Stack{}
	for i, v := range variants {
		s := st
		if i > 0 {
			// A variant gets a stack view of its own: the same database and NATS prefix
			// (so the same config), its own ports.
			cp := *st
			if cp.EdgeAddr, err = harness.FreeAddr(); err != nil {
				return nil, err
			}
			if cp.EdgeAdmin, err = harness.FreeAddr(); err != nil {
				return nil, err
			}
			cp.Edge = nil
			s = &cp
		}
		// Each edge its own id and meter spool: they share the stack's NATS prefix.
		env := append([]string{"TOLLGATE_PPROF=true", fmt.Sprintf("TOLLGATE_EDGE_ID=tail-%d", i),
			"TOLLGATE_METER_SPOOL_DIR=" + filepath.Join(b.Dir, fmt.Sprintf("tail-spool-%d", i))}, v.env...)
		if err := s.StartEdge(ctx, procs, cpus, env...); err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		defer s.StopEdge()
		if err := b.WaitServed(ctx, s.Edge, "http://"+s.EdgeAddr, sc.host, sc.paths, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		edges[v.name] = s
	}

	// nginx's one-core maximum: closed-loop wrk, the median of rounds short runs.
	d := max(b.duration/2, 2*time.Second)
	if _, err := runWrk(ctx, b, loadTarget{url: ngxBase + sc.hit, host: sc.host}, b.warmup, "tail-max-warmup"); err != nil {
		return nil, err
	}
	for i := range rounds {
		lr, err := runWrk(ctx, b, loadTarget{url: ngxBase + sc.hit, host: sc.host}, d, fmt.Sprintf("tail-max-%d", i+1))
		if err != nil {
			return nil, err
		}
		rep.maxRuns = append(rep.maxRuns, lr.qps())
	}
	rep.maxQPS = tailMedian(rep.maxRuns)
	fmt.Fprintf(os.Stderr, "bench: tail  nginx S1 closed-loop max at %d worker(s): %.0f req/s (median of %v)\n", procs, rep.maxQPS, fmtQPSList(rep.maxRuns))

	rep.gateways = []string{"nginx"}
	for _, v := range variants {
		rep.gateways = append(rep.gateways, v.name)
	}
	type target struct {
		addr string
		p    *harness.Proc
		s    *harness.Stack
	}
	targets := map[string]target{"nginx": {addr: fmt.Sprintf("127.0.0.1:%d", port), p: ngx}}
	for name, s := range edges {
		targets[name] = target{addr: s.EdgeAddr, p: s.Edge, s: s}
	}
	traced := map[string]bool{}
	topFrac := slices.Max(fracs)
	for _, frac := range fracs {
		rate := int(frac * rep.maxQPS)
		for round := 1; round <= rounds; round++ {
			for _, gw := range roundOrder(rep.gateways, round) {
				t := targets[gw]
				spec := tailload.Spec{Addr: t.addr, Host: sc.host, Path: sc.hit, Rate: rate, Conns: b.tail.conns,
					Warmup: b.warmup, Duration: b.duration}
				tag := fmt.Sprintf("%s-%.0f-%d", strings.ReplaceAll(gw, " ", "_"), frac*100, round)
				var stopTrace func() (string, error)
				if t.s != nil && b.tail.trace > 0 && frac == topFrac && !traced[gw] {
					traced[gw] = true
					stopTrace = b.tailTrace(ctx, t.s, tag, b.warmup+time.Second)
				}
				var gc0, pause0 float64
				if t.s != nil {
					gc0, pause0 = b.edgeGC(t.s.EdgeAdmin)
				}
				u0, err := harness.GroupUsage(t.p.Pid())
				if err != nil {
					return rep, t.p.Failure(err.Error())
				}
				t0 := time.Now()
				res, err := b.tailGen(ctx, spec, tag)
				wall := time.Since(t0)
				if err != nil {
					return rep, err
				}
				u1, err := harness.GroupUsage(t.p.Pid())
				if err != nil {
					return rep, t.p.Failure(err.Error())
				}
				if stopTrace != nil {
					path, err := stopTrace()
					if err != nil {
						fmt.Fprintf(os.Stderr, "bench: tail trace of %s: %v\n", gw, err)
					} else {
						rep.traces = append(rep.traces, gw+": "+path)
					}
				}
				run := tailRun{gateway: gw, frac: frac, round: round, res: res,
					busy: u1.CPUSince(u0, b.tick) / wall.Seconds()}
				if t.s != nil {
					gc1, pause1 := b.edgeGC(t.s.EdgeAdmin)
					run.gcs, run.gcPause = gc1-gc0, pause1-pause0
				}
				rep.runs = append(rep.runs, run)
				flag := ""
				if res.Behind() {
					flag = "  GENERATOR BEHIND"
				}
				fmt.Fprintf(os.Stderr, "bench: tail  %3.0f%% %6d/s round %d %-24s p50 %s  p99 %s  p99.9 %s  max %s  late %d  queued %d  errors %d  non-2xx %d  busy %.2f  GCs %.0f%s\n",
					frac*100, rate, round, gw, figures.FmtUS(res.P50), figures.FmtUS(res.P99), figures.FmtUS(res.P999), figures.FmtUS(res.Max),
					res.Late, res.Queued, res.Errors, res.Bad, run.busy, run.gcs, flag)
			}
		}
	}
	return rep, nil
}

// tailTrace starts recording a runtime execution trace of the stack's edge after delay
// (past the generator's warm-up); the returned function waits for it and says where it is.
func (b *bench) tailTrace(ctx context.Context, s *harness.Stack, tag string, delay time.Duration) func() (string, error) {
	path := filepath.Join(b.Dir, "trace-"+tag+".out")
	done := make(chan error, 1)
	go func() {
		select {
		case <-ctx.Done():
			done <- ctx.Err()
			return
		case <-time.After(delay):
		}
		url := fmt.Sprintf("http://%s/debug/pprof/trace?seconds=%d", s.EdgeAdmin, max(1, int(b.tail.trace/time.Second)))
		resp, err := b.HTTP.Get(url)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("%s: status %d", url, resp.StatusCode)
		}
		done <- err
	}()
	return func() (string, error) { return path, <-done }
}

// edgeGC reads the edge's garbage collections so far and their pauses in all (seconds)
// from its /metrics (the Go collector's go_gc_duration_seconds summary); 0 when absent.
func (b *bench) edgeGC(admin string) (count, pauses float64) {
	m := b.ScrapeMetrics(admin)
	return m["go_gc_duration_seconds_count"], m["go_gc_duration_seconds_sum"]
}

// fmtRatios is per-round ratios as their median and extremes, with the median's 95%
// confidence interval from 6 rounds on (medianCI): "1.05× (0.98–1.12; CI 1.01–1.08)".
func fmtRatios(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	out := fmt.Sprintf("%.2f× (%.2f–%.2f", tailMedian(xs), slices.Min(xs), slices.Max(xs))
	if sp := spreadOf(xs); sp.ciOK {
		out += fmt.Sprintf("; CI %.2f–%.2f", sp.ciLo, sp.ciHi)
	}
	return out + ")"
}

func tailMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtQPSList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// tailMarkdown renders the tail scenario: per rate, each gateway's medians over rounds,
// the per-round ratios to nginx, then every run.
func (r *report) tailMarkdown(s *strings.Builder) {
	t := r.tail
	if t == nil {
		return
	}
	fmt.Fprintf(s, "## Tail: latency at a fixed open-loop rate (S1)\n\n")
	fmt.Fprintf(s, "nginx's closed-loop S1 maximum at %d worker(s) (wrk, %d connections): %.0f req/s (median of %s). "+
		"Then at fixed fractions of it, the bench's open-loop generator on CPU %s (%d connections; request j due at start + j/rate, "+
		"its latency counted from that due time, so a stall counts for every request it delays: no coordinated omission; "+
		"log-linear histograms, ≤0.4%% error), nginx and Tollgate at %d proc(s) in %d interleaved rounds, the order alternating, "+
		"%s warm-up + %s measured per run. Figures are medians over rounds; ratios are Tollgate ÷ nginx per round, then their median (min–max; from 6 rounds on, CI: the median's 95%% confidence interval, as in the rounds' tables). "+
		"*late*: sends the generator itself made ≥1 ms behind schedule with its connection free (a run with more than 1%% late is flagged: the load side, not the gateway, was behind); "+
		"*queued*: requests that waited for their connection's previous answer (counted in their latency); "+
		"*busy*: the gateway's CPU seconds ÷ wall seconds over the run, warm-up included; at the same rate sent, *busy ÷ nginx* is the ratio of CPU per request at equal load, "+
		"which the closed-loop sweep cannot give (there each gateway's rate is what the saturated load side gets out of it).\n\n",
		t.procs, r.b.conns, t.maxQPS, fmtQPSList(t.maxRuns), r.b.LoadCPUs, t.conns, t.procs, t.rounds, r.b.warmup, r.b.duration)
	s.WriteString("| load | gateway | rate sent | p50 | p99 | p99.9 | max | p99 ÷ nginx | p99.9 ÷ nginx | busy | busy ÷ nginx | late | queued | errors + non-2xx | flagged rounds |\n")
	s.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, frac := range t.fracs {
		for _, gw := range t.gateways {
			var p50, p99, p999, mx, rate, busy, r99, r999, rbusy []float64
			var late, queued, bad int64
			flagged := 0
			for _, run := range t.runs {
				if run.frac != frac || run.gateway != gw {
					continue
				}
				x := run.res
				p50, p99, p999, mx = append(p50, x.P50), append(p99, x.P99), append(p999, x.P999), append(mx, x.Max)
				rate, busy = append(rate, x.SentRate()), append(busy, run.busy)
				late, queued, bad = late+x.Late, queued+x.Queued, bad+x.Errors+x.Bad
				if x.Behind() {
					flagged++
				}
				if gw == "nginx" {
					continue
				}
				for _, n := range t.runs {
					if n.frac == frac && n.round == run.round && n.gateway == "nginx" && n.res.P99 > 0 && n.res.P999 > 0 {
						r99 = append(r99, x.P99/n.res.P99)
						r999 = append(r999, x.P999/n.res.P999)
						if n.busy > 0 {
							rbusy = append(rbusy, run.busy/n.busy)
						}
					}
				}
			}
			if len(p99) == 0 {
				continue
			}
			fmt.Fprintf(s, "| %.0f%% | %s | %.0f/s | %s | %s | %s | %s | %s | %s | %.2f | %s | %d | %d | %d | %d of %d |\n",
				frac*100, gw, tailMedian(rate), figures.FmtUS(tailMedian(p50)), figures.FmtUS(tailMedian(p99)), figures.FmtUS(tailMedian(p999)), figures.FmtUS(tailMedian(mx)),
				fmtRatios(r99), fmtRatios(r999), tailMedian(busy), fmtRatios(rbusy), late, queued, bad, flagged, len(p99))
		}
	}
	s.WriteString("\nEvery run (*GCs*: the edge's collections during the run, warm-up included, and their stop-the-world pauses in all):\n\n")
	s.WriteString("| load | round | gateway | rate sent | p50 | p90 | p99 | p99.9 | max | generator lag p99 / max | late | queued | busy | GCs (pauses) |\n")
	s.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range t.runs {
		x := run.res
		gc := "-"
		if run.gateway != "nginx" {
			gc = fmt.Sprintf("%.0f (%s)", run.gcs, figures.FmtUS(run.gcPause*1e6))
		}
		fmt.Fprintf(s, "| %.0f%% | %d | %s | %.0f/s | %s | %s | %s | %s | %s | %s / %s | %d | %d | %.2f | %s |\n", run.frac*100, run.round, run.gateway,
			x.SentRate(), figures.FmtUS(x.P50), figures.FmtUS(x.P90), figures.FmtUS(x.P99), figures.FmtUS(x.P999), figures.FmtUS(x.Max), figures.FmtUS(x.LagP99), figures.FmtUS(x.LagMax), x.Late, x.Queued, run.busy, gc)
	}
	if len(t.traces) > 0 {
		s.WriteString("\nExecution traces (`go tool trace FILE`):\n\n")
		for _, p := range t.traces {
			fmt.Fprintf(s, "- %s\n", p)
		}
	}
	s.WriteString("\n")
}
