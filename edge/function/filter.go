package function

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// Limits are a tenant plan's bounds on its functions; zero fields take the runtime's.
type Limits struct {
	Timeout          time.Duration
	MemoryLimitPages uint32
	// Concurrency caps the tenant's callbacks running at once on this edge. The latest
	// filter made for a tenant sets it for all of that tenant's filters.
	Concurrency int
}

const rootContextID = 1

// minLogLevel: the level proxy_get_log_level reports. Lines below it are dropped, so
// guests that check the level skip formatting them.
const minLogLevel = LogInfo

var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// Filter is one function configured for one route: a module, its plugin configuration,
// and a small fixed set of started instances, each holding many requests' contexts (as
// Envoy runs one VM per worker for every stream on it).
type Filter struct {
	rt      *Runtime
	m       *Module
	tenant  string
	name    string
	tenantB []byte
	nameB   []byte
	config  []byte
	timeout int64 // ns
	pages   uint32
	slot    *tenantSlot
	// slots holds the instances; nil is a slot not started yet or whose instance was
	// dropped. Its length is the cap on instances.
	slots  []atomic.Pointer[instance]
	rr     atomic.Uint32 // round robin over slots
	grow   sync.Mutex    // one instance started at a time
	closed atomic.Bool
	// A filter that keeps failing is refused for a while (quarantine), so a hostile module
	// cannot make the edge pay for a deep recursion or a loop on every request.
	strikes     atomic.Int32
	quarantined atomic.Int64 // until this now(); 0 = not
}

// Strikes before a quarantine, and its length: 1s, doubling with each further strike, at
// most 30s.
const (
	maxStrikes     = 3
	quarantineBase = time.Second
	quarantineMax  = 30 * time.Second
)

func (f *Filter) strike() {
	n := f.strikes.Add(1)
	if n < maxStrikes {
		return
	}
	d := quarantineBase << min(n-maxStrikes, 5)
	f.quarantined.Store(now() + int64(min(d, quarantineMax)))
}

func (f *Filter) ok() {
	if f.strikes.Load() != 0 {
		f.strikes.Store(0)
	}
}

// tenantSlot is a tenant's share of the edge: a semaphore on running callbacks.
type tenantSlot struct {
	sem atomic.Pointer[chan struct{}]
}

func (s *tenantSlot) resize(n int) {
	if p := s.sem.Load(); p != nil && cap(*p) == n {
		return
	}
	ch := make(chan struct{}, n)
	s.sem.Store(&ch)
}

// NewFilter makes a filter and starts its first instance, so a module that cannot start
// or refuses its configuration fails here (ReasonStart, ReasonMemory), not on a request.
func (r *Runtime) NewFilter(m *Module, tenant, name string, pluginConfig []byte, lim Limits) (*Filter, error) {
	f := &Filter{
		rt: r, m: m, tenant: tenant, name: name,
		tenantB: []byte(tenant), nameB: []byte(name),
		config:  append([]byte(nil), pluginConfig...),
		timeout: int64(r.cfg.Timeout),
		pages:   r.cfg.MemoryLimitPages,
	}
	if lim.Timeout > 0 {
		f.timeout = int64(lim.Timeout)
	}
	if lim.MemoryLimitPages > 0 {
		f.pages = min(lim.MemoryLimitPages, maxMemoryPages)
	}
	conc := r.cfg.TenantConcurrency
	if lim.Concurrency > 0 {
		conc = lim.Concurrency
	}
	if m.minPages > f.pages {
		return nil, &Error{Reason: ReasonMemory, Function: name,
			Detail: fmt.Sprintf("the module needs %d pages of memory at start; the limit is %d", m.minPages, f.pages)}
	}
	r.mu.Lock()
	s, ok := r.tenants[tenant]
	if !ok {
		s = &tenantSlot{}
		r.tenants[tenant] = s
	}
	s.resize(conc)
	r.mu.Unlock()
	f.slot = s
	// More instances than the tenant may run callbacks at once, or than there are cores,
	// would only hold memory: a callback holds its instance for microseconds, and every
	// request's context lives in whichever instance it started on.
	f.slots = make([]atomic.Pointer[instance], max(1, min(conc, runtime.GOMAXPROCS(0))))
	in, err := f.newInstance()
	if err != nil {
		return nil, err
	}
	in.slotNo = 0
	f.slots[0].Store(in)
	return f, nil
}

