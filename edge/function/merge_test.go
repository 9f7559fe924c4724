package function_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// mergeCallbacks are the callbacks a request's merged entries call, by the short name the
// merge guest logs them with.
var mergeCallbacks = []struct{ short, export, sig, result string }{
	{"create", "proxy_on_context_create", "(param i32 i32)", ""},
	{"request_headers", "proxy_on_request_headers", "(param i32 i32 i32) (result i32)", "(i32.const 0)"},
	{"response_headers", "proxy_on_response_headers", "(param i32 i32 i32) (result i32)", "(i32.const 0)"},
	{"response_body", "proxy_on_response_body", "(param i32 i32 i32) (result i32)", "(i32.const 0)"},
	{"done", "proxy_on_done", "(param i32) (result i32)", "(i32.const 1)"},
	{"log", "proxy_on_log", "(param i32)", ""},
	{"delete", "proxy_on_delete", "(param i32)", ""},
	{"http_call_response", "proxy_on_http_call_response", "(param i32 i32 i32 i32 i32)", ""},
}

// mergeModes are what the merge guest does in the callback under test, after logging it.
var mergeModes = map[string]string{
	"":        "",
	"trap":    "(unreachable)",
	"loop":    "(loop $l (br $l))",
	"badcall": "(drop (call $log (i32.const 2) (i32.const 0x7ffffff0) (i32.const 16)))",
	// 403 "no", no headers
	"reply": "(drop (call $reply (i32.const 403) (i32.const 0) (i32.const 0) (i32.const 120) (i32.const 2) (i32.const 0) (i32.const 0) (i32.const -1)))",
	// a callout to "up", then a pause where the callback has a result to say so
	"callout": "(drop (call $http (i32.const 112) (i32.const 2) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 100) (i32.const 128)))",
}

// mergeGuest is a guest that logs every callback's short name as it enters it, adds
// x-merged: req and x-merged: resp to the request and response headers, resumes the
// stream when a callout answers, and does mode in callback at.
func mergeGuest(t testing.TB, at, mode string) []byte {
	var b strings.Builder
	b.WriteString(`(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_send_local_response" (func $reply (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_http_call" (func $http (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_continue_stream" (func $continue (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "x-merged")
  (data (i32.const 80) "req")
  (data (i32.const 96) "resp")
  (data (i32.const 112) "up")
  (data (i32.const 120) "no")
  (global $heap (mut i32) (i32.const 4096))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (local.get $p) (local.get $n)))
    (local.get $p))
`)
	for i, cb := range mergeCallbacks {
		fmt.Fprintf(&b, "  (data (i32.const %d) %q)\n", 256+64*i, cb.short)
		fmt.Fprintf(&b, "  (func (export %q) %s\n", cb.export, cb.sig)
		fmt.Fprintf(&b, "    (drop (call $log (i32.const 2) (i32.const %d) (i32.const %d)))\n", 256+64*i, len(cb.short))
		switch cb.short {
		case "create":
			b.WriteString("    (global.set $heap (i32.const 4096))\n")
		case "request_headers":
			b.WriteString("    (drop (call $add (i32.const 0) (i32.const 64) (i32.const 8) (i32.const 80) (i32.const 3)))\n")
		case "response_headers":
			b.WriteString("    (drop (call $add (i32.const 2) (i32.const 64) (i32.const 8) (i32.const 96) (i32.const 4)))\n")
		case "http_call_response":
			b.WriteString("    (drop (call $continue (i32.const 0)))\n")
		}
		if cb.short == at && mode != "" {
			// Not for the root context, which the instance creates when it starts.
			b.WriteString("    (if (i32.ne (local.get 0) (i32.const 1)) (then " + mergeModes[mode])
			if mode == "callout" && cb.result != "" {
				b.WriteString(" (return (i32.const 1))")
			}
			b.WriteString("))\n")
		}
		b.WriteString("    " + cb.result + ")\n")
	}
	b.WriteString(")\n")
	return functiontest.WAT(t, b.String())
}

// mergeOutcome is what a request through the merge guest showed: every callback in the
// order the guest saw them, the headers, the reply, and the failure.
type mergeOutcome struct {
	Logs       []string
	Req, Resp  []functiontest.Pair
	Reply      functiontest.LocalReply // zero when none
	Reason     function.Reason
	Callback   string
	Merged     bool // a merged entry ran
	AfterError []string
}

