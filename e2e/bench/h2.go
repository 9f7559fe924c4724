package main

// HTTP/2 at the client side, beside nginx, driven by h2load (Debian's nghttp2-client):
//
//   - S1h2: S1's plain proxy over TLS 1.3 with ALPN h2, -h2-conns connections of
//     -h2-streams concurrent streams each. HTTP/1.1 to the upstream on both gateways.
//   - S1grpc: unary gRPC calls (grpc.health.v1.Health/Check with an empty request) over
//     h2c with prior knowledge, passed on over HTTP/2 to a grpc-go health server the bench
//     runs itself: nginx with grpc_pass, Tollgate with a route whose upstream.protocol is
//     "h2". h2load sends the call as a POST of the framed request; it reads no trailers,
//     so a gRPC client checks once per gateway, before measuring, that the answer is
//     SERVING and not a gRPC error carried in a 200.
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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"tollgate/e2e/bench/harness"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// h2Scenarios are the scenarios h2load drives; they run in the sweep only (not -compare).
var h2Scenarios = []string{"S1h2", "S1grpc"}

// h2Targets are the targets the HTTP/2 scenarios are held to: Tollgate ÷ nginx CPU per
// request at most this (the report says whether the median of the rounds meets it).
var h2Targets = map[string]float64{"S1h2": 1.0, "S1grpc": 1.1}

const (
	grpcCheckPath = "/grpc.health.v1.Health/Check"
	grpcRoute     = "/grpc.health.v1.Health"
)

// h2Settings are h2load's flags.
type h2Settings struct {
	conns   int
	streams int
}

func (h *h2Settings) register(fs *flag.FlagSet) {
	fs.IntVar(&h.conns, "h2-conns", 16, "S1h2, S1grpc: h2load's connections (-c)")
	fs.IntVar(&h.streams, "h2-streams", 8, "S1h2, S1grpc: concurrent streams per connection (h2load -m)")
}

func (h *h2Settings) check() error {
	if h.conns < 1 || h.streams < 1 {
		return fmt.Errorf("-h2-conns and -h2-streams must be at least 1")
	}
	return nil
}

func isH2(s string) bool { return slices.Contains(h2Scenarios, s) }

// h2PerfScenario is S1h2 or S1grpc as a proxy scenario.
func h2PerfScenario(id string) *perfScenario {
	if id == "S1grpc" {
		return &perfScenario{id: id, desc: "gRPC unary Health/Check over h2c, HTTP/2 to a grpc-go upstream (h2load)",
			host: "grpc.localhost", hit: grpcCheckPath, paths: []string{grpcRoute}, loader: "h2load", h2: true, grpc: true}
	}
	return &perfScenario{id: id, desc: "S1 over TLS 1.3 with ALPN h2 (h2load)",
		host: "bench.localhost", hit: "/h2", paths: []string{"/h2"}, loader: "h2load", h2: true, tls: true}
}

// configureH2Scenario creates S1h2's plain route or S1grpc's route to the gRPC upstream.
func (b *bench) configureH2Scenario(ctx context.Context, s *harness.Stack, slug, upURL string, sc *perfScenario) error {
	if !sc.grpc {
		return s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("h2", sc.hit, upURL, "none", false), nil)
	}
	r := harness.RouteBody("grpc-health", grpcRoute, fmt.Sprintf("http://127.0.0.1:%d", b.GRPCPort), "none", false)
	r["upstream"].(map[string]any)["protocol"] = "h2"
	if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil); err != nil {
		return fmt.Errorf("S1grpc needs a route's upstream.protocol \"h2\" (HTTP/2 to the upstream, which gRPC requires); this build refused it: %w", err)
	}
	return nil
}

