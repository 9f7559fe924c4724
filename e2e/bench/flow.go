package main

// Flow-control scenarios.
//
//   - S2l, S2x, S2a: S2 (key auth) with a rate limit on the route that is never reached,
//     counted locally (S2l), exactly in Redis (S2x: one EVALSHA per request) or
//     approximately (S2a: Redis sees one command per key per 100 ms). Measured with wrk
//     like the other proxy scenarios, against S1 ("the plugin tax") and nginx with
//     limit_req; the report adds the Redis commands per request, from the edge's
//     tollgate_limit_redis_commands_total. S2x and S2a need Redis (-redis, default the
//     machine's 127.0.0.1:6379 when they are asked for).
//   - S7: a burst of 10× the base rate for 1 s, on a route whose limit (2× base, bucket
//     of 10× base) admits it all: p99 before, during and after the burst, and every
//     answer must be 200.
//   - noisy: tenant B at a steady rate alone, then while tenant A (its platform plan: a
//     rate of -noisy-limit, concurrency 64) is flooded at 10× its limit; B's p99 alone vs
//     with the neighbour.
//
// S7 and noisy need fixed-rate load, which wrk cannot do: the bench runs itself as the
// load generator (TOLLGATE_BENCH_LOADGEN=1, a spec on stdin, results on stdout), pinned
// to the load CPUs, an open loop that sends on schedule whatever the answers do.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/rateload"
	"tollgate/e2e/bench/tailload"
	"tollgate/e2e/bench/wsload"
)

// flowModes maps the S2 limiter scenarios to their route's mode.
var flowModes = map[string]string{"S2l": "local", "S2x": "exact", "S2a": "approximate"}

func isFlowPerf(s string) bool { _, ok := flowModes[s]; return ok }

func needsRedis(scs []string) bool {
	return slices.Contains(scs, "S2x") || slices.Contains(scs, "S2a")
}

// flowPerfScenario is S2 with the limiter on in one mode, on a path of its own.
func flowPerfScenario(id string) *perfScenario {
	mode := flowModes[id]
	key := "bench-" + harness.RandomHex(16) // replaced by the key Tollgate issues
	path := "/keyed-" + mode
	return &perfScenario{id: id, desc: "key auth + rate limit, " + mode + " (never reached)",
		host: "bench.localhost", hit: path, paths: []string{path},
		key: key, headers: map[string]string{"X-API-Key": key}, limit: true, mode: mode}
}

// configureFlowScenario creates the consumer, key and limited route of an S2l/x/a.
func (b *bench) configureFlowScenario(ctx context.Context, s *harness.Stack, slug, upURL string, sc *perfScenario) error {
	var c, k harness.Created
	if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers", map[string]any{"name": "bench-" + sc.id}, &c); err != nil {
		return err
	}
	if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/consumers/"+c.ID+"/keys", nil, &k); err != nil {
		return err
	}
	sc.key = k.Key
	sc.headers = map[string]string{"X-API-Key": k.Key}
	r := harness.RouteBody("keyed-"+sc.mode, sc.hit, upURL, "key", false)
	// A limit the bench never reaches: only its bookkeeping (and Redis round trips) count.
	r["rate_limit"] = map[string]any{"rps": 1_000_000, "burst": 1_000_000, "mode": sc.mode}
	return s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil)
}

// redisCommands reads the edge's tollgate_limit_redis_commands_total (0 when absent).
func (b *bench) redisCommands(admin string) float64 {
	return b.ScrapeMetrics(admin)["tollgate_limit_redis_commands_total"]
}

// ---------------------------------------------------------------------------------------
// The load generator

// lgSpec is what the load generator runs: rateload's phases one after the other, each
// with streams sent concurrently at fixed rates to the edge at Addr. Closed (S9), WS (S6)
// or Tail (the tail scenario), when set, replace the phases with that kind of run.
type lgSpec struct {
	Addr   string           `json:"addr"`
	Phases []rateload.Phase `json:"phases"`
	Closed *closedSpec      `json:"closed,omitempty"`
	WS     *wsload.Spec     `json:"ws,omitempty"`
	Tail   *tailload.Spec   `json:"tail,omitempty"`
}

