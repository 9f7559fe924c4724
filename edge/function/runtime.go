package function

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Config is a Runtime's settings; the zero value of each field means its default.
type Config struct {
	// CacheDir holds wazero's compiled code on disk, so a restarted edge does not compile
	// its modules again. Default: "" (memory only).
	CacheDir string
	// MemoryLimitPages bounds one instance's linear memory, in 64 KiB pages.
	// Default: 256 (16 MiB).
	MemoryLimitPages uint32
	// Timeout is the guest time one callback may take before the instance is cut off.
	// Default: 5ms.
	Timeout time.Duration
	// WallFactor is how many times its budget a run of callbacks may take in wall time
	// before the watchdog cuts it off. The guest's work is bounded by its fuel, which
	// runs out about when a tight loop has used the budget (see instrument) and which a
	// guest descheduled by a busy machine does not spend; the wall-clock cut is the
	// backstop for guests whose work the fuel undercounts (long loop bodies, bulk memory
	// instructions). 1 makes the budget wall time, as it was, and fails well-behaved
	// guests whenever the edge's cores are contended. Default: 4.
	WallFactor int
	// TenantConcurrency is how many guest callbacks of one tenant run at once on this edge.
	// Default: max(1, GOMAXPROCS/2).
	TenantConcurrency int
	// Callout performs the guests' proxy_http_call; nil refuses them (InternalFailure).
	Callout CalloutFunc
	// StartTimeout bounds a new instance's start (the module's own initialisation,
	// proxy_on_vm_start and proxy_on_configure). Default: 1s.
	StartTimeout time.Duration
	// Log receives what guests log outside a request (while starting or configuring);
	// within a request it goes to HTTP.Log. Nil drops it.
	Log func(tenant, function string, level LogLevel, msg []byte)
}

const (
	defaultMemoryPages  = 256
	defaultTimeout      = 5 * time.Millisecond
	defaultWallFactor   = 4
	defaultStartTimeout = time.Second
	maxMemoryPages      = 65536
)

func (c Config) withDefaults() Config {
	if c.MemoryLimitPages == 0 {
		c.MemoryLimitPages = defaultMemoryPages
	}
	if c.MemoryLimitPages > maxMemoryPages {
		c.MemoryLimitPages = maxMemoryPages
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultTimeout
	}
	if c.WallFactor <= 0 {
		c.WallFactor = defaultWallFactor
	}
	if c.TenantConcurrency <= 0 {
		c.TenantConcurrency = DefaultTenantConcurrency()
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = defaultStartTimeout
	}
	return c
}

// Runtime compiles modules and runs their instances. One per edge process.
type Runtime struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache

	mu      sync.Mutex
	modules map[string]*Module
	tenants map[string]*tenantSlot
	live    map[*instance]struct{}
	closed  bool

	// The watchdog sleeps while no guest runs (sleeping), so an idle edge pays nothing;
	// active says a run began since it last looked, and it clears it before it sleeps.
	active atomic.Bool
	// running counts the runs in progress while SetLockFreeRuns is off: two contended
	// adds a run, which the lock-free protocol replaced with the read-mostly active.
	running atomic.Int32
	cuts    atomic.Int64 // runs the watchdog stopped, for the tests
	// procs is GOMAXPROCS, which the runtime may change while the edge runs (a container's
	// CPU limit): the watchdog reads it again on every tick.
	procs    atomic.Int32
	sleeping atomic.Bool
	wake     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
}

// NewRuntime starts a runtime with its host modules and its watchdog.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("function: compilation cache %s: %w", cfg.CacheDir, err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	// Not WithCloseOnContextDone: it costs a goroutine per guest call. Modules stop
	// themselves instead, through the check instrument adds.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	if err := instantiateHost(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		_ = cache.Close(ctx)
		return nil, err
	}
	r := &Runtime{
		cfg: cfg, rt: rt, cache: cache,
		modules: map[string]*Module{},
		tenants: map[string]*tenantSlot{},
		live:    map[*instance]struct{}{},
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	r.procs.Store(int32(runtime.GOMAXPROCS(0)))
	go r.watchdog()
	return r, nil
}

// Close stops the watchdog and frees every module and instance.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.stopped
	err := r.rt.Close(ctx)
	return errors.Join(err, r.cache.Close(ctx))
}

// Module is a compiled module, shared by every filter that runs it.
type Module struct {
	SHA256   string
	compiled wazero.CompiledModule
	exports  exportSet
	minPages uint32
}