// startGRPCUpstream starts the gRPC health server (the bench binary itself, runGRPCHealth)
// pinned to the load CPUs, as the other upstreams are.
func (b *bench) startGRPCUpstream(ctx context.Context) error {
	if b.GRPCPort != 0 {
		return nil
	}
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := harness.StartProc("gRPC health upstream", filepath.Join(b.Dir, "grpc-upstream.log"), b.LoadCPUs,
		append(os.Environ(), "TOLLGATE_BENCH_GRPC="+addr), self)
	if err != nil {
		return err
	}
	b.Clean.Add(p.Stop)
	if err := harness.WaitFor(ctx, "gRPC health upstream on "+addr, 10*time.Second, 50*time.Millisecond, p, func() error {
		return grpcHealthCheck(ctx, addr, "")
	}); err != nil {
		return err
	}
	b.GRPCPort = port
	return nil
}

// runGRPCHealth is the gRPC upstream's main: grpc-go's health service, whose overall
// status (service "", what the empty request asks for) is SERVING, until killed.
func runGRPCHealth(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// grpcHealthCheck calls Health/Check at addr over h2c, with authority as :authority
// (empty: addr), and fails unless the answer is SERVING.
func grpcHealthCheck(ctx context.Context, addr, authority string) error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if authority != "" {
		opts = append(opts, grpc.WithAuthority(authority))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("Health/Check: %s", resp.GetStatus())
	}
	return nil
}

