package function

import (
	"context"
	"time"
)

// Call is one request's passage through a filter. It is driven by one goroutine, callback
// after callback, and ends with Done; after Done it belongs to the filter again.
type Call struct {
	f           *Filter
	in          *instance // the instance holding the request's context
	h           HTTP
	id          uint32
	elapsed     int64
	err         error
	victim      bool // failed because another request killed its instance
	replied     bool
	created     bool // proxy_on_context_create ran
	continued   bool
	closed      bool
	last        bool // the next callback is the request's last (Last)
	ended       bool // proxy_on_done, proxy_on_log and proxy_on_delete ran
	callouts    int
	pending     []pendingCallout
	calloutResp *CalloutResponse
	pairs       []HeaderPair
	headerBytes int
	ser         serializer
	args        [5]uint64 // the running callback's arguments
	ret         uint32    // and its result
	// Made once per Call: a method value allocates, and these are used per request.
	countFn, fillFn func(k, v []byte)
}

type pendingCallout struct {
	token uint32
	req   *CalloutRequest
}

// getCall takes a free Call of in, whose lock the caller holds.
func (in *instance) getCall() *Call {
	if n := len(in.calls); n > 0 && reuseCalls.Load() {
		c := in.calls[n-1]
		in.calls = in.calls[:n-1]
		return c
	}
	c := &Call{f: in.f}
	c.countFn, c.fillFn = c.count, c.fill
	return c
}

// Start places the request's context (a fresh id) in one of the filter's instances and
// lets go of the instance: its callbacks take it again, so the request holds no instance
// across its upstream round trip. The guest learns of the context
// (proxy_on_context_create) just before its first callback, in the same run (begin).
func (f *Filter) Start(h HTTP) (*Call, error) {
	if q := f.quarantined.Load(); q != 0 && now() < q {
		return nil, &Error{Reason: ReasonQuarantined, Function: f.name,
			Detail: "the function failed on its last requests; it is refused for a while"}
	}
	in, err := f.take()
	if err != nil {
		if e, ok := err.(*Error); !ok || e.Reason != ReasonBusy {
			f.strike()
		}
		return nil, err
	}
	c := in.getCall()
	c.in, c.h, c.elapsed, c.err, c.victim = in, h, 0, nil, false
	c.replied, c.created, c.continued, c.closed = false, false, false, false
	c.last, c.ended = false, false
	c.callouts, c.headerBytes = 0, 0
	c.pending = c.pending[:0]
	c.id = in.nextID
	if in.nextID++; in.nextID == 0 {
		in.nextID = rootContextID + 1
	}
	in.refs++
	in.mu.Unlock()
	return c, nil
}

// take returns a started instance of f, locked. It prefers one free right now, in round
// robin; when all are busy it starts one more if a slot is empty, and otherwise waits for
// the round robin's pick, whose callback is bounded by the filter's timeout.
func (f *Filter) take() (*instance, error) {
	for {
		n := uint32(len(f.slots))
		first := f.rr.Add(1)
		empty := -1
		for i := range n {
			j := (first + i) % n
			in := f.slots[j].Load()
			if in == nil {
				if empty < 0 {
					empty = int(j)
				}
				continue
			}
			if in.mu.TryLock() {
				if !in.dead {
					return in, nil
				}
				f.slots[j].CompareAndSwap(in, nil)
				in.mu.Unlock()
			}
		}
		if empty >= 0 && f.grow.TryLock() {
			in, err := f.grown(empty)
			f.grow.Unlock()
			if in != nil || err != nil {
				return in, err
			}
			continue
		}
		if in := f.slots[first%n].Load(); in != nil {
			in.mu.Lock()
			if !in.dead {
				return in, nil
			}
			in.mu.Unlock()
		} else if empty >= 0 {
			// Another request is starting an instance: wait for it, then fill the slot
			// unless it did.
			f.grow.Lock()
			in, err := f.grown(empty)
			f.grow.Unlock()
			if in != nil || err != nil {
				return in, err
			}
		}
	}
}

