package function

import (
	"context"
	"time"
)

// Call is one request's passage through a filter. It is driven by one goroutine, callback
// after callback, and ends with Done; after Done it belongs to the filter again.
type Call struct {
	in          *instance
	h           HTTP
	id          uint32
	elapsed     int64
	err         error
	replied     bool
	continued   bool
	closed      bool
	callouts    int
	pending     []pendingCallout
	calloutResp *CalloutResponse
	pairs       []HeaderPair
	headerBytes int
	ser         serializer
	// Made once per instance: a method value allocates, and these are used per request.
	countFn, fillFn func(k, v []byte)
}

type pendingCallout struct {
	token uint32
	req   *CalloutRequest
}

func (in *instance) newCall() *Call {
	c := &Call{in: in}
	c.countFn, c.fillFn = c.count, c.fill
	return c
}

// Start takes an instance for one request (a pooled one, or a new one when all are busy)
// and creates the request's context in it.
func (f *Filter) Start(h HTTP) (*Call, error) {
	if q := f.quarantined.Load(); q != 0 && now() < q {
		return nil, &Error{Reason: ReasonQuarantined, Function: f.name,
			Detail: "the function failed on its last requests; it is refused for a while"}
	}
	var in *instance
	select {
	case in = <-f.pool:
	default:
		var err error
		if in, err = f.newInstance(); err != nil {
			f.strike()
			return nil, err
		}
	}
	c := in.c
	c.h, c.elapsed, c.err = h, 0, nil
	c.replied, c.continued, c.closed = false, false, false
	c.callouts, c.headerBytes = 0, 0
	c.pending = c.pending[:0]
	c.id = in.nextID
	if in.nextID++; in.nextID == 0 {
		in.nextID = rootContextID + 1
	}
	in.call = c
	in.stack[0], in.stack[1] = uint64(c.id), rootContextID
	if busy, err := c.run(cbContextCreate, 2); err != nil {
		if busy {
			in.call, c.h = nil, nil
			f.release(in)
		} else {
			c.Done()
		}
		return nil, err
	}
	return c, nil
}

// Elapsed is the guest time this request has used so far: the wall time of its callbacks,
// callouts excluded.
func (c *Call) Elapsed() time.Duration { return time.Duration(c.elapsed) }

// Replied says the guest answered the request itself (proxy_send_local_response, passed
// to HTTP.SendLocalReply): the edge sends that answer and calls no further callback but
// Done.
func (c *Call) Replied() bool { return c.replied }

// OnRequestHeaders runs proxy_on_request_headers. ActionPause means the guest replied.
func (c *Call) OnRequestHeaders(endOfStream bool) (Action, error) {
	return c.http(cbRequestHeaders, uint32(c.h.HeaderCount(RequestHeaders)), endOfStream)
}

// OnRequestBody runs proxy_on_request_body with the whole body (size bytes).
func (c *Call) OnRequestBody(size int, endOfStream bool) (Action, error) {
	return c.http(cbRequestBody, uint32(size), endOfStream)
}

// OnResponseHeaders runs proxy_on_response_headers.
func (c *Call) OnResponseHeaders(endOfStream bool) (Action, error) {
	return c.http(cbResponseHeaders, uint32(c.h.HeaderCount(ResponseHeaders)), endOfStream)
}