// Compile compiles module once per sha256hex: a second call with the same hash returns the
// first result. The module is checked as Validate checks it.
func (r *Runtime) Compile(ctx context.Context, sha256hex string, module []byte) (*Module, error) {
	r.mu.Lock()
	if m, ok := r.modules[sha256hex]; ok {
		r.mu.Unlock()
		return m, nil
	}
	r.mu.Unlock()
	inst, err := instrument(module)
	if err != nil {
		return nil, fmt.Errorf("not a valid WebAssembly module: %w", err)
	}
	cm, err := r.rt.CompileModule(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("not a valid WebAssembly module: %w", err)
	}
	ex, minPages, err := checkABI(cm)
	if err != nil {
		_ = cm.Close(ctx)
		return nil, err
	}
	m := &Module{SHA256: sha256hex, compiled: cm, exports: ex, minPages: minPages}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.modules[sha256hex]; ok {
		_ = cm.Close(ctx)
		return prev, nil
	}
	r.modules[sha256hex] = m
	return m, nil
}

// Forget drops a compiled module no filter uses any more (filters already made keep it).
func (r *Runtime) Forget(ctx context.Context, sha256hex string) {
	r.mu.Lock()
	m, ok := r.modules[sha256hex]
	delete(r.modules, sha256hex)
	r.mu.Unlock()
	if ok {
		_ = m.compiled.Close(ctx)
	}
}

var (
	validateOnce sync.Once
	validateRT   wazero.Runtime
)

// Validate says whether module can run here: it is WebAssembly, exports what proxy-wasm
// 0.2.x needs, and imports nothing but the host calls this package offers. The error is
// meant for the tenant who uploaded the module.
func Validate(ctx context.Context, module []byte) error {
	if len(module) < 8 || string(module[:4]) != "\x00asm" {
		return errors.New("not a WebAssembly module (no \\0asm header)")
	}
	validateOnce.Do(func() {
		// The interpreter only checks and translates, far cheaper than compiling to
		// machine code, and the api needs no more.
		validateRT = wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfigInterpreter())
	})
	// The rewriter's checks come first: they keep malformed counts away from wazero.
	if _, err := instrument(module); err != nil {
		return fmt.Errorf("not a valid WebAssembly module, or one this host cannot run: %w", err)
	}
	cm, err := validateRT.CompileModule(ctx, module)
	if err != nil {
		return fmt.Errorf("not a valid WebAssembly module: %w", err)
	}
	defer cm.Close(ctx)
	_, _, err = checkABI(cm)
	return err
}

// exportSet is which optional callbacks a module exports.
type exportSet struct {
	reqHeaders, reqBody, respHeaders, respBody bool
}

type sig struct{ params, results []api.ValueType }

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

func sigOf(results int, params ...api.ValueType) sig {
	s := sig{params: params}
	for range results {
		s.results = append(s.results, i32)
	}
	return s
}

// guestExports are the callbacks the host may call, with their signatures; a module that
// exports one of these names with another signature is refused.
var guestExports = map[string]sig{
	"proxy_on_context_create":     sigOf(0, i32, i32),
	"proxy_on_vm_start":           sigOf(1, i32, i32),
	"proxy_on_configure":          sigOf(1, i32, i32),
	"proxy_on_request_headers":    sigOf(1, i32, i32, i32),
	"proxy_on_request_body":       sigOf(1, i32, i32, i32),
	"proxy_on_request_trailers":   sigOf(1, i32, i32),
	"proxy_on_response_headers":   sigOf(1, i32, i32, i32),
	"proxy_on_response_body":      sigOf(1, i32, i32, i32),
	"proxy_on_response_trailers":  sigOf(1, i32, i32),
	"proxy_on_http_call_response": sigOf(0, i32, i32, i32, i32, i32),
	"proxy_on_done":               sigOf(1, i32),
	"proxy_on_log":                sigOf(0, i32),
	"proxy_on_delete":             sigOf(0, i32),
	"proxy_on_tick":               sigOf(0, i32),
	"proxy_on_memory_allocate":    sigOf(1, i32),
	"malloc":                      sigOf(1, i32),
	"_initialize":                 sigOf(0),
	"_start":                      sigOf(0),
	"proxy_abi_version_0_2_1":     sigOf(0),
	"proxy_abi_version_0_2_0":     sigOf(0),
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkABI holds a compiled module to the ABI: its imports, its exports, its memory.
func checkABI(cm wazero.CompiledModule) (exportSet, uint32, error) {
	var ex exportSet
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		want, ok := hostSignatures[mod][name]
		if !ok {
			return ex, 0, fmt.Errorf("imports %s.%s, which is outside the proxy-wasm ABI this host offers", mod, name)
		}
		if !sameTypes(f.ParamTypes(), want.params) || !sameTypes(f.ResultTypes(), want.results) {
			return ex, 0, fmt.Errorf("imports %s.%s with a signature that does not match the ABI's", mod, name)
		}
	}
	for _, m := range cm.ImportedMemories() {
		mod, name, _ := m.Import()
		return ex, 0, fmt.Errorf("imports memory %s.%s: a module must define its own memory", mod, name)
	}
	fns := cm.ExportedFunctions()
	for name, f := range fns {
		want, ok := guestExports[name]
		if ok && (!sameTypes(f.ParamTypes(), want.params) || !sameTypes(f.ResultTypes(), want.results)) {
			return ex, 0, fmt.Errorf("exports %s with a signature that does not match the ABI's", name)
		}
	}
	if fns["proxy_abi_version_0_2_1"] == nil && fns["proxy_abi_version_0_2_0"] == nil {
		return ex, 0, errors.New("missing export proxy_abi_version_0_2_1 (or proxy_abi_version_0_2_0): not a proxy-wasm 0.2 module")
	}
	if fns["proxy_on_context_create"] == nil {
		return ex, 0, errors.New("missing export proxy_on_context_create")
	}
	if fns["proxy_on_memory_allocate"] == nil && fns["malloc"] == nil {
		return ex, 0, errors.New("missing export proxy_on_memory_allocate (or malloc)")
	}
	mem, ok := cm.ExportedMemories()["memory"]
	if !ok {
		return ex, 0, errors.New("missing export memory")
	}
	ex.reqHeaders = fns["proxy_on_request_headers"] != nil
	ex.reqBody = fns["proxy_on_request_body"] != nil
	ex.respHeaders = fns["proxy_on_response_headers"] != nil
	ex.respBody = fns["proxy_on_response_body"] != nil
	return ex, mem.Min(), nil
}

