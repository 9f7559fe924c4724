package main

// Interleaved rounds: the machinery -compare and the normal sweep share.
//
// A figure measured once swings by up to 15% between runs on this machine (other work,
// frequency, caches), more than the differences worth telling apart. Measuring the two
// things compared back to back, many times over, with the order alternating, turns each
// round into one ratio in which drift slower than a round cancels; the median of those
// ratios is the figure and their spread says how far to trust it. A round in which a
// gateway was not what limited the window (idle because the load side saturated, or
// because other processes took its CPU) says little about the gateway and is flagged and
// left out.

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"tollgate/e2e/bench/cpustat"
	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
)

// pairRound is two measurements of one round whose ratio b ÷ a is the round's figure:
// -compare's builds A and B of one scenario (and nginx after them when asked for), or in
// the sweep nginx (a) and Tollgate (b), or one gateway's baseline scenario (a, S1) and
// another (b, S2) in the same round.
type pairRound struct {
	scenario   string // with two scenarios, "S2÷S1"
	procs, n   int    // n counts rounds from 1
	first      string // which of the two ran first: the order alternates
	a, b       perfResult
	nginx      *perfResult
	aWhy, bWhy string // why that side's gateway was not the bottleneck; empty: it was
}

func (r *pairRound) flagged() bool { return r.aWhy != "" || r.bWhy != "" }

func (r *pairRound) cpuRatio() float64 { return quotient(r.b.usPerReq, r.a.usPerReq) }

func (r *pairRound) qpsRatio() float64 { return quotient(r.b.load.qps(), r.a.load.qps()) }

func quotient(x, y float64) float64 {
	if x <= 0 || y <= 0 {
		return math.NaN()
	}
	return x / y
}

// spread summarises a sample: its median, extremes and quartiles (linear interpolation
// between order statistics, as R's default and numpy's), and the median's 95% confidence
// interval (medianCI) when the sample is large enough for one.
type spread struct {
	n                        int
	median, min, max, q1, q3 float64
	ciLo, ciHi               float64
	ciOK                     bool
}

// ciHalf is the larger half of the median's confidence interval as a share of the median:
// the resolution of the figure (±ciHalf). NaN without an interval.
func (s spread) ciHalf() float64 {
	if !s.ciOK || s.median <= 0 {
		return math.NaN()
	}
	return max(s.median-s.ciLo, s.ciHi-s.median) / s.median
}

func spreadOf(xs []float64) spread {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{}
	}
	slices.Sort(v)
	sp := spread{n: len(v), median: quantile(v, 0.5), min: v[0], max: v[len(v)-1], q1: quantile(v, 0.25), q3: quantile(v, 0.75)}
	sp.ciLo, sp.ciHi, sp.ciOK = medianCI(v, ciLevel)
	return sp
}

// ciLevel is the confidence of the intervals the reports give for medians.
const ciLevel = 0.95

// medianCI is a distribution-free confidence interval of the median of a sorted sample:
// the order statistics x(j) and x(n−1−j) (from 0) for the largest j such that the chance
// of at most j of n values falling below the true median, Binomial(n, ½), is at most
// (1−level)/2. It assumes the values independent and nothing of their distribution: a
// round disturbed by the machine moves the interval by one rank, not by its size. ok is
// false when n is too small for the level (at 95%, fewer than 6 values).
func medianCI(sorted []float64, level float64) (lo, hi float64, ok bool) {
	n := len(sorted)
	tail := (1 - level) / 2
	j, cum := -1, 0.0
	for i := 0; i < n/2; i++ {
		cum += binomHalf(n, i)
		if cum > tail {
			break
		}
		j = i
	}
	if j < 0 {
		return 0, 0, false
	}
	return sorted[j], sorted[n-1-j], true
}

