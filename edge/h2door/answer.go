package h2door

import (
	"context"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2/hpack"
)

// A stream of the door's own server through the chain: its request rebuilt as the
// HTTP/1.1 head it would have been (as for Go's server, server.go), and the chain's
// answer framed straight from the fasthttp.Response, without net/http's header maps.

// run serves st on the goroutine it was started on (a worker's).
func (st *stream) run() {
	sc := st.sc
	h := sc.s.h
	aborted := true
	defer func() {
		if v := recover(); v != nil && h.log != nil {
			h.log.Printf("h2door: panic serving a stream: %v\n%s", v, debug.Stack())
		}
		sc.handlerDone(st, aborted)
	}()
	hx := h.getExchange(sc.sconn)
	err := hx.readStream(st)
	h.pass(&hx.ctx, err, st)
	aborted = st.answer(&hx.ctx.Response)
	h.putExchange(hx)
}

// readStream rebuilds st's request as the RequestCtx's, as readRequest does for Go's
// server's.
func (hx *exchange) readStream(st *stream) error {
	if st.method == http.MethodConnect {
		return errConnect
	}
	if st.truncated {
		return errHeadTooLarge // the list was over its bound: fields are missing
	}
	host := st.authority
	if host == "" {
		for _, f := range st.fields {
			if f.Name == "host" {
				host = f.Value
				break
			}
		}
	}
	if !noSpace(st.path) || !noSpace(host) || !fieldName(st.method) {
		return errBadTarget
	}
	b := startHead(hx.head[:0], st.method, st.path, host)
	cookies := 0
	for _, f := range st.fields {
		switch f.Name {
		case "host":
			continue // :authority is the host
		case "cookie":
			cookies++ // joined below (RFC 9113 8.2.3)
			continue
		}
		if !fieldValue(f.Value) {
			return errBadTarget
		}
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	if cookies > 0 {
		b = append(b, "cookie: "...)
		n := 0
		for _, f := range st.fields {
			if f.Name == "cookie" {
				if !fieldValue(f.Value) {
					return errBadTarget
				}
				if n > 0 {
					b = append(b, "; "...)
				}
				b = append(b, f.Value...)
				n++
			}
		}
		b = append(b, "\r\n"...)
	}
	var body io.Reader
	if st.hasBody {
		body = st
	}
	return hx.endHead(b, body, st.declared)
}

// Stream is what the chain may use of the HTTP/2 stream a request came on.
type Stream interface {
	// Context ends when the client resets the stream or its connection ends.
	Context() context.Context
	// Body is the stream's request body, readable while the answer streams and after
	// the chain returned; nil when the request has none.
	Body() io.Reader
}

// answer frames the chain's answer on st. It reports whether it failed half-way.
func (st *stream) answer(resp *fasthttp.Response) (aborted bool) {
	sc := st.sc
	status := resp.StatusCode()
	if status < 200 || status > 999 {
		status = fasthttp.StatusBadGateway
	}
	head := st.method == http.MethodHead
	bodyless := head || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified
	stream := resp.IsBodyStream()
	var body []byte
	if !bodyless && !stream {
		body = resp.Body()
	}
	cl := -1
	switch n := resp.Header.ContentLength(); {
	case stream || head:
		if n >= 0 {
			cl = n
		}
	case !bodyless:
		cl = len(body)
	}
	end := bodyless || !stream && len(body) == 0 && !hasTrailers(resp)

	sc.mu.Lock()
	sc.hbuf.Reset()
	enc, fb := sc.enc, &sc.block
	fb.reset()
	hasDate := false
	for k, v := range resp.Header.All() {
		if hop(k) == hopDrop {
			continue
		}
		name := lowerName(k)
		if name == "date" {
			hasDate = true
		}
		fb.add(name, v)
	}
	if cl >= 0 {
		fb.vals = strconv.AppendInt(fb.vals, int64(cl), 10)
		fb.added("content-length")
	}
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	fb.encode(enc)
	if !hasDate {
		_ = enc.WriteField(hpack.HeaderField{Name: "date", Value: httpDate()})
	}
	err := st.writeBlock(end)
	sc.mu.Unlock()
	if err != nil || end {
		return err != nil
	}

	if stream {
		if err := resp.BodyWriteTo(dataWriter{st}); err != nil {
			return true
		}
	} else if len(body) > 0 {
		if err := st.writeData(body, !hasTrailers(resp)); err != nil {
			return true
		}
		if st.localDone {
			return false
		}
	}
	// The upstream's trailer fields are known once its body has been read.
	sc.mu.Lock()
	sc.hbuf.Reset()
	fb.reset()
	for k := range resp.Header.Trailers() {
		if v := resp.Header.PeekBytes(k); len(v) > 0 {
			fb.add(lowerName(k), v)
		}
	}
	n := len(fb.fields)
	fb.encode(enc)
	if n > 0 {
		err = st.writeBlock(true)
	}
	sc.mu.Unlock()
	if n == 0 {
		err = st.writeData(nil, true)
	}
	return err != nil
}

// fieldBlock gathers a header block's fields so that their values become strings (which
// the HPACK encoder takes) in one allocation for the block rather than one per field.
type fieldBlock struct {
	vals   []byte
	fields []blockField
}

type blockField struct {
	name     string
	from, to int // the value, in vals
}

func (b *fieldBlock) reset() { b.vals, b.fields = b.vals[:0], b.fields[:0] }

func (b *fieldBlock) add(name string, v []byte) {
	b.vals = append(b.vals, v...)
	b.added(name)
}

// added records name for the value appended to vals since the last field.
func (b *fieldBlock) added(name string) {
	from := 0
	if n := len(b.fields); n > 0 {
		from = b.fields[n-1].to
	}
	b.fields = append(b.fields, blockField{name, from, len(b.vals)})
}

// encode writes the fields, in order, with enc.
func (b *fieldBlock) encode(enc *hpack.Encoder) {
	if len(b.fields) == 0 {
		return
	}
	all := string(b.vals)
	for _, f := range b.fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f.name, Value: all[f.from:f.to]})
	}
	if cap(b.vals) > 64<<10 {
		b.vals = nil // an answer with huge fields does not keep its buffer for the connection's life
	}
}

