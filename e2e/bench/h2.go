package main

// HTTP/2 at the client side, beside nginx, driven by h2load (Debian's nghttp2-client):
//
//   - S1h2: S1's plain proxy over TLS 1.3 with ALPN h2, -h2-conns connections of
//     -h2-streams concurrent streams each. HTTP/1.1 to the upstream on both gateways.
//   - S1grpc: unary gRPC calls (grpc.health.v1.Health/Check with an empty request) over
//     h2c with prior knowledge, passed on over HTTP/2 to a health server the bench runs
//     itself (-grpc-upstream: its own lean one by default, or grpc-go's): nginx with
//     grpc_pass, Tollgate with a route whose upstream.protocol is "h2". h2load sends the
//     call as a POST of the framed request; it reads no trailers, so a gRPC client checks
//     once per gateway, before measuring, that the answer is SERVING and not a gRPC error
//     carried in a 200.
//
// h2load rather than the bench's own Go client: its HPACK and framing cost the load CPU
// little, and both gateways get the same client. The gateway's CPU is measured around
// the h2load process as around wrk's (measureWarm), so its warm-up is a run of its own
// rather than --warm-up-time, whose CPU would be counted.

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"tollgate/e2e/bench/grpchealth"
	"tollgate/e2e/bench/h2load"
	"tollgate/e2e/bench/harness"
)

// h2Scenarios are the scenarios h2load drives; they run in the sweep only (not -compare).
var h2Scenarios = []string{"S1h2", "S1grpc"}

// h2Targets are the targets the HTTP/2 scenarios are held to: Tollgate ÷ nginx CPU per
// request at most this (the report says whether the median of the rounds meets it).
var h2Targets = map[string]float64{"S1h2": 1.0, "S1grpc": 1.1}

// h2Settings are h2load's flags.
type h2Settings struct {
	conns    int
	streams  int
	upstream string // S1grpc's upstream: "lean" or "grpc-go"
}

func (h *h2Settings) register(fs *flag.FlagSet) {
	fs.IntVar(&h.conns, "h2-conns", 16, "S1h2, S1grpc: h2load's connections (-c)")
	fs.IntVar(&h.streams, "h2-streams", 8, "S1h2, S1grpc: concurrent streams per connection (h2load -m)")
	fs.StringVar(&h.upstream, "grpc-upstream", "lean", "S1grpc's upstream: lean (the bench's own health server, HTTP/2 framed by x/net) or grpc-go "+
		"(grpc-go's health server, which with h2load saturates the load CPU before nginx does, so its nginx rounds are flagged)")
}

func (h *h2Settings) check() error {
	if h.conns < 1 || h.streams < 1 {
		return fmt.Errorf("-h2-conns and -h2-streams must be at least 1")
	}
	if h.upstream != "lean" && h.upstream != "grpc-go" {
		return fmt.Errorf("-grpc-upstream: %q; lean or grpc-go", h.upstream)
	}
	return nil
}

// grpcUpstreamName is -grpc-upstream's server, as the reports name it.
func grpcUpstreamName(u string) string {
	if u == "grpc-go" {
		return "grpc-go's"
	}
	return "the bench's lean (x/net framed)"
}

func isH2(s string) bool { return slices.Contains(h2Scenarios, s) }

// h2PerfScenario is S1h2 or S1grpc as a proxy scenario.
func h2PerfScenario(id string) *perfScenario {
	if id == "S1grpc" {
		return &perfScenario{id: id, desc: "gRPC unary Health/Check over h2c, HTTP/2 to a gRPC upstream (h2load)",
			host: "grpc.localhost", hit: grpchealth.CheckPath, paths: []string{grpchealth.ServicePath}, loader: "h2load", h2: true, grpc: true}
	}
	return &perfScenario{id: id, desc: "S1 over TLS 1.3 with ALPN h2 (h2load)",
		host: "bench.localhost", hit: "/h2", paths: []string{"/h2"}, loader: "h2load", h2: true, tls: true}
}

// configureH2Scenario creates S1h2's plain route or S1grpc's route to the gRPC upstream.
func (b *bench) configureH2Scenario(ctx context.Context, s *harness.Stack, slug, upURL string, sc *perfScenario) error {
	if !sc.grpc {
		return s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("h2", sc.hit, upURL, "none", false), nil)
	}
	r := harness.RouteBody("grpc-health", grpchealth.ServicePath, fmt.Sprintf("http://127.0.0.1:%d", b.GRPCPort), "none", false)
	r["upstream"].(map[string]any)["protocol"] = "h2"
	if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil); err != nil {
		return fmt.Errorf("S1grpc needs a route's upstream.protocol \"h2\" (HTTP/2 to the upstream, which gRPC requires); this build refused it: %w", err)
	}
	return nil
}

