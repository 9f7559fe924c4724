package h2door

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
)

// One chain for both doors: each HTTP/2 stream is turned into the fasthttp.RequestCtx
// the HTTP/1.1 door hands the gateway (Chain.Serve), and the answer the chain left in it
// back into the stream's response.
//
// The request is rebuilt as the HTTP/1.1 head it would have been (request line, Host from
// :authority, the fields as sent, "Transfer-Encoding: chunked" when the stream's body has
// no declared length) and parsed by fasthttp's own header parser, so the chain sees the
// raw header block it scans on HTTP/1.1 and every header rule holds unchanged. Go's
// HTTP/2 server has already refused what HTTP/2 forbids (connection-specific fields,
// invalid names and values, a header list over MaxHeaderBytes). The body streams: the
// stream's reader becomes the request's body stream, as StreamRequestBody makes it on
// HTTP/1.1.
//
// The connection under the RequestCtx stands in for the stream's connection (WithConn):
// its addresses and, over TLS, its TLS state, so an SNI check and the scheme work as on
// HTTP/1.1; but its streams share it and Go's server owns it, so nothing of the chain can
// read, write, close or hijack it. The one step that would (a WebSocket upgrade) needs
// Connection and Upgrade fields that HTTP/2 refuses, and CONNECT, the method HTTP/2
// tunnels with, is refused here.

// Chain is what the door needs of the gateway.
type Chain interface {
	// Serve runs the gateway on a request and leaves the answer in ctx.Response.
	Serve(ctx *fasthttp.RequestCtx)
	// Refuse answers a request the gateway never saw with the error r names.
	Refuse(ctx *fasthttp.RequestCtx, r Refusal)
}

// Refusal is why the door answers a stream itself.
type Refusal int

const (
	RefuseBadRequest     Refusal = iota // the request cannot be an HTTP/1.1 one
	RefuseHeaderTooLarge                // its head is over the HTTP/1.1 bound
	RefuseConnect                       // CONNECT, which HTTP/2 tunnels with
)

// Config is the HTTP/2 server's: limits shared with the HTTP/1.1 door, and HTTP/2's own.
type Config struct {
	MaxStreams   uint32        // SETTINGS_MAX_CONCURRENT_STREAMS
	HeaderBytes  int           // the header list bound: HTTP/1.1's ReadBufferSize
	ReadTimeout  time.Duration // per stream, as HTTP/1.1's per request; 0: none
	WriteTimeout time.Duration // per stream, and for a write that makes no progress
	IdleTimeout  time.Duration // a connection with no stream is closed after it
	Logger       *slog.Logger  // protocol errors and server messages, at debug level
	FastLogger   fasthttp.Logger
	// NoWorkers runs the chain on the goroutine Go's server starts for each stream
	// rather than on a pooled one (workers.go).
	NoWorkers bool
	// HeaderTable bounds the HPACK dynamic table of the answers' header blocks, in
	// bytes; 0: none is used (encoderTableSize).
	HeaderTable uint32
}

// HTTP/2 limits that have no HTTP/1.1 counterpart.
const (
	MaxReadFrameSize = 16 << 10 // the protocol's default: no frame is larger
	StreamWindow     = 256 << 10
	ConnWindow       = 1 << 20
)

// connKey is the http.Request context key of the connection a stream came on.
type connKey struct{}

// WithConn is what the server's ConnContext does: ctx carrying the connection c, under
// the RequestCtx of each of its streams (as a StreamConn).
func WithConn(ctx context.Context, c net.Conn) context.Context {
	sc := streamConn{c}
	if tc, ok := c.(*tls.Conn); ok {
		return context.WithValue(ctx, connKey{}, net.Conn(tlsStreamConn{sc, tc}))
	}
	return context.WithValue(ctx, connKey{}, net.Conn(sc))
}

// The connection a stream's RequestCtx holds. Its streams share it and Go's server owns
// it, so the chain may learn from it (addresses, the TLS state: ConnectionState, which
// fasthttp's IsTLS looks for too) and do nothing to it: reads, writes and Close fail, and
// helpers that act on the edge's own connection types (a lingering close, a hijack) do
// not recognize it.
type streamConn struct{ net.Conn }

