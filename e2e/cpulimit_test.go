package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"tollgate/infra/testenv"
)

// TestEdgeProcsFollowCPULimit: an edge in a container limited to one CPU (a cgroup's CPU
// quota, as the container runtime sets it) runs one P when started as the deploy files
// start it, with GOMAXPROCS taken from limits.cpu; left to itself, Go reads the quota but
// never goes below two Ps, which on one core's quota means throttling, so the deploy
// files cannot rely on it. (Limits of two cores and more Go follows by itself; this
// machine has too few CPUs to show it.)
func TestEdgeProcsFollowCPULimit(t *testing.T) {
	t.Parallel()
	if runtime.NumCPU() < 2 {
		t.Skip("needs a machine of two or more CPUs to tell a limit of one from none")
	}
	cg := newCPUCgroup(t)
	cg.limit(t, 1)
	s := newStack(t)
	s.startAPI()
	s.edgeWrap = cg.wrap()
	procs := func(p *proc) float64 {
		_, body := adminGet(t, p.adminAddr, "/metrics")
		return sampleOf(body, "go_sched_gomaxprocs_threads")
	}

	// What the kubelet gives the container for limits.cpu "1" (divisor 1).
	p, _ := s.startEdge("GOMAXPROCS=1")
	if v := procs(p); v != 1 {
		t.Errorf("go_sched_gomaxprocs_threads = %v with the limit's GOMAXPROCS, want 1", v)
	}
	if !regexp.MustCompile(`"procs":1\b`).MatchString(p.output.String()) {
		t.Errorf("the edge's start line does not report procs 1")
	}
	p.stopClean(t, stopTimeout)

	p, _ = s.startEdge()
	if v := procs(p); v != 2 {
		t.Errorf("go_sched_gomaxprocs_threads = %v under a one-CPU quota without GOMAXPROCS, want Go's floor of 2", v)
	}
}

// cpuCgroup is a cgroup with the cpu controller that the test creates and removes (cgroup
// v1's cpu hierarchy or v2's unified one).
type cpuCgroup struct {
	dir string
	v2  bool
}

// newCPUCgroup skips the test when this process cannot create one (not root, or no
// writable cpu controller), as on a desktop; the CI machines can.
func newCPUCgroup(t *testing.T) *cpuCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	name := testenv.Name("tollgate_test_")
	var cg cpuCgroup
	switch {
	case fileExists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
		cg.dir = filepath.Join("/sys/fs/cgroup/cpu", name)
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		cg.dir, cg.v2 = filepath.Join("/sys/fs/cgroup", name), true
	default:
		t.Skip("no cgroup cpu controller mounted at /sys/fs/cgroup")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	if cg.v2 && !fileExists(filepath.Join(cg.dir, "cpu.max")) {
		_ = os.Remove(cg.dir)
		t.Skip("cgroup v2 without the cpu controller delegated to children")
	}
	// Registered before any process is started in it, so it runs after they are stopped.
	t.Cleanup(func() {
		var err error
		for range 50 { // a killed process leaves its cgroup a moment after wait returns
			if err = os.Remove(cg.dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("remove cgroup %s: %v", cg.dir, err)
	})
	return &cg
}

// limit sets the group's CPU bandwidth to cpus cores; 0 lifts the limit.
func (c *cpuCgroup) limit(t *testing.T, cpus int) {
	t.Helper()
	const period = 100000 // µs, the kernel's default
	write := func(file, value string) {
		if err := os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0o644); err != nil {
			t.Fatalf("cgroup %s: %v", file, err)
		}
	}
	switch {
	case c.v2 && cpus == 0:
		write("cpu.max", "max "+strconv.Itoa(period))
	case c.v2:
		write("cpu.max", strconv.Itoa(cpus*period)+" "+strconv.Itoa(period))
	case cpus == 0:
		write("cpu.cfs_quota_us", "-1")
	default:
		write("cpu.cfs_period_us", strconv.Itoa(period))
		write("cpu.cfs_quota_us", strconv.Itoa(cpus*period))
	}
}

// wrap is a command prefix that moves the process into the group and then execs the rest
// of its command line, so the program's runtime starts already limited.
func (c *cpuCgroup) wrap() []string {
	return []string{"/bin/sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", filepath.Join(c.dir, "cgroup.procs")}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