// binomHalf is P(X = k) for X ~ Binomial(n, ½), computed in logs so large n do not underflow.
func binomHalf(n, k int) float64 {
	ln := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
	return math.Exp(ln(n) - ln(k) - ln(n-k) - float64(n)*math.Ln2)
}

// quantile of a sorted, non-empty sample.
func quantile(sorted []float64, q float64) float64 {
	h := q * float64(len(sorted)-1)
	lo := int(math.Floor(h))
	if lo+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// pairSummary is one scenario at one procs value over its rounds.
type pairSummary struct {
	scenario       string
	procs          int
	rounds, used   int
	cpu, qps       spread // B ÷ A over the rounds used
	aUS, bUS       spread // each side's own µs/req over the rounds used
	aNginx, bNginx spread // A ÷ nginx and B ÷ nginx µs/req, when nginx ran
}

// summarise groups rounds by scenario and procs, in the order they first ran. Flagged
// rounds are left out unless all is set.
func summarisePairs(rounds []pairRound, all bool) []pairSummary {
	var out []pairSummary
	idx := map[string]int{}
	var cpu, qps, aUS, bUS, aN, bN [][]float64
	for i := range rounds {
		r := &rounds[i]
		k := fmt.Sprintf("%s/%d", r.scenario, r.procs)
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, pairSummary{scenario: r.scenario, procs: r.procs})
			cpu, qps, aUS, bUS, aN, bN = append(cpu, nil), append(qps, nil), append(aUS, nil), append(bUS, nil), append(aN, nil), append(bN, nil)
		}
		out[j].rounds++
		if r.flagged() && !all {
			continue
		}
		out[j].used++
		cpu[j] = append(cpu[j], r.cpuRatio())
		qps[j] = append(qps[j], r.qpsRatio())
		aUS[j] = append(aUS[j], r.a.usPerReq)
		bUS[j] = append(bUS[j], r.b.usPerReq)
		if r.nginx != nil {
			aN[j] = append(aN[j], quotient(r.a.usPerReq, r.nginx.usPerReq))
			bN[j] = append(bN[j], quotient(r.b.usPerReq, r.nginx.usPerReq))
		}
	}
	for j := range out {
		out[j].cpu, out[j].qps = spreadOf(cpu[j]), spreadOf(qps[j])
		out[j].aUS, out[j].bUS = spreadOf(aUS[j]), spreadOf(bUS[j])
		out[j].aNginx, out[j].bNginx = spreadOf(aN[j]), spreadOf(bN[j])
	}
	return out
}

// notBottleneck says why a measured gateway was not what limited the window, or "" when it
// was: it kept its CPUs busy at least busyMin of the time. Only the CPUs it does not share
// with the load side count (at 2 procs on this machine, CPU 0): on the shared one it
// competes with wrk. /proc/stat's counters over the same window tell why it was idle: the
// load side's CPUs were saturated, or other processes took the gateway's CPU.
func notBottleneck(r perfResult, busyMin float64, gwCPUs, loadCPUs []int) string {
	own := ownCPUs(gwCPUs, loadCPUs)
	if len(own) == 0 {
		return "" // gateway and load share every CPU: no side can be told apart
	}
	need := busyMin * float64(len(own))
	if r.busy >= need {
		return ""
	}
	why := fmt.Sprintf("gateway busy %.2f < %.2f", r.busy, need)
	if load := cpustat.BusyShare(r.sys0, r.sys1, loadCPUs); load >= 0.95 {
		why += fmt.Sprintf("; load side saturated (CPU %s %.0f%% busy)", cpustat.FormatList(loadCPUs), 100*load)
	}
	// The gateway's own use may spill onto the shared CPU, so this is at least what
	// others took of its CPUs.
	if others := othersShare(cpustat.BusyShare(r.sys0, r.sys1, own), r.busy, own); others >= 0.05 {
		why += fmt.Sprintf("; other processes took %.0f%% of CPU %s", 100*others, cpustat.FormatList(own))
	}
	return why
}

