package main

import (
	"strings"
	"testing"
	"time"

	"tollgate/e2e/bench/cpustat"
	"tollgate/e2e/bench/harness"
	"tollgate/e2e/bench/tailload"
	"tollgate/e2e/bench/wsload"
)

// S6's rounds give a per-round ratio to nginx, and the settling CPU is shown apart.
func TestWSMarkdownRounds(t *testing.T) {
	b := &bench{threads: 2, conns: 64, Env: &harness.Env{LoadCPUs: "1"}, cores: []int{1}, wsConns: 10, wsRate: 10,
		wsSettle: 12 * time.Second, duration: 5 * time.Second, tick: 100}
	r := newReport(b)
	ws := func(gw string, round int, usPerMsg float64, rss1 int64, settle float64) wsResult {
		return wsResult{gateway: gw, procs: 1, round: round, usPerMsg: usPerMsg, rss0: 1000, rss1: rss1,
			rssSettled: rss1, settleCPUSec: settle, client: wsload.Result{Opened: 10, Sent: 50, Received: 50}}
	}
	r.ws = []wsResult{
		ws("nginx", 1, 40, 1100, 0), ws("tollgate", 1, 60, 1200, 0.07),
		ws("tollgate", 2, 50, 1200, 0.01), ws("nginx", 2, 50, 1100, 0),
		ws("nginx", 3, 50, 1100, 0), ws("tollgate", 3, 100, 1200, 0.02),
	}
	var s strings.Builder
	r.wsMarkdown(&s)
	md := s.String()
	reportHas(t, md,
		"idle for 12s (*settling*",
		"| tollgate | 1 | 1 | 10 |",
		"| 70, 1.2 MiB |",
		// rounds: 60/40 = 1.5, 50/50 = 1, 100/50 = 2; RSS per tunnel 20/10 = 2 in each.
		"Tollgate ÷ nginx at 1 proc(s), median of 3 rounds (min–max; from 6 rounds on, CI: the median's 95% confidence interval): "+
			"CPU per message 1.50× (1.00–2.00), RSS per tunnel 2.00× (2.00–2.00)",
	)
}

// From 6 rounds on, a median of per-round ratios comes with its 95% confidence interval:
// the 1st and 6th of 6 sorted ratios (medianCI).
func TestFmtRatiosCI(t *testing.T) {
	if got, want := fmtRatios([]float64{1.2, 1.0, 1.1}), "1.10× (1.00–1.20)"; got != want {
		t.Errorf("3 rounds: %q, want %q", got, want)
	}
	if got, want := fmtRatios([]float64{1.3, 1.0, 1.1, 1.2, 1.4, 1.5}), "1.25× (1.00–1.50; CI 1.00–1.50)"; got != want {
		t.Errorf("6 rounds: %q, want %q", got, want)
	}
}

// In -compare's rounds an S6 measurement counts messages as requests, and is flagged when
// the trickle did not run as asked.
func TestWSAsPerf(t *testing.T) {
	// CPU 0 (the gateway's) 18% busy over the trickle, 12% running processes, 10% of it
	// the gateway; the rest softirqs.
	w := wsResult{gateway: "tollgate-a", procs: 1, usPerMsg: 50, trickleCPUSec: 0.5,
		client: wsload.Result{Sent: 10000, Received: 10000, TrickleSeconds: 5},
		sys0:   cpustat.Times{0: {100, 1000, 80}, 1: {100, 1000, 100}}, sys1: cpustat.Times{0: {190, 1500, 140}, 1: {600, 1500, 600}}}
	gw, load := []int{0}, []int{1}
	r, why := w.asPerf(2000, gw, load)
	if why != "" || r.usPerReq != 50 || r.load.qps() != 2000 || r.busy != 0.1 {
		t.Errorf("a full trickle: %+v, flagged %q", r, why)
	}
	lost := w
	lost.client.Received = 9990
	if _, why := lost.asPerf(2000, gw, load); !strings.Contains(why, "10 of 10000 messages lost") {
		t.Errorf("lost messages: flagged %q", why)
	}
	slow := w
	slow.client.Sent, slow.client.Received = 9000, 9000
	if _, why := slow.asPerf(2000, gw, load); !strings.Contains(why, "load side fell behind") {
		t.Errorf("a slow client: flagged %q", why)
	}
	// Others ran 20% of the time on CPU 0: processes 30%, 10% the gateway.
	busy := w
	busy.sys1 = cpustat.Times{0: {280, 1500, 230}, 1: {600, 1500, 600}}
	if _, why := busy.asPerf(2000, gw, load); why != "other processes ran 20% of the time on CPU 0" {
		t.Errorf("a busy machine: flagged %q", why)
	}
}

// At the same rate, the tail's busy ratio is the ratio of CPU per request.
func TestTailMarkdownBusyRatio(t *testing.T) {
	b := &bench{threads: 2, conns: 64, Env: &harness.Env{LoadCPUs: "1"}, cores: []int{1}, duration: 5 * time.Second, warmup: 2 * time.Second}
	r := newReport(b)
	res := tailload.Result{P50: 100, P99: 1000, P999: 2000, Max: 3000}
	r.tail = &tailReport{procs: 1, maxQPS: 1000, maxRuns: []float64{1000}, gateways: []string{"nginx", "tollgate"},
		fracs: []float64{0.5}, conns: 64, rounds: 2, runs: []tailRun{
			{gateway: "nginx", frac: 0.5, round: 1, res: res, busy: 0.50},
			{gateway: "tollgate", frac: 0.5, round: 1, res: res, busy: 0.55},
			{gateway: "tollgate", frac: 0.5, round: 2, res: res, busy: 0.60},
			{gateway: "nginx", frac: 0.5, round: 2, res: res, busy: 0.50},
		}}
	var s strings.Builder
	r.tailMarkdown(&s)
	md := s.String()
	reportHas(t, md, "busy ÷ nginx", "| 1.15× (1.10–1.20) |")
}

// reportHas fails t for each of wants that the report md lacks.
func reportHas(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