var errStreamConn = errors.New("h2door: an HTTP/2 stream's connection belongs to the HTTP/2 server")

func (streamConn) Read([]byte) (int, error)  { return 0, errStreamConn }
func (streamConn) Write([]byte) (int, error) { return 0, errStreamConn }
func (streamConn) Close() error              { return errStreamConn }

type tlsStreamConn struct {
	streamConn
	tc *tls.Conn
}

// ConnectionState is the TLS state of the stream's connection (its SNI, ALPN…).
func (c tlsStreamConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// Handshake is done: the connection was sorted by the protocol it negotiated.
func (c tlsStreamConn) Handshake() error { return nil }

// NewServer is the server of every HTTP/2 connection, from every Split's H2 listener.
func NewServer(cfg Config, chain Chain) *http.Server {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	log := cfg.Logger
	return &http.Server{
		Handler:   NewHandler(cfg, chain),
		Protocols: &p,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: int(cfg.MaxStreams),
			MaxReadFrameSize:     MaxReadFrameSize,
			// The windows bound what one connection can make the edge buffer of request
			// bodies its streams have not read yet.
			MaxReceiveBufferPerConnection: ConnWindow,
			MaxReceiveBufferPerStream:     StreamWindow,
			WriteByteTimeout:              cfg.WriteTimeout,
			MaxEncoderHeaderTableSize:     encoderTableSize(cfg.HeaderTable),
			CountError: func(errType string) {
				if log.Enabled(context.Background(), slog.LevelDebug) {
					log.Debug("edge: http2: connection or stream error", "type", errType)
				}
			},
		},
		MaxHeaderBytes: cfg.HeaderBytes,
		ReadTimeout:    cfg.ReadTimeout,
		WriteTimeout:   cfg.WriteTimeout,
		IdleTimeout:    cfg.IdleTimeout,
		ConnContext:    WithConn,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// GoServer is Go's HTTP/2 server of a chain (NewServer), its connections' writes
// batched.
type GoServer struct{ *http.Server }

// NewGoServer is Go's HTTP/2 server of chain, the door's before its own (Server).
func NewGoServer(cfg Config, chain Chain) GoServer { return GoServer{NewServer(cfg, chain)} }

// Serve serves l's connections with their writes batched (conn.BatchWrites;
// TOLLGATE_EDGE_HTTP2_BATCH_WRITES), sends that make no progress for the write timeout
// failing as the server's own would.
func (s GoServer) Serve(l net.Listener) error {
	return s.Server.Serve(batchedListener{l, s.HTTP2.WriteByteTimeout})
}

type batchedListener struct {
	net.Listener
	timeout time.Duration
}

func (l batchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return conn.BatchWrites(c, l.timeout), nil
}

// encoderTableSize is the http.HTTP2Config.MaxEncoderHeaderTableSize that bounds an
// encoder's HPACK dynamic table to n bytes. Go reads 0 as its default (4096), so no table
// is 1 byte: every entry takes at least 32, so none fits, and every field is sent as an
// index into the static table or as a literal that the peer does not store.
func encoderTableSize(n uint32) int {
	return int(max(n, 1))
}

// NewHandler is the server's handler: each stream through chain. A request must carry
// its connection in its context (WithConn).
func NewHandler(cfg Config, chain Chain) http.Handler {
	h := &handler{chain: chain, log: cfg.FastLogger, headBuf: 2*cfg.HeaderBytes + 4096}
	if !cfg.NoWorkers {
		h.workers = &workers{h: h, maxIdle: maxIdle}
	}
	return h
}

type handler struct {
	chain   Chain
	log     fasthttp.Logger
	headBuf int
	pool    sync.Pool // *exchange
	workers *workers  // nil: each stream runs on its own goroutine
}

// exchange is what one stream borrows: the RequestCtx and the buffers that rebuild the
// request's head.
type exchange struct {
	ctx  fasthttp.RequestCtx
	head []byte
	rd   bytes.Reader
	br   *bufio.Reader
	body body
}

// body is a stream's body without its Close: the chain replaces a request's body
// stream with wrappers of it (fasthttp closes the one replaced), and the HTTP/2 server
// closes the body itself when the handler returns.
type body struct{ r io.Reader }

func (b *body) Read(p []byte) (int, error) { return b.r.Read(p) }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var aborted bool
	if h.workers != nil {
		aborted = h.workers.run(w, r)
	} else {
		aborted = h.serve(w, r)
	}
	if aborted {
		// The answer's body failed half-way: a reset stream tells the client, where a
		// clean end would pass a truncated body off as whole.
		panic(http.ErrAbortHandler)
	}
}

// serve runs one stream through the chain and writes its answer; aborted: the answer's
// body failed half-way.
func (h *handler) serve(w http.ResponseWriter, r *http.Request) (aborted bool) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	hx := h.getExchange(c)
	err := hx.readRequest(r)
	h.pass(&hx.ctx, err, goStream{r})
	aborted = writeResponse(w, r, &hx.ctx.Response)
	h.putExchange(hx)
	return aborted
}