// ownCPUs is the gateway's CPUs that the load side does not share.
func ownCPUs(gwCPUs, loadCPUs []int) []int {
	var own []int
	for _, c := range gwCPUs {
		if !slices.Contains(loadCPUs, c) {
			own = append(own, c)
		}
	}
	return own
}

// othersShare is the share of own's time that went to others than the gateway, from
// their share (cpustat.BusyShare or TaskShare) and the gateway's busy (CPU seconds ÷ wall
// seconds); -1 when the share could not be read or own is empty.
func othersShare(share, busy float64, own []int) float64 {
	if share < 0 || len(own) == 0 {
		return -1
	}
	return share - busy/float64(len(own))
}

// minRounds is the fewest rounds whose median and spread mean something: with fewer, one
// disturbed round moves the median.
const minRounds = 5

// roundSettings are the flags of interleaved rounds, for the sweep and -compare alike.
type roundSettings struct {
	rounds  int           // rounds per -cores value; 1: the sweep measures each scenario once (a quick look)
	busyMin float64       // a gateway is the bottleneck when busy ≥ busyMin × the CPUs it does not share with the load
	loadMax float64       // a load side busy ≥ loadMax of its CPUs was saturated: the round is flagged; 0: not checked
	all     bool          // keep flagged rounds in the medians
	warm    time.Duration // warm-up of every measurement after a scenario's first on a gateway
}

func (r *roundSettings) register(fs *flag.FlagSet) {
	fs.IntVar(&r.rounds, "rounds", minRounds, "request scenarios: rounds per -cores value (1, or at least 5), each measuring every scenario once on every gateway "+
		"(with -compare: on A and B), back to back, the order alternating; the report gives per-round ratios with their median and spread. "+
		"1: each scenario once per gateway, no spread (a quick look; figures swing ±15% between runs here)")
	fs.Float64Var(&r.busyMin, "busy", 0.90, "a gateway busy below this share of the CPUs it does not share with the load side was not the bottleneck; its round is flagged")
	fs.Float64Var(&r.busyMin, "compare-busy", 0.90, "the same as -busy (its former name)")
	fs.Float64Var(&r.loadMax, "load-max", 0.98, "a round whose load side (-load-cpus) was busy at least this share of the window is flagged as bound by the load side, "+
		"even when the gateway looked busy; 0: not checked (only when the gateway and the load side have no CPU in common)")
	fs.BoolVar(&r.all, "all-rounds", false, "keep flagged rounds in the medians")
	fs.BoolVar(&r.all, "compare-all-rounds", false, "the same as -all-rounds (its former name)")
	fs.DurationVar(&r.warm, "round-warmup", time.Second, "warm-up of each measurement after a scenario's first on a gateway (which gets -warmup): "+
		"the stacks stay up across rounds, so only wrk's new connections need it")
}

func (r *roundSettings) check() error {
	if r.rounds != 1 && r.rounds < minRounds {
		return fmt.Errorf("-rounds: %d; at least %d, so that the median and spread mean something (or 1 for a quick look without them)", r.rounds, minRounds)
	}
	if r.busyMin <= 0 || r.busyMin > 1 {
		return fmt.Errorf("-busy: %g is not in (0, 1]", r.busyMin)
	}
	if r.loadMax < 0 || r.loadMax > 1 {
		return fmt.Errorf("-load-max: %g is not in [0, 1]", r.loadMax)
	}
	if r.warm < 0 {
		return fmt.Errorf("-round-warmup: %s is negative", r.warm)
	}
	return nil
}

