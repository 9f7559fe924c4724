package function_test

import (
	"fmt"
	"sync"
	"testing"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// Many more requests in flight than the filter has instances: each request's context
// lives in a shared instance between its callbacks, the instances stay within their cap,
// and every request gets its own path back, never another's.
func TestManyContextsPerInstance(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.Contexts, "many", "", function.Limits{Concurrency: 2})
	const n = 64
	var started, finished sync.WaitGroup
	proceed := make(chan struct{})
	errs := make(chan error, n)
	started.Add(n)
	finished.Add(n)
	for i := range n {
		go func() {
			defer finished.Done()
			path := fmt.Sprintf("/r/%d", i)
			h := functiontest.NewHTTP("GET", path)
			c, err := f.Start(h)
			if err == nil {
				_, err = c.OnRequestHeaders(true)
			}
			started.Done()
			<-proceed // every request is now in flight, as across an upstream round trip
			if err != nil {
				errs <- fmt.Errorf("%s: %v", path, err)
				if c != nil {
					c.Done()
				}
				return
			}
			h.Respond("200")
			if _, err := c.OnResponseHeaders(true); err != nil {
				errs <- fmt.Errorf("%s: response headers: %v", path, err)
			} else if v, _ := h.Get(function.ResponseHeaders, "x-path"); v != path {
				errs <- fmt.Errorf("%s: x-path %q", path, v)
			}
			c.Done()
		}()
	}
	started.Wait()
	inFlight := function.Instances(f)
	close(proceed)
	finished.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if inFlight < 1 || inFlight > function.MaxInstances(f) {
		t.Errorf("%d instances with %d requests in flight; the cap is %d", inFlight, n, function.MaxInstances(f))
	}
	if live := function.LiveInstances(r); live > function.MaxInstances(f) {
		t.Errorf("%d live instances after the requests; the cap is %d", live, function.MaxInstances(f))
	}
	t.Logf("%d requests in flight on %d instances (cap %d)", n, inFlight, function.MaxInstances(f))
}

// A request that traps kills the instance its context lives in: the other requests on
// it fail their next callback with the same reason and end cleanly, the filter is not
// quarantined for them, and new requests run on a fresh instance.
func TestTrapFailsTheInstancesOtherContexts(t *testing.T) {
	r := newRuntime(t, function.Config{})
	f := filter(t, r, functiontest.Contexts, "trap", "", function.Limits{Concurrency: 1})
	if function.MaxInstances(f) != 1 {
		t.Fatalf("cap %d, want 1", function.MaxInstances(f))
	}
	type req struct {
		h *functiontest.HTTP
		c *function.Call
	}
	var others []req
	for i := range 5 {
		h := functiontest.NewHTTP("GET", fmt.Sprintf("/other/%d", i))
		c, err := f.Start(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.OnRequestHeaders(true); err != nil {
			t.Fatal(err)
		}
		others = append(others, req{h, c})
	}
	if _, err := roundTrip(f, functiontest.NewHTTP("GET", "/boom", "x-trap", "1")); reason(err) != function.ReasonTrap {
		t.Fatalf("the trapping request: %v", err)
	}
	for _, o := range others {
		o.h.Respond("200")
		_, err := o.c.OnResponseHeaders(true)
		if reason(err) != function.ReasonTrap {
			t.Errorf("a request on the dead instance: %v, want reason trap", err)
		} else {
			t.Logf("%v", err)
		}
		o.c.Done()
	}
	if live := function.LiveInstances(r); live != 0 {
		t.Errorf("%d live instances after the trap, want 0", live)
	}
	for i := range 5 {
		path := fmt.Sprintf("/after/%d", i)
		h := functiontest.NewHTTP("GET", path)
		if _, err := roundTrip(f, h); err != nil {
			t.Fatalf("a new request: %v", err)
		}
		if v, _ := h.Get(function.ResponseHeaders, "x-path"); v != path {
			t.Errorf("%s: x-path %q", path, v)
		}
	}
	if live := function.LiveInstances(r); live != 1 {
		t.Errorf("%d live instances, want 1 fresh one", live)
	}
}
