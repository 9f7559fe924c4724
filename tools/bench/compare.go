package main

// -compare REF: two Tollgate builds on the same machine, measured in turns.
//
// Two sweeps run minutes apart differ by more than the changes worth measuring (up to
// 15% here: other work on the shared machine, frequency, caches), so a figure taken from
// each says little about a 2% change. -compare builds REF beside the working tree and
// measures the two in rounds, A and B back to back on the same pinning and load, each round
// giving one ratio B ÷ A: drift slower than a round hits both sides alike and falls out of
// the ratio. The median over the rounds is the figure, the spread of the ratios says how far
// to trust it, and -compare HEAD -compare-b HEAD (one build against itself) shows the spread
// the machine alone produces.

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// compareSettings are -compare's flags.
type compareSettings struct {
	ref     string  // A: a git revision
	refB    string  // B: a git revision; empty: the working tree (or -bin)
	rounds  int     // rounds per scenario, each measuring A and B once
	busyMin float64 // a side is the bottleneck when busy ≥ busyMin × its own CPUs
	all     bool    // keep rounds whose gateway was not the bottleneck in the median
}

const minCompareRounds = 5

// compareDefaultScenarios are the ones -compare measures when -scenarios is not given.
var compareDefaultScenarios = []string{"S1", "S2", "S2j", "S4r"}

func (c *compareSettings) register(fs *flag.FlagSet) {
	fs.StringVar(&c.ref, "compare", "", "compare Tollgate built from this git revision (A) with the working tree's build (B) in interleaved rounds; "+
		"proxy scenarios only (default "+strings.Join(compareDefaultScenarios, ",")+"), no nginx unless -gateways names it")
	fs.StringVar(&c.refB, "compare-b", "", "-compare: build B from this git revision instead of the working tree (-compare HEAD -compare-b HEAD: the machine's own noise)")
	fs.IntVar(&c.rounds, "rounds", minCompareRounds, "-compare: rounds per scenario and -cores value (at least 5), each measuring A and B once, back to back")
	fs.Float64Var(&c.busyMin, "compare-busy", 0.90, "-compare: a gateway busy below this share of its own CPUs was not the bottleneck; its round is flagged")
	fs.BoolVar(&c.all, "compare-all-rounds", false, "-compare: keep flagged rounds in the medians")
}

// setup checks -compare's flags and settles the scenarios and gateways it measures; without
// -compare it only refuses the flags that need it.
func (c *compareSettings) setup(b *bench, scs []string) ([]string, error) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.ref == "" {
		for _, f := range []string{"compare-b", "rounds", "compare-busy", "compare-all-rounds"} {
			if set[f] {
				return nil, fmt.Errorf("-%s is a setting of -compare, which is not given", f)
			}
		}
		return scs, nil
	}
	if c.rounds < minCompareRounds {
		return nil, fmt.Errorf("-rounds: %d; -compare needs at least %d", c.rounds, minCompareRounds)
	}
	if c.busyMin <= 0 || c.busyMin > 1 {
		return nil, fmt.Errorf("-compare-busy: %g is not in (0, 1]", c.busyMin)
	}
	if !set["scenarios"] {
		scs = compareDefaultScenarios
	}
	for _, s := range scs {
		if !isPerf(s) || s == "S6" {
			return nil, fmt.Errorf("-compare: %s is not a request scenario (S1, S2, S2j, S2l, S2x, S2a, S3, S4, S4r, S5, S9)", s)
		}
	}
	// -compare compares Tollgate builds; nginx only when asked for by name, as a reference.
	b.gateways = []string{"tollgate"}
	if set["gateways"] {
		if !strings.Contains(","+flag.Lookup("gateways").Value.String()+",", ",tollgate,") {
			return nil, fmt.Errorf("-compare measures Tollgate builds: -gateways must include tollgate")
		}
		if strings.Contains(","+flag.Lookup("gateways").Value.String()+",", ",nginx,") {
			b.gateways = []string{"tollgate", "nginx"}
		}
	}
	return scs, nil
}

