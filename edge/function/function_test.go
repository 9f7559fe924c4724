package function_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// newRuntime is a runtime for one test. Compiled code is shared between the tests through
// one on-disk cache, so each Go guest is compiled to machine code once per test process.
func newRuntime(t testing.TB, cfg function.Config) *function.Runtime {
	t.Helper()
	if cfg.Timeout == 0 {
		// Wall time: a loaded machine deschedules a thread for more than the default 5 ms.
		cfg.Timeout = time.Second
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = sharedCache(t)
	}
	r, err := function.NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

var (
	cacheOnce sync.Once
	cacheDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cacheDir != "" {
		_ = os.RemoveAll(cacheDir)
	}
	os.Exit(code)
}

func sharedCache(t testing.TB) string {
	cacheOnce.Do(func() {
		d, err := os.MkdirTemp("", "fncache-")
		if err != nil {
			t.Fatal(err)
		}
		cacheDir = d
	})
	return cacheDir
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// filter compiles a guest and makes a filter of it for tenant.
func filter(t testing.TB, r *function.Runtime, guest, tenant, config string, lim function.Limits) *function.Filter {
	t.Helper()
	mod := functiontest.Build(t, guest)
	m, err := r.Compile(context.Background(), sum(mod), mod)
	if err != nil {
		t.Fatalf("compile %s: %v", guest, err)
	}
	f, err := r.NewFilter(m, tenant, guest, []byte(config), lim)
	if err != nil {
		t.Fatalf("filter %s: %v", guest, err)
	}
	t.Cleanup(f.Close)
	return f
}

// roundTrip runs a whole request through f: request headers, then (unless the guest
// replied) a 200 response's headers.
func roundTrip(f *function.Filter, h *functiontest.HTTP) (time.Duration, error) {
	c, err := f.Start(h)
	if err != nil {
		return 0, err
	}
	if _, err := c.OnRequestHeaders(true); err != nil {
		c.Done()
		return 0, err
	}
	if !c.Replied() {
		h.Respond("200", "content-type", "text/plain")
		if _, err := c.OnResponseHeaders(true); err != nil {
			c.Done()
			return 0, err
		}
	}
	return c.Done(), nil
}

func reason(err error) function.Reason {
	var e *function.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func TestValidate(t *testing.T) {
	ctx := context.Background()
	for _, g := range []string{functiontest.Noop, functiontest.HMAC, functiontest.WatNoop} {
		if err := function.Validate(ctx, functiontest.Build(t, g)); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
	cases := []struct {
		name, want string
		module     []byte
	}{
		{"not wasm", "not a WebAssembly module", []byte("<html>hello</html>")},
		{"truncated", "not a valid WebAssembly module", []byte("\x00asm\x01\x00\x00\x00\x01")},
		{"huge table", "starts with 100000000 elements", functiontest.WAT(t, `(module (table 100000000 funcref))`)},
		{"lying data size", "truncated", []byte("\x00asm\x01\x00\x00\x00\x05\x03\x01\x00\x01\x0b\x09\x01\x00\x41\x00\x0b\xff\xff\xff\xff\x0f")},
		{"lying count", "declares 268435455 entries", []byte("\x00asm\x01\x00\x00\x00\x02\x05\xff\xff\xff\x7f\x00")},
		{"foreign import", "imports env.open_socket", functiontest.WAT(t, `(module
			(import "env" "open_socket" (func (param i32) (result i32)))
			(memory (export "memory") 1)
			(func (export "proxy_abi_version_0_2_1"))
			(func (export "proxy_on_context_create") (param i32 i32))
			(func (export "malloc") (param i32) (result i32) (i32.const 0)))`)},
		{"wasi files", "imports wasi_snapshot_preview1.path_open", functiontest.WAT(t, `(module
			(import "wasi_snapshot_preview1" "path_open" (func (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
			(memory (export "memory") 1)
			(func (export "proxy_abi_version_0_2_1"))
			(func (export "proxy_on_context_create") (param i32 i32))
			(func (export "malloc") (param i32) (result i32) (i32.const 0)))`)},
		{"wrong signature", "imports env.proxy_log with a signature", functiontest.WAT(t, `(module
			(import "env" "proxy_log" (func (param i32) (result i32)))
			(memory (export "memory") 1)
			(func (export "proxy_abi_version_0_2_1"))
			(func (export "proxy_on_context_create") (param i32 i32))
			(func (export "malloc") (param i32) (result i32) (i32.const 0)))`)},
		{"no abi version", "missing export proxy_abi_version_0_2_1", functiontest.WAT(t, `(module
			(memory (export "memory") 1)
			(func (export "proxy_on_context_create") (param i32 i32))
			(func (export "malloc") (param i32) (result i32) (i32.const 0)))`)},
		{"no allocator", "missing export proxy_on_memory_allocate", functiontest.WAT(t, `(module
			(memory (export "memory") 1)
			(func (export "proxy_abi_version_0_2_1"))
			(func (export "proxy_on_context_create") (param i32 i32)))`)},
		{"simd", "instruction 0xfd is not supported", functiontest.WAT(t, `(module
			(memory (export "memory") 1)
			(func (export "proxy_abi_version_0_2_1"))
			(func (export "proxy_on_context_create") (param i32 i32) (drop (v128.const i32x4 0 0 0 0)))
			(func (export "malloc") (param i32) (result i32) (i32.const 0)))`)},
		{"reserved export", "reserves", functiontest.WAT(t, `(module
			(memory (export "memory") 1)
			(global (export "tollgate_stop") (mut i32) (i32.const 0))
			(func (export "proxy_abi_version_0_2_1"))
			(func (export "proxy_on_context_create") (param i32 i32))
			(func (export "malloc") (param i32) (result i32) (i32.const 0)))`)},
		{"no memory", "missing export memory", functiontest.WAT(t, `(module
			(func (export "proxy_abi_version_0_2_1"))
			(func (export "proxy_on_context_create") (param i32 i32))
			(func (export "malloc") (param i32) (result i32) (i32.const 0)))`)},
	}
	for _, c := range cases {
		err := function.Validate(ctx, c.module)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestNoopAndHeaders(t *testing.T) {
	r := newRuntime(t, function.Config{})
	for _, g := range []string{functiontest.Noop, functiontest.WatNoop} {
		f := filter(t, r, g, "t1", "", function.Limits{})
		h := functiontest.NewHTTP("GET", "/")
		el, err := roundTrip(f, h)
		if err != nil || h.Reply != nil {
			t.Fatalf("%s: %v %+v", g, err, h.Reply)
		}
		if el <= 0 {
			t.Errorf("%s: guest time %v, want > 0", g, el)
		}
	}
	f := filter(t, r, functiontest.Headers, "t1", "", function.Limits{})
	for range 3 { // the second and third requests run on the pooled instance
		h := functiontest.NewHTTP("GET", "/")
		if _, err := roundTrip(f, h); err != nil {
			t.Fatal(err)
		}
		if v, _ := h.Get(function.RequestHeaders, "x-function"); v != "request" {
			t.Errorf("request header x-function = %q; headers %v", v, h.Maps[function.RequestHeaders])
		}
		if v, _ := h.Get(function.ResponseHeaders, "x-function"); v != "response" {
			t.Errorf("response header x-function = %q; headers %v", v, h.Maps[function.ResponseHeaders])
		}
	}
	if reqBody, respHeaders, respBody := f.Exports(); !reqBody || !respHeaders || !respBody {
		t.Errorf("Exports() = %v %v %v", reqBody, respHeaders, respBody)
	}
}

// A guest that recurses 100 deep, as legitimate code may, runs request after request on
// the same instance: every way out of a function gives its frames back.
func TestModerateRecursion(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.Nested, "t1", "", function.Limits{})
	for i := range 3 {
		h := functiontest.NewHTTP("GET", "/")
		if _, err := roundTrip(f, h); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if v, _ := h.Get(function.RequestHeaders, "x-depth"); v != "100" {
			t.Fatalf("request %d: x-depth = %q; headers %v", i, v, h.Maps[function.RequestHeaders])
		}
	}
	if n := function.Instances(f); n != 1 {
		t.Errorf("%d instances after three requests in a row, want the one", n)
	}
}

func TestLocalReply(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.Deny, "t1", "", function.Limits{})
	h := functiontest.NewHTTP("GET", "/", "X-Deny", "no ticket")
	c, err := f.Start(h)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.OnRequestHeaders(true)
	if err != nil || !c.Replied() || a != function.ActionPause {
		t.Fatalf("action %v, replied %v, err %v", a, c.Replied(), err)
	}
	c.Done()
	rep := h.Reply
	if rep == nil || rep.Status != 403 || rep.Body != "denied by function: no ticket" {
		t.Fatalf("reply %+v", rep)
	}
	if len(rep.Headers) != 2 || rep.Headers[0] != (functiontest.Pair{Key: "x-denied-by", Value: "function"}) {
		t.Errorf("reply headers %v", rep.Headers)
	}
	if logs := h.LogLines(); len(logs) != 1 || logs[0] != "info: denied: no ticket" {
		t.Errorf("logs %q", logs)
	}
	h = functiontest.NewHTTP("GET", "/")
	if _, err := roundTrip(f, h); err != nil || h.Reply != nil {
		t.Fatalf("a request without X-Deny: %v %+v", err, h.Reply)
	}
}

func TestPluginConfig(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.Config, "tenant-a", "hello config", function.Limits{})
	h := functiontest.NewHTTP("GET", "/")
	h.Properties[function.PropRoute] = "route-1"
	if _, err := roundTrip(f, h); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"x-config": "hello config", "x-tenant": "tenant-a", "x-route": "route-1"} {
		if v, _ := h.Get(function.ResponseHeaders, k); v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	if _, ok := h.Get(function.ResponseHeaders, "x-consumer"); ok {
		t.Error("x-consumer set with no consumer")
	}
	mod := functiontest.Build(t, functiontest.Config)
	m, err := r.Compile(context.Background(), sum(mod), mod)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.NewFilter(m, "tenant-a", "config", []byte("refuse"), function.Limits{})
	if reason(err) != function.ReasonStart || !strings.Contains(err.Error(), "refused its configuration") {
		t.Fatalf("a refused configuration: %v", err)
	}
}

// sign is what seed 000's clients send.
func sign(secret, method, path, date string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(method + path + date))
	return hex.EncodeToString(m.Sum(nil))
}

func TestHMACAuth(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.HMAC, "t1", "alice=s3cret\nbob=other", function.Limits{})
	date := time.Now().UTC().Format(http.TimeFormat)
	cases := []struct {
		name, id, date, sig, consumer, log string
	}{
		{"good", "alice", date, sign("s3cret", "GET", "/orders", date), "alice", ""},
		{"wrong secret", "alice", date, sign("other", "GET", "/orders", date), "", "bad signature"},
		{"other path", "bob", date, sign("other", "GET", "/other", date), "", "bad signature"},
		{"unknown id", "carol", date, sign("s3cret", "GET", "/orders", date), "", "unknown key id"},
		{"stale", "alice", "Mon, 02 Jan 2006 15:04:05 GMT", sign("s3cret", "GET", "/orders", "Mon, 02 Jan 2006 15:04:05 GMT"), "", "too far"},
		{"missing", "", date, "", "", "missing"},
	}
	for _, c := range cases {
		h := functiontest.NewHTTP("GET", "/orders", "X-Key-Id", c.id, "X-Date", c.date, "X-Signature", c.sig)
		if _, err := roundTrip(f, h); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := h.Properties[function.PropConsumer]; got != c.consumer {
			t.Errorf("%s: consumer %q, want %q", c.name, got, c.consumer)
		}
		logs := strings.Join(h.LogLines(), "\n")
		if c.log != "" && !strings.Contains(logs, c.log) {
			t.Errorf("%s: logs %q, want %q", c.name, logs, c.log)
		}
	}
}

func TestHostileGuests(t *testing.T) {
	r := newRuntime(t, function.Config{Timeout: 100 * time.Millisecond, MemoryLimitPages: 64})
	cases := []struct {
		guest  string
		want   function.Reason
		detail string
	}{
		{guest: functiontest.Loop, want: function.ReasonTimeout},
		{guest: functiontest.GrowBomb, want: function.ReasonMemory},
		// Recursion stops at the depth limit, long before the deadline.
		{guest: functiontest.Recursion, want: function.ReasonTrap, detail: function.DepthDetail},
		{guest: functiontest.Trap, want: function.ReasonTrap},
		{guest: functiontest.BadPtr, want: function.ReasonBadHostCall},
		{guest: functiontest.HugeHdrs, want: function.ReasonBadHostCall},
	}
	for _, c := range cases {
		f := filter(t, r, c.guest, "hostile", "", function.Limits{})
		before := function.LiveInstances(r)
		start := time.Now()
		_, err := roundTrip(f, functiontest.NewHTTP("GET", "/"))
		took := time.Since(start)
		if got := reason(err); got != c.want {
			t.Errorf("%s: %v, want reason %s", c.guest, err, c.want)
			continue
		}
		var fe *function.Error
		if errors.As(err, &fe) && c.detail != "" && fe.Detail != c.detail {
			t.Errorf("%s: detail %q, want %q", c.guest, fe.Detail, c.detail)
		}
		t.Logf("%s: %v after %v", c.guest, err, took)
		if took > 2*time.Second {
			t.Errorf("%s: failed after %v", c.guest, took)
		}
		if after := function.LiveInstances(r); after != before-1 {
			t.Errorf("%s: %d live instances after the failure, %d before: the failed one must be dropped", c.guest, after, before)
		}
	}
}

// A filter that fails request after request is refused for a while, and a success ends
// the streak.
func TestQuarantine(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.Trap, "t1", "", function.Limits{})
	for i := range 3 {
		if _, err := roundTrip(f, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonTrap {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if _, err := roundTrip(f, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonQuarantined {
		t.Fatalf("after three traps: %v", err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := roundTrip(f, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonTrap {
		t.Fatalf("after the quarantine: %v", err)
	}
	// The streak goes on: the next failure quarantines again at once.
	if _, err := roundTrip(f, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonQuarantined {
		t.Fatalf("the fifth request: %v", err)
	}
}

// A tenant whose function never returns cannot hold more than its cap, and another
// tenant's requests go on meanwhile.
func TestTenantConcurrencyCap(t *testing.T) {
	r := newRuntime(t, function.Config{})
	loop := filter(t, r, functiontest.Loop, "greedy", "", function.Limits{Timeout: 300 * time.Millisecond, Concurrency: 1})
	quick := filter(t, r, functiontest.WatNoop, "greedy", "", function.Limits{Timeout: 20 * time.Millisecond, Concurrency: 1})
	other := filter(t, r, functiontest.WatNoop, "polite", "", function.Limits{})
	done := make(chan error)
	go func() {
		_, err := roundTrip(loop, functiontest.NewHTTP("GET", "/"))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // the loop holds greedy's one slot
	if _, err := roundTrip(quick, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonBusy {
		t.Errorf("greedy's second function: %v, want busy", err)
	}
	for range 20 {
		if _, err := roundTrip(other, functiontest.NewHTTP("GET", "/")); err != nil {
			t.Fatalf("polite: %v", err)
		}
	}
	if err := <-done; reason(err) != function.ReasonTimeout {
		t.Errorf("loop: %v", err)
	}
	if _, err := roundTrip(quick, functiontest.NewHTTP("GET", "/")); err != nil {
		t.Errorf("greedy after the loop was cut off: %v", err)
	}
}

func TestCompilationCacheOnDisk(t *testing.T) {
	dir := t.TempDir()
	mod := functiontest.Build(t, functiontest.Noop)
	var took [2]time.Duration
	for i := range took {
		r, err := function.NewRuntime(context.Background(), function.Config{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		m, err := r.Compile(context.Background(), sum(mod), mod)
		if err != nil {
			t.Fatal(err)
		}
		took[i] = time.Since(start)
		start = time.Now()
		f, err := r.NewFilter(m, "t", "noop", nil, function.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("a filter of the Go no-op guest (%d bytes) starts in %v", len(mod), time.Since(start))
		f.Close()
		_ = r.Close(context.Background())
	}
	t.Logf("compile: %v cold, %v from the disk cache", took[0], took[1])
	if took[1] > took[0] {
		t.Errorf("the cached compile (%v) was slower than the cold one (%v)", took[1], took[0])
	}
}

func TestCallout(t *testing.T) {
	var mu sync.Mutex
	var got []*function.CalloutRequest
	r := newRuntime(t, function.Config{Callout: func(ctx context.Context, req *function.CalloutRequest) (*function.CalloutResponse, error) {
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		var path string
		for _, h := range req.Headers {
			if string(h.Key) == ":path" {
				path = string(h.Value)
			}
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a callout without a deadline")
		}
		if path == "/check/ok" {
			return &function.CalloutResponse{Headers: []function.HeaderPair{{Key: []byte(":status"), Value: []byte("200")}}, Body: []byte("user-7")}, nil
		}
		if path == "/check/down" {
			return nil, errors.New("connection refused")
		}
		return &function.CalloutResponse{Headers: []function.HeaderPair{{Key: []byte(":status"), Value: []byte("401")}}}, nil
	}})
	f := filter(t, r, functiontest.Callout, "t1", "auth-service", function.Limits{})

	h := functiontest.NewHTTP("GET", "/ok")
	el, err := roundTrip(f, h)
	if err != nil || h.Reply != nil {
		t.Fatalf("allowed: %v %+v", err, h.Reply)
	}
	if v, _ := h.Get(function.RequestHeaders, "x-auth"); v != "user-7" {
		t.Errorf("x-auth = %q", v)
	}
	if len(got) != 1 || got[0].Upstream != "auth-service" || got[0].Tenant != "t1" || got[0].Timeout != 500*time.Millisecond {
		t.Errorf("callout %+v", got)
	}
	t.Logf("guest time of a request with a callout: %v", el)

	for _, path := range []string{"/no", "/down"} {
		h = functiontest.NewHTTP("GET", path)
		if _, err := roundTrip(f, h); err != nil {
			t.Fatal(err)
		}
		if h.Reply == nil || h.Reply.Status != 403 {
			t.Errorf("%s: reply %+v, want 403", path, h.Reply)
		}
	}

	// No callout function: the guest's call is refused and it replies 503 itself.
	r2 := newRuntime(t, function.Config{})
	f2 := filter(t, r2, functiontest.Callout, "t1", "auth-service", function.Limits{})
	h = functiontest.NewHTTP("GET", "/ok")
	if _, err := roundTrip(f2, h); err != nil || h.Reply == nil || h.Reply.Status != 503 {
		t.Errorf("without callouts: %v %+v", err, h.Reply)
	}
}

func TestBodies(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.Body, "t1", "", function.Limits{})
	h := functiontest.NewHTTP("POST", "/pay")
	h.ReqBody = []byte(`{"amount":5,"card":"4111111111111111"}`)
	c, err := f.Start(h)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() (function.Action, error){
		func() (function.Action, error) { return c.OnRequestHeaders(false) },
		func() (function.Action, error) { return c.OnRequestBody(len(h.ReqBody), true) },
		func() (function.Action, error) {
			h.Respond("200")
			h.RespBody = []byte("paid")
			return c.OnResponseHeaders(false)
		},
		func() (function.Action, error) { return c.OnResponseBody(len(h.RespBody), true) },
	}
	for i, step := range steps {
		if a, err := step(); err != nil || a != function.ActionContinue {
			t.Fatalf("step %d: %v %v", i, a, err)
		}
	}
	c.Done()
	if got := string(h.ReqBody); got != `{"amount":5,"card":"****"}` {
		t.Errorf("request body %s", got)
	}
	if got := string(h.RespBody); got != "paid\n-- filtered\n" {
		t.Errorf("response body %q", got)
	}
}

// TestLoopStopsOnOneCore: with one P, a looping guest leaves no P for the watchdog (the
// guest's compiled code cannot be preempted), so the guest's own fuel must stop it.
func TestLoopStopsOnOneCore(t *testing.T) {
	r := newRuntime(t, function.Config{Timeout: 20 * time.Millisecond})
	f := filter(t, r, functiontest.Loop, "spin", "", function.Limits{})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := roundTrip(f, functiontest.NewHTTP("GET", "/"))
		done <- err
	}()
	select {
	case err := <-done:
		if reason(err) != function.ReasonTimeout {
			t.Fatalf("a loop on one core: %v, want reason %s", err, function.ReasonTimeout)
		}
		t.Logf("a loop on one core stopped after %v: %v", time.Since(start), err)
	case <-time.After(30 * time.Second):
		// Unreachable while the loop holds the only P; the test binary's timeout reports it.
		t.Fatal("a loop on one core was not stopped")
	}
}
