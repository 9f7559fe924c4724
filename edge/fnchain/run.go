package fnchain

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/function"
)

// Outcome is how a run's phase ended.
type Outcome int

const (
	// Continue: every function let the request (or response) go on.
	Continue Outcome = iota
	// Replied: a function answered with a local reply, now in ctx.Response.
	Replied
	// Failed: a function trapped, ran past its time or made a bad host call
	// (function_failed).
	Failed
	// Busy: the tenant's concurrency cap stayed full (function_busy).
	Busy
	// Unavailable: a module of the route is not on this edge (function_unavailable).
	Unavailable
	// NoConsumer: the authenticating function neither replied nor named a consumer.
	NoConsumer
)

// Props are what the edge tells functions of the request beyond its headers.
type Props struct {
	RouteID   string
	RequestID []byte
	Host      []byte // the Host the tenant was found by
	TLS       bool
	Consumer  string // the consumer's id once authenticated ("" before, or none)
}

// Run is one request's pass through a route's chain. It implements function.HTTP over
// the request and response fasthttp holds. Runs are pooled: Start takes one, Finish
// returns it.
type Run struct {
	c     *Chain
	ctx   *fasthttp.RequestCtx
	props Props
	calls []*function.Call // started, in filter order
	cur   int              // the filter whose callback runs
	phase int
	// named is the consumer an authenticating function set, nil when none.
	named   []byte
	replied bool
	outcome Outcome
	guest   time.Duration // guest time of calls already done
	scratch []byte
	err     error // why the run failed, for the edge's debug log
}

const (
	phaseRequest = iota
	phaseResponse
)

var runPool = sync.Pool{New: func() any { return &Run{calls: make([]*function.Call, 0, 4)} }}

// Start begins a request's run of c.
func Start(c *Chain, ctx *fasthttp.RequestCtx, p Props) *Run {
	r := runPool.Get().(*Run)
	r.c, r.ctx, r.props = c, ctx, p
	return r
}

// SetConsumer tells the functions after authentication who the caller is.
func (r *Run) SetConsumer(id string) { r.props.Consumer = id }

// Authenticate runs the authenticating function's request callbacks (the body's too when
// it reads it: the edge has read the body first). On Continue, the consumer it named is
// returned (as the guest wrote it: an id or a name).
func (r *Run) Authenticate(hasBody bool) (consumer []byte, o Outcome) {
	if r.c.Unavailable != nil {
		return nil, r.fail(Unavailable, r.c.Unavailable)
	}
	if o := r.request(0, hasBody); o != Continue {
		return nil, o
	}
	if len(r.named) == 0 {
		return nil, r.setOutcome(NoConsumer)
	}
	return r.named, Continue
}

// Request runs the request callbacks of the functions after the authenticator (all of
// them on a route without one).
func (r *Run) Request(hasBody bool) Outcome {
	if r.c.Unavailable != nil {
		return r.fail(Unavailable, r.c.Unavailable)
	}
	for i := len(r.calls); i < len(r.c.filters); i++ {
		if o := r.request(i, hasBody); o != Continue {
			return o
		}
	}
	return Continue
}

func (r *Run) request(i int, hasBody bool) Outcome {
	f := r.c.filters[i]
	r.cur, r.phase = i, phaseRequest
	call, err := f.f.Start(r)
	if err != nil {
		return r.failErr(err)
	}
	r.calls = append(r.calls, call)
	bodyToo := hasBody && f.reqBody
	if _, err := call.OnRequestHeaders(!bodyToo); err != nil {
		return r.failErr(err)
	}
	if r.replied {
		return r.setOutcome(Replied)
	}
	if bodyToo {
		if _, err := call.OnRequestBody(len(r.ctx.Request.Body()), true); err != nil {
			return r.failErr(err)
		}
		if r.replied {
			return r.setOutcome(Replied)
		}
	}
	return Continue
}

