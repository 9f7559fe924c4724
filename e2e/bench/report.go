package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/h2load"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/soak"
	"tollgate/e2e/bench/tenantscale"
)

// report gathers a sweep's results and renders them as markdown.
type report struct {
	b      *bench
	start  time.Time
	tools  []string
	perf   []perfResult
	config *configResult
	rss    []rssResult
	hot    []hotResult // hotupdate (scale.go)
	cold   *coldResult // cold (scale.go)
	scale  *tenantscale.Result
	flow   *flowResult
	ws     []wsResult
	soak   *soak.Result
	cmp    *compareResult // -compare (compare_run.go)
	rounds []roundMeasure // the sweep's rounds, every measurement (rounds.go)
	tail   *tailReport    // the tail scenario (tail.go)
	h2load bool           // an HTTP/2 scenario ran: h2load's version goes with the tools
}

func newReport(b *bench) *report { return &report{b: b, start: time.Now()} }

func firstLine(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return argv[0] + ": " + err.Error()
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

func (r *report) describeTools() {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	r.tools = []string{
		fmt.Sprintf("%d CPUs, Linux %s, %s", runtime.NumCPU(), strings.TrimSpace(string(kernel)), runtime.Version()),
		firstLine(harness.NginxBin(), "-v"),
		firstLine("wrk", "-v"),
	}
	if r.h2load {
		r.tools = append(r.tools, h2load.Version())
	}
	if r.b.NginxForward {
		r.tools = append(r.tools, "nginx adds X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host and X-Request-Id towards the upstream and returns X-Request-Id, as Tollgate does (-nginx-forward=false: bare proxy_pass)")
	} else {
		r.tools = append(r.tools, "nginx proxies with a bare proxy_pass: no forwarding headers or request id, which Tollgate adds (-nginx-forward=false)")
	}
	if r.b.MeterOff {
		r.tools = append(r.tools, "Tollgate edges with TOLLGATE_METER=off: usage metering disabled (the cost of metering)")
	}
}

func (r *report) find(scenario, gateway string, procs int) *perfResult {
	for i := range r.perf {
		p := &r.perf[i]
		if p.scenario == scenario && p.gateway == gateway && p.procs == procs {
			return p
		}
	}
	return nil
}

func (r *report) markdown() string {
	var s strings.Builder
	fmt.Fprintf(&s, "# Tollgate bench, %s\n\n", r.start.Format("2006-01-02 15:04 MST"))
	for _, t := range r.tools {
		fmt.Fprintf(&s, "- %s\n", t)
	}
	if r.b.EdgeBin != "" {
		s.WriteString("- Tollgate edges run tollgate-edge (the edge-only binary, as the deploy files run it; -edge-binary tollgate: `tollgate edge`)\n")
	} else if r.b.Bin != "" {
		s.WriteString("- Tollgate edges run `tollgate edge`\n")
	}
	if len(r.perf) == 0 {
		s.WriteString("\n")
	} else {
		r.perfNotes(&s)
		r.h2Markdown(&s)
		r.roundsMarkdown(&s)
		s.WriteString("## Proxy scenarios\n\n")
		s.WriteString("procs = GOMAXPROCS for Tollgate, worker processes for nginx. Ratios are to nginx in the same sweep (µs/req: lower is better); ")
		s.WriteString("\"vs S1\" is the same gateway's µs/req over its S1 (the plugin tax).")
		if len(r.rounds) > 0 {
			s.WriteString(" Each row is the round with the median µs/req of its scenario and gateway among the rounds used (a real measurement, " +
				"so its figures belong together); the ratios in this table are between those rows, whereas the interleaved rounds above " +
				"give the median of each round's own ratio, the figure to quote.")
		} else if r.b.rnd.rounds == 1 && r.b.cmp.ref == "" {
			s.WriteString(" One round (-rounds 1): each figure is one measurement, which swings by up to ±15% between runs on a shared machine; a quick look, not a figure to quote.")
		}
		s.WriteString("\n\n")
		s.WriteString("| scenario | gateway | procs | QPS | p50 | p99 | CPU µs/req | busy | µs/req vs nginx | QPS vs nginx | µs/req vs S1 | RSS | non-2xx | socket errors |\n")
		s.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range r.perf {
			usN, qpsN, vsS1 := "-", "-", "-"
			if p.gateway != "nginx" {
				if n := r.find(p.scenario, "nginx", p.procs); n != nil {
					usN, qpsN = figures.Ratio(p.usPerReq, n.usPerReq), figures.Ratio(p.load.qps(), n.load.qps())
				}
			}
			if p.scenario != "S1" {
				if s1 := r.find("S1", p.gateway, p.procs); s1 != nil {
					vsS1 = figures.Ratio(p.usPerReq, s1.usPerReq)
				}
			}
			fmt.Fprintf(&s, "| %s | %s | %d | %.0f | %s | %s | %.2f | %.2f | %s | %s | %s | %s | %d | %d |\n",
				p.scenario, p.gateway, p.procs, p.load.qps(), figures.FmtUS(p.load.P50), figures.FmtUS(p.load.P99), p.usPerReq, p.busy,
				usN, qpsN, vsS1, figures.FmtKB(p.rssKB), p.load.Status, p.load.socketErrors())
		}
		s.WriteString("\n")
		r.scenarioMarkdown(&s)
		r.scaling(&s)
	}
	r.wsMarkdown(&s)
	r.flowMarkdown(&s)
	if c := r.config; c != nil {
		s.WriteString("## Config fan-out (commit to KV bucket)\n\n")
		s.WriteString("From the api's 201 reaching the client to the entry arriving at a JetStream KV watcher of the bucket ")
		s.WriteString("(\"edge\": to the edge answering 200 on the new route, polled every 1 ms).\n\n")
		s.WriteString("| changes | n | p50 | p99 | max | notes |\n|---|---:|---:|---:|---:|---|\n")
		row := func(name string, l figures.LatStats, note string) {
			if l.N == 0 {
				return
			}
			if l.Neg > 0 {
				note = strings.TrimPrefix(note+fmt.Sprintf("; %d in the bucket before the 201 arrived (counted as 0)", l.Neg), "; ")
			}
			fmt.Fprintf(&s, "| %s | %d | %s | %s | %s | %s |\n", name, l.N, figures.FmtDur(l.P50), figures.FmtDur(l.P99), figures.FmtDur(l.Max), note)
		}
		row("sequential, 201 → bucket", c.seqBucket, "")
		row("sequential, 201 → edge serves", c.seqEdge, "")
		note := fmt.Sprintf("%d clients; all 201s after %s; all in bucket after %s", c.burstWorkers, figures.FmtDur(c.burstAPI), figures.FmtDur(c.burstTotal))
		if c.burstEdgeLast > 0 {
			note += fmt.Sprintf("; edge serves the last after %s", figures.FmtDur(c.burstEdgeLast))
		}
		row(fmt.Sprintf("burst of %d, 201 → bucket", c.burstN), c.burstBucket, note)
		s.WriteString("\n")
	}
	r.rssMarkdown(&s)
	r.hotMarkdown(&s)
	r.coldMarkdown(&s)
	r.scale.Markdown(&s)
	r.soak.Markdown(&s)
	r.tailMarkdown(&s)
	r.compareMarkdown(&s)
	return s.String()
}

// scaling is the 1 → 2 core figure, projected from CPU per request: the load side
// saturates near 60k req/s on this machine, so measured QPS cannot show it.
func (r *report) scaling(s *strings.Builder) {
	if len(r.b.cores) < 2 {
		return
	}
	lo, hi := r.b.cores[0], r.b.cores[len(r.b.cores)-1]
	if lo == hi {
		return
	}
	fmt.Fprintf(s, "## Scaling, %d → %d cores (projected from CPU µs/req)\n\n", lo, hi)
	fmt.Fprintf(s, "Projected max QPS = cores × 10⁶ ÷ µs/req, i.e. what the gateway would serve with its cores saturated, "+
		"from the measured CPU per request; measured QPS cannot separate gateways here because wrk and the upstream on CPU %s "+
		"saturate first. The %d-proc µs/req is measured with the gateway sharing CPU %s with the load side. "+
		"Efficiency = µs/req at %d ÷ µs/req at %d (1.00 = linear).\n\n", r.b.LoadCPUs, hi, r.b.LoadCPUs, lo, hi)
	fmt.Fprintf(s, "| scenario | gateway | µs/req %d | µs/req %d | projected QPS %d core(s) | projected QPS %d cores | efficiency |\n", lo, hi, lo, hi)
	s.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for _, p := range r.perf {
		if p.procs != lo {
			continue
		}
		q := r.find(p.scenario, p.gateway, hi)
		if q == nil || p.usPerReq <= 0 || q.usPerReq <= 0 {
			continue
		}
		fmt.Fprintf(s, "| %s | %s | %.2f | %.2f | %.0f | %.0f | %.2f |\n", p.scenario, p.gateway, p.usPerReq, q.usPerReq,
			float64(lo)*1e6/p.usPerReq, float64(hi)*1e6/q.usPerReq, p.usPerReq/q.usPerReq)
	}
	s.WriteString("\n")
}

func (r *report) perfNotes(s *strings.Builder) {
	fmt.Fprintf(s, "- wrk -t%d -c%d, %s measured after %s warmup, with the upstream (nginx, 1 worker, `return 200 \"ok\"`) on CPU %s; "+
		"the gateway on CPU 0 (1 proc) or CPUs 0-%d; nginx proxy: upstream keepalive 64, HTTP/1.1, access_log off\n",
		r.b.threads, r.b.conns, r.b.duration, r.b.warmup, r.b.LoadCPUs, runtime.NumCPU()-1)
	fmt.Fprintf(s, "- CPU µs/req: the run time of every thread of the gateway's process group (/proc/PID/task/*/schedstat, in ns; "+
		"utime+stime from /proc/PID/stat, CLK_TCK %d, where a thread ended meanwhile) over the window ÷ requests the load generator completed; "+
		"busy = CPU seconds ÷ wall seconds\n", r.b.tick)
	s.WriteString("- every gateway holds the config of all the sweep's scenarios at once (S4r's routes live in their own tenant/virtual host)\n")
	if r.find("S9", "tollgate", r.b.cores[0]) != nil || r.find("S9", "nginx", r.b.cores[0]) != nil {
		fmt.Fprintf(s, "- S9p/S9/S9h: the bench's own closed-loop client (Go, fasthttp, %d connections, SNI tls.localhost, TLS 1.3 with X25519 only) instead of wrk, "+
			"which would send the IP it dials as SNI; so compare S9 with S9p (same client), not with S1 (wrk). S9p and S9h are measured over half the window "+
			"(at least 2 s), S9h without warm-up (its connections are new on every request; S9 before it warmed the upstream pool)\n", r.b.conns)
	}
	s.WriteString("\n")
}

// scenarioMarkdown adds what the payload, canary and TLS scenarios measure beyond the
// main table: S3's rewrite tax, S4's split, S5's throughput and memory, S9's TLS tax and
// handshakes.
func (r *report) scenarioMarkdown(s *strings.Builder) {
	gws := r.b.gateways
	var rows []string
	for _, procs := range r.b.cores {
		for _, gw := range gws {
			if x, base := r.find("S3", gw, procs), r.find("S3b", gw, procs); x != nil && base != nil {
				what := "rewrite (set, remove, rename) ÷ plain POST"
				if gw == "nginx" {
					what = "nginx proxies S3 unchanged (it has no JSON rewrite): its S3 is its plain POST again"
				}
				rows = append(rows, fmt.Sprintf("| S3 | %s | %d | %.2f µs/req vs %.2f (S3b) | %s | %s |", gw, procs, x.usPerReq, base.usPerReq,
					figures.Ratio(x.usPerReq, base.usPerReq), what))
			}
		}
		for _, gw := range gws {
			if x := r.find("S4", gw, procs); x != nil && x.split != nil {
				rows = append(rows, fmt.Sprintf("| S4 | %s | %d | main %d, canary %d (counted at the upstreams) | %.2f%% to the canary | want %d%% |",
					gw, procs, x.split.main, x.split.canary, x.split.canaryPct(), s4Weight))
			}
		}
		for _, gw := range gws {
			if x := r.find("S5", gw, procs); x != nil {
				mbs := x.load.qps() * s5Size / (1 << 20)
				rows = append(rows, fmt.Sprintf("| S5 | %s | %d | %.0f MiB/s relayed, %.1f µs/req (%.2f µs/KiB) | peak RSS %s (+%.1f MiB over the window's start) | %s |", gw, procs, mbs,
					x.usPerReq, x.usPerReq/1024, figures.FmtKB(x.rssPeakKB), float64(x.rssPeakKB-x.rssStartKB)/1024,
					strings.TrimPrefix(peerRatio(r, x, func(p *perfResult) float64 { return p.usPerReq }, "µs/req")+"; "+
						peerRatio(r, x, func(p *perfResult) float64 { return float64(p.rssPeakKB) }, "peak RSS"), "; ")))
			}
		}
		for _, gw := range gws {
			p, k, h := r.find("S9p", gw, procs), r.find("S9", gw, procs), r.find("S9h", gw, procs)
			if k != nil && p != nil {
				rows = append(rows, fmt.Sprintf("| S9 | %s | %d | TLS keep-alive %.2f µs/req vs plain %.2f (S9p) | %s | %s |", gw, procs,
					k.usPerReq, p.usPerReq, figures.Ratio(k.usPerReq, p.usPerReq), peerRatio(r, k, func(p *perfResult) float64 { return p.usPerReq }, "µs/req")))
			}
			if h != nil {
				rows = append(rows, fmt.Sprintf("| S9h | %s | %d | %.0f handshakes/s, %.1f µs CPU per handshake + request | | %s |", gw, procs,
					h.load.qps(), h.usPerReq, peerRatio(r, h, func(p *perfResult) float64 { return p.usPerReq }, "µs/handshake")))
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	s.WriteString("## S3, S4, S5, S9 in detail\n\n")
	s.WriteString("S3: Tollgate's rewrite against its own plain POST of the same body (S3b, measured over half the window); nginx's row is only the reference for proxying the body. ")
	s.WriteString("S4: requests each upstream answered in the window (nginx stub_status), whatever the gateway says. ")
	s.WriteString("S5: peak RSS sampled every 100 ms during the window (nginx: master + workers, default proxy buffering). ")
	s.WriteString("S9h: every request on a new connection with a full TLS 1.3 handshake (no resumption): µs/req there is the handshake's cost plus a request's.\n\n")
	s.WriteString("| scenario | gateway | procs | figure | ratio or memory | vs nginx, or note |\n|---|---|---:|---|---|---|\n")
	for _, row := range rows {
		s.WriteString(row + "\n")
	}
	s.WriteString("\n")
}

// peerRatio is x's figure over nginx's in the same sweep, for a Tollgate row.
func peerRatio(r *report, x *perfResult, f func(*perfResult) float64, what string) string {
	if x.gateway == "nginx" {
		return ""
	}
	n := r.find(x.scenario, "nginx", x.procs)
	if n == nil {
		return ""
	}
	return fmt.Sprintf("%s nginx's %s", figures.Ratio(f(x), f(n)), what)
}

// wsMarkdown renders S6.
func (r *report) wsMarkdown(s *strings.Builder) {
	if len(r.ws) == 0 {
		return
	}
	fmt.Fprintf(s, "## S6: WebSocket tunnels\n\n%d tunnels opened through the gateway (16 upgrades at a time) by the bench's client, "+
		"then %d messages/s (32-byte text frames, round-robin over the tunnels) echoed by the bench's upstream for %s; both on CPU %s. "+
		"RSS per tunnel = (gateway RSS with the tunnels open, 1 s after the last upgrade − before) ÷ tunnels; CPU per upgrade = gateway CPU while opening ÷ tunnels. "+
		"Then the tunnels stay open and idle for %s (*settling*: the gateway's CPU and RSS over and after that wait, one-off work after the burst such as the edge's memory return), "+
		"and CPU per message = gateway CPU during the trickle that follows ÷ messages echoed (a frame each way). nginx: proxy_http_version 1.1 with Upgrade/Connection headers. "+
		"Gateway CPU is its threads' run time in ns (in clock ticks, %d/s, ±1 tick, only when a thread ended meanwhile).\n\n",
		r.b.wsConns, r.b.wsRate, r.b.duration, r.b.LoadCPUs, r.b.wsSettle, r.b.tick)
	s.WriteString("| gateway | procs | round | tunnels | opened in | RSS before | RSS open | KiB/tunnel | CPU µs/upgrade | settling: CPU ms, RSS after | messages | CPU µs/message | p50 | p99 | lost | closed by gateway | KiB/tunnel vs nginx | µs/message vs nginx |\n")
	s.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	perMsg, perTunnel := map[int][]float64{}, map[int][]float64{} // by procs
	var keys []int
	for _, w := range r.ws {
		memN, cpuN := "-", "-"
		if w.gateway != "nginx" {
			for _, n := range r.ws {
				if n.gateway == "nginx" && n.procs == w.procs && n.round == w.round {
					memN, cpuN = figures.Ratio(w.kibPerConn(), n.kibPerConn()), figures.Ratio(w.usPerMsg, n.usPerMsg)
					k := w.procs
					if !slices.Contains(keys, k) {
						keys = append(keys, k)
					}
					if n.usPerMsg > 0 {
						perMsg[k] = append(perMsg[k], w.usPerMsg/n.usPerMsg)
					}
					if n.kibPerConn() > 0 {
						perTunnel[k] = append(perTunnel[k], w.kibPerConn()/n.kibPerConn())
					}
				}
			}
		}
		fmt.Fprintf(s, "| %s | %d | %d | %d | %.2fs | %s | %s | %.1f | %.1f | %.0f, %s | %d | %.2f | %s | %s | %d | %d | %s | %s |\n",
			w.gateway, w.procs, w.round, w.client.Opened, w.client.OpenSeconds, figures.FmtKB(w.rss0), figures.FmtKB(w.rss1), w.kibPerConn(), w.usPerUpgrade,
			w.settleCPUSec*1000, figures.FmtKB(w.rssSettled), w.client.Received, w.usPerMsg, figures.FmtUS(w.client.P50), figures.FmtUS(w.client.P99), w.client.Sent-w.client.Received, w.client.ClosedByTheGateway, memN, cpuN)
	}
	s.WriteString("\n")
	for _, k := range keys {
		fmt.Fprintf(s, "- Tollgate ÷ nginx at %d proc(s), median of %d rounds (min–max; from 6 rounds on, CI: the median's 95%% confidence interval): CPU per message %s, RSS per tunnel %s\n",
			k, len(perMsg[k]), fmtRatios(perMsg[k]), fmtRatios(perTunnel[k]))
	}
	if len(keys) > 0 {
		s.WriteString("\n")
	}
}