// verifyH2 checks once per gateway, before measuring, that the scenario is what it claims:
// S1h2 answers 200 over HTTP/2 negotiated by ALPN, S1grpc answers a gRPC SERVING (polled:
// the gRPC route is not covered by WaitServed's HTTP/1.1 GETs). addr is host:port.
func (b *bench) verifyH2(ctx context.Context, gw string, p *harness.Proc, sc *perfScenario, addr string) error {
	if sc.grpc {
		return harness.WaitFor(ctx, gw+" to answer gRPC Health/Check on "+addr, b.ReadyTimeout, 100*time.Millisecond, p, func() error {
			return grpcHealthCheck(ctx, addr, sc.host)
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

// grpcEmptyRequest is an empty HealthCheckRequest in gRPC's length-prefixed framing: not
// compressed, 0 bytes of message.
var grpcEmptyRequest = []byte{0, 0, 0, 0, 0}

// h2loadArgs is the h2load command line of one run of sc against addr (host:port) for d,
// after taskset. The URL names the scenario's host, so SNI and :authority carry it as a
// browser's would, and --connect-to sends it to addr. One thread: h2load shares the load
// CPU with the upstream, and one event loop does not contend with itself.
func h2loadArgs(sc *perfScenario, addr string, set h2Settings, d time.Duration, body string) []string {
	scheme := "http"
	if sc.tls {
		scheme = "https"
	}
	_, port, _ := net.SplitHostPort(addr)
	argv := []string{"h2load", "-t", "1", "-c", strconv.Itoa(set.conns), "-m", strconv.Itoa(set.streams),
		"-D", fmt.Sprintf("%dms", d.Milliseconds()), "--connect-to", addr}
	if sc.grpc {
		argv = append(argv, "-H", "content-type: application/grpc", "-H", "te: trailers", "-d", body)
	}
	return append(argv, fmt.Sprintf("%s://%s:%s%s", scheme, sc.host, port, sc.hit))
}

// runH2load runs h2load on the load CPUs for d and returns its summary in wrk's shape.
func (b *bench) runH2load(ctx context.Context, sc *perfScenario, addr string, d time.Duration, tag string) (loadResult, error) {
	body := ""
	if sc.grpc {
		body = filepath.Join(b.Dir, "grpc-health-request.bin")
		if err := os.WriteFile(body, grpcEmptyRequest, 0o644); err != nil {
			return loadResult{}, err
		}
	}
	argv := append([]string{"taskset", "-c", b.LoadCPUs}, h2loadArgs(sc, addr, b.h2, d, body)...)
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
	s, err := parseH2load(string(out))
	if err != nil {
		return loadResult{}, fmt.Errorf("h2load %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	if s.protocol != "h2" && s.protocol != "h2c" {
		return loadResult{}, fmt.Errorf("h2load %s: negotiated %q, not HTTP/2\n%s", tag, s.protocol, out)
	}
	return s.loadResult(), nil
}

// h2loadSummary is what the bench reads of h2load's report.
type h2loadSummary struct {
	protocol                             string  // "Application protocol:", h2 or h2c
	seconds                              float64 // "finished in": the measured time
	reqPerSec                            float64
	total, done, succeeded, failed       int64 // failed: every stream not succeeded, HTTP errors included
	errored, timeout                     int64 // the failed ones without an HTTP status: reset, connection lost, timed out
	status2xx, status3xx, status4xx, st5 int64
	meanUS                               float64 // "time for request" mean
}

// loadResult is the summary in wrk's shape, so that the report treats both alike. h2load
// counts as done the streams it finished, as succeeded those answered 2xx or 3xx, as
// failed the rest, and as errored the failed ones without an answer (reset, connection
// lost, timed out): so every answered stream is a request, the failed ones with an answer
// are status errors, and the errored ones read errors or timeouts. Its "status codes" line
// is not used for the count: it includes answers whose streams the end of the window cut
// off. h2load gives no percentiles: P50 and P99 stay 0 (shown as "-").
func (s h2loadSummary) loadResult() loadResult {
	return loadResult{
		Requests:   s.done - s.errored,
		DurationUS: int64(s.seconds * 1e6),
		Status:     s.failed - s.errored,
		Read:       max(0, s.errored-s.timeout),
		Timeout:    s.timeout,
	}
}

var (
	h2FinishedRE = regexp.MustCompile(`(?m)^finished in ([0-9.]+)(us|ms|s|m|h), ([0-9.]+) req/s`)
	h2RequestsRE = regexp.MustCompile(`(?m)^requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2StatusRE   = regexp.MustCompile(`(?m)^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	h2ProtoRE    = regexp.MustCompile(`(?m)^Application protocol: (\S+)`)
	h2TimeRE     = regexp.MustCompile(`(?m)^time for request:\s+(\S+)\s+(\S+)\s+(\S+)`)
)

// parseH2load reads h2load's human report (it has no machine-readable one). Lines it does
// not know are skipped, so that a version adding lines still parses; one of the lines it
// needs missing is an error, not a zero.
func parseH2load(out string) (h2loadSummary, error) {
	var s h2loadSummary
	m := h2FinishedRE.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no \"finished in …, … req/s\" line")
	}
	d, err := time.ParseDuration(m[1] + m[2])
	if err != nil {
		return s, fmt.Errorf("finished in %s%s: %v", m[1], m[2], err)
	}
	s.seconds = d.Seconds()
	s.reqPerSec, _ = strconv.ParseFloat(m[3], 64)
	m = h2RequestsRE.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no \"requests: … succeeded, … failed\" line")
	}
	ints := func(m []string, dst ...*int64) {
		for i, p := range dst {
			*p, _ = strconv.ParseInt(m[i+1], 10, 64)
		}
	}
	ints(m, &s.total, &s.done, &s.succeeded, &s.failed, &s.errored, &s.timeout)
	m = h2StatusRE.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no \"status codes:\" line")
	}
	ints(m, &s.status2xx, &s.status3xx, &s.status4xx, &s.st5)
	if m := h2ProtoRE.FindStringSubmatch(out); m != nil {
		s.protocol = m[1]
	}
	if m := h2TimeRE.FindStringSubmatch(out); m != nil {
		if d, err := time.ParseDuration(m[3]); err == nil { // "123us", "1.23ms", "2.50s"
			s.meanUS = float64(d) / float64(time.Microsecond)
		}
	}
	return s, nil
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
		fmt.Fprintf(s, "S1grpc: unary grpc.health.v1.Health/Check calls over h2c, HTTP/2 to a grpc-go health server on CPU %s "+
			"(nginx: grpc_pass with keepalive 64; Tollgate: upstream.protocol h2); each gateway's answer was checked SERVING by a gRPC client "+
			"before measuring, since h2load reads no trailers. ", r.b.LoadCPUs)
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

// h2loadVersion is h2load's version line for the report's tools.
func h2loadVersion() string {
	out, err := exec.Command("h2load", "--version").CombinedOutput()
	if err != nil {
		return "h2load: " + err.Error()
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
