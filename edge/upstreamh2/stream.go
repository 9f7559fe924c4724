package upstreamh2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/grpcweb"
	"tollgate/edge/meter"
)

// IsGRPC: application/grpc and its +proto, +json… forms.
func IsGRPC(ct []byte) bool {
	return bytes.HasPrefix(ct, []byte("application/grpc")) && (len(ct) == len("application/grpc") || ct[len("application/grpc")] == '+' || ct[len("application/grpc")] == ';')
}

// GRPCTimeout parses a grpc-timeout value: at most 8 digits and a unit (H, M, S, m, u,
// n), as gRPC's HTTP/2 protocol defines it.
func GRPCTimeout(v []byte) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v[:len(v)-1]), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// ErrTooLarge is a request body's read past its limit.
var ErrTooLarge = errors.New("upstreamh2: request body over its limit")

// RequestBody is the request body as the transport reads it, from its own goroutine and
// possibly after the edge's handler returned: a client's stream bounded by the route's
// max_body_bytes (past it the read fails and the upstream stream is reset), or a body in
// memory. Detach cuts it off from its source, for a retry that sends the same unread
// stream on a new attempt.
type RequestBody struct {
	mu      sync.Mutex
	src     io.Reader
	limit   int64
	n       atomic.Int64
	started atomic.Bool
	over    atomic.Bool
	text    io.Reader // the base64 decoder of a gRPC-Web -text body, over readRaw
	bad     atomic.Bool
}

// Close leaves the stream's body to its server, which closes it when the stream ends.
func (b *RequestBody) Close() error { return nil }

// NewRequestBody reads src, failing past limit bytes.
func NewRequestBody(src io.Reader, limit int64) *RequestBody {
	return &RequestBody{src: src, limit: limit}
}

// Read counts what it reads against the limit.
func (b *RequestBody) Read(p []byte) (int, error) {
	if b.text == nil {
		return b.readRaw(p)
	}
	b.started.Store(true)
	n, err := b.text.Read(p)
	if errors.Is(err, grpcweb.ErrBase64) {
		b.bad.Store(true)
	}
	return n, err
}

// DecodeText has the body decode a gRPC-Web -text body as it is read (the base64 of a
// gRPC body, maybe in several padded chunks), so that a gRPC upstream gets its binary
// frames. The limit still counts what the client sent, the base64 characters.
func (b *RequestBody) DecodeText() { b.text = grpcweb.NewTextReader(rawBody{b}) }

// Malformed reports a -text body that is not base64: the client's fault, not the
// upstream's.
func (b *RequestBody) Malformed() bool { return b.bad.Load() }

type rawBody struct{ b *RequestBody }

func (r rawBody) Read(p []byte) (int, error) { return r.b.readRaw(p) }

func (b *RequestBody) readRaw(p []byte) (int, error) {
	b.started.Store(true)
	b.mu.Lock()
	src := b.src
	b.mu.Unlock()
	if src == nil {
		return 0, io.ErrClosedPipe
	}
	n, err := src.Read(p)
	if total := b.n.Add(int64(n)); total > b.limit {
		b.over.Store(true)
		return 0, ErrTooLarge
	}
	return n, err
}

// ReadNow reads what the body holds without waiting for more: all of one in memory,
// what a client's HTTP/2 stream has received. 0 and no error: more is to come, or the
// body cannot tell (a -text body, decoded as it is read).
func (b *RequestBody) ReadNow(p []byte) (int, error) {
	if b.text != nil {
		return 0, nil
	}
	b.mu.Lock()
	src := b.src
	b.mu.Unlock()
	var n int
	var err error
	switch s := src.(type) {
	case nil:
		return 0, io.ErrClosedPipe
	case *bytes.Reader:
		n, err = s.Read(p)
	case nowReader:
		n, err = s.ReadNow(p)
	default:
		return 0, nil
	}
	if n == 0 && err == nil {
		return 0, nil
	}
	b.started.Store(true)
	if total := b.n.Add(int64(n)); total > b.limit {
		b.over.Store(true)
		return 0, ErrTooLarge
	}
	return n, err
}