// runLoadgen is the load generator's main: the spec on stdin, results on stdout.
func runLoadgen() int {
	var spec lgSpec
	dec := json.NewDecoder(os.Stdin)
	if err := dec.Decode(&spec); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: spec:", err)
		return 2
	}
	switch {
	case spec.Closed != nil:
		return runClosedLoop(spec.Closed)
	case spec.Tail != nil:
		return tailload.Run(spec.Tail)
	case spec.WS != nil:
		// The bench's go-ahead may already sit in the decoder's buffer.
		return wsload.RunClient(spec.WS, io.MultiReader(dec.Buffered(), os.Stdin))
	}
	out := rateload.Run(spec.Addr, spec.Phases)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 1
	}
	return 0
}

// loadgen runs the spec in a pinned child process and returns its results.
func (b *bench) loadgen(ctx context.Context, spec lgSpec, tag string) ([]rateload.Result, error) {
	var total time.Duration
	for _, ph := range spec.Phases {
		total += ph.Duration
	}
	return runLoadgenChild[[]rateload.Result](ctx, b, spec, total+time.Minute, "load generator", "loadgen", tag)
}

// runLoadgenChild runs the bench itself as a load generator (runLoadgen) pinned to the
// load CPUs, spec on its stdin, for at most limit; it keeps the child's output in the run's
// directory as {file}-{tag}.json and decodes it. what names the child in errors.
func runLoadgenChild[T any](ctx context.Context, b *bench, spec lgSpec, limit time.Duration, what, file, tag string) (T, error) {
	var out T
	self, err := os.Executable()
	if err != nil {
		return out, err
	}
	in, err := json.Marshal(spec)
	if err != nil {
		return out, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", "-c", b.LoadCPUs, self)
	cmd.Env = append(os.Environ(), "TOLLGATE_BENCH_LOADGEN=1")
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return out, fmt.Errorf("%s (%s): %v\n%s", what, tag, err, stderr.String())
	}
	_ = os.WriteFile(filepath.Join(b.Dir, file+"-"+tag+".json"), stdout.Bytes(), 0o644)
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return out, fmt.Errorf("%s (%s) output %q: %v", what, tag, stdout.String(), err)
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------
// S7 and noisy

// flowResult holds S7's and the noisy neighbour's results for the report.
type flowResult struct {
	procs      int
	redis      string
	s7         []rateload.Result
	s7Base     int
	noisy      []rateload.Result
	noisyLimit int
	noisyRate  int
}

func (r *flowResult) find(rs []rateload.Result, phase, stream string) *rateload.Result {
	for i := range rs {
		if rs[i].Phase == phase && rs[i].Stream == stream {
			return &rs[i]
		}
	}
	return nil
}

// flowScenarios runs S7 and noisy on a stack of their own, the edge at the first -cores
// value pinned to the gateway CPUs.
func (b *bench) flowScenarios(ctx context.Context, scs []string) (*flowResult, error) {
	upPort, err := b.upstream(ctx)
	if err != nil {
		return nil, err
	}
	upURL := fmt.Sprintf("http://127.0.0.1:%d", upPort)
	s, err := b.NewStack(ctx, "flow", b.LoadCPUs)
	if err != nil {
		return nil, err
	}
	procs := b.cores[0]
	res := &flowResult{procs: procs, redis: b.RedisURL, s7Base: b.s7Rate, noisyLimit: b.noisyLimit, noisyRate: b.noisyRate}
	host := func(slug string) string { return slug + ".localhost" }

	if slices.Contains(scs, "S7") {
		if _, err := s.Client.CreateTenant(ctx, "burst"); err != nil {
			return res, err
		}
		r := harness.RouteBody("burst", "/burst", upURL, "none", false)
		// The burst stays below the limit: 10× base for 1 s fits a bucket of 10× base
		// (plus what refills at 2× base), so every answer must be 200.
		r["rate_limit"] = map[string]any{"rps": 2 * b.s7Rate, "burst": 10 * b.s7Rate}
		if err := s.Client.Call(ctx, "POST", "/v1/tenants/burst/routes", r, nil); err != nil {
			return res, err
		}
	}
	if slices.Contains(scs, "noisy") {
		plan := map[string]any{"rate_limit": map[string]any{"rps": b.noisyLimit, "burst": b.noisyLimit}, "concurrency": 64}
		if err := s.Client.PutPlatformPlan(ctx, "bench-noisy", plan); err != nil {
			return res, err
		}
		if err := s.Client.Call(ctx, "POST", "/v1/tenants", map[string]any{"slug": "noisy", "name": "noisy", "plan": "bench-noisy"}, nil); err != nil {
			return res, err
		}
		if _, err := s.Client.CreateTenant(ctx, "quiet"); err != nil {
			return res, err
		}
		for _, slug := range []string{"noisy", "quiet"} {
			if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("api", "/api", upURL, "none", false), nil); err != nil {
				return res, err
			}
		}
	}
	if err := s.StartEdge(ctx, procs, gatewayCPUs(procs)); err != nil {
		return res, err
	}
	defer s.StopEdge()
	base := "http://" + s.EdgeAddr
	if slices.Contains(scs, "S7") {
		if err := b.WaitServed(ctx, s.Edge, base, host("burst"), []string{"/burst"}, nil); err != nil {
			return res, err
		}
		st := func(rate int) []rateload.Stream {
			return []rateload.Stream{{Name: "burst", Host: host("burst"), Path: "/burst", Rate: rate}}
		}
		spec := lgSpec{Addr: s.EdgeAddr, Phases: []rateload.Phase{
			{Name: "warmup", Duration: b.warmup, Streams: st(b.s7Rate)},
			{Name: "before", Duration: 3 * time.Second, Streams: st(b.s7Rate)},
			{Name: "burst", Duration: time.Second, Streams: st(10 * b.s7Rate)},
			{Name: "after", Duration: 2 * time.Second, Streams: st(b.s7Rate)},
		}}
		// Let the bucket refill from the warm-up before the measured phases? It never
		// empties: the warm-up runs at base, below the 2× base rate.
		if res.s7, err = b.loadgen(ctx, spec, "S7"); err != nil {
			return res, err
		}
		for _, ph := range []string{"before", "burst", "after"} {
			if x := res.find(res.s7, ph, "burst"); x != nil {
				fmt.Fprintf(os.Stderr, "bench: S7 %-6s %6d req/s  p50 %s  p99 %s  max %s  non-2xx %d  errors %d  late %d\n",
					ph, x.Rate, figures.FmtUS(x.P50), figures.FmtUS(x.P99), figures.FmtUS(x.Max), x.Sent-x.OK-x.Errors, x.Errors, x.Late)
			}
		}
	}
	if slices.Contains(scs, "noisy") {
		if err := b.WaitServed(ctx, s.Edge, base, host("quiet"), []string{"/api"}, nil); err != nil {
			return res, err
		}
		if err := b.WaitServed(ctx, s.Edge, base, host("noisy"), []string{"/api"}, nil); err != nil {
			return res, err
		}
		quiet := rateload.Stream{Name: "B", Host: host("quiet"), Path: "/api", Rate: b.noisyRate}
		noisy := rateload.Stream{Name: "A", Host: host("noisy"), Path: "/api", Rate: 10 * b.noisyLimit}
		d := max(b.duration/2, 3*time.Second)
		spec := lgSpec{Addr: s.EdgeAddr, Phases: []rateload.Phase{
			{Name: "warmup", Duration: b.warmup, Streams: []rateload.Stream{quiet}},
			{Name: "alone", Duration: d, Streams: []rateload.Stream{quiet}},
			{Name: "neighbour", Duration: d, Streams: []rateload.Stream{quiet, noisy}},
			{Name: "alone again", Duration: d, Streams: []rateload.Stream{quiet}},
		}}
		if res.noisy, err = b.loadgen(ctx, spec, "noisy"); err != nil {
			return res, err
		}
		for _, x := range res.noisy {
			if x.Phase == "warmup" {
				continue
			}
			fmt.Fprintf(os.Stderr, "bench: noisy %-11s %s %6d req/s  200 %d  429 %d  503 %d  p50 %s  p99 %s  late %d\n",
				x.Phase, x.Stream, x.Rate, x.OK, x.Limited, x.Overloaded, figures.FmtUS(x.P50), figures.FmtUS(x.P99), x.Late)
		}
	}
	return res, nil
}

