package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tollgate/e2e/bench/cpustat"
	"tollgate/e2e/bench/harness"
)

func TestSpreadOf(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want spread
	}{
		{[]float64{5, 1, 4, 2, 3}, spread{n: 5, median: 3, min: 1, max: 5, q1: 2, q3: 4}},
		{[]float64{4, 1, 3, 2}, spread{n: 4, median: 2.5, min: 1, max: 4, q1: 1.75, q3: 3.25}},
		{[]float64{1.02}, spread{n: 1, median: 1.02, min: 1.02, max: 1.02, q1: 1.02, q3: 1.02}},
		{[]float64{math.NaN(), 0.98, 1.00, 1.04}, spread{n: 3, median: 1.00, min: 0.98, max: 1.04, q1: 0.99, q3: 1.02}},
		{nil, spread{}},
		{[]float64{math.NaN()}, spread{}},
	} {
		got := spreadOf(c.xs)
		eq := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if got.n != c.want.n || !eq(got.median, c.want.median) || !eq(got.min, c.want.min) || !eq(got.max, c.want.max) ||
			!eq(got.q1, c.want.q1) || !eq(got.q3, c.want.q3) {
			t.Errorf("spreadOf(%v) = %+v, want %+v", c.xs, got, c.want)
		}
	}
}