// Exports says which optional callbacks the module has, so the edge skips buffering a
// body for a filter that never reads it.
func (f *Filter) Exports() (reqBody, respHeaders, respBody bool) {
	return f.m.exports.reqBody, f.m.exports.respHeaders, f.m.exports.respBody
}

// Close frees the filter's instances; one still holding a request's context is freed at
// that request's Done. A request may still Start on a closed filter (a route being
// replaced): it gets an instance freed at its Done.
func (f *Filter) Close() {
	f.closed.Store(true)
	for i := range f.slots {
		if in := f.slots[i].Load(); in != nil {
			in.mu.Lock()
			if in.refs == 0 {
				in.drop()
			}
			in.mu.Unlock()
		}
	}
}

// instance is one started copy of a module. It holds the contexts of many requests;
// mu lets one goroutine at a time run guest code in it, one callback at a time.
type instance struct {
	mu     sync.Mutex
	slotNo int    // its index in f.slots; -1 when in no slot
	refs   int    // requests whose context lives in it (under mu)
	fatal  *Error // why it died, told to the other requests on it
	gone   bool   // its module is closed
	f      *Filter
	mod    api.Module
	mem    api.Memory
	ctx    context.Context
	stop   api.MutableGlobal // instrument's fuel: see deadline for who may touch it
	alloc_ api.Function
	cb     [cbCount]api.Function
	// entries are the module's merged entries (merge.go); nil where it has none. phase
	// and hold are their globals.
	entries [entryCount]api.Function
	phase   api.Global
	hold    api.MutableGlobal
	stack   [12]uint64
	mstack  [1]uint64
	nextID  uint32
	call    *Call // the request whose callback runs (under mu); nil while starting
	// calls are free Calls of this instance (under mu, which Start and Done hold anyway),
	// reused so a request allocates nothing and takes no lock of its own for one.
	calls []*Call

	// deadline is the state of a run of callbacks, published for the watchdog without a
	// lock: 0 when none runs, the now() it must be done by while one does, and cutting
	// while the watchdog stops it. Go code touches the fuel (stop) only while it owns the
	// state: the run between begin and end, and the watchdog between its swap to cutting
	// and its swap back, which end waits for.
	deadline atomic.Int64
	// locked is SetLockFreeRuns off when the instance started: runs begin and end under
	// fuelMu, which the watchdog holds to cut one.
	locked   bool
	fuelMu   sync.Mutex
	timedOut atomic.Bool
	lm       *linearMemory
	bad      string // the first bad host call, for the tenant's log
	exited   bool   // the guest called proc_exit
	dead     bool   // never reuse
}

const (
	cbContextCreate = iota
	cbVMStart
	cbConfigure
	cbRequestHeaders
	cbRequestBody
	cbResponseHeaders
	cbResponseBody
	cbHTTPCallResponse
	cbDone
	cbLog
	cbDelete
	cbCount
)

var cbNames = [cbCount]string{
	"proxy_on_context_create", "proxy_on_vm_start", "proxy_on_configure",
	"proxy_on_request_headers", "proxy_on_request_body",
	"proxy_on_response_headers", "proxy_on_response_body",
	"proxy_on_http_call_response", "proxy_on_done", "proxy_on_log", "proxy_on_delete",
}

// linearMemory backs an instance's memory and refuses growth past the filter's limit:
// memory.grow answers -1, as the Wasm spec allows.
type linearMemory struct {
	buf     []byte
	limit   uint64
	refused bool
}