// compareRound is one round of one scenario: A and B measured back to back (and nginx
// after them when asked for).
type compareRound struct {
	scenario   string
	procs, n   int    // n counts rounds from 1
	first      string // "A" or "B", which ran first: the order alternates
	a, b       perfResult
	nginx      *perfResult
	aWhy, bWhy string // why that side's gateway was not the bottleneck; empty: it was
}

func (r *compareRound) flagged() bool { return r.aWhy != "" || r.bWhy != "" }

func (r *compareRound) cpuRatio() float64 { return quotient(r.b.usPerReq, r.a.usPerReq) }

func (r *compareRound) qpsRatio() float64 { return quotient(r.b.load.qps(), r.a.load.qps()) }

func quotient(x, y float64) float64 {
	if x <= 0 || y <= 0 {
		return math.NaN()
	}
	return x / y
}

// spread summarises a sample: its median, extremes and quartiles (linear interpolation
// between order statistics, as R's default and numpy's).
type spread struct {
	n                        int
	median, min, max, q1, q3 float64
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
	return spread{n: len(v), median: quantile(v, 0.5), min: v[0], max: v[len(v)-1], q1: quantile(v, 0.25), q3: quantile(v, 0.75)}
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

// compareSummary is one scenario at one procs value over its rounds.
type compareSummary struct {
	scenario       string
	procs          int
	rounds, used   int
	cpu, qps       spread // B ÷ A over the rounds used
	aUS, bUS       spread // each side's own µs/req over the rounds used
	aNginx, bNginx spread // A ÷ nginx and B ÷ nginx µs/req, when nginx ran
}

// summarise groups rounds by scenario and procs, in the order they first ran. Flagged
// rounds are left out unless all is set.
func summarise(rounds []compareRound, all bool) []compareSummary {
	var out []compareSummary
	idx := map[string]int{}
	var cpu, qps, aUS, bUS, aN, bN [][]float64
	for i := range rounds {
		r := &rounds[i]
		k := fmt.Sprintf("%s/%d", r.scenario, r.procs)
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, compareSummary{scenario: r.scenario, procs: r.procs})
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
	var own []int
	for _, c := range gwCPUs {
		if !slices.Contains(loadCPUs, c) {
			own = append(own, c)
		}
	}
	if len(own) == 0 {
		return "" // gateway and load share every CPU: no side can be told apart
	}
	need := busyMin * float64(len(own))
	if r.busy >= need {
		return ""
	}
	why := fmt.Sprintf("gateway busy %.2f < %.2f", r.busy, need)
	if load := busyShare(r.sys0, r.sys1, loadCPUs); load >= 0.95 {
		why += fmt.Sprintf("; load side saturated (CPU %s %.0f%% busy)", cpuListString(loadCPUs), 100*load)
	}
	if all := busyShare(r.sys0, r.sys1, own); all >= 0 {
		// The gateway's own use may spill onto the shared CPU, so this is at least what
		// others took of its CPUs.
		if others := all - r.busy/float64(len(own)); others >= 0.05 {
			why += fmt.Sprintf("; other processes took %.0f%% of CPU %s", 100*others, cpuListString(own))
		}
	}
	return why
}

// cpuTimes is each CPU's busy and total time in clock ticks, from /proc/stat.
type cpuTimes map[int][2]uint64

func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	return parseCPUTimes(string(b))
}

func parseCPUTimes(s string) cpuTimes {
	t := cpuTimes{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || len(f[0]) < 4 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var total, idle uint64
		// user nice system idle iowait irq softirq steal; guest and guest_nice are
		// already counted in user and nice.
		for i, v := range f[1:min(len(f), 9)] {
			x, _ := strconv.ParseUint(v, 10, 64)
			total += x
			if i == 3 || i == 4 {
				idle += x
			}
		}
		t[n] = [2]uint64{total - idle, total}
	}
	return t
}

// busyShare is the share of the time cpus were busy between t0 and t1, averaged over
// them; -1 when a counter is missing.
func busyShare(t0, t1 cpuTimes, cpus []int) float64 {
	var busy, total uint64
	for _, c := range cpus {
		a, ok0 := t0[c]
		b, ok1 := t1[c]
		if !ok0 || !ok1 || b[1] < a[1] || b[0] < a[0] {
			return -1
		}
		busy += b[0] - a[0]
		total += b[1] - a[1]
	}
	if total == 0 {
		return -1
	}
	return float64(busy) / float64(total)
}