// OnResponseBody runs proxy_on_response_body with the whole body (size bytes).
func (c *Call) OnResponseBody(size int, endOfStream bool) (Action, error) {
	return c.http(cbResponseBody, uint32(size), endOfStream)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// http runs one HTTP callback, then the callouts it asked for and their answers' callback.
// Bodies arrive whole, so a Pause with no callout pending asks for nothing the host would
// wait for: it reads as Continue. A Pause for a callout must be followed by
// proxy_continue_stream or a local reply once the answers are in; otherwise the request
// fails, as it would hang in Envoy.
func (c *Call) http(cb int, n uint32, endOfStream bool) (Action, error) {
	if c.err != nil {
		return ActionContinue, c.err
	}
	in := c.in
	if in.cb[cb] == nil {
		return ActionContinue, nil
	}
	c.continued = false
	in.stack[0], in.stack[1], in.stack[2] = uint64(c.id), uint64(n), b2u(endOfStream)
	if _, err := c.run(cb, 3); err != nil {
		return ActionContinue, err
	}
	paused := u32(in.stack[0]) != uint32(ActionContinue)
	calledOut := false
	for len(c.pending) > 0 && !c.replied && !c.closed {
		calledOut = true
		p := c.pending[0]
		c.pending = c.pending[1:]
		resp := c.callout(p.req)
		c.calloutResp = resp
		in.stack[0], in.stack[1] = uint64(c.id), uint64(p.token)
		in.stack[2], in.stack[3], in.stack[4] = uint64(len(resp.Headers)), uint64(len(resp.Body)), uint64(len(resp.Trailers))
		_, err := c.run(cbHTTPCallResponse, 5)
		c.calloutResp = nil
		if err != nil {
			return ActionContinue, err
		}
	}
	c.pending = c.pending[:0]
	switch {
	case c.closed:
		return c.failCall(cbNames[cb], "the function closed the stream")
	case c.replied:
		return ActionPause, nil
	case paused && calledOut && !c.continued:
		return c.failCall(cbNames[cb], "the function paused for a callout and never resumed the stream")
	}
	return ActionContinue, nil
}

func (c *Call) failCall(cb, detail string) (Action, error) {
	c.err = &Error{Reason: ReasonBadHostCall, Function: c.in.f.name, Callback: cb, Detail: detail}
	return ActionContinue, c.err
}

func (c *Call) callout(req *CalloutRequest) *CalloutResponse {
	fn := c.in.f.rt.cfg.Callout
	if fn == nil || c.in.cb[cbHTTPCallResponse] == nil {
		return &CalloutResponse{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), req.Timeout)
	defer cancel()
	resp, err := fn(ctx, req)
	if err != nil || resp == nil {
		return &CalloutResponse{}
	}
	return resp
}

// run runs callback cb within the tenant's concurrency cap. busy reports that the cap
// stayed full (the instance is then untouched).
func (c *Call) run(cb int, nargs int) (busy bool, err error) {
	in := c.in
	fn := in.cb[cb]
	if fn == nil {
		in.stack[0] = 0
		return false, nil
	}
	sem := *in.f.slot.sem.Load()
	select {
	case sem <- struct{}{}:
	default:
		t := time.NewTimer(time.Duration(in.f.timeout))
		select {
		case sem <- struct{}{}:
			t.Stop()
		case <-t.C:
			c.err = &Error{Reason: ReasonBusy, Function: in.f.name, Callback: cbNames[cb],
				Detail: "the tenant's functions are all busy on this edge"}
			return true, c.err
		}
	}
	err = in.invoke(cbNames[cb], fn, nargs, in.f.timeout)
	<-sem
	if err != nil {
		c.err = err
	}
	return false, err
}

// Done ends the request in the guest (proxy_on_done, proxy_on_log, proxy_on_delete) and
// gives the instance back to the filter's pool, or drops it if it failed. It returns the
// request's whole guest time, Elapsed included; c must not be used after.
func (c *Call) Done() time.Duration {
	in := c.in
	if c.err == nil && !in.dead {
		for _, cb := range [...]int{cbDone, cbLog, cbDelete} {
			in.stack[0] = uint64(c.id)
			if _, err := c.run(cb, 1); err != nil {
				break
			}
		}
	}
	if c.err != nil {
		in.dead = true
		if e, ok := c.err.(*Error); !ok || e.Reason != ReasonBusy {
			in.f.strike()
		}
	} else {
		in.f.ok()
	}
	el := time.Duration(c.elapsed)
	in.call, c.h, c.calloutResp = nil, nil, nil
	in.f.release(in)
	return el
}

func (f *Filter) release(in *instance) {
	if in.dead || f.closed.Load() {
		in.destroy()
		return
	}
	select {
	case f.pool <- in:
		if f.closed.Load() {
			// Close drained the pool before this instance was put back.
			f.Close()
		}
	default:
		in.destroy()
	}
}
