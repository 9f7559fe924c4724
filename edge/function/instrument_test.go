package function_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// FuzzInstrument feeds the module rewriter arbitrary bytes: it must never panic; what it
// accepts must not make wazero allocate without bound (it once did, from a declared count);
// and a module wazero accepts must, once rewritten, still be accepted, export what it
// exported with the same types, and add the merged entries its callbacks allow, no others.
// That the flag is exported and works is TestHostileGuests' part: every filter runs a
// rewritten module.
func FuzzInstrument(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x0a\x09\x01\x07\x00\x03\x40\x0c\x00\x0b\x0b"))
	// Every entry; and one of an imported function exported as two callbacks, in a module
	// with no function or code section of its own.
	f.Add(functiontest.WAT(f, `(module
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_response_body") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_log") (param i32))
  (func (export "proxy_on_delete") (param i32)))`))
	f.Add(functiontest.WAT(f, `(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (export "proxy_on_log" (func $exit))
  (export "proxy_on_delete" (func $exit)))`))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	f.Cleanup(func() { _ = rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, module []byte) {
		out, err := function.Instrument(module)
		if err != nil {
			return // refused: wazero never sees it (Validate and Compile check first)
		}
		cm, err := rt.CompileModule(ctx, module)
		if err != nil {
			return
		}
		defer cm.Close(ctx)
		cm2, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("the rewritten module does not compile: %v", err)
		}
		defer cm2.Close(ctx)
		checkEntries(t, cm.ExportedFunctions(), cm2.ExportedFunctions())
	})
}

