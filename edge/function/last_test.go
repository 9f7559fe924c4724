package function_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// lastGuest logs from each of the callbacks that end a context, and reads a request
// property from proxy_on_log, so the test sees that they ran and with what they ran.
const lastGuest = `(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property" (func $prop (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "done")
  (data (i32.const 32) "delete")
  (data (i32.const 48) "request\00path")
  (data (i32.const 64) "headers")
  (global $heap (mut i32) (i32.const 1024))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (local.get $p) (local.get $n)))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32) (global.set $heap (i32.const 1024)))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (drop (call $log (i32.const 2) (i32.const 64) (i32.const 7)))
    (i32.const 0))
  (func (export "proxy_on_done") (param i32) (result i32)
    (drop (call $log (i32.const 2) (i32.const 16) (i32.const 4)))
    (i32.const 1))
  ;; logs the request's path, which it reads through proxy_get_property (address at 0,
  ;; size at 4)
  (func (export "proxy_on_log") (param i32)
    (if (i32.eqz (call $prop (i32.const 48) (i32.const 12) (i32.const 0) (i32.const 4)))
      (then (drop (call $log (i32.const 2) (i32.load (i32.const 0)) (i32.load (i32.const 4)))))))
  (func (export "proxy_on_delete") (param i32)
    (drop (call $log (i32.const 2) (i32.const 32) (i32.const 6))))
)`

// With TOLLGATE_EDGE_FUNCTION_END_WITH_LAST_CALLBACK on, the callback Last announces
// ends the context in its own run: proxy_on_done, proxy_on_log (properties still readable)
// and proxy_on_delete have run, once each and in order, when it returns, and Done adds
// nothing. Off, they wait for Done, as they always did.
func TestLastCallbackEndsTheRequest(t *testing.T) {
	r := newRuntime(t, function.Config{})
	mod := functiontest.WAT(t, lastGuest)
	m, err := r.Compile(context.Background(), sum(mod), mod)
	if err != nil {
		t.Fatal(err)
	}
	f, err := r.NewFilter(m, "t", "last", nil, function.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	want := []string{"info: headers", "info: done", "info: /orders/42", "info: delete"}
	for _, on := range []bool{true, false} {
		function.SetEndWithLastCallback(on)
		for range 3 { // a reused Call must not carry the last request's state
			h := functiontest.NewHTTP("GET", "/orders/42")
			c := throughLast(t, f, h)
			before := h.LogLines()
			if on && !slices.Equal(before, want) {
				t.Errorf("on: logs after the last callback %q, want %q", before, want)
			}
			if !on && !slices.Equal(before, want[:1]) {
				t.Errorf("off: logs after the last callback %q, want %q", before, want[:1])
			}
			if d := c.Done(); d <= 0 {
				t.Errorf("on=%v: guest time %v", on, d)
			}
			if got := h.LogLines(); !slices.Equal(got, want) {
				t.Errorf("on=%v: logs after Done %q, want %q", on, got, want)
			}
		}
	}
	function.SetEndWithLastCallback(true)
}

// A watchdog asleep after a second without guests wakes for the next run and cuts off a
// loop at its deadline: the run's deadline and the watchdog's sleep meet without a lock,
// and a missed wake would leave the loop to its fuel, which lasts longer.
func TestWatchdogWakesForALoop(t *testing.T) {
	// WallFactor 1: the watchdog's deadline comes before the fuel runs out.
	r := newRuntime(t, function.Config{Timeout: 50 * time.Millisecond, WallFactor: 1})
	f := filter(t, r, functiontest.Loop, "spin", "", function.Limits{})
	for i := 0; !function.WatchdogAsleep(r); i++ {
		if i > 100 {
			t.Fatal("the watchdog did not go to sleep after 5 s without guests")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := roundTrip(f, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonTimeout {
		t.Fatalf("a loop: %v, want reason %s", err, function.ReasonTimeout)
	}
	if n := function.WatchdogCuts(r); n == 0 {
		t.Error("the watchdog cut nothing: the fuel stopped the loop, the watchdog slept through it")
	}
}

// With the watchdog's deadline far off, a loop is stopped by its fuel alone, at about its
// budget of CPU time: the bound that holds however busy the machine's cores are.
func TestFuelStopsALoopBeforeTheWatchdog(t *testing.T) {
	r := newRuntime(t, function.Config{Timeout: 20 * time.Millisecond, WallFactor: 100})
	f := filter(t, r, functiontest.Loop, "spin", "", function.Limits{})
	if _, err := roundTrip(f, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonTimeout {
		t.Fatalf("a loop: %v, want reason %s", err, function.ReasonTimeout)
	}
	if n := function.WatchdogCuts(r); n != 0 {
		t.Errorf("the watchdog cut %d runs; the fuel should have stopped the loop 2 s before its deadline", n)
	}
}

// With the run's speed-ups off (a lock per run, a Call allocated per request, a
// context.WithValue), a filter behaves the same: its headers are set request after
// request, and the watchdog still cuts a loop off at its deadline.
func TestRunSwitchesOff(t *testing.T) {
	function.SetLockFreeRuns(false)
	function.SetReuseCalls(false)
	function.SetOwnContext(false)
	t.Cleanup(func() {
		function.SetLockFreeRuns(true)
		function.SetReuseCalls(true)
		function.SetOwnContext(true)
	})
	r := newRuntime(t, function.Config{Timeout: 50 * time.Millisecond, WallFactor: 1})
	f := filter(t, r, functiontest.WatHeaders, "t1", "", function.Limits{})
	for range 3 {
		h := functiontest.NewHTTP("GET", "/")
		if _, err := roundTrip(f, h); err != nil {
			t.Fatal(err)
		}
		if v, _ := h.Get(function.RequestHeaders, "x-function"); v == "" {
			t.Errorf("request header x-function missing; headers %v", h.Maps[function.RequestHeaders])
		}
	}
	loop := filter(t, r, functiontest.Loop, "spin", "", function.Limits{})
	if _, err := roundTrip(loop, functiontest.NewHTTP("GET", "/")); reason(err) != function.ReasonTimeout {
		t.Fatalf("a loop: %v, want reason %s", err, function.ReasonTimeout)
	}
	if n := function.WatchdogCuts(r); n == 0 {
		t.Error("the watchdog cut nothing under the lock")
	}
}

// throughLast runs h's request headers and a 200's response headers through f, the
// latter announced as the last callback (Call.Last); the caller ends the Call.
func throughLast(t *testing.T, f *function.Filter, h *functiontest.HTTP) *function.Call {
	t.Helper()
	c, err := f.Start(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OnRequestHeaders(true); err != nil {
		t.Fatal(err)
	}
	h.Respond("200")
	c.Last()
	if _, err := c.OnResponseHeaders(true); err != nil {
		t.Fatal(err)
	}
	return c
}