// hasTrailers reports whether resp declares trailer fields with a value.
func hasTrailers(resp *fasthttp.Response) bool {
	for k := range resp.Header.Trailers() {
		if len(resp.Header.PeekBytes(k)) > 0 {
			return true
		}
	}
	return false
}

// dataWriter sends each piece of a streamed body as it comes.
type dataWriter struct{ st *stream }

func (w dataWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := w.st.writeData(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// statusText is :status's value.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 304:
		return "304"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}

// lowerName is a response field's name as HTTP/2 spells it, in lower case (RFC 9113
// 8.2.1); the usual ones without an allocation.
func lowerName(k []byte) string {
	if s, ok := lowerNames[string(k)]; ok {
		return s
	}
	b := make([]byte, len(k))
	for i, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return string(b)
}

var lowerNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{"Content-Type", "Content-Length", "Content-Encoding", "Date", "Server",
		"X-Request-Id", "Cache-Control", "Etag", "Last-Modified", "Vary", "Location", "Set-Cookie",
		"Grpc-Status", "Grpc-Message", "Grpc-Encoding", "Grpc-Accept-Encoding", "Expires", "Age",
		"Access-Control-Allow-Origin", "Www-Authenticate", "Retry-After", "X-Ratelimit-Limit",
		"X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Cache", "Accept-Ranges", "Content-Range"} {
		l := make([]byte, len(s))
		for i := 0; i < len(s); i++ {
			c := s[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			l[i] = c
		}
		m[s] = string(l)
	}
	return m
}()

// httpDate is the Date of an answer, made once a second.
func httpDate() string {
	now := time.Now().Unix()
	if d := date.Load(); d != nil && d.unix == now {
		return d.text
	}
	d := &dateText{unix: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	date.Store(d)
	return d.text
}

type dateText struct {
	unix int64
	text string
}

var date atomic.Pointer[dateText]
