package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"tollgate/infra/testenv"
)

// bin is the tollgate binary TestMain built; edgeBin the tollgate-edge binary (the
// edge alone, which the deploy files run).
var bin, edgeBin string

// raceBuild: the binary was built with -race (E2E_RACE=1).
var raceBuild = os.Getenv("E2E_RACE") == "1"

// Deadlines.
var (
	// applyDeadline is how soon a config change made through the api must show at the
	// edge: the product's 1 s, widened under the race detector (see the package doc).
	applyDeadline = func() time.Duration {
		if raceBuild {
			return 3 * time.Second
		}
		return time.Second
	}()
	readyTimeout = 30 * time.Second // a process answering /readyz 200
	stopTimeout  = 30 * time.Second // SIGTERM to exit; the product drains for up to 25 s
	pollEvery    = 10 * time.Millisecond
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	// The CLI runs of the tests must not find a `tollgate dev` the developer runs.
	os.Setenv("TOLLGATE_DEV_STATE", "off")
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "tollgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, edgeBin = filepath.Join(dir, "tollgate"), filepath.Join(dir, "tollgate-edge")
	start := time.Now()
	for out, pkg := range map[string]string{bin: ".", edgeBin: "./cmd/tollgate-edge"} {
		args := []string{"build", "-o", out}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s (in %s): %v\n", cmd, root, err)
			return 1
		}
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "e2e: built %s and %s (race=%v) in %s\n", bin, edgeBin, raceBuild, time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}

// repoRoot is the module root: the nearest parent of the package directory with go.mod.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Processes

// syncBuffer is a bytes.Buffer safe for the process's writers and the test's readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is one running tollgate process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer // stdout alone (the dev banner)
	output *syncBuffer // stdout and stderr interleaved, for failure reports
	done   chan struct{}
	err    error // cmd.Wait's result, once done is closed

	addr      string // api: the management API; edge: the public port
	adminAddr string // edge: the admin port
}

// startProc starts bin with args and env (on top of the test process's environment minus
// every TOLLGATE_ variable) in its own process group. Its output is printed if the test
// fails, and it is stopped (SIGTERM, then SIGKILL) when the test ends; a data race it
// reports fails the test.
func startProc(t *testing.T, name string, args []string, env []string) *proc {
	t.Helper()
	return startArgv(t, name, append([]string{bin}, args...), env)
}