// grown starts an instance in slot i (under f.grow) and returns it locked; nil, nil when
// the slot was filled meanwhile. Starting runs guest code, so it takes a slot of the
// tenant's cap like a callback.
func (f *Filter) grown(i int) (*instance, error) {
	if f.slots[i].Load() != nil {
		return nil, nil
	}
	sem, err := f.acquire(cbVMStart, false)
	if err != nil {
		return nil, err
	}
	in, err := f.newInstance()
	release(sem)
	if err != nil {
		return nil, err
	}
	in.slotNo = i
	in.mu.Lock()
	f.slots[i].Store(in)
	return in, nil
}

// Elapsed is the guest time this request has used so far: the wall time of its callbacks,
// callouts excluded.
func (c *Call) Elapsed() time.Duration { return time.Duration(c.elapsed) }

// Replied says the guest answered the request itself (proxy_send_local_response, passed
// to HTTP.SendLocalReply): the edge sends that answer and calls no further callback but
// Done.
func (c *Call) Replied() bool { return c.replied }

// Last says the next callback is the last this request makes of the filter (the
// response headers' when no response body callback follows, or the response body's):
// the context then ends (proxy_on_done, proxy_on_log, proxy_on_delete) in the same run,
// one guest entry, one clock reading and one budget less than a separate Done. The guest
// sees on_log before the edge sends the response rather than after, which is all
// proxy-wasm promises of it. It does nothing while SetEndWithLastCallback is off.
func (c *Call) Last() {
	if endWithLast.Load() {
		c.last = true
	}
}

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
	c.args[0], c.args[1], c.args[2] = uint64(c.id), uint64(n), b2u(endOfStream)
	if err := c.run(cb, 3, false); err != nil {
		return ActionContinue, err
	}
	paused := c.ret != uint32(ActionContinue)
	calledOut := false
	for len(c.pending) > 0 && !c.replied && !c.closed {
		calledOut = true
		p := c.pending[0]
		c.pending = c.pending[1:]
		resp := c.callout(p.req)
		c.calloutResp = resp
		c.args[0], c.args[1] = uint64(c.id), uint64(p.token)
		c.args[2], c.args[3], c.args[4] = uint64(len(resp.Headers)), uint64(len(resp.Body)), uint64(len(resp.Trailers))
		err := c.run(cbHTTPCallResponse, 5, false)
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
	c.err = &Error{Reason: ReasonBadHostCall, Function: c.f.name, Callback: cb, Detail: detail}
	return ActionContinue, c.err
}