// Unread reports that no attempt has read of it: it can go to another one.
func (b *RequestBody) Unread() bool { return !b.started.Load() }

// Over reports a read past the limit.
func (b *RequestBody) Over() bool { return b.over.Load() }

// Len is the bytes read so far.
func (b *RequestBody) Len() int64 { return b.n.Load() }

// Detach cuts the body off from its source: later reads fail.
func (b *RequestBody) Detach() {
	b.mu.Lock()
	b.src = nil
	b.mu.Unlock()
}

// ResponseBody relays the upstream's body and, at its end, its trailer fields into h,
// the header of the answer being written. A gRPC call's deadline (call's) or its request
// body past the limit end it with the gRPC status that says so in the trailer, rather
// than a reset stream, once the answer's head has gone out.
type ResponseBody struct {
	res     *http.Response
	req     *RequestBody
	call    context.Context
	cancel  context.CancelFunc
	grpc    bool
	h       *fasthttp.ResponseHeader
	out     int64
	ended   bool
	closed  bool
	use     meter.Usage
	metered bool
	web     *webAnswer
}

// NewResponseBody relays res; cancel ends the call, when the body is closed.
func NewResponseBody(res *http.Response, req *RequestBody, call context.Context, cancel context.CancelFunc, grpc bool, h *fasthttp.ResponseHeader) *ResponseBody {
	return &ResponseBody{res: res, req: req, call: call, cancel: cancel, grpc: grpc, h: h}
}

func (b *ResponseBody) Read(p []byte) (int, error) {
	if b.web != nil {
		return b.readWeb(p)
	}
	return b.read(p)
}

func (b *ResponseBody) read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	n, err := b.res.Body.Read(p)
	b.out += int64(n)
	switch {
	case err == io.EOF:
		b.ended = true
		b.Trailers()
	case err != nil && b.grpc && b.req.Over():
		b.ended = true
		b.setTrailer("Grpc-Status", "8") // RESOURCE_EXHAUSTED
		b.setTrailer("Grpc-Message", "the request body is over this API's size limit")
		return n, io.EOF
	case err != nil && b.grpc && b.pastDeadline():
		// The head went out: the client learns of the deadline from the trailer, as
		// from a server that gave up itself.
		b.ended = true
		b.setTrailer("Grpc-Status", "4")
		b.setTrailer("Grpc-Message", "deadline exceeded at the gateway")
		return n, io.EOF
	}
	return n, err
}

// pastDeadline reports a call whose deadline has passed: the edge's own cancel, or the
// upstream resetting the stream at the same deadline (grpc-timeout is passed on, and a
// gRPC server resets a stream when it runs out).
func (b *ResponseBody) pastDeadline() bool {
	d, ok := b.call.Deadline()
	return errors.Is(b.call.Err(), context.DeadlineExceeded) || ok && !time.Now().Before(d)
}

// Trailers copies the upstream's trailer fields into the answer.
func (b *ResponseBody) Trailers() {
	for k, vs := range b.res.Trailer {
		for _, v := range vs {
			b.setTrailer(k, v)
		}
	}
}

func (b *ResponseBody) setTrailer(k, v string) {
	if b.web != nil {
		b.web.add(k, v)
		return
	}
	if err := b.h.AddTrailer(k); err != nil {
		return // a field HTTP forbids as a trailer is dropped, as fasthttp would
	}
	b.h.Set(k, v)
}

// RecordAtClose has the body record u when it is closed, with the bytes relayed each
// way.
func (b *ResponseBody) RecordAtClose(u meter.Usage) { b.use, b.metered = u, true }

func (b *ResponseBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.res.Body.Close()
	b.cancel()
	if b.metered {
		// One call, whatever the number of messages.
		b.use.In, b.use.Out = b.req.Len(), b.out
		b.use.Record()
	}
	return err
}