// flowMarkdown renders the flow-control sections: the limiter's tax in each mode with
// Redis commands per request, S7 and the noisy neighbour.
func (r *report) flowMarkdown(s *strings.Builder) {
	var rows []perfResult
	for _, p := range r.perf {
		if isFlowPerf(p.scenario) && p.gateway == "tollgate" {
			rows = append(rows, p)
		}
	}
	if len(rows) > 0 {
		s.WriteString("## Flow control: the limiter's cost (S2 + a rate limit never reached)\n\n")
		s.WriteString("S2l/S2x/S2a: key auth plus a route limit counted locally, exactly in Redis (one EVALSHA per request) or ")
		s.WriteString("approximately (one pipelined round trip per 100 ms). Redis commands per request from the edge's ")
		s.WriteString("tollgate_limit_redis_commands_total over the measured window (heartbeats included).\n\n")
		s.WriteString("| scenario | procs | QPS | p99 | CPU µs/req | µs/req vs S1 | µs/req vs S2 | Redis cmd/req | non-2xx |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range rows {
			vs1, vs2 := "-", "-"
			if x := r.find("S1", p.gateway, p.procs); x != nil {
				vs1 = figures.Ratio(p.usPerReq, x.usPerReq)
			}
			if x := r.find("S2", p.gateway, p.procs); x != nil {
				vs2 = figures.Ratio(p.usPerReq, x.usPerReq)
			}
			fmt.Fprintf(s, "| %s (%s) | %d | %.0f | %s | %.2f | %s | %s | %.3f | %d |\n", p.scenario, flowModes[p.scenario], p.procs,
				p.load.qps(), figures.FmtUS(p.load.P99), p.usPerReq, vs1, vs2, p.redisPerReq, p.load.Status)
		}
		s.WriteString("\n")
	}
	f := r.flow
	if f == nil {
		return
	}
	redisNote := "local limits (no Redis)"
	if f.redis != "" {
		redisNote = "limits in Redis " + f.redis
	}
	if len(f.s7) > 0 {
		fmt.Fprintf(s, "## S7: burst of 10× for 1 s\n\nOne route limited to %d/s with a bucket of %d (the burst stays below the limit); "+
			"fixed-rate open-loop load (the bench's own generator on CPU %s), edge GOMAXPROCS=%d, %s. Latency from send to answer.\n\n",
			2*f.s7Base, 10*f.s7Base, r.b.LoadCPUs, f.procs, redisNote)
		s.WriteString("| phase | req/s | requests | p50 | p90 | p99 | max | non-2xx | errors | sent late |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, ph := range []string{"before", "burst", "after"} {
			if x := f.find(f.s7, ph, "burst"); x != nil {
				fmt.Fprintf(s, "| %s | %d | %d | %s | %s | %s | %s | %d | %d | %d |\n", ph, x.Rate, x.Sent, figures.FmtUS(x.P50), figures.FmtUS(x.P90),
					figures.FmtUS(x.P99), figures.FmtUS(x.Max), x.Sent-x.OK-x.Errors, x.Errors, x.Late)
			}
		}
		if b, a := f.find(f.s7, "burst", "burst"), f.find(f.s7, "before", "burst"); b != nil && a != nil {
			fmt.Fprintf(s, "\np99 during the burst ÷ p99 before: %s\n", figures.Ratio(b.P99, a.P99))
		}
		s.WriteString("\n")
	}
	if len(f.noisy) > 0 {
		fmt.Fprintf(s, "## Noisy neighbour\n\nTenant B (no limits) at %d/s; tenant A on a platform plan of %d/s (concurrency 64) flooded at %d/s "+
			"in the middle phase. Edge GOMAXPROCS=%d, %s.\n\n", f.noisyRate, f.noisyLimit, 10*f.noisyLimit, f.procs, redisNote)
		s.WriteString("| phase | tenant | req/s | 200 | 429 | 503 | other | p50 | p99 | max | sent late |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range f.noisy {
			if x.Phase == "warmup" {
				continue
			}
			fmt.Fprintf(s, "| %s | %s | %d | %d | %d | %d | %d | %s | %s | %s | %d |\n", x.Phase, x.Stream, x.Rate, x.OK, x.Limited,
				x.Overloaded, x.Bad+x.Errors, figures.FmtUS(x.P50), figures.FmtUS(x.P99), figures.FmtUS(x.Max), x.Late)
		}
		if a, n := f.find(f.noisy, "alone", "B"), f.find(f.noisy, "neighbour", "B"); a != nil && n != nil {
			fmt.Fprintf(s, "\nB's p99 with the flooding neighbour ÷ alone: %s (the issue's bar: ≤ 1.10×)\n", figures.Ratio(n.P99, a.P99))
		}
		s.WriteString("\n")
	}
}