// checkEntries holds a rewritten module's exported functions to its original's: the same,
// with the same types, and the merged entries the original's callbacks allow.
func checkEntries(t *testing.T, orig, out map[string]api.FunctionDefinition) {
	t.Helper()
	sig := func(d api.FunctionDefinition) string {
		return fmt.Sprint(d.ParamTypes(), d.ResultTypes())
	}
	i32 := api.ValueTypeI32
	has := func(name string, params, results []api.ValueType) bool {
		d, ok := orig[name]
		return ok && sig(d) == fmt.Sprint(params, results)
	}
	p1, p2, p3, r1 := []api.ValueType{i32}, []api.ValueType{i32, i32}, []api.ValueType{i32, i32, i32}, []api.ValueType{i32}
	ends := 0
	for _, ok := range []bool{has("proxy_on_done", p1, r1), has("proxy_on_log", p1, nil), has("proxy_on_delete", p1, nil)} {
		if ok {
			ends++
		}
	}
	want := map[string]string{}
	if has("proxy_on_context_create", p2, nil) && has("proxy_on_request_headers", p3, r1) {
		want["tollgate_request_headers"] = fmt.Sprint([]api.ValueType{i32, i32, i32, i32}, r1)
	}
	if has("proxy_on_response_headers", p3, r1) && ends > 0 {
		want["tollgate_response_headers_end"] = fmt.Sprint(p3, r1)
	}
	if has("proxy_on_response_body", p3, r1) && ends > 0 {
		want["tollgate_response_body_end"] = fmt.Sprint(p3, r1)
	}
	if ends >= 2 {
		want["tollgate_end"] = fmt.Sprint(p1, []api.ValueType(nil))
	}
	for name, d := range orig {
		if o, ok := out[name]; !ok || sig(o) != sig(d) {
			t.Errorf("export %s %s became %v", name, sig(d), o)
		}
	}
	for name, d := range out {
		if _, ok := orig[name]; ok {
			continue
		}
		if w, ok := want[name]; !ok || sig(d) != w {
			t.Errorf("added export %s %s; want %q", name, sig(d), want)
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Errorf("entries missing: %q", want)
	}
}

// Every test guest survives the rewrite, and the rewritten loop guest stops when told.
func TestInstrumentGuests(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	for _, g := range []string{functiontest.Noop, functiontest.HMAC, functiontest.WatNoop, functiontest.Loop, functiontest.Recursion, functiontest.Nested} {
		out, err := function.Instrument(functiontest.Build(t, g))
		if err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		if _, err := rt.CompileModule(ctx, out); err != nil {
			t.Fatalf("%s rewritten: %v", g, err)
		}
	}
	// Code that names a global past the module's own would reach the host's.
	hostGlobal := "\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x0a\x07\x01\x05\x00\x23\x00\x1a\x0b"
	if _, err := function.Instrument([]byte(hostGlobal)); err == nil || !strings.Contains(err.Error(), "global 0 does not exist") {
		t.Errorf("a function reading global 0 of none: %v", err)
	}
	for _, name := range []string{function.StopExport, function.DepthExport} {
		_, err := function.Instrument(functiontest.WAT(t, `(module (global (export "`+name+`") i32 (i32.const 0)))`))
		if err == nil {
			t.Errorf("a module exporting %s was accepted", name)
		}
	}
}

// depthModule is a module with the shapes of call the depth check must count: plain
// recursion ending in a leaf, which is not counted; a function of 32 params and locals,
// three frames each; one that leaves by every way out of a function; one of two results;
// and a trap that is not the limit's.
const depthModule = `(module
  (func $leaf (param $n i32) (result i32)
    (local i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64)
    (local.get $n))
  (func $down (export "down") (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n)) (then (call $leaf (i32.const 0)))
      (else (i32.add (call $down (i32.sub (local.get $n) (i32.const 1))) (i32.const 1)))))
  (func $wide (export "wide") (param $n i32) (result i32)
    (local i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64)
    (local i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64)
    (if (result i32) (i32.eqz (local.get $n)) (then (i32.const 0))
      (else (i32.add (call $wide (i32.sub (local.get $n) (i32.const 1))) (i32.const 1)))))
  (func $exits (export "exits") (param $n i32) (result i32)
    (local $s i32)
    (if (i32.eqz (local.get $n)) (then (return (i32.const 0))))
    (local.set $s (i32.add (local.get $n) (call $exits (i32.sub (local.get $n) (i32.const 1)))))
    (br_if 0 (local.get $s) (i32.eq (i32.and (local.get $n) (i32.const 3)) (i32.const 1)))
    (drop)
    (block $on (result i32)
      (br_table $on 1 (local.get $s) (i32.eq (i32.and (local.get $n) (i32.const 3)) (i32.const 2))))
    (drop)
    (if (i32.eq (i32.and (local.get $n) (i32.const 3)) (i32.const 3)) (then (br 1 (local.get $s))))
    (local.get $s))
  (func $pairs (export "pairs") (param $n i32) (result i32 i32)
    (if (i32.eqz (local.get $n)) (then (return (i32.const 0) (i32.const 0))))
    (call $pairs (i32.sub (local.get $n) (i32.const 1)))
    (i32.add (local.get $n))
    (br 0))
  (func $trap (export "trap") (param $n i32)
    (if (i32.eqz (local.get $n)) (then (unreachable)))
    (call $trap (i32.sub (local.get $n) (i32.const 1))))
)`

// tailModule is, built with wat2wasm --enable-tail-call:
//
//	(module
//	  (type $t (func (param i32) (result i32)))
//	  (table 1 funcref)
//	  (elem (i32.const 0) $f)
//	  (func $f (export "f") (param i32) (result i32)
//	    (if (result i32) (i32.eqz (local.get 0)) (then (i32.const 7))
//	      (else (return_call $g (i32.sub (local.get 0) (i32.const 1))))))
//	  (func $g (param i32) (result i32)
//	    (return_call_indirect (type $t) (local.get 0) (i32.const 0))))
const tailModule = "\x00\x61\x73\x6d\x01\x00\x00\x00\x01\x06\x01\x60\x01\x7f\x01\x7f\x03\x03\x02\x00\x00\x04\x04\x01\x70\x00\x01\x07\x05\x01\x01\x66\x00\x00\x09\x07\x01\x00\x41\x00\x0b\x01\x00\x0a\x1e\x02\x12\x00\x20\x00\x45\x04\x7f\x41\x07\x05\x20\x00\x41\x01\x6b\x12\x01\x0b\x0b\x09\x00\x20\x00\x41\x00\x13\x00\x00\x0b"

// instantiate rewrites module and starts it with fuel enough for any test.
func instantiate(t *testing.T, rt wazero.Runtime, module []byte) api.Module {
	t.Helper()
	ctx := context.Background()
	out, err := function.Instrument(module)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mod.Close(ctx) })
	mod.ExportedGlobal(function.StopExport).(api.MutableGlobal).Set(1 << 62)
	return mod
}

