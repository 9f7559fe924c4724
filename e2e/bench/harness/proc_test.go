package harness

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A master that stops its worker on SIGTERM, as nginx's does, and cannot on SIGKILL.
const forkingMaster = `sleep 600 & echo "worker $!"; trap 'kill $!; exit 0' TERM; wait`

// TestDeathSignalStopsWorkers: when the bench dies without stopping what it started, a
// process started with SIGTERM as its parent-death signal takes its workers with it, and
// one started with SIGKILL leaves them behind (which is why nginx gets SIGTERM).
func TestDeathSignalStopsWorkers(t *testing.T) {
	if os.Getenv("BENCH_DEATHSIG_HELPER") != "" {
		deathSigHelper()
		return
	}
	for _, c := range []struct {
		sig       string
		survivors bool
	}{{"TERM", false}, {"KILL", true}} {
		t.Run(c.sig, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestDeathSignalStopsWorkers$")
			cmd.Env = append(os.Environ(), "BENCH_DEATHSIG_HELPER="+c.sig, "BENCH_DEATHSIG_DIR="+t.TempDir())
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			worker := 0
			for sc := bufio.NewScanner(out); worker == 0 && sc.Scan(); {
				if v, ok := strings.CutPrefix(sc.Text(), "worker "); ok {
					worker, _ = strconv.Atoi(v)
				}
			}
			if worker == 0 {
				_ = cmd.Process.Kill()
				t.Fatalf("the helper gave no worker pid (%v)", cmd.Wait())
			}
			defer syscall.Kill(worker, syscall.SIGKILL)
			_ = cmd.Process.Kill() // the bench dies without its cleanups
			_ = cmd.Wait()
			// A worker that is to go goes within milliseconds; give it ten seconds on a
			// loaded machine, and one that is to stay two.
			wait := 10 * time.Second
			if c.survivors {
				wait = 2 * time.Second
			}
			gone := false
			for end := time.Now().Add(wait); time.Now().Before(end) && !gone; time.Sleep(20 * time.Millisecond) {
				gone = !alive(worker)
			}
			if gone == c.survivors {
				t.Errorf("death signal SIG%s: worker %d gone = %v, want %v", c.sig, worker, gone, !c.survivors)
			}
		})
	}
}

// deathSigHelper plays the bench: it starts the forking master, passes on the worker's
// pid, and waits to be killed.
func deathSigHelper() {
	sig := syscall.SIGTERM
	if os.Getenv("BENCH_DEATHSIG_HELPER") == "KILL" {
		sig = syscall.SIGKILL
	}
	logPath := filepath.Join(os.Getenv("BENCH_DEATHSIG_DIR"), "master.log")
	if _, err := StartProcSig("forking master", logPath, "", os.Environ(), sig, "sh", "-c", forkingMaster); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		if line, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "worker "); ok {
			fmt.Println("worker", line)
			time.Sleep(time.Minute)
		}
	}
	os.Exit(1)
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z"
}

// A process outlives the thread of the goroutine that started it: a goroutine that ends
// locked to its thread ends the thread (all but the main thread), and a child forked from
// that thread would get its parent-death signal (SIGKILL) then. Four such goroutines, so
// that at least one runs on a thread that ends.
func TestChildOutlivesStartersThread(t *testing.T) {
	dir := t.TempDir()
	var procs []*Proc
	for i := range 4 {
		started := make(chan *Proc, 1)
		errs := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			p, err := StartProc("sleeper", filepath.Join(dir, fmt.Sprint("sleeper-", i, ".log")), "", nil, "sleep", "60")
			if err != nil {
				errs <- err
				return
			}
			started <- p
		}()
		select {
		case err := <-errs:
			t.Fatal(err)
		case p := <-started:
			procs = append(procs, p)
			defer p.Stop()
		}
	}
	// The starters' threads have ended by now or soon; a signal one set off arrives at once.
	time.Sleep(500 * time.Millisecond)
	for i, p := range procs {
		if p.Exited() {
			t.Errorf("child %d ended with its starter's thread: %v", i, p.err)
		}
	}
}

func TestCPUSince(t *testing.T) {
	const tick = 100
	for _, c := range []struct {
		u0, u Usage
		want  float64
	}{
		{Usage{Ticks: 100, NS: 1_000_000_000}, Usage{Ticks: 201, NS: 2_004_500_000}, 1.0045}, // ns where both have it
		{Usage{Ticks: 100}, Usage{Ticks: 201, NS: 2_004_500_000}, 1.01},                      // ticks when one lacks ns
		{Usage{Ticks: 100, NS: 1_000_000_000}, Usage{Ticks: 201, NS: 1_500_000_000}, 1.01},   // a thread's run time lost: ticks
	} {
		if got := c.u.CPUSince(c.u0, tick); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("CPUSince(%+v, %+v) = %v, want %v", c.u0, c.u, got, c.want)
		}
	}
	// This process's run time grows, in nanoseconds, as it burns CPU (however busy the
	// machine: the loop runs until it has, or gives up after a minute).
	n0 := RunNS(os.Getpid())
	if n0 <= 0 {
		t.Fatalf("RunNS of this process = %d", n0)
	}
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		if RunNS(os.Getpid())-n0 >= int64(10*time.Millisecond) {
			return
		}
	}
	t.Errorf("RunNS: still within 10 ms of %d after a minute of spinning", n0)
}
