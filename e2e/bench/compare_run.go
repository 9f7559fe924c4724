package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"tollgate/e2e/bench/cpustat"
	"tollgate/e2e/bench/harness"
)

// compareSide is one of the two builds -compare measures, with its own stack (database,
// api, NATS prefix) so a revision whose migrations or config differ runs as it would.
type compareSide struct {
	name    string // "A" or "B"
	label   string // what was built
	Bin     string
	env     []string // -compare-env-a or -b: this side's own edge settings
	st      *harness.Stack
	scs     []*perfScenario // the same scenarios, configured through this side's api
	tlsAddr string
}

// h2Addr is the host:port h2load drives sc at: the TLS listener (ALPN h2) for S1h2, the
// plain one (h2c with prior knowledge) for S1grpc.
func (s *compareSide) h2Addr(sc *perfScenario) string {
	if sc.tls {
		return s.tlsAddr
	}
	return s.st.EdgeAddr
}

// compareResult is what -compare measured.
type compareResult struct {
	set        roundSettings
	a, b       string // the sides' labels
	aSum, bSum string // their binaries' sha256
	rounds     []pairRound
}

// compareSweep builds both sides and measures them round by round: in each round every
// scenario is measured on A and on B back to back (nginx after them when asked for), the
// order of A and B alternating between rounds so that neither always runs first.
func (b *bench) compareSweep(ctx context.Context, ids []string) (*report, error) {
	rep := newReport(b)
	if err := harness.EnsureTools(); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(ids, isH2) {
		if err := harness.EnsureH2load(); err != nil {
			return nil, err
		}
		rep.h2load = true
	}
	rep.describeTools()
	if err := checkServices(ctx, b); err != nil {
		return nil, err
	}
	loadCPUs, err := cpustat.ParseList(b.LoadCPUs)
	if err != nil {
		return nil, fmt.Errorf("-load-cpus: %w", err)
	}
	A, B := &compareSide{name: "A"}, &compareSide{name: "B"}
	// Both names are resolved before anything is built: HEAD may move meanwhile (others
	// commit in this checkout), and HEAD against HEAD must stay one commit.
	commitA, err := resolveCommit(ctx, b.root, b.cmp.ref)
	if err != nil {
		return nil, err
	}
	commitB := ""
	if b.cmp.refB != "" {
		if commitB, err = resolveCommit(ctx, b.root, b.cmp.refB); err != nil {
			return nil, err
		}
	}
	if A.Bin, A.label, err = b.buildRef(ctx, b.cmp.ref, commitA, "tollgate-a"); err != nil {
		return nil, err
	}
	switch {
	case commitB == commitA:
		// The same commit twice (the A/A run) is built once: both sides run that binary.
		B.Bin, B.label = A.Bin, A.label
	case commitB != "":
		if B.Bin, B.label, err = b.buildRef(ctx, b.cmp.refB, commitB, "tollgate-b"); err != nil {
			return nil, err
		}
	case b.Bin != "":
		B.Bin, B.label = b.Bin, "-bin "+b.Bin
	default:
		B.Bin, B.label = filepath.Join(b.Dir, "tollgate-b"), describeWorkTree(ctx, b.root)
		fmt.Fprintf(os.Stderr, "bench: building B, the %s\n", B.label)
		if err := goBuild(ctx, b.root, B.Bin); err != nil {
			return nil, fmt.Errorf("building the working tree: %w", err)
		}
	}
	A.env, B.env = envList(b.cmp.envA), envList(b.cmp.envB)
	for _, s := range []*compareSide{A, B} {
		if len(s.env) > 0 {
			s.label += ", edge with " + strings.Join(s.env, ",")
		}
	}
	res := &compareResult{set: b.rnd, a: A.label, b: B.label, aSum: fileSHA256(A.Bin), bSum: fileSHA256(B.Bin)}
	rep.cmp = res
	if err := b.lockMachine(ctx); err != nil {
		return rep, err
	}

	upPort, err := b.upstream(ctx)
	if err != nil {
		return rep, err
	}
	upURL := fmt.Sprintf("http://127.0.0.1:%d", upPort)
	if err := b.scenarioServices(ctx, ids); err != nil {
		return rep, err
	}
	sides := []*compareSide{A, B}
	for _, s := range sides {
		b.Bin = s.Bin // newStack takes its binary from here
		// The api is idle while measuring; it stays off the gateway's CPU.
		if s.st, err = b.NewStack(ctx, "cmp"+strings.ToLower(s.name), b.LoadCPUs); err != nil {
			return rep, fmt.Errorf("%s: %w", s.name, err)
		}
		s.scs = buildPerfScenarios(b, ids)
		if err := b.configureTollgate(ctx, s.st, upURL, s.scs); err != nil {
			return rep, fmt.Errorf("%s: %w", s.name, err)
		}
	}

	withTLS := slices.Contains(ids, "S9") || slices.Contains(ids, "S1h2") // the edge's one TLS listener serves both
	for _, procs := range b.cores {
		cpus := gatewayCPUs(procs)
		gwCPUs, err := cpustat.ParseList(cpus)
		if err != nil {
			return rep, err
		}
		for _, s := range sides {
			extra := slices.Clone(s.env)
			if withTLS {
				port, err := harness.FreePort()
				if err != nil {
					return rep, err
				}
				s.tlsAddr = fmt.Sprintf("127.0.0.1:%d", port)
				extra = append(extra, "TOLLGATE_EDGE_TLS_ADDR="+s.tlsAddr, "TOLLGATE_EDGE_TLS_CERT="+b.TLSCert, "TOLLGATE_EDGE_TLS_KEY="+b.TLSKey)
			}
			if err := s.st.StartEdge(ctx, procs, cpus, extra...); err != nil {
				return rep, fmt.Errorf("%s: %w", s.name, err)
			}
			for _, sc := range s.scs {
				if sc.h2 {
					// Its own check, over HTTP/2: a gRPC route answers no HTTP/1.1 GET.
					if err := b.verifyH2(ctx, "tollgate", s.st.Edge, sc, s.h2Addr(sc)); err != nil {
						return rep, fmt.Errorf("%s %s: %w", s.name, sc.id, err)
					}
					continue
				}
				base := "http://" + s.st.EdgeAddr
				if err := b.WaitServed(ctx, s.st.Edge, base, sc.host, sc.paths, sc.headers); err != nil {
					return rep, fmt.Errorf("%s %s: %w", s.name, sc.id, err)
				}
				if err := b.verify(ctx, "tollgate", sc, base); err != nil {
					return rep, fmt.Errorf("%s %s: %w", s.name, sc.id, err)
				}
			}
		}
		var ngx *harness.Proc
		var ngxBase, ngxTLS string
		if b.has("nginx") {
			port, err := harness.FreePort()
			if err != nil {
				return rep, err
			}
			tlsPort := 0
			if withTLS {
				if tlsPort, err = harness.FreePort(); err != nil {
					return rep, err
				}
				ngxTLS = fmt.Sprintf("127.0.0.1:%d", tlsPort)
			}
			// A's scenarios carry the key and token nginx checks; B's differ only in those.
			if ngx, err = b.StartProxy(ctx, port, tlsPort, upPort, procs, cpus, proxySites(A.scs)); err != nil {
				return rep, err
			}
			ngxBase = fmt.Sprintf("http://127.0.0.1:%d", port)
			for _, sc := range A.scs {
				if err := b.WaitServed(ctx, ngx, ngxBase, sc.host, sc.paths, sc.headers); err != nil {
					return rep, fmt.Errorf("nginx %s: %w", sc.id, err)
				}
			}
		}

		for n := 1; n <= b.rnd.rounds; n++ {
			order := []*compareSide{A, B}
			if n%2 == 0 {
				order = []*compareSide{B, A}
			}
			for i := range A.scs {
				rd := pairRound{scenario: A.scs[i].id, procs: procs, n: n, first: order[0].name}
				for _, s := range order {
					sc := s.scs[i]
					addr := "http://" + s.st.EdgeAddr
					switch {
					case sc.h2:
						addr = s.h2Addr(sc)
					case sc.tls:
						addr = s.tlsAddr
					}
					b.perfAdmin = s.st.EdgeAdmin
					r, why, err := b.measureRound(ctx, "tollgate", "tollgate-"+strings.ToLower(s.name), procs, sc, s.st.Edge, addr, gwCPUs, loadCPUs)
					if err != nil {
						return rep, fmt.Errorf("%s: %w", s.name, err)
					}
					if s == A {
						rd.a, rd.aWhy = r, why
					} else {
						rd.b, rd.bWhy = r, why
					}
				}
				if ngx != nil {
					addr := ngxBase
					if A.scs[i].tls {
						addr = ngxTLS
					}
					r, _, err := b.measureRound(ctx, "nginx", "nginx", procs, A.scs[i], ngx, addr, gwCPUs, loadCPUs)
					if err != nil {
						return rep, err
					}
					rd.nginx = &r
				}
				res.rounds = append(res.rounds, rd)
				flag := ""
				if rd.flagged() {
					flag = "  FLAGGED: " + strings.TrimPrefix(strings.Join([]string{sideWhy("A", rd.aWhy), sideWhy("B", rd.bWhy)}, ""), "; ")
				}
				fmt.Fprintf(os.Stderr, "bench: compare %-4s procs=%d round %d/%d (%s first)  A %6.2f µs/req %7.0f req/s busy %.2f | B %6.2f µs/req %7.0f req/s busy %.2f | B÷A µs/req %.3f, QPS %.3f%s\n",
					rd.scenario, procs, n, b.rnd.rounds, rd.first, rd.a.usPerReq, rd.a.load.qps(), rd.a.busy,
					rd.b.usPerReq, rd.b.load.qps(), rd.b.busy, rd.cpuRatio(), rd.qpsRatio(), flag)
			}
		}
		for _, s := range sides {
			s.st.StopEdge()
		}
		if ngx != nil {
			ngx.Stop()
		}
	}
	return rep, nil
}