// The depth check lets a guest go exactly maxDepth frames deep, counts a function of many
// locals as several frames, gives every frame back on every way out, and is told apart
// from the guest's own traps. The compiler, not the interpreter: the interpreter stops
// at 2000 frames of its own.
func TestCallDepth(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod := instantiate(t, rt, functiontest.WAT(t, depthModule))
	depth := mod.ExportedGlobal(function.DepthExport)

	wideFrames := uint64(1 + 32/function.FramePerLocals)
	for _, c := range []struct {
		fn      string
		deepest uint64 // the deepest call that passes: n+1 calls of fn
		frames  uint64
	}{
		{"down", function.MaxDepth - 1, 1},
		{"wide", function.MaxDepth/wideFrames - 1, wideFrames},
	} {
		res, err := mod.ExportedFunction(c.fn).Call(ctx, c.deepest)
		if err != nil || res[0] != c.deepest {
			t.Fatalf("%s(%d): %v %v", c.fn, c.deepest, res, err)
		}
		if d := depth.Get(); d != 0 {
			t.Fatalf("%s(%d) left a depth of %d", c.fn, c.deepest, d)
		}
		mod2 := instantiate(t, rt, functiontest.WAT(t, depthModule))
		_, err = mod2.ExportedFunction(c.fn).Call(ctx, c.deepest+1)
		if err == nil || !function.OverDepth(mod2) {
			t.Fatalf("%s(%d), %d frames: %v, depth %d; want the depth check's trap", c.fn, c.deepest+1, (c.deepest+2)*c.frames, err, mod2.ExportedGlobal(function.DepthExport).Get())
		}
	}

	for i := range 2 { // the second call finds the depth the first left
		res, err := mod.ExportedFunction("exits").Call(ctx, 1000)
		if err != nil || res[0] != 500500 {
			t.Fatalf("exits(1000), call %d: %v %v", i, res, err)
		}
		res, err = mod.ExportedFunction("pairs").Call(ctx, 1000)
		if err != nil || res[0] != 0 || res[1] != 500500 {
			t.Fatalf("pairs(1000), call %d: %v %v", i, res, err)
		}
		if d := depth.Get(); d != 0 {
			t.Fatalf("call %d left a depth of %d", i, d)
		}
	}

	if _, err := mod.ExportedFunction("trap").Call(ctx, 100); err == nil || function.OverDepth(mod) {
		t.Fatalf("the guest's own trap: %v, over depth %v", err, function.OverDepth(mod))
	}

	// Tail calls replace the caller's frame, so they do not add up. wazero runs them only
	// when the feature is on, which the host does not turn on.
	trt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2|experimental.CoreFeaturesTailCall))
	defer trt.Close(ctx)
	tail := instantiate(t, trt, []byte(tailModule))
	if res, err := tail.ExportedFunction("f").Call(ctx, 10*function.MaxDepth); err != nil || res[0] != 7 {
		t.Fatalf("tail calls %d deep: %v %v", 10*function.MaxDepth, res, err)
	}
	if d := tail.ExportedGlobal(function.DepthExport).Get(); d != 0 {
		t.Fatalf("tail calls left a depth of %d", d)
	}
	if _, err := rt.CompileModule(ctx, []byte(tailModule)); err == nil {
		t.Error("the host's features accept tail calls: the depth check's handling of them is now live")
	}
}