// getExchange is a pooled exchange whose RequestCtx is on c, a stream's connection.
func (h *handler) getExchange(c net.Conn) *exchange {
	hx, _ := h.pool.Get().(*exchange)
	if hx == nil {
		hx = &exchange{}
		hx.br = bufio.NewReaderSize(&hx.rd, h.headBuf)
	}
	hx.ctx.Init2(c, h.log, false)
	return hx
}

// pass runs the request rebuilt from s through the chain, or has the chain refuse it
// for err, the rebuild's failure.
func (h *handler) pass(ctx *fasthttp.RequestCtx, err error, s Stream) {
	switch {
	case err == errConnect:
		h.chain.Refuse(ctx, RefuseConnect)
	case err == errHeadTooLarge:
		h.chain.Refuse(ctx, RefuseHeaderTooLarge)
	case err != nil:
		h.chain.Refuse(ctx, RefuseBadRequest)
	default:
		ctx.SetUserValue(requestKey{}, s)
		h.chain.Serve(ctx)
	}
}

// putExchange gives hx back once its answer was written.
func (h *handler) putExchange(hx *exchange) {
	ctx := &hx.ctx
	_ = ctx.Response.CloseBodyStream()
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.ResetUserValues()
	hx.head = hx.head[:0]
	hx.rd.Reset(nil)
	hx.body.r = nil
	h.pool.Put(hx)
}

// requestKey is the RequestCtx user value of the stream's own request (Request).
type requestKey struct{}

// Body is the request body of the HTTP/2 stream ctx's request came on (Stream.Body),
// or nil.
func Body(ctx *fasthttp.RequestCtx) io.Reader {
	if s := Request(ctx); s != nil {
		return s.Body()
	}
	return nil
}

// Request is the HTTP/2 stream ctx's request came on, or nil for a request of the
// HTTP/1.1 door. A proxy to an HTTP/2 upstream takes from it what the rebuilt request
// cannot carry: the stream's context, which ends when the client resets the stream, and
// its body, which may be read while the answer streams (gRPC's bidirectional streams)
// and after the chain has returned, where the RequestCtx's body stream may not be.
func Request(ctx *fasthttp.RequestCtx) Stream {
	s, _ := ctx.UserValue(requestKey{}).(Stream)
	return s
}

// goStream is the Stream of a request of Go's server.
type goStream struct{ r *http.Request }

func (s goStream) Context() context.Context { return s.r.Context() }

func (s goStream) Body() io.Reader {
	if s.r.Body == nil || s.r.Body == http.NoBody {
		return nil
	}
	return s.r.Body
}

type requestError string

func (e requestError) Error() string { return string(e) }

const (
	errConnect      = requestError("CONNECT")
	errHeadTooLarge = requestError("head too large")
	errBadTarget    = requestError("bad target")
)