// MaxResponseBody bounds the response body buffered for a function that reads it.
const MaxResponseBody = 4 << 20

// Response runs the response callbacks of the functions that started, last first (as
// Envoy runs encoder filters). A streamed body is read whole first when some function
// reads bodies; one over MaxResponseBody fails the request.
func (r *Run) Response() Outcome {
	r.phase = phaseResponse
	resp := &r.ctx.Response
	if r.c.RespBody && resp.IsBodyStream() {
		b, err := io.ReadAll(io.LimitReader(resp.BodyStream(), MaxResponseBody+1))
		_ = resp.CloseBodyStream()
		if err == nil && len(b) > MaxResponseBody {
			err = fmt.Errorf("the response body is over the %d bytes a function may read", MaxResponseBody)
		}
		if err != nil {
			return r.fail(Failed, err)
		}
		resp.SetBody(b)
	}
	hasBody := r.c.RespBody && len(resp.Body()) > 0
	for i := len(r.calls) - 1; i >= 0; i-- {
		f, call := r.c.filters[i], r.calls[i]
		if !f.respHeaders && !f.respBody {
			continue
		}
		r.cur = i
		bodyToo := hasBody && f.respBody
		if f.respHeaders {
			if !bodyToo {
				call.Last()
			}
			if _, err := call.OnResponseHeaders(!bodyToo); err != nil {
				return r.failErr(err)
			}
			if r.replied {
				return r.setOutcome(Replied)
			}
		}
		if bodyToo {
			call.Last()
			if _, err := call.OnResponseBody(len(r.ctx.Response.Body()), true); err != nil {
				return r.failErr(err)
			}
			if r.replied {
				return r.setOutcome(Replied)
			}
		}
	}
	return Continue
}

// Err is why the run failed (nil unless an outcome was Failed, Busy or Unavailable).
func (r *Run) Err() error { return r.err }

// Why says in words which function stopped the run and why, for the tenant's request
// log ("" when none did). It allocates: call it only for a run that failed.
func (r *Run) Why() string {
	if r.err == nil {
		return ""
	}
	if r.outcome == Unavailable || r.cur >= len(r.c.filters) {
		return "a function of the route could not run: " + r.err.Error()
	}
	return "function " + r.c.filters[r.cur].name + " failed: " + r.err.Error()
}

// Finish ends the run's calls and returns the guest time they took, then puts r back in
// the pool: r must not be used again.
func (r *Run) Finish() time.Duration {
	d := r.guest
	for _, call := range r.calls {
		d += call.Done()
	}
	c := r.c
	if len(r.calls) > 0 || r.outcome != Continue {
		c.outcomes[r.outcomeIndex()].Inc()
		c.seconds.Observe(d.Seconds())
	}
	clear(r.calls)
	r.calls = r.calls[:0]
	r.c, r.ctx, r.props, r.named, r.replied, r.outcome, r.guest, r.err = nil, nil, Props{}, r.named[:0], false, Continue, 0, nil
	r.scratch = r.scratch[:0]
	runPool.Put(r)
	return d
}

func (r *Run) outcomeIndex() int {
	switch r.outcome {
	case Replied:
		return outcomeReply
	case Failed, NoConsumer:
		return outcomeFailed
	case Busy:
		return outcomeBusy
	case Unavailable:
		return outcomeUnavailable
	}
	return outcomeOK
}

func (r *Run) setOutcome(o Outcome) Outcome {
	r.outcome = o
	return o
}

func (r *Run) failErr(err error) Outcome {
	var fe *function.Error
	if errors.As(err, &fe) && fe.Reason == function.ReasonBusy {
		return r.fail(Busy, err)
	}
	return r.fail(Failed, err)
}

