// Package harness starts and measures what the bench runs: processes in their own
// process groups (their CPU time and RSS read from /proc), Tollgate stacks on a database
// and NATS prefix of their own, nginx as upstream and as the proxy to beat, and the
// management API client the scenarios configure them with. Everything it starts is
// registered with the run's Cleanups as soon as it exists; it measures nothing itself.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cleanups runs registered undo steps in reverse order, once, whatever happened before:
// every process started, database created and bucket made is registered here as soon as
// it exists.
type Cleanups struct {
	mu  sync.Mutex
	fns []func()
}

func (c *Cleanups) Add(f func()) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

func (c *Cleanups) Run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// Proc is a process the bench started, leader of its own process group so that it and
// everything it forks (nginx's workers) are measured and killed together.
type Proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	once sync.Once
}

// StartProc starts argv in its own process group, pinned to cpus (taskset -c, exec'd, so
// the pid is the program's own) unless cpus is empty, with stdout and stderr in logPath.
// Should the bench die without stopping it (SIGKILL, a second Ctrl-C), the kernel kills
// it too (SIGKILL as its parent-death signal).
func StartProc(name, logPath, cpus string, env []string, argv ...string) (*Proc, error) {
	return StartProcSig(name, logPath, cpus, env, syscall.SIGKILL, argv...)
}

// StartProcSig is StartProc with the signal the process gets when the bench dies. A
// process that forks workers of its own (nginx) needs one it can handle: SIGKILL'd, the
// master cannot stop its workers, which then live on, holding their port and CPU.
func StartProcSig(name, logPath, cpus string, env []string, deathSig syscall.Signal, argv ...string) (*Proc, error) {
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig}
	if err := spawn(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// spawn starts cmd from the one OS thread that forks every process of the bench. The
// kernel sends a child its parent-death signal when the thread that forked it ends, not
// its process, and Go ends a thread whose goroutine exits while locked to it (the
// route-change poller's, pinned to the load CPUs): an edge forked earlier from the thread
// such a goroutine then locked was SIGKILLed in the middle of a run when the poller
// ended. The spawning thread stays locked to its goroutine and never ends.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: nothing else runs on this thread, and it never ends
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnReqs <- r
	return <-r.done
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

func (p *Proc) Pid() int { return p.cmd.Process.Pid }

func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the whole process group: SIGTERM, then SIGKILL after a grace period.
func (p *Proc) Stop() {
	p.once.Do(func() {
		pg := p.Pid()
		_ = syscall.Kill(-pg, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		// The leader may be gone while forked members linger; the group id outlives it.
		_ = syscall.Kill(-pg, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
		}
	})
}

// Failure describes a process that died or did not come up, with the end of its log.
func (p *Proc) Failure(what string) error {
	state := "still running"
	if p.Exited() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	return fmt.Errorf("%s: %s (%s); last lines of %s:\n%s", p.name, what, state, p.log, Tail(p.log, 25))
}

func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// Usage is what /proc says about a process group at one instant.
type Usage struct {
	Ticks int64 // utime+stime of every member, in clock ticks
	NS    int64 // the same time in nanoseconds: every member's threads' run time (schedstat); 0 when /proc has none
	RSSKB int64 // VmRSS summed over members
	Procs int
}

// CPUSince is the group's CPU seconds from u0 to u. It counts in nanoseconds when /proc
// gave them both times: utime+stime come in ticks of 1/tick s (10 ms), a 1% step in a
// one-second window of one busy core, where schedstat's run time is exact. A thread
// that ended between the two lost its last run time from ns but not from ticks, so ns
// is trusted only when it does not fall below what ticks say by more than two ticks.
func (u Usage) CPUSince(u0 Usage, tick int64) float64 {
	ticks := float64(u.Ticks-u0.Ticks) / float64(tick)
	if u.NS <= 0 || u0.NS <= 0 {
		return ticks
	}
	ns := float64(u.NS-u0.NS) / 1e9
	if ns < ticks-2/float64(tick) {
		return ticks
	}
	return ns
}

// RunNS sums the run time of every thread of pid (/proc/PID/task/*/schedstat, first field).
func RunNS(pid int) int64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var sum int64
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		sum += n
	}
	return sum
}

// procStat is /proc/PID/stat's fields from the state on (field 3 of proc(5) is f[0]), or
// nil when the process is gone.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name is in parentheses and may hold spaces: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// GroupUsage sums CPU time and RSS over every process whose process group is pgid.
func GroupUsage(pgid int) (Usage, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStat(pid)
		// f[0] state, f[2] pgrp, f[11] utime, f[12] stime (fields 3, 5, 14, 15 of proc(5)).
		if len(f) < 13 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		u.Ticks += ut + st
		u.NS += RunNS(pid)
		u.RSSKB += RSSKB(pid)
		u.Procs++
	}
	if u.Procs == 0 {
		return u, fmt.Errorf("no process in group %d", pgid)
	}
	return u, nil
}

func RSSKB(pid int) int64 { return statusKB(pid, "VmRSS:") }

// RSSFileKB is the part of a process's RSS that is pages of files it maps, its binary's
// above all: clean pages the kernel can drop and read again, shared with every process
// of the same binary, and mapped more or less densely from one run to the next
// (fault-around maps the neighbours of a touched page that are in the page cache).
func RSSFileKB(pid int) int64 { return statusKB(pid, "RssFile:") }

// statusKB reads one kB field of /proc/<pid>/status; 0 when it cannot.
func statusKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// ClockTicks is USER_HZ, the unit of utime and stime.
func ClockTicks() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
}

// FreePort asks the kernel for a free loopback port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitFor polls check every interval until it returns nil, the process dies, or timeout
// passes; the error says what was awaited and the last reason it was not ready.
func WaitFor(ctx context.Context, what string, timeout, interval time.Duration, p *Proc, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if p != nil && p.Exited() {
			return p.Failure(what + ": " + last.Error())
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("timed out after %s waiting for %s: %v", timeout, what, last)
			if p != nil {
				return p.Failure(err.Error())
			}
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("waiting for %s", what))
		case <-time.After(interval):
		}
	}
}

// FreeAddr is a free loopback address, host and port.
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}

// GroupRSS is the RSS of p's process group in KB; 0 when it cannot be read.
func GroupRSS(p *Proc) int64 {
	u, err := GroupUsage(p.Pid())
	if err != nil {
		return 0
	}
	return u.RSSKB
}

// Log is the path of the file that holds the process's stdout and stderr.
func (p *Proc) Log() string { return p.log }