// DefaultTenantConcurrency is the cap on one tenant's guest callbacks running at once
// when none is set: half the edge's cores, at least one.
func DefaultTenantConcurrency() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// skipIdleCap is SetSkipIdleCap's switch; on by default.
var skipIdleCap atomic.Bool

func init() { skipIdleCap.Store(true) }

// SetSkipIdleCap chooses whether a tenant whose concurrency cap is at least the edge's
// Go processors skips the cap's semaphore (on), or takes a slot for every run of
// callbacks all the same (off): two channel operations a run, which the cap cannot
// need, since no more callbacks can run at once than there are processors
// (TOLLGATE_EDGE_FUNCTION_SKIP_IDLE_CAP).
func SetSkipIdleCap(on bool) { skipIdleCap.Store(on) }

// endWithLast is SetEndWithLastCallback's switch; on by default.
var endWithLast atomic.Bool

func init() { endWithLast.Store(true) }

// SetEndWithLastCallback chooses whether Call.Last ends the request's context in the run
// of its last callback (on), or leaves it to Done, a run of its own (off)
// (TOLLGATE_EDGE_FUNCTION_END_WITH_LAST_CALLBACK).
func SetEndWithLastCallback(on bool) { endWithLast.Store(on) }

// mergedEntries is SetMergedEntries' switch; on by default.
var mergedEntries atomic.Bool

func init() { mergedEntries.Store(true) }

// SetMergedEntries chooses whether the host enters the guest once for callbacks that run
// back to back in a run, through the merged entries instrument adds (on: the context's
// creation with the request headers' callback, the last response callback with the
// context's end, the end's three callbacks), or once per callback (off)
// (TOLLGATE_EDGE_FUNCTION_MERGED_ENTRIES).
func SetMergedEntries(on bool) { mergedEntries.Store(on) }

// The switches below turn off, one by one, what made a run of callbacks cheap; on by
// default. Each one's cost is BenchmarkRun's variant in edge/fnchain.
var lockFreeRuns, reuseCalls, ownContext atomic.Bool

func init() {
	lockFreeRuns.Store(true)
	reuseCalls.Store(true)
	ownContext.Store(true)
}

// SetLockFreeRuns chooses whether a run of callbacks begins and ends against the watchdog
// with atomics alone (on), or under a lock per instance that the watchdog also takes to
// cut a run, with a count of running guests kept by every run (off)
// (TOLLGATE_EDGE_FUNCTION_LOCKFREE_RUNS).
func SetLockFreeRuns(on bool) { lockFreeRuns.Store(on) }

// SetReuseCalls chooses whether a request's Call is taken from its instance's free list
// (on) or allocated for each request (off) (TOLLGATE_EDGE_FUNCTION_REUSE_CALLS).
func SetReuseCalls(on bool) { reuseCalls.Store(on) }

// SetOwnContext chooses whether instances started from now on run guest calls with a
// context type of their own (on) or with a context.WithValue carrying the instance
// (off), which wazero and every host call then look up through the chain of contexts
// (TOLLGATE_EDGE_FUNCTION_OWN_CONTEXT).
func SetOwnContext(on bool) { ownContext.Store(on) }