// mergeRequest runs one request through a fresh filter of mod (a fresh one: failures
// in a row would quarantine it). path is "last" (Last before the response headers,
// their run ends the context), "body" (response headers, then Last and the response
// body) or "done" (no Last: Done ends the context).
func mergeRequest(t *testing.T, r *function.Runtime, m *function.Module, path string) mergeOutcome {
	t.Helper()
	f, err := r.NewFilter(m, "t", "merge", nil, function.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := functiontest.NewHTTP("GET", "/merge")
	c, err := f.Start(h)
	if err != nil {
		t.Fatal(err)
	}
	var out mergeOutcome
	fail := func(err error) {
		var fe *function.Error
		if errors.As(err, &fe) && out.Reason == "" {
			out.Reason, out.Callback = fe.Reason, fe.Callback
		}
	}
	steps := []func() error{
		func() error { _, err := c.OnRequestHeaders(true); return err },
		func() error {
			h.Respond("200")
			h.RespBody = []byte("body")
			if path == "last" {
				c.Last()
			}
			_, err := c.OnResponseHeaders(path != "body")
			return err
		},
		func() error {
			if path != "body" {
				return nil
			}
			c.Last()
			_, err := c.OnResponseBody(len(h.RespBody), true)
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			fail(err)
			break
		}
		if c.Replied() {
			break
		}
	}
	before := len(h.LogLines())
	phase, fatal := c.DoneResult()
	fail(fatal)
	out.Logs = h.LogLines()
	out.AfterError = out.Logs[before:]
	out.Req, out.Resp = h.Maps[function.RequestHeaders], h.Maps[function.ResponseHeaders]
	if h.Reply != nil {
		out.Reply = *h.Reply
	}
	out.Merged = phase != ""
	return out
}

// With merged entries on and off, a request shows the same: the callbacks in the same
// order, each of proxy_on_done, proxy_on_log and proxy_on_delete once, the same headers
// and replies, callouts answered and the stream resumed, and a trap, a timeout or a bad
// host call in any callback a merged entry calls failing the request with the same
// reason, naming that callback, and running no callback after it.
func TestMergedEntriesBehaveAsSeparateOnes(t *testing.T) {
	r := newRuntime(t, function.Config{Timeout: 50 * time.Millisecond,
		Callout: func(context.Context, *function.CalloutRequest) (*function.CalloutResponse, error) {
			return &function.CalloutResponse{Body: []byte("ok")}, nil
		}})
	t.Cleanup(func() { function.SetMergedEntries(true) })
	for _, cb := range mergeCallbacks {
		for _, mode := range []string{"", "trap", "loop", "badcall", "reply", "callout"} {
			if mode == "" && cb.short != "create" {
				continue // the same module whatever the position
			}
			mod := mergeGuest(t, cb.short, mode)
			m, err := r.Compile(context.Background(), sum(mod), mod)
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"last", "body", "done"} {
				name := fmt.Sprintf("%s in %s, %s", mode, cb.short, path)
				if mode == "" {
					name = "plain, " + path
				}
				var got [2]mergeOutcome
				for i, on := range []bool{true, false} {
					function.SetMergedEntries(on)
					got[i] = mergeRequest(t, r, m, path)
				}
				on, off := got[0], got[1]
				// A failure in the first callback leaves the phase as it was: no sign.
				if (!on.Merged && on.Callback != "proxy_on_context_create") || off.Merged {
					t.Errorf("%s: a merged entry ran: %v with them on, %v off", name, on.Merged, off.Merged)
				}
				on.Merged = off.Merged
				if fmt.Sprint(on) != fmt.Sprint(off) {
					t.Errorf("%s:\n on: %+v\noff: %+v", name, on, off)
				}
				checkMergeOutcome(t, name, cb.short, cb.export, mode, path, off)
			}
		}
	}
}

// checkMergeOutcome holds the outcome with merged entries off, which on was compared to,
// to what the separate callbacks must show.
func checkMergeOutcome(t *testing.T, name, at, export, mode, path string, o mergeOutcome) {
	t.Helper()
	for _, end := range []string{"done", "log", "delete"} {
		if n := strings.Count(strings.Join(o.Logs, ","), "info: "+end); n > 1 {
			t.Errorf("%s: %s ran %d times: %q", name, end, n, o.Logs)
		}
	}
	ran := slices.Contains(o.Logs, "info: "+at)
	want := map[string]function.Reason{"trap": function.ReasonTrap, "loop": function.ReasonTimeout, "badcall": function.ReasonBadHostCall}[mode]
	switch {
	case want != "" && ran:
		if o.Reason != want || o.Callback != export {
			t.Errorf("%s: failed with %s in %s, want %s in %s", name, o.Reason, o.Callback, want, at)
		}
		if last := o.Logs[len(o.Logs)-1]; last != "info: "+at {
			t.Errorf("%s: callbacks ran after the failure: %q", name, o.Logs)
		}
	case want != "":
		if o.Reason != "" {
			t.Errorf("%s: %s never ran, yet the request failed: %s in %s", name, at, o.Reason, o.Callback)
		}
	case o.Reason != "":
		t.Errorf("%s: failed with %s in %s: %q", name, o.Reason, o.Callback, o.Logs)
	default:
		for _, end := range []string{"done", "log", "delete"} {
			if !slices.Contains(o.Logs, "info: "+end) {
				t.Errorf("%s: %s never ran: %q", name, end, o.Logs)
			}
		}
	}
	if mode == "" {
		want := []string{"create", "request_headers", "response_headers", "done", "log", "delete"}
		if path == "body" {
			want = slices.Insert(want, 3, "response_body")
		}
		for i := range want {
			want[i] = "info: " + want[i]
		}
		if !slices.Equal(o.Logs, want) {
			t.Errorf("%s: callbacks %q, want %q", name, o.Logs, want)
		}
		if len(o.Req) == 0 || o.Req[len(o.Req)-1] != (functiontest.Pair{Key: "x-merged", Value: "req"}) ||
			len(o.Resp) == 0 || o.Resp[len(o.Resp)-1] != (functiontest.Pair{Key: "x-merged", Value: "resp"}) {
			t.Errorf("%s: headers %v, %v", name, o.Req, o.Resp)
		}
	}
	if mode == "reply" && ran && o.Reply.Status != 403 {
		t.Errorf("%s: reply %+v", name, o.Reply)
	}
	if mode == "callout" && ran && at != "done" && at != "log" && at != "delete" && at != "http_call_response" &&
		!slices.Contains(o.Logs, "info: http_call_response") {
		t.Errorf("%s: the callout was never answered: %q", name, o.Logs)
	}
}