// flag says why a measurement's round is flagged, or "" when it is not: the gateway was not
// the bottleneck (notBottleneck), or the load side's CPUs were saturated, which may have
// held the gateway back even when it looked busy. The second is told only when the
// gateway and the load side share no CPU: on a shared one the load side is always busy.
func (r roundSettings) flag(m perfResult, gwCPUs, loadCPUs []int) string {
	if why := notBottleneck(m, r.busyMin, gwCPUs, loadCPUs); why != "" || r.loadMax <= 0 {
		return why
	}
	if slices.ContainsFunc(gwCPUs, func(c int) bool { return slices.Contains(loadCPUs, c) }) {
		return ""
	}
	if load := cpustat.BusyShare(m.sys0, m.sys1, loadCPUs); load >= r.loadMax {
		return fmt.Sprintf("load side saturated (CPU %s %.0f%% busy)", cpustat.FormatList(loadCPUs), 100*load)
	}
	return ""
}

// flagRule says in the report what flag flags and what becomes of a flagged round.
func (r roundSettings) flagRule() string {
	what := "left out of the medians (-all-rounds keeps them)"
	if r.all {
		what = "kept in the medians (-all-rounds)"
	}
	load := ""
	if r.loadMax > 0 {
		load = fmt.Sprintf(", or the load side's CPUs busy at least %.0f%% of the window (checked when the gateway and the load side share no CPU)", 100*r.loadMax)
	}
	return fmt.Sprintf("the gateway busy below %.2f of the CPUs it does not share with the load side (with /proc/stat's reason: "+
		"load side saturated, or other processes on the gateway's CPU)%s; flagged rounds are %s", r.busyMin, load, what)
}

// roundMeasure is one measurement of the sweep's rounds.
type roundMeasure struct {
	perfResult
	n     int    // the round, from 1
	first string // the gateway measured first in this round
	why   string // why the round is flagged for this measurement; empty: it is not
}

// ownRatios are the ratios a gateway's scenarios are judged by against its own baseline in
// the same round: the plugins' tax (S2 and S2j over S1), a large route table's (S4r over
// S1), the rewrite's (S3 over its plain POST S3b) and TLS's (S9 over plain S9p).
var ownRatios = [][2]string{
	{"S2", "S1"}, {"S2j", "S1"}, {"S2l", "S1"}, {"S2x", "S1"}, {"S2a", "S1"}, {"S4", "S1"}, {"S4r", "S1"}, {"S5", "S1"},
	{"S3", "S3b"}, {"S9", "S9p"},
	{"S1f", "S1"}, {"S1h", "S1"}, {"S2hmac", "S1"}, {"S2hmac", "S2"},
}

// sweepRounds measures the request scenarios at one procs value b.rnd.rounds times. In
// each round every scenario runs on every gateway back to back, the gateways' order
// reversed in even rounds; the gateways keep running with their config throughout. Every
// measurement goes to rep.rounds, and the round with the median µs/req of each scenario
// and gateway (among the rounds used) to rep.perf, for the tables that show one row each.
func (b *bench) sweepRounds(ctx context.Context, procs int, scs []*perfScenario, targets map[string]*harness.Proc,
	addr func(gw string, sc *perfScenario) string, rep *report) error {
	gwCPUs, err := cpustat.ParseList(gatewayCPUs(procs))
	if err != nil {
		return err
	}
	loadCPUs, err := cpustat.ParseList(b.LoadCPUs)
	if err != nil {
		return fmt.Errorf("-load-cpus: %w", err)
	}
	warmed := map[string]bool{}
	var ms []roundMeasure
	for n := 1; n <= b.rnd.rounds; n++ {
		order := roundOrder(b.gateways, n)
		for _, sc := range scs {
			if sc.ws {
				continue // S6 is no request scenario: measured once, before the rounds
			}
			for _, gw := range order {
				warm := b.rnd.warm
				if k := sc.id + "/" + gw; !warmed[k] {
					warm, warmed[k] = b.warmup, true
				}
				r, err := b.measureWarm(ctx, warm, gw, procs, sc, targets[gw], addr(gw, sc))
				if err != nil {
					return err
				}
				m := roundMeasure{perfResult: r, n: n, first: order[0], why: b.rnd.flag(r, gwCPUs, loadCPUs)}
				ms = append(ms, m)
				note := ""
				if m.why != "" {
					note = "  FLAGGED: " + m.why
				}
				fmt.Fprintf(os.Stderr, "bench: round %d/%d  %-4s %-8s procs=%d  %8.0f req/s  p99 %s  %6.2f µs/req  busy %.2f  load CPU %s  non-2xx %d  sock-err %d%s\n",
					n, b.rnd.rounds, sc.id, gw, procs, r.load.qps(), figures.FmtUS(r.load.P99), r.usPerReq, r.busy,
					fmtPct(cpustat.BusyShare(r.sys0, r.sys1, loadCPUs)), r.load.Status, r.load.socketErrors(), note)
			}
		}
	}
	rep.rounds = append(rep.rounds, ms...)
	rep.perf = append(rep.perf, medianRounds(ms, b.gateways, b.rnd.all)...)
	return nil
}