// readRequest rebuilds r as the RequestCtx's request.
func (hx *exchange) readRequest(r *http.Request) error {
	if r.Method == http.MethodConnect {
		return errConnect
	}
	// Go's server checks the method, the fields' names and values, but not the
	// pseudo-headers that become the request line and Host: a space or control byte
	// there would split the head. The rest is checked again, for a head that a change
	// in the server could not open to injected lines.
	if !noSpace(r.RequestURI) || !noSpace(r.Host) || !fieldName(r.Method) {
		return errBadTarget
	}
	b := startHead(hx.head[:0], r.Method, r.RequestURI, r.Host)
	for k, vs := range r.Header {
		if k == "Host" {
			continue // :authority is the host
		}
		if !fieldName(k) {
			return errBadTarget
		}
		for _, v := range vs {
			if !fieldValue(v) {
				return errBadTarget
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	var body io.Reader
	if r.Body != nil && r.Body != http.NoBody {
		body = r.Body
	}
	return hx.endHead(b, body, r.ContentLength)
}

// startHead begins a rebuilt request's head: its request line and Host.
func startHead(b []byte, method, target, host string) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	return append(b, "\r\n"...)
}

// endHead ends the head b (chunked when body, if any, has no declared length) and
// parses it as the RequestCtx's request, whose body stream body becomes.
func (hx *exchange) endHead(b []byte, body io.Reader, length int64) error {
	if body != nil && length < 0 {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	b = append(b, "\r\n"...)
	hx.head = b
	if len(b) > hx.br.Size() {
		return errHeadTooLarge
	}
	hx.rd.Reset(b)
	hx.br.Reset(&hx.rd)
	req := &hx.ctx.Request
	if err := req.Header.Read(hx.br); err != nil {
		return err
	}
	if body != nil {
		hx.body.r = body
		req.SetBodyStream(&hx.body, int(length))
	}
	return nil
}

// noSpace reports whether s has no space, control byte or DEL.
func noSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// fieldName reports whether s is a token (RFC 9110 5.6.2).
func fieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !tchar[c] {
			return false
		}
	}
	return true
}

var tchar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// fieldValue reports whether s has no control byte other than tab (RFC 9110 5.5).
func fieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// writeResponse writes the chain's answer to the stream. It reports whether the body
// failed half-way.
func writeResponse(w http.ResponseWriter, r *http.Request, resp *fasthttp.Response) (aborted bool) {
	h := w.Header()
	hasCT := false
	for k, v := range resp.Header.All() {
		switch hop(k) {
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
			// The head goes out before the body's first piece: a streamed answer may
			// wait on the client (a gRPC stream answering each message), which would
			// otherwise never see the head it waits for.
			if err := http.NewResponseController(w).Flush(); err != nil {
				return true
			}
			if err := resp.BodyWriteTo(flusher{w}); err != nil {
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

// flusher sends each piece of a streamed body as it comes, as HTTP/1.1's chunked
// writer does.
type flusher struct{ w http.ResponseWriter }

func (f flusher) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = http.NewResponseController(f.w).Flush()
	}
	return n, err
}

var _ io.Writer = flusher{}

const (
	hopKeep = iota
	hopDrop
	hopContentType
)

// hop classifies a response field for HTTP/2: the connection-specific ones HTTP/2
// forbids (RFC 9113 8.2.2), Content-Length (set from the body) and Trailer (the trailer
// fields go after the body on their own) are dropped.
func hop(k []byte) int {
	switch {
	case bytes.EqualFold(k, strConnection), bytes.EqualFold(k, strKeepAlive), bytes.EqualFold(k, strProxyConnection),
		bytes.EqualFold(k, strTransferEncoding), bytes.EqualFold(k, strUpgrade), bytes.EqualFold(k, strContentLength),
		bytes.EqualFold(k, strTrailer):
		return hopDrop
	case bytes.EqualFold(k, strContentType):
		return hopContentType
	}
	return hopKeep
}

var (
	strConnection       = []byte("Connection")
	strKeepAlive        = []byte("Keep-Alive")
	strProxyConnection  = []byte("Proxy-Connection")
	strTransferEncoding = []byte("Transfer-Encoding")
	strUpgrade          = []byte("Upgrade")
	strContentLength    = []byte("Content-Length")
	strTrailer          = []byte("Trailer")
	strContentType      = []byte("Content-Type")
)
