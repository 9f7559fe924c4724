package function

import (
	"fmt"

	"github.com/tetratelabs/wazero/api"
)

// LiveInstances counts the instances a runtime holds (pooled or serving).
func LiveInstances(r *Runtime) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// HostFunc describes one host function, for the fuzz guest that forwards to each.
type HostFunc struct {
	Module, Name    string
	Params, Results []string // "i32" or "i64"
}

// HostFuncs lists the host functions a guest may import.
func HostFuncs() []HostFunc {
	var out []HostFunc
	for _, mod := range []string{"env", "wasi_snapshot_preview1"} {
		fns := envFuncs
		if mod != "env" {
			fns = wasiFuncs
		}
		for _, f := range fns {
			h := HostFunc{Module: mod, Name: f.name}
			for _, p := range f.s.params {
				h.Params = append(h.Params, api.ValueTypeName(p))
			}
			for _, r := range f.s.results {
				h.Results = append(h.Results, api.ValueTypeName(r))
			}
			out = append(out, h)
		}
	}
	return out
}

// CallExport runs a guest export within c's request, as a callback runs.
func (c *Call) CallExport(name string, args []uint64) error {
	in := c.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.dead {
		return fmt.Errorf("the instance is dead")
	}
	fn := in.mod.ExportedFunction(name)
	if fn == nil {
		return fmt.Errorf("no export %s", name)
	}
	copy(in.stack[:], args)
	in.call = c
	err := in.invoke(name, fn, len(args), in.f.timeout)
	in.call = nil
	if err != nil {
		in.kill(err)
		c.err = err
	}
	return err
}

// WriteMemory writes b into the guest's memory at off; false when out of bounds.
func (c *Call) WriteMemory(off uint32, b []byte) bool {
	c.in.mu.Lock()
	defer c.in.mu.Unlock()
	return !c.in.dead && c.in.mem.Write(off, b)
}

// Instances counts f's started instances.
func Instances(f *Filter) int {
	n := 0
	for i := range f.slots {
		if f.slots[i].Load() != nil {
			n++
		}
	}
	return n
}

// MaxInstances is the cap on f's instances.
func MaxInstances(f *Filter) int { return len(f.slots) }

// Instrument is instrument, for the fuzz target.
var Instrument = instrument

// MaxDepth is the call depth a guest may reach, in frames; FramePerLocals the params and
// locals a frame holds.
const (
	MaxDepth       = maxDepth
	FramePerLocals = framePerLocals
	DepthExport    = depthExport
	StopExport     = stopExport
)

// DepthDetail is the detail of a trap at the depth limit.
var DepthDetail = depthDetail

// OverDepth is overDepth.
var OverDepth = overDepth

// WatchdogAsleep says the runtime's watchdog sleeps for want of guests.
func WatchdogAsleep(r *Runtime) bool { return r.sleeping.Load() }

// WatchdogCuts counts the runs the watchdog stopped.
func WatchdogCuts(r *Runtime) int64 { return r.cuts.Load() }

// EntryNames are the merged entries' exports; PhaseExport and HoldExport their globals.
var EntryNames = entryNames

const (
	PhaseExport = phaseExport
	HoldExport  = holdExport
)

// DoneResult ends c as Done does and returns what a test cannot see once c is gone: the
// callback a merged entry called last in the instance ("" when no entry ran, or when it
// failed in its first, proxy_on_context_create), and the failure that killed the
// instance, if one did (Done keeps its own to itself).
func (c *Call) DoneResult() (phase string, fatal error) {
	in := c.in
	c.Done()
	in.mu.Lock()
	defer in.mu.Unlock()
	if p := in.phase.Get(); p != 0 && p < cbCount {
		phase = cbNames[p]
	}
	if in.fatal != nil {
		fatal = in.fatal
	}
	return phase, fatal
}
