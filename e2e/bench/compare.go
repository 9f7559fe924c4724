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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// compareSettings are -compare's flags; its rounds are -rounds and its flagging -busy and
// -load-max, shared with the sweep (rounds.go).
type compareSettings struct {
	ref  string // A: a git revision
	refB string // B: a git revision; empty: the working tree (or -bin)
	// envA and envB are comma-separated VAR=value settings for one side's edge only (on
	// top of -edge-env): one build with a switch on and off is -compare HEAD -compare-b
	// HEAD -compare-env-b SWITCH=off.
	envA, envB string
}

// compareDefaultScenarios are the ones -compare measures when -scenarios is not given.
var compareDefaultScenarios = []string{"S1", "S2", "S2j", "S4r"}

func (c *compareSettings) register(fs *flag.FlagSet) {
	fs.StringVar(&c.ref, "compare", "", "compare Tollgate built from this git revision (A) with the working tree's build (B) in interleaved rounds; "+
		"proxy scenarios only, S6, S1h2 and S1grpc included (default "+strings.Join(compareDefaultScenarios, ",")+"), no nginx unless -gateways names it")
	fs.StringVar(&c.refB, "compare-b", "", "-compare: build B from this git revision instead of the working tree (-compare HEAD -compare-b HEAD: the machine's own noise)")
	fs.StringVar(&c.envA, "compare-env-a", "", "-compare: comma-separated VAR=value settings added to A's edge only (after -edge-env)")
	fs.StringVar(&c.envB, "compare-env-b", "", "-compare: comma-separated VAR=value settings added to B's edge only (-compare HEAD -compare-b HEAD -compare-env-b TOLLGATE_EDGE_RAW_IO=off: what a switch saves)")
}

// setup checks -compare's flags and settles the scenarios and gateways it measures; without
// -compare it only refuses the flags that need it.
func (c *compareSettings) setup(b *bench, scs []string) ([]string, error) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.ref == "" {
		for _, f := range []string{"compare-b", "compare-env-a", "compare-env-b"} {
			if set[f] {
				return nil, fmt.Errorf("-%s is a setting of -compare, which is not given", f)
			}
		}
		return scs, nil
	}
	if b.rnd.rounds < minRounds {
		return nil, fmt.Errorf("-rounds: %d; -compare needs at least %d", b.rnd.rounds, minRounds)
	}
	if !set["scenarios"] {
		scs = compareDefaultScenarios
	}
	for _, s := range scs {
		if !isPerf(s) {
			return nil, fmt.Errorf("-compare: %s is not a proxy scenario (S1, S1f, S1h, S1h2, S1grpc, S2, S2hmac, S2j, S2l, S2x, S2a, S3, S4, S4r, S5, S6, S9)", s)
		}
	}
	for _, e := range append(envList(c.envA), envList(c.envB)...) {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return nil, fmt.Errorf("-compare-env-a/-b: %q is not VAR=value", e)
		}
	}
	// -compare compares Tollgate builds; nginx only when asked for by name, as a reference.
	b.gateways = []string{"tollgate"}
	if set["gateways"] {
		if !strings.Contains(","+flag.Lookup("gateways").Value.String()+",", ",tollgate,") {
			return nil, fmt.Errorf("-compare measures Tollgate builds: -gateways must include tollgate")
		}
		if strings.Contains(","+flag.Lookup("gateways").Value.String()+",", ",nginx,") {
			// nginx's HTTP/2 and gRPC listeners are the sweep's (perf.go); -compare's
			// nginx serves HTTP/1.1 and S9's TLS only.
			if h := slices.IndexFunc(scs, isH2); h >= 0 {
				return nil, fmt.Errorf("-compare: %s is compared between Tollgate builds only; measure it beside nginx in the sweep (without -compare)", scs[h])
			}
			b.gateways = []string{"tollgate", "nginx"}
		}
	}
	return scs, nil
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

// lockMachine takes the machine for this bench's measurements, waiting while another bench
// holds it, and releases it with the run's cleanups, after every process the run started.
// The sweeps call it once their builds are done: a build takes minutes on a busy machine,
// and holding the lock through it would only keep another bench from measuring.
func (b *bench) lockMachine(ctx context.Context) error {
	release, err := machineLock(ctx, filepath.Join(os.TempDir(), "tollgate-bench.lock"))
	if err != nil {
		return err
	}
	b.Clean.Add(release)
	return nil
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