// startArgv is startProc for a command line of its own: argv[0] is the program (a
// wrapper that execs bin, say).
func startArgv(t *testing.T, name string, argv []string, env []string) *proc {
	t.Helper()
	args := argv[1:]
	p := &proc{name: name, stdout: &syncBuffer{}, output: &syncBuffer{}, done: make(chan struct{})}
	cmd := exec.Command(argv[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLLGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if raceBuild && os.Getenv("GORACE") == "" {
		// The race runtime sleeps 1 s at exit by default; a report fails the test anyway.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	// Admin listeners on any free port unless env names one: several apis and billings
	// run at once.
	cmd.Env = append(cmd.Env, "TOLLGATE_API_ADMIN_ADDR=127.0.0.1:0", "TOLLGATE_BILLING_ADMIN_ADDR=127.0.0.1:0")
	// Nor may dev stacks share the demo upstream's port or the state file in the home
	// directory, which would also point the tests' CLI runs at a test's stack.
	cmd.Env = append(cmd.Env, "TOLLGATE_DEV_UPSTREAM_ADDR=127.0.0.1:0", "TOLLGATE_DEV_STATE=off")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout = io.MultiWriter(p.stdout, p.output)
	cmd.Stderr = p.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("----- output of %s (%s) -----\n%s----- end of %s -----", name, strings.Join(args, " "), p.output.String(), name)
		}
	})
	t.Cleanup(func() {
		p.stop(t, stopTimeout)
		if strings.Contains(p.output.String(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race (see its output)", name)
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the process's exit status; -1 if it was killed by a signal.
func (p *proc) exitCode() int { return p.cmd.ProcessState.ExitCode() }

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

// stop sends SIGTERM and waits up to timeout, then SIGKILL. It reports whether the
// process exited by itself within timeout.
func (p *proc) stop(t *testing.T, timeout time.Duration) bool {
	if p.exited() {
		return true
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
	}
	t.Logf("%s did not exit within %s of SIGTERM; killing it", p.name, timeout)
	p.signal(syscall.SIGKILL)
	<-p.done
	return false
}

// stopClean stops the process and fails the test unless it exits 0 within timeout.
func (p *proc) stopClean(t *testing.T, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	if !p.stop(t, timeout) {
		t.Fatalf("%s: still running %s after SIGTERM", p.name, timeout)
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("%s: exit status %d after SIGTERM (%v), want 0", p.name, code, p.err)
	}
	t.Logf("%s exited 0 %s after SIGTERM", p.name, time.Since(start).Round(time.Millisecond))
}

// waitExit waits up to timeout for the process to exit by itself.
func (p *proc) waitExit(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %s", p.name, timeout)
	}
}

func (p *proc) bindFailed() bool {
	return p.exited() && strings.Contains(p.output.String(), "address already in use")
}

// waitReady polls url until it answers 200 with a body saying "status":"ready" (every
// /readyz of ours does), failing early if the process exits. A bare 200 is not enough:
// freeAddr's port was free a moment ago, but before the process binds it another
// program may get it from the kernel (a test's httptest upstream, which answers any
// path), and a 200 from that impostor would pass for the process's own while the
// process fails to bind and exits.
func (p *proc) waitReady(url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if p.exited() {
			return fmt.Errorf("%s exited (%v) before %s answered 200", p.name, p.err, url)
		}
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"status":"ready"`)) {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not 200 within %s (last: %s)", p.name, url, timeout, last)
		}
		time.Sleep(pollEvery)
	}
}

// handedOut holds every port freeAddr has returned in this test binary. The kernel
// hands a just-closed ephemeral port out again readily, so without it two processes of
// one stack (an api and its edge's admin port, say) could be given the same port.
var handedOut struct {
	sync.Mutex
	ports map[string]bool
}

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago and that no
// other caller in this binary was given. Another program may still take it before the
// process binds; the start helpers retry then.
func freeAddr(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[string]bool{}
	}
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if !handedOut.ports[portOf(addr)] {
			handedOut.ports[portOf(addr)] = true
			return addr
		}
	}
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// ---------------------------------------------------------------------------------------
// Stacks

// stack is one deployment: a database, a NATS server, a bucket prefix, an admin token,
// and the api and edge processes started on them.
type stack struct {
	t        *testing.T
	dbURL    string
	ns       *server.Server
	prefix   string
	token    string
	edgeAddr string // the deployment's edge addresses (the api is told them too)
	edgeAdm  string
	edgeWrap []string // if set, startEdge runs edgeWrap followed by bin and its arguments
	leanEdge bool     // startEdge runs tollgate-edge rather than tollgate edge
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{
		t:        t,
		dbURL:    testenv.Postgres(t),
		ns:       testenv.NATS(t),
		prefix:   testenv.Name("e2e_"),
		token:    testenv.Name("tgadm_e2e_"),
		edgeAddr: freeAddr(t),
		edgeAdm:  freeAddr(t),
	}
	return s
}

func (s *stack) bucket() string  { return s.prefix + "_config" }
func (s *stack) natsURL() string { return s.ns.ClientURL() }

// env is the environment of a process of the stack, overridden by extra.
func (s *stack) env(extra ...string) []string {
	env := []string{
		"TOLLGATE_DATABASE_URL=" + s.dbURL,
		"TOLLGATE_NATS_URL=" + s.natsURL(),
		"TOLLGATE_NATS_PREFIX=" + s.prefix,
		"TOLLGATE_ADMIN_TOKEN=" + s.token,
		"TOLLGATE_EDGE_ADDR=" + s.edgeAddr,
		"TOLLGATE_EDGE_ADMIN_ADDR=" + s.edgeAdm,
		"TOLLGATE_UPSTREAM_ALLOW_CIDRS=127.0.0.0/8",
		"TOLLGATE_EDGE_DOMAIN=localhost",
	}
	return append(env, extra...) // later entries win in exec's environment
}

// startAPI starts `tollgate api` on a free port and waits for its /readyz.
func (s *stack) startAPI(extra ...string) (*proc, *apiClient) {
	t := s.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		addr := freeAddr(t)
		p := startProc(t, fmt.Sprintf("api@%s", addr), []string{"api"},
			s.env(append([]string{"TOLLGATE_API_ADDR=" + addr}, extra...)...))
		err := p.waitReady("http://"+addr+"/readyz", readyTimeout)
		if err == nil {
			p.addr = addr
			return p, &apiClient{t: t, base: "http://" + addr, token: s.token, hc: &http.Client{Timeout: 30 * time.Second}}
		}
		if p.bindFailed() && attempt < 5 {
			continue
		}
		t.Fatalf("api did not become ready: %v (its output is below)", err)
	}
}

// startEdge starts `tollgate edge` (tollgate-edge with leanEdge) on the stack's edge
// addresses (new ones if those are taken) and waits for its /readyz, which answers 200
// once the bucket is loaded.
func (s *stack) startEdge(extra ...string) (*proc, *edgeClient) {
	t := s.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		// A meter spool of the test's own (extra may name another, to keep one across restarts).
		spool := "TOLLGATE_METER_SPOOL_DIR=" + t.TempDir()
		argv := append(append(slices.Clone(s.edgeWrap), bin), "edge")
		if s.leanEdge {
			argv = append(slices.Clone(s.edgeWrap), edgeBin)
		}
		p := startArgv(t, fmt.Sprintf("edge@%s", s.edgeAddr), argv, s.env(append([]string{spool}, extra...)...))
		err := p.waitReady("http://"+s.edgeAdm+"/readyz", readyTimeout)
		if err == nil {
			p.addr, p.adminAddr = s.edgeAddr, s.edgeAdm
			return p, newEdgeClient(s.edgeAddr)
		}
		if p.bindFailed() && attempt < 5 {
			s.edgeAddr, s.edgeAdm = freeAddr(t), freeAddr(t)
			continue
		}
		t.Fatalf("edge did not become ready: %v (its output is below)", err)
	}
}

// ---------------------------------------------------------------------------------------
// Management API client

type apiClient struct {
	t     *testing.T
	base  string
	token string
	hc    *http.Client
}

type apiResp struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any // nil unless the body is a JSON object
}

func (r apiResp) String() string { return fmt.Sprintf("%d %s", r.Status, r.Raw) }

// call sends one request; body, if not nil, is sent as JSON. Transport errors fail the
// test.
func (c *apiClient) call(method, path string, body any, header ...string) apiResp {
	c.t.Helper()
	resp, err := c.try(method, path, body, header...)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func (c *apiClient) try(method, path string, body any, header ...string) (apiResp, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return apiResp{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return apiResp{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return apiResp{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResp{}, err
	}
	r := apiResp{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r, nil
}

// must sends a request and fails the test unless the status is want; it returns the body.
func (c *apiClient) must(want int, method, path string, body any, header ...string) map[string]any {
	c.t.Helper()
	r := c.call(method, path, body, header...)
	if r.Status != want {
		c.t.Fatalf("%s %s: got %s, want %d", method, path, r, want)
	}
	return r.Body
}

// Shorthands for the objects the tests make.

// createTenant creates a tenant on the platform plan "unlimited", so the tests that are
// not about flow control are not limited by the default plan (free: 10 requests/s).
func (c *apiClient) createTenant(slug string) map[string]any {
	c.t.Helper()
	return c.must(201, "POST", "/v1/tenants", map[string]any{"slug": slug, "name": "E2E " + slug, "plan": "unlimited"})
}

// routeSpec is a route body: paths, one upstream target, auth, and extra fields.
func routeSpec(name, path, upstream, auth string, extra ...any) map[string]any {
	r := map[string]any{
		"name":     name,
		"paths":    []string{path},
		"upstream": map[string]any{"targets": []map[string]any{{"url": upstream, "weight": 1}}},
		"auth":     auth,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		r[extra[i].(string)] = extra[i+1]
	}
	return r
}

func (c *apiClient) createRoute(slug string, spec map[string]any) map[string]any {
	c.t.Helper()
	return c.must(201, "POST", "/v1/tenants/"+slug+"/routes", spec)
}

func (c *apiClient) createConsumer(slug, name string) string {
	c.t.Helper()
	return str(c.t, c.must(201, "POST", "/v1/tenants/"+slug+"/consumers", map[string]any{"name": name}), "id")
}

// createKey returns the key's id and its plaintext.
func (c *apiClient) createKey(slug, consumerID string) (id, key string) {
	c.t.Helper()
	b := c.must(201, "POST", "/v1/tenants/"+slug+"/consumers/"+consumerID+"/keys", map[string]any{})
	return str(c.t, b, "id"), str(c.t, b, "key")
}

// str is body[field] as a non-empty string.
func str(t *testing.T, body map[string]any, field string) string {
	t.Helper()
	s, _ := body[field].(string)
	if s == "" {
		t.Fatalf("response has no string %q: %v", field, body)
	}
	return s
}

func num(t *testing.T, body map[string]any, field string) int64 {
	t.Helper()
	f, ok := body[field].(float64)
	if !ok {
		t.Fatalf("response has no number %q: %v", field, body)
	}
	return int64(f)
}

// ---------------------------------------------------------------------------------------
// Edge client

// edgeClient calls the edge's public port as http://<slug>.localhost:<port>: it dials
// 127.0.0.1:<port> and sends Host: <slug>.localhost:<port> (see the package doc).
type edgeClient struct {
	addr string
	hc   *http.Client
}

func newEdgeClient(addr string) *edgeClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &edgeClient{addr: addr, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

type edgeResp struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *edgeResp) String() string {
	if r == nil {
		return "<no response>"
	}
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// do sends method path to the tenant slug; header is name, value pairs.
func (e *edgeClient) do(method, slug, path string, header ...string) (*edgeResp, error) {
	return e.doCtx(context.Background(), method, slug, path, header...)
}

func (e *edgeClient) doCtx(ctx context.Context, method, slug, path string, header ...string) (*edgeResp, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+e.addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Host = slug + ".localhost:" + portOf(e.addr)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &edgeResp{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

func (e *edgeClient) get(t *testing.T, slug, path string, header ...string) *edgeResp {
	t.Helper()
	r, err := e.do("GET", slug, path, header...)
	if err != nil {
		t.Fatalf("GET %s.localhost%s: %v", slug, path, err)
	}
	return r
}

func (e *edgeClient) close() { e.hc.CloseIdleConnections() }

// checkEnvelope returns an error unless r is the gateway's error envelope with status
// and code: exactly {"error":{"code","message","request_id"}}, all non-empty strings, JSON
// content type, and request_id equal to X-Request-Id when that header is set.
func checkEnvelope(r *edgeResp, status int, code string) error {
	if r.Status != status {
		return fmt.Errorf("status %d, want %d (%s)", r.Status, status, r)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("Content-Type %q, want application/json (%s)", ct, r)
	}
	var env map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	if err := dec.Decode(&env); err != nil {
		return fmt.Errorf("body is not an error envelope: %v (%s)", err, r)
	}
	if len(env) != 1 || env["error"] == nil {
		return fmt.Errorf("body has keys other than \"error\": %s", r)
	}
	e := env["error"]
	if len(e) != 3 {
		return fmt.Errorf("error object has %d fields, want code, message, request_id: %s", len(e), r)
	}
	for _, f := range []string{"code", "message", "request_id"} {
		if s, _ := e[f].(string); s == "" {
			return fmt.Errorf("error.%s is not a non-empty string: %s", f, r)
		}
	}
	if e["code"] != code {
		return fmt.Errorf("error.code %q, want %q (%s)", e["code"], code, r)
	}
	if id := r.Header.Get("X-Request-Id"); id != "" && id != e["request_id"] {
		return fmt.Errorf("error.request_id %q differs from X-Request-Id %q", e["request_id"], id)
	}
	return nil
}

func wantEnvelope(t *testing.T, r *edgeResp, status int, code string) {
	t.Helper()
	if err := checkEnvelope(r, status, code); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------------------
// Upstreams

// echoed is what the echo upstream answers: what it received.
type echoed struct {
	Upstream string              `json:"upstream"`
	Method   string              `json:"method"`
	Path     string              `json:"path"`
	RawPath  string              `json:"raw_path"`
	Query    string              `json:"query"`
	Headers  map[string][]string `json:"headers"`
}

// echoUpstream is an upstream that answers 200 with an echoed naming itself.
func echoUpstream(t *testing.T, name string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", name)
		json.NewEncoder(w).Encode(echoed{
			Upstream: name, Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(),
			Query: r.URL.RawQuery, Headers: r.Header,
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func decodeEcho(t *testing.T, r *edgeResp) echoed {
	t.Helper()
	var e echoed
	if r.Status != 200 {
		t.Fatalf("want 200 from the upstream, got %s", r)
	}
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Upstream == "" {
		t.Fatalf("not an echo upstream's answer (%v): %s", err, r)
	}
	return e
}

// slowUpstream answers 200 after delay (or gives up when the client goes away). Each
// request's arrival is sent on the returned channel (without blocking).
func slowUpstream(t *testing.T, delay time.Duration) (*httptest.Server, <-chan string) {
	t.Helper()
	arrived := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- r.URL.Path:
		default:
		}
		select {
		case <-time.After(delay):
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "slow hello")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return srv, arrived
}

// downUpstream is a URL on which nothing listens.
func downUpstream(t *testing.T) string {
	return "http://" + freeAddr(t)
}

// ---------------------------------------------------------------------------------------
// Polling

// eventually calls fn every pollEvery until it returns nil, and fails the test with fn's
// last error if that does not happen within timeout. It returns how long it took.
func eventually(t *testing.T, timeout time.Duration, what string, fn func() error) time.Duration {
	t.Helper()
	d, err := poll(timeout, fn)
	if err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
	return d
}

// poll is eventually without the test: it returns fn's last error on timeout.
func poll(timeout time.Duration, fn func() error) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := fn()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), err
		}
		time.Sleep(pollEvery)
	}
}

// served returns a poll function that succeeds once the edge answers slug path with 200
// from the upstream named upstream ("" = any upstream).
func served(e *edgeClient, slug, path, upstream string, header ...string) func() error {
	return func() error {
		r, err := e.do("GET", slug, path, header...)
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("GET %s: %s", path, r)
		}
		if upstream != "" {
			if got := r.Header.Get("X-Upstream"); got != upstream {
				return fmt.Errorf("GET %s: served by upstream %q, want %q", path, got, upstream)
			}
		}
		return nil
	}
}

// answers returns a poll function that succeeds once the edge answers slug path with the
// error envelope status/code.
func answers(e *edgeClient, slug, path string, status int, code string, header ...string) func() error {
	return func() error {
		r, err := e.do("GET", slug, path, header...)
		if err != nil {
			return err
		}
		return checkEnvelope(r, status, code)
	}
}

var errNotYet = errors.New("not yet")