func (c *Call) callout(req *CalloutRequest) *CalloutResponse {
	fn := c.f.rt.cfg.Callout
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

// acquire takes a slot of the tenant's concurrency cap for callback cb; the caller gives
// it back with release. Unless wait, a cap that stays full for the filter's timeout is
// ReasonBusy. A cap of at least the edge's cores binds nothing (no more callbacks run at
// once than there are Go processors to run them), so then no slot is taken: nil
// (SetSkipIdleCap).
func (f *Filter) acquire(cb int, wait bool) (chan struct{}, error) {
	sem := *f.slot.sem.Load()
	if cap(sem) >= int(f.rt.procs.Load()) && skipIdleCap.Load() {
		return nil, nil
	}
	select {
	case sem <- struct{}{}:
		return sem, nil
	default:
	}
	if wait {
		sem <- struct{}{}
		return sem, nil
	}
	t := time.NewTimer(time.Duration(f.timeout))
	defer t.Stop()
	select {
	case sem <- struct{}{}:
		return sem, nil
	case <-t.C:
		return nil, &Error{Reason: ReasonBusy, Function: f.name, Callback: cbNames[cb],
			Detail: "the tenant's functions are all busy on this edge"}
	}
}

func release(sem chan struct{}) {
	if sem != nil {
		<-sem
	}
}

// run runs callback cb with c.args[:nargs] within the tenant's concurrency cap, holding
// the request's instance meanwhile; the context's creation runs first when it has not.
func (c *Call) run(cb int, nargs int, wait bool) error {
	in := c.in
	if in.cb[cb] == nil {
		c.ret = 0
		return nil
	}
	sem, err := c.f.acquire(cb, wait)
	if err != nil {
		c.err = err
		return err
	}
	in.mu.Lock()
	start := c.begin()
	err = c.step(cb, nargs)
	c.end(start)
	in.mu.Unlock()
	release(sem)
	return err
}

// step runs callback cb in the caller's run: the context's creation first when it has
// not run, the context's end after it when it is the last (Last), with as few entries
// into the guest as the module's merged entries allow (SetMergedEntries).
func (c *Call) step(cb int, nargs int) error {
	in := c.in
	var err error
	merged := mergedEntries.Load()
	switch {
	case merged && cb == cbRequestHeaders && !c.created && in.entries[entryRequest] != nil:
		c.created = true
		c.args[1], c.args[2], c.args[3] = rootContextID, c.args[1], c.args[2]
		err = c.execEntry(entryRequest, cbContextCreate, 4)
	case merged && (cb == cbResponseHeaders || cb == cbResponseBody) && c.last && !c.ended &&
		len(c.pending) == 0 && in.entries[entryOf(cb)] != nil:
		if err = c.create(); err != nil {
			break
		}
		// The entry ended the context unless the callback queued a callout or failed:
		// then it stopped before proxy_on_done's phase.
		err = c.execEntry(entryOf(cb), cb, nargs)
		c.ended = !c.victim && in.phaseOr(cb) >= cbDone
	default:
		if err = c.create(); err == nil {
			err = c.exec(cb, nargs)
		}
	}
	// After the last callback, unless it asked for callouts: the run of their last
	// answer ends the context instead. Once: a caller that announced the last callback
	// too early must not make the guest end a context twice.
	if err == nil && c.last && !c.ended && len(c.pending) == 0 {
		err = c.finish()
	}
	return err
}

// entryOf is the merged entry that runs response callback cb and then the end.
func entryOf(cb int) int {
	if cb == cbResponseBody {
		return entryResponseBody
	}
	return entryResponseHeaders
}

// begin opens a run of callbacks on c's instance, which the caller holds (instance.begin);
// 0 when the instance is dead, which exec then reports.
func (c *Call) begin() int64 {
	if c.in.dead {
		return 0
	}
	return c.in.begin(c.f.timeout)
}

func (c *Call) end(start int64) {
	if start != 0 {
		c.elapsed += c.in.end(start)
	}
}

// create tells the guest of the request's context (proxy_on_context_create), once.
func (c *Call) create() error {
	if c.created {
		return nil
	}
	c.created = true
	args := c.args
	c.args[0], c.args[1] = uint64(c.id), rootContextID
	err := c.exec(cbContextCreate, 2)
	c.args = args
	return err
}

// exec runs callback cb on c's instance, which the caller holds. A failure kills the
// instance: the other requests whose contexts live in it fail at their next callback
// with the same reason, as Envoy fails every stream of a VM that crashed.
func (c *Call) exec(cb int, nargs int) error {
	in := c.in
	if in.dead {
		return c.victimOf(cb)
	}
	fn := in.cb[cb]
	if fn == nil {
		c.ret = 0
		return nil
	}
	copy(in.stack[:nargs], c.args[:nargs])
	in.call = c
	err := in.call1(cbNames[cb], fn, nargs, c.f.timeout)
	in.call = nil
	c.ret = u32(in.stack[0])
	if err != nil {
		in.kill(err)
		c.err = err
	}
	return err
}

// victimOf fails c at callback cb because another request killed its instance.
func (c *Call) victimOf(cb int) error {
	c.victim = true
	c.err = &Error{Reason: c.in.fatal.Reason, Function: c.f.name, Callback: cbNames[cb],
		Detail: "its instance failed in another request: " + c.in.fatal.Detail}
	return c.err
}

// execEntry runs merged entry e as exec runs a callback; first is its first callback,
// named when the instance is already dead. A failure names the callback the entry called
// last (its phase).
func (c *Call) execEntry(e, first, nargs int) error {
	in := c.in
	if in.dead {
		return c.victimOf(first)
	}
	copy(in.stack[:nargs], c.args[:nargs])
	in.call = c
	err := in.call1(cbNames[first], in.entries[e], nargs, c.f.timeout)
	in.call = nil
	c.ret = u32(in.stack[0])
	if err != nil {
		if fe, ok := err.(*Error); ok {
			fe.Callback = cbNames[in.phaseOr(first)]
		}
		in.kill(err)
		c.err = err
	}
	return err
}

// phaseOr is the callback the last merged entry called; first should the global hold
// something else.
func (in *instance) phaseOr(first int) int {
	if p := in.phase.Get(); p < cbCount {
		return int(p)
	}
	return first
}

// finish ends the request's context in the guest: proxy_on_done, proxy_on_log and
// proxy_on_delete, within the caller's run, once. The result of the callback before them
// stays c.ret: http reads it for the pause, whether or not the context ended in its run.
func (c *Call) finish() error {
	c.ended = true
	ret := c.ret
	var err error
	if mergedEntries.Load() && c.in.entries[entryEnd] != nil && !c.in.dead {
		c.args[0] = uint64(c.id)
		err = c.execEntry(entryEnd, cbDone, 1)
	} else {
		for _, cb := range [...]int{cbDone, cbLog, cbDelete} {
			if err != nil || c.in.dead {
				break
			}
			c.args[0] = uint64(c.id)
			err = c.exec(cb, 1)
		}
	}
	c.ret = ret
	return err
}

// kill drops an instance whose guest failed; the caller holds in.mu.
func (in *instance) kill(err error) {
	e, ok := err.(*Error)
	if !ok {
		e = &Error{Reason: ReasonTrap, Function: in.f.name, Detail: err.Error()}
	}
	in.fatal = e
	in.drop()
}

// Done ends the request in the guest (proxy_on_done, proxy_on_log, proxy_on_delete, even
// after a failed callback, so the guest frees the context) unless its instance died; a
// context no callback ran for is created first, so the guest sees every request. The
// three run as one run (instance.begin), within one timeout. It returns the request's
// whole guest time, Elapsed included; c must not be used after.
func (c *Call) Done() time.Duration {
	in, f := c.in, c.f
	if !c.ended && (!c.created || in.cb[cbDone] != nil || in.cb[cbLog] != nil || in.cb[cbDelete] != nil) {
		// The context must go whatever the cap: wait for a slot, which running callbacks
		// free within their timeout.
		sem, _ := f.acquire(cbDone, true)
		in.mu.Lock()
		if !in.dead {
			start := c.begin()
			if c.create() == nil {
				_ = c.finish()
			}
			c.end(start)
		}
		in.mu.Unlock()
		release(sem)
	}
	if c.err != nil {
		if e, ok := c.err.(*Error); !c.victim && (!ok || e.Reason != ReasonBusy) {
			f.strike()
		}
	} else {
		f.ok()
	}
	el := time.Duration(c.elapsed)
	c.in, c.h, c.calloutResp, c.err = nil, nil, nil, nil
	in.mu.Lock()
	if in.refs--; in.refs == 0 && (in.dead || in.slotNo < 0 || f.closed.Load()) {
		in.drop()
	} else if reuseCalls.Load() {
		// A dropped instance's Calls go with it.
		in.calls = append(in.calls, c)
	}
	in.mu.Unlock()
	return el
}
