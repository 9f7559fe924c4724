package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBinDir is where initdb and pg_ctl are: TOLLGATE_TEST_PG_BIN, else the newest
// Debian /usr/lib/postgresql/<version>/bin, else the directory of initdb on PATH.
func PostgresBinDir() (string, error) {
	if d := os.Getenv("TOLLGATE_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// The newest version first: 9.6 < 10 < 15 by number, not by string.
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no initdb/pg_ctl: install postgresql (apt-get install postgresql) or set TOLLGATE_TEST_PG_BIN")
}

func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// PGServer is a Postgres instance of the test's own (initdb into a temporary directory,
// trust authentication, a loopback port and a unix socket in that directory), so a test
// can stop, start and freeze it without touching the machine's server. It is stopped and
// its files removed when the test ends.
type PGServer struct {
	tb     testing.TB
	bin    string
	data   string
	socket string
	log    string
	port   int
	cred   *syscall.Credential // postgres refuses to run as root: run as the postgres user

	mu      sync.Mutex
	running bool
	frozen  []int // pids stopped by Freeze, postmaster first
}

// StartPostgres initdbs and starts a private Postgres and waits until it accepts
// connections.
func StartPostgres(tb testing.TB) *PGServer {
	tb.Helper()
	bin, err := PostgresBinDir()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	base := tb.TempDir()
	s := &PGServer{tb: tb, bin: bin, data: filepath.Join(base, "data"), socket: base, log: filepath.Join(base, "postgres.log")}
	if os.Geteuid() == 0 {
		if err := s.runAsPostgres(base); err != nil {
			tb.Fatalf("testenv: %v", err)
		}
	}
	// fsync off: the test's faults are process deaths and stops, not a lost machine, and
	// the shared CI machine's disk is slow.
	if out, err := s.command("initdb", "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync").CombinedOutput(); err != nil {
		tb.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	conf := "\n# testenv\nfsync = off\nfull_page_writes = off\nmax_connections = 200\nshared_buffers = 32MB\n" +
		"listen_addresses = '127.0.0.1'\nunix_socket_directories = '" + s.socket + "'\n"
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		tb.Fatalf("testenv: postgresql.conf: %v", err)
	}
	tb.Cleanup(s.destroy)
	// A port picked free may be taken before the server binds it: try another.
	var last error
	for range 3 {
		s.port = freePort(tb)
		if last = s.start(); last == nil {
			return s
		}
	}
	tb.Fatalf("testenv: %v", last)
	return nil
}

// runAsPostgres makes base the postgres user's and lets that user reach it through the
// test's temporary directories, which are the root user's alone.
func (s *PGServer) runAsPostgres(base string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root, and initdb refuses root: no postgres user to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := os.Chown(base, uid, gid); err != nil {
		return err
	}
	top := filepath.Clean(os.TempDir())
	for d := filepath.Dir(base); strings.HasPrefix(d, top+string(filepath.Separator)); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o111); err != nil {
			return err
		}
	}
	return nil
}

func (s *PGServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	// pg_ctl and the server must not inherit a PG* setting meant for a client.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Dir = s.socket
	return cmd
}

func (s *PGServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := s.command("pg_ctl", "start", "-w", "-t", "60", "-D", s.data, "-l", s.log, "-o", "-p "+strconv.Itoa(s.port))
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(s.log)
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	s.running = true
	// pg_ctl -w waits for the postmaster, not for TCP: wait until a query answers.
	for {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			c.Close(ctx)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("postgres on port %d: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL returns the URL of database db on this server, as user postgres.
func (s *PGServer) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Port is the server's TCP port; it stays the same across Stop and Start.
func (s *PGServer) Port() int { return s.port }

// CreateDatabase creates database name and returns its URL.
func (s *PGServer) CreateDatabase(name string) string {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		s.tb.Fatalf("testenv: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		s.tb.Fatalf("testenv: create database %s: %v", name, err)
	}
	return s.URL(name)
}

// Start starts the server again after Stop, on the same port and data, and waits until it
// accepts connections.
func (s *PGServer) Start() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("testenv: %v", err)
	}
}

// Stop shuts the server down (fast: open sessions are ended, clients see their
// connections refused from then on) and returns when it has exited.
func (s *PGServer) Stop() {
	s.tb.Helper()
	if err := s.stop("fast"); err != nil {
		s.tb.Fatalf("testenv: %v", err)
	}
}

// Kill stops the server the hard way (pg_ctl stop -m immediate: no checkpoint, recovery
// at the next start), as a crash would.
func (s *PGServer) Kill() {
	s.tb.Helper()
	if err := s.stop("immediate"); err != nil {
		s.tb.Fatalf("testenv: %v", err)
	}
}

func (s *PGServer) stop(mode string) error {
	s.thaw()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	if out, err := s.command("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", s.data).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	s.running = false
	return nil
}

// Freeze stops the postmaster and every process of it with SIGSTOP: connections stay open
// and nothing answers, as on a hung machine, until Thaw.
func (s *PGServer) Freeze() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running || s.frozen != nil {
		return
	}
	pm, err := s.postmasterPID()
	if err != nil {
		s.tb.Fatalf("testenv: freeze: %v", err)
	}
	// The postmaster first, so it forks no child that the list below would miss.
	if err := syscall.Kill(pm, syscall.SIGSTOP); err != nil {
		s.tb.Fatalf("testenv: freeze: %v", err)
	}
	s.frozen = []int{pm}
	for _, pid := range childrenOf(pm) {
		if syscall.Kill(pid, syscall.SIGSTOP) == nil {
			s.frozen = append(s.frozen, pid)
		}
	}
}

// Thaw resumes what Freeze stopped.
func (s *PGServer) Thaw() { s.thaw() }

func (s *PGServer) thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Children first, so the postmaster does not find them unresponsive.
	for i := len(s.frozen) - 1; i >= 0; i-- {
		_ = syscall.Kill(s.frozen[i], syscall.SIGCONT)
	}
	s.frozen = nil
}

func (s *PGServer) destroy() {
	if err := s.stop("immediate"); err != nil {
		s.tb.Logf("testenv: %v", err)
	}
}

func (s *PGServer) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces: the fields after its closing
		// parenthesis are state, then ppid.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