// measureRound measures one scenario on one gateway for -compare's rounds, and why the
// measurement is flagged (empty: it is not); S6 is measured by measureWS and stated per
// message (wsResult.asPerf), under name (its client's log: ws-NAME-PROCS.log).
func (b *bench) measureRound(ctx context.Context, gw, name string, procs int, sc *perfScenario, p *harness.Proc, addr string, gwCPUs, loadCPUs []int) (perfResult, string, error) {
	if sc.ws {
		w, err := b.measureWS(ctx, name, procs, sc, p, addr)
		if err != nil {
			return perfResult{}, "", err
		}
		r, why := w.asPerf(b.wsRate, gwCPUs, loadCPUs)
		return r, why, nil
	}
	r, err := b.measure(ctx, gw, procs, sc, p, addr)
	if err != nil {
		return r, "", err
	}
	return r, b.rnd.flag(r, gwCPUs, loadCPUs), nil
}

func sideWhy(side, why string) string {
	if why == "" {
		return ""
	}
	return "; " + side + ": " + why
}

// buildRef builds commit, which ref named, into the run's directory and labels it.
func (b *bench) buildRef(ctx context.Context, ref, commit, name string) (bin, label string, err error) {
	fmt.Fprintf(os.Stderr, "bench: building %s (%s) from git (git archive into %s, go build -trimpath)\n", ref, commit[:12], b.Dir)
	if bin, _, err = buildRevision(ctx, b.root, commit, b.Dir, name); err != nil {
		return "", "", err
	}
	return bin, fmt.Sprintf("%s (%s)", ref, commit[:12]), nil
}

