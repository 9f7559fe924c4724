package function_test

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// FuzzInstrument feeds the module rewriter arbitrary bytes: it must never panic; what it
// accepts must not make wazero allocate without bound (it once did, from a declared count);
// and a module wazero accepts must, once rewritten, still be accepted. That the flag is exported and works is
// TestHostileGuests' part: every filter runs a rewritten module.
func FuzzInstrument(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x0a\x09\x01\x07\x00\x03\x40\x0c\x00\x0b\x0b"))
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
		_ = cm.Close(ctx)
		cm2, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("the rewritten module does not compile: %v", err)
		}
		_ = cm2.Close(ctx)
	})
}

// Every test guest survives the rewrite, and the rewritten loop guest stops when told.
func TestInstrumentGuests(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	for _, g := range []string{functiontest.Noop, functiontest.HMAC, functiontest.WatNoop, functiontest.Loop, functiontest.Recursion} {
		out, err := function.Instrument(functiontest.Build(t, g))
		if err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		if _, err := rt.CompileModule(ctx, out); err != nil {
			t.Fatalf("%s rewritten: %v", g, err)
		}
	}
	_, err := function.Instrument(functiontest.WAT(t, `(module (global (export "tollgate_stop") i32 (i32.const 0)))`))
	if err == nil {
		t.Error("a module exporting tollgate_stop was accepted")
	}
}