func TestMedianCI(t *testing.T) {
	seq := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(i)
		}
		return v
	}
	for _, c := range []struct {
		n      int
		ok     bool
		lo, hi float64 // ranks from 0, as tables of the sign test give them
	}{
		{5, false, 0, 0}, // 2 × 1/32 > 5%: no 95% interval
		{6, true, 0, 5},  // 2 × 1/64 = 3.1%
		{9, true, 1, 7},  // 2 × 10/512 = 3.9%
		{20, true, 5, 14},
		{41, true, 13, 27},
		{1001, true, 469, 531},
	} {
		lo, hi, ok := medianCI(seq(c.n), 0.95)
		if ok != c.ok || (ok && (lo != c.lo || hi != c.hi)) {
			t.Errorf("medianCI of %d values = %v–%v (ok %v), want %v–%v (ok %v)", c.n, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
	sp := spreadOf([]float64{1.00, 0.98, 1.02, 0.99, 1.01, 1.03, 0.97})
	if !sp.ciOK || sp.ciLo != 0.97 || sp.ciHi != 1.03 || math.Abs(sp.ciHalf()-0.03) > 1e-9 {
		t.Errorf("spreadOf's interval = %v–%v ±%v (ok %v), want 0.97–1.03 ±0.03", sp.ciLo, sp.ciHi, sp.ciHalf(), sp.ciOK)
	}
	if got := fmtCI(sp); got != "0.970–1.030 (±3.0%)" {
		t.Errorf("fmtCI = %q", got)
	}
	if got := fmtCI(spreadOf([]float64{1, 1, 1})); got != "-" {
		t.Errorf("fmtCI of 3 values = %q, want -", got)
	}
}

// round makes a round of the given µs/req and QPS on each side; why flags side A.
func round(sc string, n int, aUS, bUS, aQPS, bQPS float64, why string) pairRound {
	res := func(us, qps float64) perfResult {
		return perfResult{scenario: sc, gateway: "tollgate", procs: 1, usPerReq: us, busy: 1,
			load: loadResult{Requests: int64(qps * 10), DurationUS: 10e6}}
	}
	first := "A"
	if n%2 == 0 {
		first = "B"
	}
	return pairRound{scenario: sc, procs: 1, n: n, first: first, a: res(aUS, aQPS), b: res(bUS, bQPS), aWhy: why}
}

func TestSummarise(t *testing.T) {
	rounds := []pairRound{
		round("S1", 1, 20, 20.4, 50000, 49000, ""),                  // 1.02, 0.98
		round("S2", 1, 30, 30, 40000, 40000, ""),                    // 1, 1
		round("S1", 2, 20, 19.8, 50000, 50500, ""),                  // 0.99, 1.01
		round("S1", 3, 20, 30, 50000, 30000, "load side saturated"), // 1.5, 0.6: flagged
		round("S1", 4, 20, 20, 50000, 50000, ""),                    // 1, 1
		round("S1", 5, 0, 20, 0, 50000, ""),                         // A measured nothing: no ratio
	}
	sum := summarisePairs(rounds, false)
	if len(sum) != 2 || sum[0].scenario != "S1" || sum[1].scenario != "S2" {
		t.Fatalf("summarise grouped %+v, want S1 then S2", sum)
	}
	s1 := sum[0]
	if s1.rounds != 5 || s1.used != 4 {
		t.Errorf("S1: %d rounds, %d used; want 5 and 4 (the flagged one left out)", s1.rounds, s1.used)
	}
	if s1.cpu.n != 3 || math.Abs(s1.cpu.median-1.0) > 1e-9 || math.Abs(s1.cpu.min-0.99) > 1e-9 || math.Abs(s1.cpu.max-1.02) > 1e-9 {
		t.Errorf("S1 µs/req ratio %+v, want median 1.00 over 0.99–1.02 of 3 rounds", s1.cpu)
	}
	if math.Abs(s1.qps.median-1.0) > 1e-9 || math.Abs(s1.qps.min-0.98) > 1e-9 || math.Abs(s1.qps.max-1.01) > 1e-9 {
		t.Errorf("S1 QPS ratio %+v, want median 1.00 over 0.98–1.01", s1.qps)
	}
	all := summarisePairs(rounds, true)[0]
	if all.used != 5 || math.Abs(all.cpu.max-1.5) > 1e-9 || math.Abs(all.cpu.median-1.01) > 1e-9 {
		t.Errorf("S1 with all rounds: used %d, ratio %+v; want 5 used, max 1.5, median 1.01", all.used, all.cpu)
	}
	if r := rounds[3]; !r.flagged() || rounds[0].flagged() {
		t.Error("a round is flagged when a side says why it was not the bottleneck, and only then")
	}
}

func TestNotBottleneck(t *testing.T) {
	// busy is the gateway's own share; ticks over a 100-tick window per CPU.
	res := func(busy float64, cpu0, cpu1 uint64) perfResult {
		return perfResult{busy: busy, sys0: cpustat.Times{0: {0, 0}, 1: {0, 0}}, sys1: cpustat.Times{0: {cpu0, 100}, 1: {cpu1, 100}}}
	}
	one, two, load := []int{0}, []int{0, 1}, []int{1}
	if why := notBottleneck(res(0.97, 98, 90), 0.9, one, load); why != "" {
		t.Errorf("a gateway busy 0.97 of its CPU is the bottleneck; got %q", why)
	}
	why := notBottleneck(res(0.70, 72, 100), 0.9, one, load)
	if !strings.Contains(why, "gateway busy 0.70 < 0.90") || !strings.Contains(why, "load side saturated (CPU 1 100% busy)") || strings.Contains(why, "other processes") {
		t.Errorf("load side saturated: got %q", why)
	}
	why = notBottleneck(res(0.70, 100, 60), 0.9, one, load)
	if !strings.Contains(why, "other processes took 30% of CPU 0") || strings.Contains(why, "saturated") {
		t.Errorf("CPU 0 taken by others: got %q", why)
	}
	// At 2 procs the gateway shares CPU 1 with the load: only CPU 0 is its own.
	if why := notBottleneck(res(1.3, 100, 100), 0.9, two, load); why != "" {
		t.Errorf("2 procs, busy 1.3: got %q", why)
	}
	if why := notBottleneck(res(0.5, 50, 100), 0.9, two, load); !strings.Contains(why, "< 0.90") {
		t.Errorf("2 procs, busy 0.5: got %q", why)
	}
	// One CPU for everything: nothing to tell apart, never flagged.
	if why := notBottleneck(res(0.4, 100, 0), 0.9, one, one); why != "" {
		t.Errorf("gateway and load on one CPU: got %q", why)
	}
}

// TestBuildRevision builds a committed revision of a throwaway repository whose working
// tree has moved on: the binary is the revision's, the unpacked source is gone afterwards,
// the same source gives the same binary, and a revision that is not there is an error.
func TestBuildRevision(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := t.TempDir()
	mod := filepath.Join(repo, "svc") // the module below the repository's top, as it may be
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const prog = "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Print(%q) }\n"
	git("init", "-q")
	write("go.mod", "module example.com/svc\n\ngo 1.22\n")
	write("main.go", strings.Replace(prog, "%q", `"committed"`, 1))
	git("add", ".")
	git("commit", "-q", "-m", "one")
	write("main.go", strings.Replace(prog, "%q", `"working tree"`, 1)) // not committed

	ctx := context.Background()
	dir := t.TempDir()
	bin, commit, err := buildRevision(ctx, mod, "HEAD", dir, "svc-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(commit) != 40 {
		t.Errorf("commit %q, want a full id", commit)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || string(out) != "committed" {
		t.Errorf("the revision's binary printed %q (%v), want %q", out, err, "committed")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "svc-a" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v after the build, want only the binary (the source removed)", dir, names)
	}

	// The same source built from the working tree after restoring it: the same bytes.
	git("checkout", "--", ".")
	wt := filepath.Join(dir, "svc-b")
	if err := goBuild(ctx, mod, wt); err != nil {
		t.Fatal(err)
	}
	if a, b := fileSHA256(bin), fileSHA256(wt); a != b || a == "?" {
		t.Errorf("the same source built in two places differs: %s vs %s", a, b)
	}

	if _, _, err := buildRevision(ctx, mod, "no-such-ref", dir, "svc-c"); err == nil || !strings.Contains(err.Error(), "no-such-ref") {
		t.Errorf("a missing revision: err %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "svc-c")); !os.IsNotExist(err) {
		t.Errorf("a failed build left %s", filepath.Join(dir, "svc-c"))
	}
}

// The report says how many rounds the figure rests on, and what the flagged ones said.
func TestCompareMarkdown(t *testing.T) {
	b := &bench{threads: 2, conns: 64, Env: &harness.Env{LoadCPUs: "1"}, cores: []int{1}}
	r := newReport(b)
	r.cmp = &compareResult{set: roundSettings{rounds: 5, busyMin: 0.9}, a: "HEAD (abc)", b: "HEAD (abc)", aSum: "same", bSum: "same",
		rounds: []pairRound{
			round("S1", 1, 20, 20.4, 50000, 49000, ""),
			round("S1", 2, 20, 19.8, 50000, 50500, ""),
			round("S1", 3, 20, 30, 50000, 30000, "gateway busy 0.50 < 0.90"),
			round("S1", 4, 20, 20, 50000, 50000, ""),
			round("S1", 5, 20, 20.2, 50000, 50000, ""),
		}}
	md := r.markdown()
	reportHas(t, md,
		"the same binary",
		"| S1 | 1 | 4 of 5 | 1.005 | 0.990–1.020 |",
		"all 5 rounds with the flagged ones (not a figure to quote): µs/req B÷A median 1.010 (0.990–1.500; 95% CI -)",
		"| S1 | 1 | 3 | A | 20.00 | 30.00 | 1.500 |",
		"A: gateway busy 0.50 < 0.90 |",
		"flagged rounds are left out of the medians",
	)

	// One binary run with a setting on one side only: its differences are not noise alone.
	b.cmp.envB = "TOLLGATE_EDGE_RAW_IO=off"
	md = r.markdown()
	reportHas(t, md, "the same binary: a difference below is its edge's settings' or the machine's noise",
		"with the same settings but for the edge's above")
	if strings.Contains(md, "every difference below is the machine's noise") {
		t.Error("a comparison of two settings says its differences are noise")
	}
	if strings.Contains(md, "h2load") {
		t.Error("a comparison without HTTP/2 scenarios describes h2load")
	}

	// The HTTP/2 scenarios are h2load's, as in the sweep.
	b.h2 = h2Settings{conns: 16, streams: 8}
	r.cmp.rounds = append(r.cmp.rounds, round("S1grpc", 1, 60, 55, 15000, 16000, ""))
	reportHas(t, r.markdown(), "S1h2 and S1grpc are driven by h2load instead of wrk, as in the sweep: 16 connections × 8 concurrent streams",
		"| S1grpc | 1 | 1 | A | 60.00 | 55.00 |")
}

// A second bench waits for the first to release the machine.
func TestMachineLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.lock")
	ctx := context.Background()
	release, err := machineLock(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if holder, _ := os.ReadFile(path); !strings.Contains(string(holder), "pid ") {
		t.Errorf("the lock file says %q, want the holder's pid", holder)
	}
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if _, err := machineLock(short, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second lock while the first is held: %v, want it to wait until its context ends", err)
	}
	release()
	again, err := machineLock(ctx, path)
	if err != nil {
		t.Fatalf("the lock once released: %v", err)
	}
	again()
}

// With nginx asked for, each round shows its figure and the summary both builds' ratio to it.
func TestCompareMarkdownNginx(t *testing.T) {
	b := &bench{threads: 2, conns: 64, Env: &harness.Env{LoadCPUs: "1"}, cores: []int{1}}
	r := newReport(b)
	var rounds []pairRound
	for n := 1; n <= 5; n++ {
		rd := round("S1", n, 20, 22, 50000, 50000, "")
		rd.nginx = &perfResult{usPerReq: 16}
		rounds = append(rounds, rd)
	}
	r.cmp = &compareResult{set: roundSettings{rounds: 5, busyMin: 0.9}, rounds: rounds}
	md := r.markdown()
	reportHas(t, md,
		"| A µs/req | B µs/req | A÷nginx | B÷nginx |",
		"| S1 | 1 | 5 of 5 | 1.100 | 1.100–1.100 | 1.100–1.100 | - | 1.000 |",
		"| 20.00 | 22.00 | 1.250 | 1.375 |",
		"| nginx µs/req | flag |",
		"| ?/? | 16.00 |  |",
	)
}

func TestRoundSettingsCheck(t *testing.T) {
	ok := roundSettings{rounds: 5, busyMin: 0.9, loadMax: 0.98, warm: time.Second}
	for _, n := range []int{1, 5, 9} {
		c := ok
		c.rounds = n
		if err := c.check(); err != nil {
			t.Errorf("-rounds %d: %v", n, err)
		}
	}
	for _, c := range []roundSettings{
		{rounds: 0, busyMin: 0.9},
		{rounds: 2, busyMin: 0.9},
		{rounds: 4, busyMin: 0.9},
		{rounds: 5, busyMin: 0},
		{rounds: 5, busyMin: 1.1},
		{rounds: 5, busyMin: 0.9, loadMax: -0.1},
		{rounds: 5, busyMin: 0.9, warm: -time.Second},
	} {
		if err := c.check(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// A round whose load side saturated is flagged even when the gateway looked busy, unless
// the two share a CPU (then the load side is always busy) or -load-max is 0.
func TestRoundFlag(t *testing.T) {
	res := func(busy float64, cpu0, cpu1 uint64) perfResult {
		return perfResult{busy: busy, sys0: cpustat.Times{0: {0, 0}, 1: {0, 0}}, sys1: cpustat.Times{0: {cpu0, 100}, 1: {cpu1, 100}}}
	}
	set := roundSettings{rounds: 5, busyMin: 0.9, loadMax: 0.98}
	one, two, load := []int{0}, []int{0, 1}, []int{1}
	if why := set.flag(res(0.97, 98, 90), one, load); why != "" {
		t.Errorf("busy gateway, load side at 90%%: got %q", why)
	}
	if why := set.flag(res(0.97, 98, 99), one, load); why != "load side saturated (CPU 1 99% busy)" {
		t.Errorf("busy gateway, load side at 99%%: got %q", why)
	}
	if why := set.flag(res(0.70, 72, 100), one, load); !strings.HasPrefix(why, "gateway busy 0.70 < 0.90") {
		t.Errorf("idle gateway: got %q, want notBottleneck's reason", why)
	}
	if why := set.flag(res(1.5, 100, 100), two, load); why != "" {
		t.Errorf("2 procs share the load CPU: got %q", why)
	}
	off := set
	off.loadMax = 0
	if why := off.flag(res(0.97, 98, 100), one, load); why != "" {
		t.Errorf("-load-max 0: got %q", why)
	}
}

// measures makes a sweep's rounds: for each round, every scenario on nginx then Tollgate,
// with µs/req from us(scenario, gateway, round); flag names measurements to flag.
func measures(rounds int, scs []string, us func(sc, gw string, n int) float64, flag map[string]string) []roundMeasure {
	var ms []roundMeasure
	for n := 1; n <= rounds; n++ {
		order := []string{"nginx", "tollgate"}
		if n%2 == 0 {
			order = []string{"tollgate", "nginx"}
		}
		for _, sc := range scs {
			for _, gw := range order {
				u := us(sc, gw, n)
				ms = append(ms, roundMeasure{n: n, first: order[0], why: flag[fmt.Sprintf("%s/%s/%d", sc, gw, n)],
					perfResult: perfResult{scenario: sc, gateway: gw, procs: 1, usPerReq: u, busy: 1,
						load: loadResult{Requests: int64(1e7 / u), DurationUS: 10e6}}})
			}
		}
	}
	return ms
}

func TestSweepPairs(t *testing.T) {
	// nginx spends 20 µs on S1 and 22 on S2; Tollgate 10% more on S1 in every round and
	// 21 + n on S2; round 3's nginx S1 was disturbed.
	ms := measures(5, []string{"S1", "S2", "S2j"}, func(sc, gw string, n int) float64 {
		switch {
		case gw == "nginx" && sc == "S1":
			return 20
		case gw == "nginx":
			return 22
		case sc == "S1":
			return 22
		case sc == "S2":
			return 21 + float64(n)
		}
		return 0 // S2j measured nothing: no ratio
	}, map[string]string{"S1/nginx/3": "gateway busy 0.50 < 0.90"})

	gp := gatewayPairs(ms)
	if len(gp) != 15 || gp[0].a.gateway != "nginx" || gp[0].b.gateway != "tollgate" || gp[3].first != "tollgate" {
		t.Fatalf("gatewayPairs: %d pairs, first %+v", len(gp), gp[0])
	}
	sum := summarisePairs(gp, false)
	if len(sum) != 3 || sum[0].scenario != "S1" || sum[0].used != 4 || math.Abs(sum[0].cpu.median-1.1) > 1e-9 {
		t.Fatalf("Tollgate÷nginx S1: %+v; want 4 of 5 rounds used, median 1.1", sum[0])
	}
	if s2 := sum[1]; s2.used != 5 || math.Abs(s2.cpu.median-24.0/22) > 1e-9 || math.Abs(s2.cpu.min-1.0) > 1e-9 || math.Abs(s2.cpu.max-26.0/22) > 1e-9 {
		t.Errorf("Tollgate÷nginx S2: %+v; want median 24/22 over 22/22–26/22", s2.cpu)
	}
	if sum[2].cpu.n != 0 {
		t.Errorf("S2j measured nothing, yet has ratios %+v", sum[2].cpu)
	}

	own := ownPairs(ms, "tollgate")
	if len(own) != 10 || own[0].scenario != "S2÷S1" || own[5].scenario != "S2j÷S1" {
		t.Fatalf("ownPairs: %d pairs, first %q, sixth %q; want S2÷S1 ×5 then S2j÷S1 ×5", len(own), own[0].scenario, own[5].scenario)
	}
	o := summarisePairs(own, false)[0]
	if o.used != 5 || math.Abs(o.cpu.median-24.0/22) > 1e-9 || math.Abs(o.cpu.min-22.0/22) > 1e-9 || math.Abs(o.cpu.max-26.0/22) > 1e-9 {
		t.Errorf("S2÷S1: %+v; want median 24/22 over 22/22–26/22", o.cpu)
	}
	// A flagged baseline flags its round's ratio.
	ngx := summarisePairs(ownPairs(ms, "nginx"), false)[0]
	if ngx.used != 4 || ngx.rounds != 5 {
		t.Errorf("nginx S2÷S1: %d of %d rounds used, want 4 of 5 (round 3's S1 flagged)", ngx.used, ngx.rounds)
	}
}

func TestRoundOrder(t *testing.T) {
	gws := []string{"nginx", "tollgate"}
	for n, want := range map[int][]string{1: {"nginx", "tollgate"}, 2: {"tollgate", "nginx"}, 3: {"nginx", "tollgate"}} {
		if got := roundOrder(gws, n); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", n, got, want)
		}
	}
	if !slices.Equal(gws, []string{"nginx", "tollgate"}) {
		t.Errorf("roundOrder changed its argument: %v", gws)
	}
	if got := roundOrder([]string{"tollgate"}, 2); !slices.Equal(got, []string{"tollgate"}) {
		t.Errorf("one gateway: %v", got)
	}
}

func TestMedianRounds(t *testing.T) {
	us := map[int]float64{1: 30, 2: 10, 3: 20, 4: 50, 5: 40}
	ms := measures(5, []string{"S1"}, func(sc, gw string, n int) float64 { return us[n] }, map[string]string{"S1/tollgate/4": "x", "S1/nginx/1": "x", "S1/nginx/2": "x", "S1/nginx/3": "x", "S1/nginx/4": "x", "S1/nginx/5": "x"})
	got := medianRounds(ms, []string{"nginx", "tollgate"}, false)
	if len(got) != 2 || got[0].gateway != "nginx" || got[1].gateway != "tollgate" {
		t.Fatalf("medianRounds: %+v, want nginx then Tollgate", got)
	}
	// Tollgate's used rounds: 30, 10, 20, 40 → the lower middle, 20; nginx's are all
	// flagged, so all five count: 30.
	if got[1].usPerReq != 20 || got[0].usPerReq != 30 {
		t.Errorf("median rounds: nginx %v, Tollgate %v; want 30 and 20", got[0].usPerReq, got[1].usPerReq)
	}
	if all := medianRounds(ms, []string{"nginx", "tollgate"}, true); all[1].usPerReq != 30 {
		t.Errorf("with every round: Tollgate %v, want 30", all[1].usPerReq)
	}
}

// The sweep's report gives Tollgate ÷ nginx and Tollgate's own ratios per scenario, with the
// rounds they rest on, and every measurement.
func TestRoundsMarkdown(t *testing.T) {
	b := &bench{threads: 2, conns: 64, Env: &harness.Env{LoadCPUs: "1"}, cores: []int{1}, gateways: []string{"nginx", "tollgate"},
		rnd: roundSettings{rounds: 5, busyMin: 0.9, loadMax: 0.98, warm: time.Second}, warmup: 2 * time.Second, duration: 5 * time.Second}
	r := newReport(b)
	r.rounds = measures(5, []string{"S1", "S2"}, func(sc, gw string, n int) float64 {
		if gw == "nginx" {
			return 20
		}
		if sc == "S1" {
			return 18
		}
		return 19.8
	}, map[string]string{"S2/tollgate/2": "load side saturated (CPU 1 99% busy)"})
	r.perf = medianRounds(r.rounds, b.gateways, false)
	md := r.markdown()
	reportHas(t, md,
		"nginx first in odd rounds, tollgate in even ones",
		"| scenario | procs | rounds used | µs/req T÷N median | min–max | Q1–Q3 | 95% CI of the median | QPS T÷N median | min–max | Q1–Q3 | Tollgate µs/req | nginx µs/req |",
		"| S1 | 1 | 5 of 5 | 0.900 | 0.900–0.900 | 0.900–0.900 | - | 1.111 |",
		"- *95% CI of the median*: the order statistics that hold the median ratio",
		"| S2 | 1 | 4 of 5 | 0.990 |",
		"- S2 at 1 proc(s), all 5 rounds with the flagged ones (not a figure to quote)",
		"### tollgate against its own baselines, same round",
		"| S2÷S1 | 1 | 4 of 5 | 1.100 | 1.100–1.100 |",
		"| S2 | tollgate | 1 | 2 | tollgate | 19.80 |",
		"load side saturated (CPU 1 99% busy) |",
		"Each row is the round with the median µs/req",
		"or the load side's CPUs busy at least 98% of the window",
	)
}