// roundOrder is the order the gateways are measured in round n (from 1): as given in odd
// rounds, reversed in even ones, so that none always runs first.
func roundOrder(gws []string, n int) []string {
	order := slices.Clone(gws)
	if n%2 == 0 {
		slices.Reverse(order)
	}
	return order
}

// medianRounds picks, per scenario and procs value (in the order they ran) and gateway (in
// gws' order), the measurement with the median µs/req among the rounds used (the lower of
// the two middle ones when their number is even; all rounds when every one is flagged):
// a real measurement, so its QPS, latencies and RSS belong together.
func medianRounds(ms []roundMeasure, gws []string, all bool) []perfResult {
	type group struct {
		scenario string
		procs    int
	}
	type key struct {
		group
		gw string
	}
	used, flagged := map[key][]perfResult{}, map[key][]perfResult{}
	var order []group
	for _, m := range ms {
		g := group{m.scenario, m.procs}
		if !slices.Contains(order, g) {
			order = append(order, g)
		}
		k := key{g, m.gateway}
		if m.why != "" && !all {
			flagged[k] = append(flagged[k], m.perfResult)
		} else {
			used[k] = append(used[k], m.perfResult)
		}
	}
	var out []perfResult
	for _, g := range order {
		for _, gw := range gws {
			rs := used[key{g, gw}]
			if len(rs) == 0 {
				rs = flagged[key{g, gw}]
			}
			if len(rs) == 0 {
				continue
			}
			rs = slices.Clone(rs)
			slices.SortStableFunc(rs, func(x, y perfResult) int { return cmpFloat(x.usPerReq, y.usPerReq) })
			out = append(out, rs[(len(rs)-1)/2])
		}
	}
	return out
}

func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// gatewayPairs pairs every round's Tollgate measurement of a scenario with nginx's in the
// same round: a is nginx, b Tollgate, so the ratio is Tollgate ÷ nginx.
func gatewayPairs(ms []roundMeasure) []pairRound {
	type key struct {
		scenario string
		procs, n int
	}
	ngx := map[key]*roundMeasure{}
	for i := range ms {
		if m := &ms[i]; m.gateway == "nginx" {
			ngx[key{m.scenario, m.procs, m.n}] = m
		}
	}
	var out []pairRound
	for _, m := range ms {
		if m.gateway != "tollgate" {
			continue
		}
		if x := ngx[key{m.scenario, m.procs, m.n}]; x != nil {
			out = append(out, pairRound{scenario: m.scenario, procs: m.procs, n: m.n, first: m.first,
				a: x.perfResult, b: m.perfResult, aWhy: x.why, bWhy: m.why})
		}
	}
	return out
}