// parseCPUList reads taskset's CPU list syntax: "1", "0-1", "0,2-3".
func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %v", s, err)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= z; c++ {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func cpuListString(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// buildRevision builds the module at root as it is at git revision ref: the revision's
// tree (git archive, so the repository's worktrees and index are untouched) is unpacked
// into a directory under dir, built there with goBuild into dir/name, and removed. It
// returns the binary and the full commit id.
func buildRevision(ctx context.Context, root, ref, dir, name string) (bin, commit string, err error) {
	if commit, err = resolveCommit(ctx, root, ref); err != nil {
		return "", "", err
	}
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", "", fmt.Errorf("git rev-parse --show-toplevel: %v", err)
	}
	// The module may sit below the repository's top; git archive run there would pack only
	// that subtree, so the whole tree is unpacked and the module found in it.
	top := strings.TrimSpace(string(out))
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", "", err
	}
	rel, err := filepath.Rel(top, real)
	if err != nil {
		return "", "", err
	}
	src, err := os.MkdirTemp(dir, "src-"+commit[:12]+"-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(src)
	if err := gitArchive(ctx, top, commit, src); err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, name)
	if err := goBuild(ctx, filepath.Join(src, rel), bin); err != nil {
		return "", "", fmt.Errorf("building %s (%s): %w", ref, commit[:12], err)
	}
	return bin, commit, nil
}

// resolveCommit is the full id of the commit ref names.
func resolveCommit(ctx context.Context, root, ref string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", ref+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("git revision %q: not a commit of the repository at %s", ref, root)
	}
	return strings.TrimSpace(string(out)), nil
}

// gitArchive unpacks commit's tree into dst.
func gitArchive(ctx context.Context, root, commit, dst string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	uerr := untar(pipe, dst)
	if uerr != nil {
		io.Copy(io.Discard, pipe) // let git finish writing before Wait
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", commit, err, strings.TrimSpace(stderr.String()))
	}
	return uerr
}

func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("git archive: %v", err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("git archive: entry %q outside the tree", h.Name)
		}
		p := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		}
		// The pax header git writes (the commit id) and other kinds carry no file.
	}
}

// goBuild builds the main package in dir into out, with the same flags for both sides of
// a comparison: -trimpath and no VCS stamp, so the same source gives the same binary
// wherever it was unpacked.
func goBuild(ctx context.Context, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-o", out, ".")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}

func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "?"
	}
	return hex.EncodeToString(h.Sum(nil))
}

// describeWorkTree names the working tree's build: HEAD and how many paths differ from it
// (changed or untracked, as git status counts them).
func describeWorkTree(ctx context.Context, root string) string {
	head, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "working tree"
	}
	st, _ := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain").Output()
	n := 0
	for _, l := range strings.Split(string(st), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	if n == 0 {
		return fmt.Sprintf("working tree (= HEAD %s)", strings.TrimSpace(string(head)))
	}
	return fmt.Sprintf("working tree (HEAD %s + %d changed or untracked paths)", strings.TrimSpace(string(head)), n)
}

// machineLock keeps two benches on one machine from measuring at once: both pin their
// gateways to CPU 0 and their load to CPU 1, so each would read the other as noise. It
// waits (saying for whom) until no other bench holds the lock file at path, or ctx ends.
func machineLock(ctx context.Context, path string) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("bench lock %s: %v", path, err)
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("bench lock %s: %v", path, err)
		}
		if !said {
			holder, _ := os.ReadFile(path)
			fmt.Fprintf(os.Stderr, "bench: another bench is measuring on this machine (%s); waiting for it (%s)\n",
				strings.TrimSpace(string(holder)), path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d, %s", os.Getpid(), strings.Join(os.Args[1:], " "))), 0)
	return func() { f.Close() }, nil // closing the file releases the lock
}
