package edge

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// One chain for both doors: h2Handler turns each HTTP/2 stream into the
// fasthttp.RequestCtx the HTTP/1.1 door hands the gateway (Edge.serve), and the answer
// the chain left in it back into the stream's response.
//
// The request is rebuilt as the HTTP/1.1 head it would have been (request line, Host from
// :authority, the fields as sent, "Transfer-Encoding: chunked" when the stream's body has
// no declared length) and parsed by fasthttp's own header parser, so the chain sees the
// raw header block it scans on HTTP/1.1 (headers.go) and every rule there holds unchanged.
// Go's HTTP/2 server has already refused what HTTP/2 forbids (connection-specific fields,
// invalid names and values, a header list over MaxHeaderBytes). The body streams: the
// stream's reader becomes the request's body stream, as StreamRequestBody makes it on
// HTTP/1.1.
//
// The connection under the RequestCtx is the stream's connection: a *tls.Conn over TLS,
// so the SNI check (sniAgrees) and X-Forwarded-Proto work as on HTTP/1.1; the remote
// address, the request id, the meter and the access log come from the same chain.
// Nothing of the chain reads or writes that connection on HTTP/2: the one step that would
// (a WebSocket upgrade, which hijacks it) needs Connection and Upgrade fields that HTTP/2
// refuses, and CONNECT, the method HTTP/2 tunnels with, is refused here.

type h2Handler struct {
	e   *Edge
	log fasthttp.Logger
}

// h2Exchange is what one stream borrows: the RequestCtx and the buffers that rebuild the
// request's head.
type h2Exchange struct {
	ctx  fasthttp.RequestCtx
	head []byte
	rd   bytes.Reader
	br   *bufio.Reader
	body h2Body
}

// h2Body is a stream's body without its Close: the chain replaces a request's body
// stream with wrappers of it (fasthttp closes the one replaced), and the HTTP/2 server
// closes the body itself when the handler returns.
type h2Body struct{ r io.Reader }

func (b *h2Body) Read(p []byte) (int, error) { return b.r.Read(p) }

var h2ExchangePool sync.Pool

var replyH2Connect = newReply(tenants.EInvalidRequest, "CONNECT is not served over HTTP/2; WebSocket needs HTTP/1.1")

func (h *h2Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := h.e
	hx, _ := h2ExchangePool.Get().(*h2Exchange)
	if hx == nil {
		hx = &h2Exchange{}
		hx.br = bufio.NewReaderSize(&hx.rd, 2*e.cfg.ReadBufferSize+4096)
	}
	ctx := &hx.ctx
	c, _ := r.Context().Value(h2ConnKey{}).(net.Conn)
	ctx.Init2(c, h.log, false)

	switch err := hx.readRequest(r); {
	case err == errH2Connect:
		e.refuse(ctx, replyH2Connect)
	case err == errH2HeadTooLarge:
		e.refuse(ctx, replyHeaderTooLarge)
	case err != nil:
		e.refuse(ctx, replyBadRequest)
	default:
		e.serve(ctx)
	}
	aborted := writeH2Response(w, r, &ctx.Response)

	_ = ctx.Response.CloseBodyStream()
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.ResetUserValues()
	hx.head = hx.head[:0]
	hx.rd.Reset(nil)
	hx.body.r = nil
	h2ExchangePool.Put(hx)
	if aborted {
		// The answer's body failed half-way: a reset stream tells the client, where a
		// clean end would pass a truncated body off as whole.
		panic(http.ErrAbortHandler)
	}
}

type h2Error string

func (e h2Error) Error() string { return string(e) }

const (
	errH2Connect      = h2Error("CONNECT")
	errH2HeadTooLarge = h2Error("head too large")
	errH2BadTarget    = h2Error("bad target")
)