// ownPairs pairs every round's measurement of a scenario on gw with its baseline's
// (ownRatios) on the same gateway in the same round: a is the baseline. The pairs are
// named "S2÷S1" and come in ownRatios' order.
func ownPairs(ms []roundMeasure, gw string) []pairRound {
	type key struct {
		scenario string
		procs, n int
	}
	at := map[key]*roundMeasure{}
	for i := range ms {
		if m := &ms[i]; m.gateway == gw {
			at[key{m.scenario, m.procs, m.n}] = m
		}
	}
	var out []pairRound
	for _, rt := range ownRatios {
		for _, m := range ms {
			if m.gateway != gw || m.scenario != rt[0] {
				continue
			}
			if base := at[key{rt[1], m.procs, m.n}]; base != nil {
				out = append(out, pairRound{scenario: rt[0] + "÷" + rt[1], procs: m.procs, n: m.n, first: rt[1],
					a: base.perfResult, b: m.perfResult, aWhy: base.why, bWhy: m.why})
			}
		}
	}
	return out
}

// pairTable renders one row per scenario and procs value of rounds: how many rounds the
// figure rests on, the median of the per-round ratios b ÷ a (named name) of µs/req and of
// QPS with their extremes and interquartile range, then extra's columns. Below it, for
// every row that left flagged rounds out, what all its rounds would give.
func pairTable(s *strings.Builder, rounds []pairRound, all bool, name string, extraHead []string, extra func(pairSummary) []string) {
	fmt.Fprintf(s, "| scenario | procs | rounds used | µs/req %s median | min–max | Q1–Q3 | 95%% CI of the median | QPS %s median | min–max | Q1–Q3 |", name, name)
	for _, h := range extraHead {
		s.WriteString(" " + h + " |")
	}
	s.WriteString("\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + strings.Repeat("---:|", len(extraHead)) + "\n")
	used := summarisePairs(rounds, all)
	for _, m := range used {
		fmt.Fprintf(s, "| %s | %d | %d of %d | %s | %s | %s | %s | %s | %s | %s |", m.scenario, m.procs, m.used, m.rounds,
			fmtRatio(m.cpu.median, m.cpu.n), fmtRange(m.cpu.min, m.cpu.max, m.cpu.n), fmtRange(m.cpu.q1, m.cpu.q3, m.cpu.n), fmtCI(m.cpu),
			fmtRatio(m.qps.median, m.qps.n), fmtRange(m.qps.min, m.qps.max, m.qps.n), fmtRange(m.qps.q1, m.qps.q3, m.qps.n))
		if extra != nil {
			for _, c := range extra(m) {
				s.WriteString(" " + c + " |")
			}
		}
		s.WriteString("\n")
	}
	if all {
		return
	}
	// What the flagged rounds would have said, so a run on a busy machine still shows its
	// numbers, apart from the figure.
	var notes []string
	for j, m := range summarisePairs(rounds, true) {
		if used[j].used < used[j].rounds {
			notes = append(notes, fmt.Sprintf("- %s at %d proc(s), all %d rounds with the flagged ones (not a figure to quote): µs/req %s median %s (%s; 95%% CI %s), QPS %s median %s (%s)",
				m.scenario, m.procs, m.rounds, name, fmtRatio(m.cpu.median, m.cpu.n), fmtRange(m.cpu.min, m.cpu.max, m.cpu.n), fmtCI(m.cpu),
				name, fmtRatio(m.qps.median, m.qps.n), fmtRange(m.qps.min, m.qps.max, m.qps.n)))
		}
	}
	if len(notes) > 0 {
		s.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
}

// fmtCI is a median's confidence interval with its resolution, "0.981–1.012 (±1.9%)", or
// "-" when the sample is too small for one.
func fmtCI(sp spread) string {
	if !sp.ciOK {
		return "-"
	}
	return fmt.Sprintf("%.3f–%.3f (±%.1f%%)", sp.ciLo, sp.ciHi, 100*sp.ciHalf())
}

// ciRule says in the reports what the confidence interval is and how to use it.
const ciRule = "- *95% CI of the median*: the order statistics that hold the median ratio with 95% confidence whatever the rounds' distribution " +
	"(at least 6 rounds used; only the rounds' independence is assumed), and its larger half as a share of the median: " +
	"a difference smaller than that ± is not a finding, and a 3% one needs ±1.5% or better (more rounds narrow it about as 1/√rounds)\n"

// roundsMarkdown renders the sweep's rounds: Tollgate ÷ nginx per scenario, each gateway's
// own ratios to its baselines, and every measurement.
func (r *report) roundsMarkdown(s *strings.Builder) {
	if len(r.rounds) == 0 {
		return
	}
	b := r.b
	set := b.rnd
	firsts := "one gateway"
	if len(b.gateways) == 2 {
		firsts = fmt.Sprintf("%s first in odd rounds, %s in even ones", b.gateways[0], b.gateways[1])
	}
	s.WriteString("## Interleaved rounds\n\n")
	fmt.Fprintf(s, "- %d rounds per procs value; in each, every request scenario is measured on every gateway back to back (%s), "+
		"the gateways running throughout with the config of every scenario; a scenario's first measurement on a gateway after %s of warm-up, "+
		"the following after %s; a %s window each\n", set.rounds, firsts, b.warmup, set.warm, b.duration)
	s.WriteString("- per round: the ratio of CPU µs/req (below 1: Tollgate spends less per request than nginx in T÷N, the scenario less than its baseline in ÷ base) and of QPS; " +
		"the tables give their median over the rounds used, the extremes (min–max) and the interquartile range (Q1–Q3)\n")
	s.WriteString(ciRule)
	s.WriteString("- a round is flagged for a ratio when either of its two measurements was disturbed: " + set.flagRule() + "\n\n")
	if pairs := gatewayPairs(r.rounds); len(pairs) > 0 {
		s.WriteString("### Tollgate ÷ nginx\n\n")
		pairTable(s, pairs, set.all, "T÷N", []string{"Tollgate µs/req", "nginx µs/req"}, func(m pairSummary) []string {
			return []string{fmtFloat(m.bUS.median, m.bUS.n), fmtFloat(m.aUS.median, m.aUS.n)}
		})
		s.WriteString("\n")
	}
	for _, gw := range []string{"tollgate", "nginx"} {
		pairs := ownPairs(r.rounds, gw)
		if len(pairs) == 0 {
			continue
		}
		fmt.Fprintf(s, "### %s against its own baselines, same round\n\n", gw)
		s.WriteString("Each round's µs/req of the scenario ÷ its baseline's (S1; S3b for S3; S9p for S9) on the same gateway in the same round.\n\n")
		pairTable(s, pairs, set.all, "÷ base", []string{"µs/req", "baseline µs/req"}, func(m pairSummary) []string {
			return []string{fmtFloat(m.bUS.median, m.bUS.n), fmtFloat(m.aUS.median, m.aUS.n)}
		})
		s.WriteString("\n")
	}
	loadCPUs, _ := cpustat.ParseList(b.LoadCPUs)
	s.WriteString("### Every measurement\n\n")
	s.WriteString("busy: the gateway's CPU seconds ÷ wall seconds; load CPU: the share of time the load side's CPUs were busy (every process, /proc/stat).\n\n")
	s.WriteString("| scenario | gateway | procs | round | first | CPU µs/req | QPS | p50 | p99 | busy | load CPU | flag |\n")
	s.WriteString("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, m := range r.rounds {
		fmt.Fprintf(s, "| %s | %s | %d | %d | %s | %.2f | %.0f | %s | %s | %.2f | %s | %s |\n", m.scenario, m.gateway, m.procs, m.n, m.first,
			m.usPerReq, m.load.qps(), figures.FmtUS(m.load.P50), figures.FmtUS(m.load.P99), m.busy, fmtPct(cpustat.BusyShare(m.sys0, m.sys1, loadCPUs)), m.why)
	}
	s.WriteString("\n")
}