func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.limit {
		m.refused = true
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	nb := make([]byte, size, min(max(size, 2*uint64(cap(m.buf))), m.limit))
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

func (m *linearMemory) Free() { m.buf = nil }

func (f *Filter) newInstance() (*instance, error) {
	r := f.rt
	in := &instance{f: f, nextID: rootContextID + 1, slotNo: -1, locked: !lockFreeRuns.Load()}
	in.lm = &linearMemory{limit: uint64(f.pages) * 65536}
	if ownContext.Load() {
		in.ctx = &instCtx{Context: context.Background(), in: in}
	} else {
		in.ctx = context.WithValue(context.Background(), instKey{}, in)
	}
	actx := experimental.WithMemoryAllocator(in.ctx, experimental.MemoryAllocatorFunc(
		func(_, _ uint64) experimental.LinearMemory { return in.lm }))
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, &Error{Reason: ReasonStart, Function: f.name, Detail: "the runtime is closed"}
	}
	r.live[in] = struct{}{}
	r.mu.Unlock()
	fail := func(cb string, err error) (*instance, error) {
		in.destroy()
		if e, ok := err.(*Error); ok {
			return nil, e
		}
		return nil, &Error{Reason: ReasonStart, Function: f.name, Callback: cb, Detail: err.Error()}
	}
	mod, err := r.rt.InstantiateModule(actx, f.m.compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return fail("", err)
	}
	in.mod, in.mem = mod, mod.Memory()
	stop, ok := mod.ExportedGlobal(stopExport).(api.MutableGlobal)
	if !ok {
		return fail("", errors.New("the module was not instrumented"))
	}
	r.mu.Lock()
	in.stop = stop // under r.mu: the watchdog reads it
	r.mu.Unlock()
	for i, name := range cbNames {
		in.cb[i] = mod.ExportedFunction(name)
	}
	for i, name := range entryNames {
		in.entries[i] = mod.ExportedFunction(name)
	}
	in.phase = mod.ExportedGlobal(phaseExport)
	if in.hold, ok = mod.ExportedGlobal(holdExport).(api.MutableGlobal); !ok || in.phase == nil {
		return fail("", errors.New("the module was not instrumented"))
	}
	if in.alloc_ = mod.ExportedFunction("proxy_on_memory_allocate"); in.alloc_ == nil {
		in.alloc_ = mod.ExportedFunction("malloc")
	}
	budget := int64(r.cfg.StartTimeout)
	for _, start := range []string{"_initialize", "_start"} {
		if fn := mod.ExportedFunction(start); fn != nil {
			if err := in.invoke(start, fn, 0, budget); err != nil {
				return fail(start, err)
			}
			break
		}
	}
	in.stack[0], in.stack[1] = rootContextID, 0
	if err := in.invoke(cbNames[cbContextCreate], in.cb[cbContextCreate], 2, budget); err != nil {
		return fail("", err)
	}
	if fn := in.cb[cbVMStart]; fn != nil {
		in.stack[0], in.stack[1] = rootContextID, 0
		if err := in.invoke(cbNames[cbVMStart], fn, 2, budget); err != nil {
			return fail("", err)
		}
		if u32(in.stack[0]) == 0 {
			return fail(cbNames[cbVMStart], errors.New("the module refused to start (returned false)"))
		}
	}
	if fn := in.cb[cbConfigure]; fn != nil {
		in.stack[0], in.stack[1] = rootContextID, uint64(len(f.config))
		if err := in.invoke(cbNames[cbConfigure], fn, 2, budget); err != nil {
			return fail("", err)
		}
		if u32(in.stack[0]) == 0 {
			return fail(cbNames[cbConfigure], errors.New("the module refused its configuration (returned false)"))
		}
	}
	return in, nil
}

// drop takes in out of its slot, so new requests start elsewhere, and closes it. The
// caller holds in.mu, or in was never published.
func (in *instance) drop() {
	in.dead = true
	if in.slotNo >= 0 {
		in.f.slots[in.slotNo].CompareAndSwap(in, nil)
	}
	if !in.gone {
		in.gone = true
		in.destroy()
	}
}

func (in *instance) destroy() {
	r := in.f.rt
	r.mu.Lock()
	delete(r.live, in)
	r.mu.Unlock()
	if in.mod != nil {
		_ = in.mod.Close(context.Background())
	}
}

// invoke runs one guest export with in.stack[:nargs] as its arguments under a deadline of
// budget ns; its result is left in in.stack[0]. Any failure kills the instance.
func (in *instance) invoke(name string, fn api.Function, nargs int, budget int64) error {
	start := in.begin(budget)
	err := in.call1(name, fn, nargs, budget)
	in.end(start)
	return err
}