// readRequest rebuilds r as the RequestCtx's request.
func (hx *h2Exchange) readRequest(r *http.Request) error {
	if r.Method == http.MethodConnect {
		return errH2Connect
	}
	// Go's server checks header values but not the pseudo-headers that become the
	// request line and Host: a space or control byte there would split the head.
	if !h2Token(r.RequestURI) || !h2Token(r.Host) {
		return errH2BadTarget
	}
	b := hx.head[:0]
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, r.RequestURI...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.Host...)
	b = append(b, "\r\n"...)
	for k, vs := range r.Header {
		if k == "Host" {
			continue // :authority is the host
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	hasBody := r.Body != nil && r.Body != http.NoBody
	if hasBody && r.ContentLength < 0 {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	b = append(b, "\r\n"...)
	hx.head = b
	if len(b) > hx.br.Size() {
		return errH2HeadTooLarge
	}
	hx.rd.Reset(b)
	hx.br.Reset(&hx.rd)
	req := &hx.ctx.Request
	if err := req.Header.Read(hx.br); err != nil {
		return err
	}
	if hasBody {
		hx.body.r = r.Body
		req.SetBodyStream(&hx.body, int(r.ContentLength))
	}
	return nil
}

// h2Token reports whether s has no space, control byte or DEL.
func h2Token(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// writeH2Response writes the chain's answer to the stream. It reports whether the body
// failed half-way.
func writeH2Response(w http.ResponseWriter, r *http.Request, resp *fasthttp.Response) (aborted bool) {
	h := w.Header()
	hasCT := false
	for k, v := range resp.Header.All() {
		switch h2Hop(k) {
		case hopDrop:
			continue
		case hopContentType:
			hasCT = true
		}
		key := string(k)
		h[key] = append(h[key], string(v))
	}
	if !hasCT {
		h["Content-Type"] = nil // no sniffed type: the answer has none, as on HTTP/1.1
	}
	status := resp.StatusCode()
	if status < 200 || status > 999 {
		status = fasthttp.StatusBadGateway
	}
	bodyless := r.Method == http.MethodHead || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified
	stream := resp.IsBodyStream()
	switch cl := resp.Header.ContentLength(); {
	case stream || r.Method == http.MethodHead:
		if cl >= 0 {
			h["Content-Length"] = []string{strconv.Itoa(cl)}
		}
	case !bodyless:
		h["Content-Length"] = []string{strconv.Itoa(len(resp.Body()))}
	}
	w.WriteHeader(status)
	if !bodyless {
		if stream {
			if err := resp.BodyWriteTo(h2Flusher{w}); err != nil {
				return true
			}
		} else if b := resp.Body(); len(b) > 0 {
			if _, err := w.Write(b); err != nil {
				return true
			}
		}
	}
	// The upstream's trailer fields are known once its body has been read.
	for k := range resp.Header.Trailers() {
		if v := resp.Header.PeekBytes(k); len(v) > 0 {
			h[http.TrailerPrefix+string(k)] = []string{string(v)}
		}
	}
	return false
}

// h2Flusher sends each piece of a streamed body as it comes, as HTTP/1.1's chunked
// writer does.
type h2Flusher struct{ w http.ResponseWriter }

func (f h2Flusher) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = http.NewResponseController(f.w).Flush()
	}
	return n, err
}

var _ io.Writer = h2Flusher{}

const (
	hopKeep = iota
	hopDrop
	hopContentType
)

// h2Hop classifies a response field for HTTP/2: the connection-specific ones HTTP/2
// forbids (RFC 9113 8.2.2), Content-Length (set from the body) and Trailer (the trailer
// fields go after the body on their own) are dropped.
func h2Hop(k []byte) int {
	switch {
	case bytes.EqualFold(k, strConnectionH), bytes.EqualFold(k, strKeepAliveH), bytes.EqualFold(k, strProxyConnectionH),
		bytes.EqualFold(k, strTransferEncodingH), bytes.EqualFold(k, strUpgradeH), bytes.EqualFold(k, strContentLengthH),
		bytes.EqualFold(k, strTrailerH):
		return hopDrop
	case bytes.EqualFold(k, strContentTypeH):
		return hopContentType
	}
	return hopKeep
}

var (
	strConnectionH       = []byte("Connection")
	strKeepAliveH        = []byte("Keep-Alive")
	strProxyConnectionH  = []byte("Proxy-Connection")
	strTransferEncodingH = []byte("Transfer-Encoding")
	strUpgradeH          = []byte("Upgrade")
	strContentLengthH    = []byte("Content-Length")
	strTrailerH          = []byte("Trailer")
	strContentTypeH      = []byte("Content-Type")
)