// fail records why the run stopped and logs it for the tenant.
func (r *Run) fail(o Outcome, err error) Outcome {
	r.err = err
	name, sha := "", ""
	if r.cur < len(r.c.filters) {
		f := r.c.filters[r.cur]
		name, sha = f.name, f.sha
	}
	if o == Unavailable {
		name = ""
	}
	r.c.h.logs.log(&LogLine{TenantID: r.c.spec.TenantID, RouteID: r.c.spec.RouteID, Function: name, SHA256: sha,
		Level: "error", Message: err.Error(), RequestID: string(r.props.RequestID)})
	return r.setOutcome(o)
}

// function.HTTP

func (r *Run) header(m function.MapType) headerMap {
	switch {
	case m == function.RequestHeaders:
		return &r.ctx.Request.Header
	case m == function.ResponseHeaders && r.phase == phaseResponse:
		return &r.ctx.Response.Header
	}
	return nil
}

// headerMap is what both fasthttp header types offer.
type headerMap interface {
	VisitAll(func(k, v []byte))
	Len() int
	AddBytesKV(k, v []byte)
	SetBytesKV(k, v []byte)
	DelBytes(k []byte)
}

var (
	pseudoMethod    = []byte(":method")
	pseudoPath      = []byte(":path")
	pseudoAuthority = []byte(":authority")
	pseudoScheme    = []byte(":scheme")
	pseudoStatus    = []byte(":status")
	strHTTP         = []byte("http")
	strHTTPS        = []byte("https")
)

func (r *Run) pseudo(m function.MapType, fn func(k, v []byte)) {
	if m == function.RequestHeaders {
		req := &r.ctx.Request.Header
		fn(pseudoMethod, req.Method())
		fn(pseudoPath, req.RequestURI())
		fn(pseudoAuthority, r.props.Host)
		fn(pseudoScheme, r.scheme())
		return
	}
	r.scratch = strconv.AppendInt(r.scratch[:0], int64(r.ctx.Response.StatusCode()), 10)
	fn(pseudoStatus, r.scratch)
}

func (r *Run) scheme() []byte {
	if r.props.TLS {
		return strHTTPS
	}
	return strHTTP
}

func (r *Run) HeaderValue(m function.MapType, key []byte) ([]byte, bool) {
	h := r.header(m)
	if h == nil {
		return nil, false
	}
	var out []byte
	found := false
	visit := func(k, v []byte) {
		if !found && bytes.EqualFold(k, key) {
			out, found = v, true
		}
	}
	if len(key) > 0 && key[0] == ':' {
		r.pseudo(m, visit)
	} else {
		h.VisitAll(visit)
	}
	return out, found
}

func (r *Run) HeaderCount(m function.MapType) int {
	h := r.header(m)
	if h == nil {
		return 0
	}
	if m == function.RequestHeaders {
		return 4 + h.Len() // :method, :path, :authority, :scheme
	}
	return 1 + h.Len() // :status
}

func (r *Run) VisitHeaders(m function.MapType, fn func(key, value []byte)) bool {
	h := r.header(m)
	if h == nil {
		return false
	}
	r.pseudo(m, fn)
	h.VisitAll(fn)
	return true
}

func (r *Run) SetHeaders(m function.MapType, pairs []function.HeaderPair) bool {
	h := r.header(m)
	if h == nil {
		return false
	}
	var keys [][]byte
	h.VisitAll(func(k, _ []byte) { keys = append(keys, append([]byte(nil), k...)) })
	for _, k := range keys {
		h.DelBytes(k)
	}
	for _, p := range pairs {
		if len(p.Key) > 0 && p.Key[0] != ':' {
			h.AddBytesKV(p.Key, p.Value)
		}
	}
	return true
}

func (r *Run) AddHeader(m function.MapType, key, value []byte) bool {
	h := r.header(m)
	if h == nil {
		return false
	}
	if len(key) > 0 && key[0] != ':' {
		h.AddBytesKV(key, value)
	}
	return true
}