// compareMarkdown renders -compare's result: a summary row per scenario and procs, then
// every round.
func (r *report) compareMarkdown(s *strings.Builder) {
	c := r.cmp
	if c == nil {
		return
	}
	b := r.b
	s.WriteString("\n## Compare: B ÷ A, measured in turns\n\n")
	fmt.Fprintf(s, "- A: %s, binary sha256 %.16s…\n", c.a, c.aSum)
	fmt.Fprintf(s, "- B: %s, binary sha256 %.16s…", c.b, c.bSum)
	sameEnv := b.cmp.envA == b.cmp.envB
	switch {
	case c.aSum == c.bSum && sameEnv:
		s.WriteString(" (the same binary: every difference below is the machine's noise)")
	case c.aSum == c.bSum:
		s.WriteString(" (the same binary: a difference below is its edge's settings' or the machine's noise)")
	}
	s.WriteString("\n")
	settings := "the same settings"
	if !sameEnv {
		settings = "the same settings but for the edge's above"
	}
	fmt.Fprintf(s, "- %d rounds per scenario and procs value; in each, the scenario is measured on A and on B back to back "+
		"(A first in odd rounds, B first in even ones), each build on its own stack (database, api, NATS prefix) with "+settings+", "+
		"the edge pinned to CPUs 0 to procs−1, wrk -t%d -c%d and the upstream on CPU %s, %s warm-up and a %s window per measurement\n",
		c.set.rounds, b.threads, b.conns, b.LoadCPUs, b.warmup, b.duration)
	if slices.ContainsFunc(c.rounds, func(r pairRound) bool { return isH2(r.scenario) }) {
		fmt.Fprintf(s, "- S1h2 and S1grpc are driven by h2load instead of wrk, as in the sweep: %d connections × %d concurrent streams, one thread on CPU %s "+
			"(S1h2 over TLS 1.3 with ALPN h2; S1grpc over h2c to %s health server, each side's answer checked SERVING before measuring)\n",
			b.h2.conns, b.h2.streams, b.LoadCPUs, grpcUpstreamName(b.h2.upstream))
	}
	s.WriteString("- per round: B ÷ A of the gateway's CPU µs/req (below 1: B spends less per request) and of QPS; " +
		"the table gives their median over the rounds used, the extremes (min–max) and the interquartile range (Q1–Q3)\n")
	s.WriteString(ciRule)
	s.WriteString("- a round is flagged when either build's measurement was disturbed: " + c.set.flagRule() + "\n")
	if slices.ContainsFunc(c.rounds, func(r pairRound) bool { return r.scenario == "S6" }) {
		fmt.Fprintf(s, "- S6 is measured as in the sweep (%d tunnels opened, %s idle, then %d messages/s for the window, by the bench's WebSocket client instead of wrk): "+
			"its µs/req is the gateway's CPU µs per message echoed, its QPS messages per second; its rounds are flagged when messages were lost, "+
			"tunnels closed, the client sent under 95%% of the rate, or other processes ran at least 5%% of the time on the gateway's CPUs (the gateway is meant to be mostly idle there, so its own busy is no test)\n",
			b.wsConns, b.wsSettle, b.wsRate)
	}
	s.WriteString("\n")
	withNginx := slices.ContainsFunc(c.rounds, func(r pairRound) bool { return r.nginx != nil })
	head := []string{"A µs/req", "B µs/req"}
	if withNginx {
		head = append(head, "A÷nginx", "B÷nginx")
	}
	pairTable(s, c.rounds, c.set.all, "B÷A", head, func(m pairSummary) []string {
		cols := []string{fmtFloat(m.aUS.median, m.aUS.n), fmtFloat(m.bUS.median, m.bUS.n)}
		if withNginx {
			cols = append(cols, fmtRatio(m.aNginx.median, m.aNginx.n), fmtRatio(m.bNginx.median, m.bNginx.n))
		}
		return cols
	})
	s.WriteString("\n### Rounds\n\n")
	s.WriteString("busy: the gateway's CPU seconds ÷ wall seconds; load CPU: the share of time the load side's CPUs were busy (every process, /proc/stat).\n\n")
	s.WriteString("| scenario | procs | round | first | A µs/req | B µs/req | µs/req B÷A | A QPS | B QPS | QPS B÷A | A busy | B busy | load CPU A/B |")
	if withNginx {
		s.WriteString(" nginx µs/req |")
	}
	s.WriteString(" flag |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	if withNginx {
		s.WriteString("---:|")
	}
	s.WriteString("---|\n")
	loadCPUs, _ := cpustat.ParseList(b.LoadCPUs)
	for _, rd := range c.rounds {
		flag := ""
		if rd.flagged() {
			flag = strings.TrimPrefix(sideWhy("A", rd.aWhy)+sideWhy("B", rd.bWhy), "; ")
		}
		fmt.Fprintf(s, "| %s | %d | %d | %s | %.2f | %.2f | %s | %.0f | %.0f | %s | %.2f | %.2f | %s/%s |",
			rd.scenario, rd.procs, rd.n, rd.first, rd.a.usPerReq, rd.b.usPerReq, fmtRatio(rd.cpuRatio(), 1),
			rd.a.load.qps(), rd.b.load.qps(), fmtRatio(rd.qpsRatio(), 1), rd.a.busy, rd.b.busy,
			fmtPct(cpustat.BusyShare(rd.a.sys0, rd.a.sys1, loadCPUs)), fmtPct(cpustat.BusyShare(rd.b.sys0, rd.b.sys1, loadCPUs)))
		if withNginx {
			if rd.nginx != nil {
				fmt.Fprintf(s, " %.2f |", rd.nginx.usPerReq)
			} else {
				s.WriteString(" - |")
			}
		}
		fmt.Fprintf(s, " %s |\n", flag)
	}
	s.WriteString("\n")
}

func fmtRatio(x float64, n int) string {
	if n == 0 || math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.3f", x)
}

func fmtRange(lo, hi float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f–%.3f", lo, hi)
}

func fmtFloat(x float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func fmtPct(x float64) string {
	if x < 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}