// IsGRPCWeb: a gRPC-Web type as the edge echoes it (application/grpc-web[-text][+proto]).
func IsGRPCWeb(ct []byte) bool { return bytes.HasPrefix(ct, []byte("application/grpc-web")) }

// GRPCWebRequest makes r, the upstream request of a gRPC-Web call whose Content-Type is
// ct (application/grpc-web[-text][+proto], as the edge echoes it), a gRPC call: its
// Content-Type application/grpc, +proto kept; without X-Grpc-Web and X-User-Agent, which
// only a gRPC-Web server reads (grpc-timeout and the rest stay, TE: trailers is
// NewRequest's). Binary frames are gRPC's as they are; a -text body, which body is, is
// decoded as it streams, of a length known only at its end.
func GRPCWebRequest(r *http.Request, body *RequestBody, ct []byte) {
	v := "application/grpc"
	if bytes.HasSuffix(ct, []byte("+proto")) {
		v = "application/grpc+proto"
	}
	r.Header["Content-Type"] = []string{v}
	delete(r.Header, "X-Grpc-Web")
	delete(r.Header, "X-User-Agent")
	if bytes.Contains(ct, []byte("-text")) {
		body.DecodeText()
		if r.Body != nil {
			r.ContentLength = -1
		}
	}
}

// webAnswer is the state of a ResponseBody that answers a gRPC-Web client.
type webAnswer struct {
	text    bool
	enc     grpcweb.TextEncoder
	trailer grpcweb.Trailer
	in      []byte // what the upstream sent, to be encoded (-text)
	buf     []byte
	out     []byte // encoded, not yet read: a slice of buf
	done    bool
}

// GRPCWeb has the body answer a gRPC-Web client whose Content-Type is ct: the upstream's
// gRPC frames go through as they come (gRPC-Web's data frames are the same bytes), for
// -text base64-encoded a padded chunk per frame; and the trailer fields, which a browser
// cannot read as HTTP trailers, become the body's last frame (flag 0x80) instead, with
// grpc-status (2, UNKNOWN, when the upstream sent none), grpc-message as the upstream
// percent-encoded it, and the other fields.
func (b *ResponseBody) GRPCWeb(ct []byte) {
	b.web = &webAnswer{text: bytes.Contains(ct, []byte("-text")), trailer: grpcweb.Trailer{Status: 2}}
}

func (w *webAnswer) add(k, v string) {
	if k == "Grpc-Status" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			w.trailer.Status = n
		}
		return
	}
	// grpc-message goes as a field, not Trailer.Message: it is percent-encoded already.
	w.trailer.Metadata = append(w.trailer.Metadata, grpcweb.Field{Name: k, Value: v})
}

// webBuf is the size of the reads of a -text answer from the upstream.
const webBuf = 16 << 10

func (b *ResponseBody) readWeb(p []byte) (int, error) {
	w := b.web
	for len(w.out) == 0 {
		if w.done {
			return 0, io.EOF
		}
		var n int
		var err error
		if w.text {
			if w.in == nil {
				w.in = make([]byte, webBuf)
			}
			n, err = b.read(w.in)
			w.buf = w.enc.Append(w.buf[:0], w.in[:n])
			n = 0
		} else {
			n, err = b.read(p)
			w.buf = w.buf[:0]
		}
		switch {
		case err == io.EOF:
			w.done = true
			frame := grpcweb.AppendTrailer(nil, w.trailer)
			if w.text {
				w.buf = grpcweb.AppendEncodeText(w.enc.Flush(w.buf), frame)
			} else {
				w.buf = append(w.buf, frame...)
			}
		case err != nil:
			return n, err
		}
		w.out = w.buf
		if n > 0 {
			return n, nil
		}
	}
	c := copy(p, w.out)
	w.out = w.out[c:]
	return c, nil
}

var _ io.ReadCloser = (*RequestBody)(nil)
