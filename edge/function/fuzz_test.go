package function_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// fuzzGuest is a WAT module that imports every host function and exports call_<name>
// forwarding its arguments, plus set_alloc, which makes its allocator answer a chosen
// address (a hostile allocator). proc_exit is left out: it ends the instance by design.
func fuzzGuest(t testing.TB) ([]byte, []function.HostFunc) {
	var imports, exports strings.Builder
	var fns []function.HostFunc
	for i, h := range function.HostFuncs() {
		if h.Name == "proc_exit" {
			continue
		}
		fns = append(fns, h)
		sig := ""
		if len(h.Params) > 0 {
			sig += " (param " + strings.Join(h.Params, " ") + ")"
		}
		if len(h.Results) > 0 {
			sig += " (result " + strings.Join(h.Results, " ") + ")"
		}
		fmt.Fprintf(&imports, "  (import %q %q (func $h%d%s))\n", h.Module, h.Name, i, sig)
		fmt.Fprintf(&exports, "  (func (export \"call_%s\")%s", h.Name, sig)
		for j := range h.Params {
			fmt.Fprintf(&exports, " (local.get %d)", j)
		}
		fmt.Fprintf(&exports, " (call $h%d))\n", i)
	}
	src := "(module\n" + imports.String() + `
  (memory (export "memory") 1 4)
  (global $heap (mut i32) (i32.const 32768))
  (global $evil (mut i32) (i32.const 0))
  (func (export "set_alloc") (param i32) (global.set $evil (local.get 0)))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    (if (global.get $evil) (then (return (global.get $evil))))
    (local.set $p (global.get $heap))
    (if (i32.gt_u (i32.add (local.get $p) (local.get $n)) (i32.mul (memory.size) (i32.const 65536)))
      (then (return (i32.const 0))))
    (global.set $heap (i32.add (local.get $p) (local.get $n)))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32)
    (global.set $heap (i32.const 32768)) (global.set $evil (i32.const 0)))
  (func (export "proxy_on_http_call_response") (param i32 i32 i32 i32 i32))
` + exports.String() + ")\n"
	return functiontest.WAT(t, src), fns
}

var (
	fuzzOnce    sync.Once
	fuzzRuntime *function.Runtime
	fuzzModule  *function.Module
	fuzzFilter  *function.Filter
	fuzzFns     []function.HostFunc
)

// FuzzHostCalls drives every host call with arbitrary arguments against a guest's memory
// (filled with arbitrary bytes, the first 32 KiB) and an arbitrary allocator. Whatever the
// input, the host must not panic and a failure must be an *Error.
func FuzzHostCalls(f *testing.F) {
	f.Add(uint16(0), []byte{2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}, []byte("hello"), uint32(0))
	f.Add(uint16(10), make([]byte, 96), []byte("\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00k\x00v\x00"), uint32(0))
	f.Add(uint16(5), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, []byte{}, uint32(0xfffffff0))
	f.Add(uint16(16), []byte{0xc8, 0, 0, 0, 0, 0, 0, 0}, []byte("denied"), uint32(0))
	f.Fuzz(func(t *testing.T, which uint16, args, mem []byte, evil uint32) {
		fuzzOnce.Do(func() {
			r, err := function.NewRuntime(t.Context(), function.Config{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			mod, fns := fuzzGuest(t)
			m, err := r.Compile(t.Context(), sum(mod), mod)
			if err != nil {
				t.Fatal(err)
			}
			fuzzFilter, err = r.NewFilter(m, "fuzz", "fuzz", []byte("cfg"), function.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			fuzzRuntime, fuzzModule, fuzzFns = r, m, fns
		})
		h := fuzzFns[int(which)%len(fuzzFns)]
		vals := make([]uint64, len(h.Params))
		for i := range vals {
			if len(args) >= 8*(i+1) {
				vals[i] = binary.LittleEndian.Uint64(args[8*i:])
			}
			if h.Params[i] == "i32" {
				vals[i] = uint64(uint32(vals[i]))
			}
		}
		if len(mem) > 32768 {
			mem = mem[:32768]
		}
		hp := functiontest.NewHTTP("GET", "/fuzz", "x-a", "1")
		hp.Respond("200", "x-b", "2")
		hp.ReqBody, hp.RespBody = []byte("request body"), []byte("response body")
		c, err := fuzzFilter.Start(hp)
		if reason(err) == function.ReasonQuarantined {
			// Bad host calls in a row quarantine the filter, as they should: a new
			// filter of the same module starts with a clean record.
			fuzzFilter.Close()
			if fuzzFilter, err = fuzzRuntime.NewFilter(fuzzModule, "fuzz", "fuzz", []byte("cfg"), function.Limits{}); err != nil {
				t.Fatal(err)
			}
			c, err = fuzzFilter.Start(hp)
		}
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		defer c.Done()
		c.WriteMemory(0, mem)
		if evil != 0 {
			if err := c.CallExport("set_alloc", []uint64{uint64(evil)}); err != nil {
				t.Fatalf("set_alloc: %v", err) // it only sets a global
			}
		}
		err = c.CallExport("call_"+h.Name, vals)
		var fe *function.Error
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("%s%v: %T %v", h.Name, vals, err, err)
		}
	})
}