func (r *Run) ReplaceHeader(m function.MapType, key, value []byte) bool {
	h := r.header(m)
	if h == nil {
		return false
	}
	if len(key) == 0 || key[0] == ':' {
		if m == function.ResponseHeaders && bytes.Equal(key, pseudoStatus) {
			if s, err := strconv.Atoi(string(value)); err == nil && s >= 100 && s <= 999 {
				r.ctx.Response.SetStatusCode(s)
			}
		}
		return true
	}
	r.remove(h, key)
	h.SetBytesKV(key, value)
	return true
}

func (r *Run) RemoveHeader(m function.MapType, key []byte) bool {
	h := r.header(m)
	if h == nil {
		return false
	}
	r.remove(h, key)
	return true
}

// remove deletes every spelling of key: the edge keeps response header names as the
// upstream wrote them, so fasthttp's own lookups are case-sensitive there.
func (r *Run) remove(h headerMap, key []byte) {
	var keys [][]byte
	h.VisitAll(func(k, _ []byte) {
		if bytes.EqualFold(k, key) {
			keys = append(keys, append([]byte(nil), k...))
		}
	})
	for _, k := range keys {
		h.DelBytes(k)
	}
}

func (r *Run) Buffer(b function.BufferType) ([]byte, bool) {
	switch {
	case b == function.RequestBody && r.phase == phaseRequest:
		return r.ctx.Request.Body(), true
	case b == function.ResponseBody && r.phase == phaseResponse && !r.ctx.Response.IsBodyStream():
		return r.ctx.Response.Body(), true
	}
	return nil, false
}

func (r *Run) SetBuffer(b function.BufferType, data []byte) bool {
	switch {
	case b == function.RequestBody && r.phase == phaseRequest:
		r.ctx.Request.SetBody(data)
		r.ctx.Request.Header.SetContentLength(len(data))
		return true
	case b == function.ResponseBody && r.phase == phaseResponse && !r.ctx.Response.IsBodyStream():
		r.ctx.Response.SetBody(data)
		return true
	}
	return false
}

func (r *Run) Property(path []byte) ([]byte, bool) {
	switch string(path) {
	case function.PropRoute:
		return []byte(r.props.RouteID), true
	case function.PropConsumer:
		if len(r.named) > 0 {
			return r.named, true
		}
		if r.props.Consumer == "" {
			return nil, false
		}
		return []byte(r.props.Consumer), true
	case function.PropRequestID, function.PropID:
		return r.props.RequestID, true
	case function.PropPath:
		return r.ctx.Request.Header.RequestURI(), true
	case function.PropMethod:
		return r.ctx.Request.Header.Method(), true
	case function.PropHost:
		return r.props.Host, true
	case function.PropScheme:
		return r.scheme(), true
	case function.PropSource:
		return []byte(r.ctx.RemoteAddr().String()), true
	}
	return nil, false
}

// SetProperty takes the consumer from the authenticating function only: a later
// function cannot change who the limits and the meter count.
func (r *Run) SetProperty(path, value []byte) bool {
	if string(path) != function.PropConsumer || !r.c.spec.Auth || r.cur != 0 || r.phase != phaseRequest {
		return false
	}
	r.named = append(r.named[:0], value...)
	return true
}

func (r *Run) SendLocalReply(status int, details, body []byte, headers []function.HeaderPair) {
	resp := &r.ctx.Response
	resp.Reset()
	if status < 200 || status > 599 {
		status = 500
	}
	resp.SetStatusCode(status)
	for _, p := range headers {
		if len(p.Key) > 0 && p.Key[0] != ':' {
			resp.Header.AddBytesKV(p.Key, p.Value)
		}
	}
	resp.SetBody(body)
	r.replied = true
}

func (r *Run) Log(level function.LogLevel, msg []byte) {
	f := r.c.filters[r.cur]
	r.c.h.logs.log(&LogLine{TenantID: r.c.spec.TenantID, RouteID: r.c.spec.RouteID, Function: f.name, SHA256: f.sha,
		Level: level.String(), Message: string(msg), RequestID: string(r.props.RequestID)})
}