// startGRPCUpstream starts the gRPC health server (the bench binary itself,
// grpchealth.ServeLean or Serve) pinned to the load CPUs, as the other upstreams are.
func (b *bench) startGRPCUpstream(ctx context.Context) error {
	if b.GRPCPort != 0 {
		return nil
	}
	env := "TOLLGATE_BENCH_GRPC_LEAN"
	if b.h2.upstream == "grpc-go" {
		env = "TOLLGATE_BENCH_GRPC"
	}
	addr, port, p, err := b.startSelf("gRPC health upstream", "grpc-upstream.log", env)
	if err != nil {
		return err
	}
	if err := harness.WaitFor(ctx, "gRPC health upstream on "+addr, 10*time.Second, 50*time.Millisecond, p, func() error {
		return grpchealth.Check(ctx, addr, "")
	}); err != nil {
		return err
	}
	b.GRPCPort = port
	// One idle connection per call in flight: nginx's grpc_pass does not multiplex.
	b.GRPCKeepalive = max(64, b.h2.conns*b.h2.streams)
	return nil
}

// verifyH2 checks once per gateway, before measuring, that the scenario is what it claims:
// S1h2 answers 200 over HTTP/2 negotiated by ALPN, S1grpc answers a gRPC SERVING (polled:
// the gRPC route is not covered by WaitServed's HTTP/1.1 GETs). addr is host:port.
func (b *bench) verifyH2(ctx context.Context, gw string, p *harness.Proc, sc *perfScenario, addr string) error {
	if sc.grpc {
		return harness.WaitFor(ctx, gw+" to answer gRPC Health/Check on "+addr, b.ReadyTimeout, 100*time.Millisecond, p, func() error {
			return grpchealth.Check(ctx, addr, sc.host)
		})
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{ServerName: sc.host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "GET", "https://"+sc.host+sc.hit, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		return fmt.Errorf("GET https://%s%s at %s: %s %d, want HTTP/2.0 200", sc.host, sc.hit, addr, resp.Proto, resp.StatusCode)
	}
	return nil
}

// runH2load runs h2load on the load CPUs for d and returns its summary in wrk's shape, so
// that the report treats both alike (h2load.Summary says how its counts map to wrk's).
// h2load gives no percentiles: P50 and P99 stay 0 (shown as "-").
func (b *bench) runH2load(ctx context.Context, sc *perfScenario, addr string, d time.Duration, tag string) (loadResult, error) {
	run := h2load.Run{Addr: addr, Host: sc.host, Path: sc.hit, TLS: sc.tls, GRPC: sc.grpc,
		Conns: b.h2.conns, Streams: b.h2.streams, Duration: d}
	if sc.grpc {
		run.Body = filepath.Join(b.Dir, "grpc-health-request.bin")
		if err := os.WriteFile(run.Body, grpchealth.EmptyRequest, 0o644); err != nil {
			return loadResult{}, err
		}
	}
	argv := append([]string{"taskset", "-c", b.LoadCPUs}, run.Args()...)
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	_ = os.WriteFile(filepath.Join(b.Dir, "h2load-"+tag+".log"), out, 0o644)
	if err != nil {
		if ctx.Err() != nil {
			return loadResult{}, fmt.Errorf("h2load %s: %w", tag, ctx.Err())
		}
		return loadResult{}, fmt.Errorf("h2load %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	s, err := h2load.Parse(string(out))
	if err != nil {
		return loadResult{}, fmt.Errorf("h2load %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	if s.Protocol != "h2" && s.Protocol != "h2c" {
		return loadResult{}, fmt.Errorf("h2load %s: negotiated %q, not HTTP/2\n%s", tag, s.Protocol, out)
	}
	return loadResult{Requests: s.Requests(), DurationUS: int64(s.Seconds * 1e6), Status: s.StatusErrors(),
		Read: s.ReadErrors(), Timeout: s.Timeout}, nil
}

// h2Markdown renders the HTTP/2 targets: per scenario and procs value, Tollgate ÷ nginx CPU
// per request over the rounds (one measurement with -rounds 1) against its target.
func (r *report) h2Markdown(s *strings.Builder) {
	var rows, notes []string
	h2Pairs := filterPairs(gatewayPairs(r.rounds), isH2)
	pairs := summarisePairs(h2Pairs, r.b.rnd.all)
	for j, m := range summarisePairs(h2Pairs, true) {
		// What every round says, so that a run on a busy machine still shows its numbers,
		// apart from the figure.
		if pairs[j].used < m.rounds {
			notes = append(notes, fmt.Sprintf("- %s at %d proc(s), all %d rounds with the flagged ones (not a figure to quote): µs/req T÷N median %s (%s), Tollgate %s, nginx %s µs/req",
				m.scenario, m.procs, m.rounds, fmtRatio(m.cpu.median, m.cpu.n), fmtRange(m.cpu.min, m.cpu.max, m.cpu.n),
				fmtFloat(m.bUS.median, m.bUS.n), fmtFloat(m.aUS.median, m.aUS.n)))
		}
	}
	for _, m := range pairs {
		t := h2Targets[m.scenario]
		verdict := "met"
		if m.cpu.n == 0 {
			verdict = "no round used"
		} else if m.cpu.median > t {
			verdict = "missed"
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | ≤ %.2f | %s | %s | %s | %s | %d of %d | %s | %s | %s | %s |", m.scenario, m.procs, t,
			fmtRatio(m.cpu.median, m.cpu.n), fmtRange(m.cpu.min, m.cpu.max, m.cpu.n), fmtRange(m.cpu.q1, m.cpu.q3, m.cpu.n), fmtCI(m.cpu),
			m.used, m.rounds, fmtFloat(m.bUS.median, m.bUS.n), fmtFloat(m.aUS.median, m.aUS.n), fmtRatio(m.qps.median, m.qps.n), verdict))
	}
	if len(r.rounds) == 0 {
		for _, procs := range r.b.cores {
			for _, id := range h2Scenarios {
				t, n := r.find(id, "tollgate", procs), r.find(id, "nginx", procs)
				if t == nil || n == nil {
					continue
				}
				ratio := quotient(t.usPerReq, n.usPerReq)
				verdict := "met (one round: a quick look)"
				if !(ratio <= h2Targets[id]) {
					verdict = "missed (one round: a quick look)"
				}
				rows = append(rows, fmt.Sprintf("| %s | %d | ≤ %.2f | %.3f | - | - | - | 1 of 1 | %.2f | %.2f | %s | %s |", id, procs, h2Targets[id],
					ratio, t.usPerReq, n.usPerReq, fmtRatio(quotient(t.load.qps(), n.load.qps()), 1), verdict))
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	s.WriteString("## HTTP/2 targets\n\n")
	fmt.Fprintf(s, "h2load (nghttp2), %d connections × %d concurrent streams (-h2-conns, -h2-streams), one thread on CPU %s; its warm-up a run of its own before the window. ",
		r.b.h2.conns, r.b.h2.streams, r.b.LoadCPUs)
	if slices.ContainsFunc(rows, func(row string) bool { return strings.HasPrefix(row, "| S1h2 ") }) {
		s.WriteString("S1h2: S1's plain proxy over TLS 1.3 with ALPN h2, HTTP/1.1 to the upstream. ")
	}
	if slices.ContainsFunc(rows, func(row string) bool { return strings.HasPrefix(row, "| S1grpc ") }) {
		fmt.Fprintf(s, "S1grpc: unary grpc.health.v1.Health/Check calls over h2c, HTTP/2 to %s health server on CPU %s "+
			"(nginx: grpc_pass with keepalive %d, one per call in flight; Tollgate: upstream.protocol h2); each gateway's answer was checked SERVING by a gRPC client "+
			"before measuring, since h2load reads no trailers. ", grpcUpstreamName(r.b.h2.upstream), r.b.LoadCPUs, r.b.GRPCKeepalive)
	}
	s.WriteString("The figure is the median over the rounds used of each round's Tollgate ÷ nginx CPU µs per request (below 1: Tollgate spends less); " +
		"the target is met when that median is at most the target. h2load reports no latency percentiles.\n\n")
	s.WriteString("| scenario | procs | target T÷N | µs/req T÷N median | min–max | Q1–Q3 | 95% CI of the median | rounds used | Tollgate µs/req | nginx µs/req | QPS T÷N | target |\n")
	s.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, row := range rows {
		s.WriteString(row + "\n")
	}
	s.WriteString("\n")
	if len(notes) > 0 {
		s.WriteString("Rounds are flagged as in the interleaved rounds below: " + r.b.rnd.flagRule() + ".\n\n" + strings.Join(notes, "\n") + "\n\n")
	}
}

// filterPairs keeps the rounds of the scenarios keep takes.
func filterPairs(rs []pairRound, keep func(string) bool) []pairRound {
	var out []pairRound
	for _, r := range rs {
		if keep(r.scenario) {
			out = append(out, r)
		}
	}
	return out
}