// begin opens a run of callbacks on in: the fuel for budget ns of guest work, and
// WallFactor times budget of wall time for them all (the watchdog's deadline). It returns the clock reading end takes.
// Callbacks the host makes back to back share one begin and end, so one clock reading
// at each end: on the virtual machines edges run on a reading costs tens of ns.
// No lock: the deadline is 0 here (end waited for the watchdog), so the watchdog leaves
// the fuel alone until the store that publishes the new deadline.
func (in *instance) begin(budget int64) int64 {
	r := in.f.rt
	if in.locked {
		in.fuelMu.Lock()
		defer in.fuelMu.Unlock()
		r.running.Add(1)
	}
	start := now()
	in.stop.Set(uint64(budget) * fuelPerNS) // fuel: see instrument
	// A watchdog that caught the last run between its final callback's return and its
	// end stopped nothing: that run's callbacks had all succeeded.
	in.timedOut.Store(false)
	in.deadline.Store(start + budget*int64(r.cfg.WallFactor))
	// The flag is read far more often than written: a store only when the watchdog has
	// cleared it, a wake only when it sleeps (see watchdog for why none is missed).
	if !r.active.Load() {
		r.active.Store(true)
		if r.sleeping.Load() {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	}
	return start
}

// cutting is deadline's state while the watchdog stops a run.
const cutting = -1

// end closes what begin opened and returns the wall time since.
func (in *instance) end(start int64) int64 {
	if in.locked {
		in.fuelMu.Lock()
		defer in.fuelMu.Unlock()
		defer in.f.rt.running.Add(-1)
	}
	in.own()
	in.deadline.Store(0)
	return now() - start
}

// own waits until the watchdog is not stopping in's run, and swaps the run's deadline
// for cutting so that it cannot start to: the caller then owns the fuel, and gives the
// state back with a store (of the deadline, or 0 at end).
func (in *instance) own() int64 {
	for {
		d := in.deadline.Load()
		if d != cutting && in.deadline.CompareAndSwap(d, cutting) {
			return d
		}
		// The watchdog holds it for two stores; let it run on a single processor.
		runtime.Gosched()
	}
}

// call1 runs one guest export between begin and end; budget is the run's, for the
// tenant's log. Any failure kills the instance.
func (in *instance) call1(name string, fn api.Function, nargs int, budget int64) error {
	// Every callback has at most one result, so the stack holds max(nargs, 1) values.
	err := fn.CallWithStack(in.ctx, in.stack[:max(nargs, 1)])
	if err != nil {
		d := in.own()
		if int64(in.stop.Get()) < 0 {
			in.timedOut.Store(true) // out of fuel, or stopped by the watchdog
		}
		in.deadline.Store(d)
	}
	if err == nil && in.bad == "" && !in.timedOut.Load() {
		return nil
	}
	in.dead = true
	e := &Error{Function: in.f.name, Callback: name}
	switch {
	case in.bad != "":
		e.Reason, e.Detail = ReasonBadHostCall, in.bad
	case in.timedOut.Load():
		e.Reason, e.Detail = ReasonTimeout, fmt.Sprintf("ran past its %v", time.Duration(budget))
	case in.lm.refused:
		e.Reason, e.Detail = ReasonMemory, fmt.Sprintf("needed more than its %d KiB of memory", in.lm.limit>>10)
	case in.exited:
		var ee *sys.ExitError
		code := uint32(0)
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		e.Reason, e.Detail = ReasonTrap, fmt.Sprintf("the module exited (proc_exit %d)", code)
	case overDepth(in.mod):
		e.Reason, e.Detail = ReasonTrap, depthDetail
	default:
		e.Reason, e.Detail = ReasonTrap, trapDetail(err)
	}
	return e
}

// trapDetail keeps the first line of wazero's message (the trap's kind) and drops the
// stack trace, which names host internals.
func trapDetail(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimPrefix(s, "wasm error: ")
}

func (in *instance) fail(format string, args ...any) {
	if in.bad == "" {
		in.bad = fmt.Sprintf(format, args...)
		in.holdEntry(holdFailed)
	}
}

// holdEntry raises bits of the merged entries' hold flag (holdExport), which the entry
// checks between its calls. Only the goroutine running the guest touches it, unlike the
// fuel, which the watchdog may be cutting meanwhile.
func (in *instance) holdEntry(bits uint64) {
	if in.hold != nil { // nil only while instantiating, before any callback
		in.hold.Set(in.hold.Get() | bits)
	}
}

// read is guest memory [ptr, ptr+size); out of bounds is a bad host call.
func (in *instance) read(ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	if size > maxArgBytes {
		in.fail("an argument of %d bytes (the limit is %d)", size, maxArgBytes)
		return nil, false
	}
	b, ok := in.mem.Read(ptr, size)
	if !ok {
		in.fail("pointer %#x, length %d: outside the module's memory", ptr, size)
	}
	return b, ok
}

func (in *instance) writeU32(ptr, v uint32) status {
	if !in.mem.WriteUint32Le(ptr, v) {
		in.fail("return pointer %#x: outside the module's memory", ptr)
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// alloc asks the guest for size bytes and returns a view of them.
func (in *instance) alloc(size uint32) (uint32, []byte, bool) {
	if in.alloc_ == nil {
		in.fail("the module exports no allocator")
		return 0, nil, false
	}
	in.mstack[0] = uint64(size)
	if err := in.alloc_.CallWithStack(in.ctx, in.mstack[:]); err != nil {
		in.fail("its allocator failed: %s", trapDetail(err))
		return 0, nil, false
	}
	ptr := u32(in.mstack[0])
	if ptr == 0 {
		in.fail("its allocator returned 0 for %d bytes", size)
		return 0, nil, false
	}
	view, ok := in.mem.Read(ptr, size)
	if !ok {
		in.fail("its allocator returned %#x, outside its memory, for %d bytes", ptr, size)
	}
	return ptr, view, ok
}

// give copies data into guest memory and writes its address and size at retPtr, retSize.
func (in *instance) give(data []byte, retPtr, retSize uint32) status {
	var ptr uint32
	if len(data) > 0 {
		if len(data) > maxArgBytes {
			return statusInternalFailure
		}
		p, view, ok := in.alloc(uint32(len(data)))
		if !ok {
			return statusInvalidMemoryAccess
		}
		copy(view, data)
		ptr = p
	}
	if !in.mem.WriteUint32Le(retPtr, ptr) || !in.mem.WriteUint32Le(retSize, uint32(len(data))) {
		in.fail("return pointers %#x, %#x: outside the module's memory", retPtr, retSize)
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func (in *instance) log(level LogLevel, msg []byte) {
	if level < minLogLevel {
		return
	}
	if len(msg) > maxLogBytes {
		msg = msg[:maxLogBytes]
	}
	if in.call != nil {
		in.call.h.Log(level, msg)
	} else if fn := in.f.rt.cfg.Log; fn != nil {
		fn(in.f.tenant, in.f.name, level, msg)
	}
}

// watchdog cuts off callbacks past their deadline: it sets the instance's stop flag, and
// the guest traps at its next function call or loop iteration (see instrument).
func (r *Runtime) watchdog() {
	defer close(r.stopped)
	const tick = time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-t.C:
		case <-r.stop:
			return
		}
		r.procs.Store(int32(runtime.GOMAXPROCS(0)))
		if r.check() || r.running.Load() > 0 {
			idle = 0
			continue
		}
		// Sleep only after a second without guests: waking the watchdog costs a goroutine
		// switch, too dear to pay per callback on a busy edge.
		if idle++; idle <= 1000 {
			continue
		}
		// No wake is missed: a run publishes its deadline, then reads active. Either its
		// read comes after the store of false below, and it sees sleeping and wakes the
		// watchdog, or its deadline came before, and the check after the stores sees it.
		r.sleeping.Store(true)
		r.active.Store(false)
		if !r.check() {
			select {
			case <-r.wake:
			case <-r.stop:
				return
			}
		}
		r.sleeping.Store(false)
		idle = 0
	}
}

// cut stops in's run if it is still the one that went past d.
func (in *instance) cut(d int64) {
	if in.locked {
		in.fuelMu.Lock()
		defer in.fuelMu.Unlock()
	}
	if in.deadline.CompareAndSwap(d, cutting) {
		// Still the run that went past d, and it cannot end before the swap back.
		in.timedOut.Store(true)
		in.stop.Set(0)
		in.deadline.Store(d)
		in.f.rt.cuts.Add(1)
	}
}

// check stops the runs past their deadline and says whether any run.
func (r *Runtime) check() bool {
	n := now()
	running := false
	r.mu.Lock()
	for in := range r.live {
		d := in.deadline.Load()
		if d == 0 {
			continue
		}
		running = true
		// Stopped again on every tick until it ends: the guest takes from its fuel with a
		// read and a write, so a store of 0 between the two is lost.
		if d > 0 && n > d {
			in.cut(d)
		}
	}
	r.mu.Unlock()
	return running
}