// A Go guest (its exports are Go's wasmexport wrappers, called here from the merged
// entries inside the module) gives the same headers with merged entries on and off, and
// its context ends in the last callback's run.
func TestMergedEntriesGoGuest(t *testing.T) {
	r := newRuntime(t, function.Config{})
	t.Cleanup(func() { function.SetMergedEntries(true) })
	f := filter(t, r, functiontest.Headers, "t1", "", function.Limits{})
	for _, on := range []bool{true, false} {
		function.SetMergedEntries(on)
		for range 3 {
			h := functiontest.NewHTTP("GET", "/")
			c := throughLast(t, f, h)
			c.Done()
			if v, _ := h.Get(function.RequestHeaders, "x-function"); v != "request" {
				t.Errorf("on=%v: request header x-function = %q", on, v)
			}
			if v, _ := h.Get(function.ResponseHeaders, "x-function"); v != "response" {
				t.Errorf("on=%v: response header x-function = %q", on, v)
			}
		}
	}
}

// instrument adds an entry only where the module exports its callbacks with proxy-wasm's
// types and it merges two calls at least, and refuses modules that export its names.
func TestMergedEntriesAdded(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	header := `(memory (export "memory") 1)
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "malloc") (param i32) (result i32) (i32.const 0))
  (func (export "proxy_on_context_create") (param i32 i32))
`
	all := []string{"tollgate_request_headers", "tollgate_response_headers_end", "tollgate_response_body_end", "tollgate_end"}
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"no-op", string(functiontest.Build(t, functiontest.WatNoop)), []string{all[0], all[1], all[3]}},
		{"every callback", `(module ` + header + `
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_response_body") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_log") (param i32))
  (func (export "proxy_on_delete") (param i32)))`, all},
		{"no end", `(module ` + header + `
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (i32.const 0)))`, all[:1]},
		{"one end callback", `(module ` + header + `
  (func (export "proxy_on_response_body") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_log") (param i32)))`, all[2:3]},
		{"wrong types", `(module ` + header + `
  (func (export "proxy_on_request_headers") (param i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_done") (param i32))
  (func (export "proxy_on_log") (param i32) (result i32) (i32.const 0))
  (func (export "proxy_on_delete") (param i32)))`, nil},
		// An imported function exported as two callbacks, in a module of no functions of
		// its own: instrument adds the function and code sections.
		{"imports only", `(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (export "proxy_on_log" (func $exit))
  (export "proxy_on_delete" (func $exit)))`, all[3:]},
	} {
		mod := []byte(c.src)
		if !strings.HasPrefix(c.src, "\x00asm") {
			mod = functiontest.WAT(t, c.src)
		}
		out, err := function.Instrument(mod)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cm, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("%s: the rewritten module: %v", c.name, err)
		}
		var got []string
		for name := range cm.ExportedFunctions() {
			if strings.HasPrefix(name, "tollgate_") {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		want := slices.Clone(c.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: entries %q, want %q", c.name, got, want)
		}
		_ = cm.Close(ctx)
	}
	for _, name := range append(all, function.PhaseExport, function.HoldExport) {
		src := `(module (func (export "` + name + `")))`
		if strings.HasSuffix(name, "phase") || strings.HasSuffix(name, "hold") {
			src = `(module (global (export "` + name + `") i32 (i32.const 0)))`
		}
		if _, err := function.Instrument(functiontest.WAT(t, src)); err == nil || !strings.Contains(err.Error(), "reserves") {
			t.Errorf("a module exporting %s: %v", name, err)
		}
	}
}
