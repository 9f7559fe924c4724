package upstreamclient

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/conn"
	"tollgate/edge/meter"
)

// The edge's exchange with an upstream.
//
// DoTimeout sends a request over a connection of the target's pool (pool.go)
// and reads the answer, with what a proxy needs and a general client (fasthttp's
// HostClient.Do) spends on every request besides: no parse of the request URI the edge
// has just built, one clock read, the connection's deadlines moved only when they must
// (conn.Upstream.Bound), no allocation for a small answer.
//
//   - the request is written as the edge built it: request line, Host and headers (the
//     target's Host also for a target whose scheme is not the listener's);
//   - with GOMAXPROCS=1 it yields between writing the request and reading the answer
//     (conn.Upstream.YieldsReads);
//   - interim (1xx) answers but 101 are skipped, at most maxInterimResponses of them;
//   - a response whose Content-Length is at most maxBufferedBody is read whole and its
//     connection goes back to the pool at once; a larger body, a chunked one or one
//     delimited by the upstream closing streams through upstreamBody, which hands the
//     connection back once the body has been relayed to its end, and closes it
//     otherwise (a client that left mid-body, an upstream that broke off). A request in
//     flight holds at most maxBufferedBody of response body in memory (S5: a 1 MB or a
//     100 MB response streams). Reading a small body whole also means a small body
//     that ends early fails the exchange (502) instead of reaching the client as a
//     cut-off 200;
//   - a connection that relayed a streamed body to its end goes back to the pool even
//     when the client's connection closes after the response.
//
// A request that failed on a connection that served before, with no byte of an answer
// read (typically one the upstream closed as the request went out), is sent once more, on
// a new connection and within the same timeout, when that is safe: its body is not a
// stream (a stream is used up by the first attempt) and either nothing of it was written
// or its method is idempotent. This is what Go's net/http transport does (a request that
// wrote nothing, or is replayable, on a reused connection); an answer that began and then
// failed, or a failure on a new connection, is the upstream's and is not sent again here
// (a route's retries may, retry.go).
//
// The framing read here is fasthttp's documented readers (ResponseHeader.Read,
// Response.ReadBody, ResponseHeader.ReadTrailer) for headers and whole bodies, and ours
// for streamed ones (upstreamBody, readChunkSize); FuzzUpstreamResponse feeds both
// arbitrary upstream bytes.

// maxBufferedBody is the largest response body read whole before answering.
const maxBufferedBody = 64 << 10

// DoTimeout sends req over a pooled connection and reads the answer into resp, both
// within timeout (the route's): an error when no connection could be had
// (fasthttp.ErrNoFreeConns, a *DialError), the connection failed, or the upstream took
// longer (then fasthttp.ErrTimeout or a net.Error whose Timeout is true). The timeout
// also bounds the relay of a streamed body.
func (c *Client) DoTimeout(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	return c.DoAt(req, resp, timeout, conn.MonoNow())
}

// DoAt is DoTimeout for a caller that has just read conn.MonoNow (now) itself: a clock
// read costs 70–150 ns on a virtual machine, a few per request add up, and the same
// reading serves both.
func (c *Client) DoAt(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration, now int64) error {
	if timeout <= 0 {
		return fasthttp.ErrTimeout
	}
	// Request.Write takes the request line and Host from the parsed URI once the URI has
	// been parsed, which proxyStep does to switch the scheme for a target whose scheme is
	// not the listener's. Marking the URI unparsed makes Write send the request as the
	// edge built it.
	req.SetRequestURIBytes(req.Header.RequestURI())
	deadline := now + int64(timeout)
	slack := conn.UpstreamSlack(timeout)
	// Sending a streamed body uses the stream up (and clears IsBodyStream): such a request
	// cannot be sent again, which must be known before the first attempt.
	a := attempt{replayable: !req.IsBodyStream(), idempotent: isIdempotent(&req.Header)}
	retry, err := c.roundTrip(req, resp, now, deadline, slack, &a)
	if err != nil && retry {
		if now = conn.MonoNow(); now >= deadline {
			err = fasthttp.ErrTimeout
		} else {
			a.fresh = true
			_, err = c.roundTrip(req, resp, now, deadline, slack, &a)
		}
	}
	if err == io.EOF {
		err = fasthttp.ErrConnectionClosed
	}
	return err
}

// isIdempotent: the methods RFC 9110 (section 9.2.2) calls idempotent, and QUERY.
func isIdempotent(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsPut() || h.IsDelete() || h.IsOptions() || h.IsTrace() || h.IsQuery()
}

// attempt is what roundTrip needs to know of the request's attempts.
type attempt struct {
	replayable bool // the body is in memory (or absent), not a stream
	idempotent bool // isIdempotent
	fresh      bool // take a new connection: the first attempt failed on a reused one
}

// mayResend reports whether a request that failed on pc may be sent again (see
// DoTimeout): pc served before, no byte of an answer came, the body can be sent again,
// and nothing was written or the method is idempotent.
func (a *attempt) mayResend(pc *poolConn) bool {
	return pc.reused && !a.fresh && pc.nr == 0 && a.replayable && (a.idempotent || pc.nw == 0)
}

// roundTrip is one attempt; retry reports whether the request may be sent again.
func (c *Client) roundTrip(req *fasthttp.Request, resp *fasthttp.Response, now, deadline, slack int64, a *attempt) (retry bool, err error) {
	pc, err := c.acquire(time.Duration(deadline-now), a.fresh)
	if err != nil {
		return false, err
	}
	pc.nr, pc.nw = 0, 0
	if pc.uc != nil {
		err = pc.uc.Bound(deadline, slack)
	} else {
		err = setDeadlines(pc.Conn, deadline)
	}
	if err != nil {
		c.closeConn(pc)
		return a.mayResend(pc), err
	}

	// A client's "Connection: close" (an HTTP/1.0 client's, implicitly) ends its own
	// connection, not the upstream one: the request is written without it, so the pooled
	// connection stays open, and the flag is put back for the server, which reads it to
	// close the client's connection after the answer.
	clientClose := req.Header.ConnectionClose()
	if clientClose {
		req.Header.ResetConnectionClose()
	}
	bw := c.acquireWriter(pc)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	c.releaseWriter(bw)
	if clientClose {
		req.Header.SetConnectionClose()
	}
	if err != nil {
		if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
			err = fasthttp.ErrTimeout
		}
		c.closeConn(pc)
		return a.mayResend(pc), err
	}

	if pc.uc != nil && pc.uc.YieldsReads() {
		// The upstream cannot have answered yet: let other connections' work go first.
		runtime.Gosched()
	}

	if req.Header.IsHead() {
		resp.SkipBody = true
	}
	resp.Header.DisableNormalizing() // header names pass through as the upstream wrote them
	resp.ResetBody()
	br := c.acquireReader(pc)
	if err = readResponseHeader(&resp.Header, br); err != nil {
		c.releaseReader(br)
		c.closeConn(pc)
		return a.mayResend(pc), err
	}
	// After 101 Switching Protocols the connection speaks another protocol: never pooled.
	closeConn := resp.ConnectionClose() || resp.Header.StatusCode() == fasthttp.StatusSwitchingProtocols
	cl := resp.Header.ContentLength()
	skip := resp.SkipBody || NoBody(resp.Header.StatusCode())
	if !skip && c.stream && (cl < 0 || cl > maxBufferedBody) {
		resp.SetBodyStream(newUpstreamBody(c, pc, br, &resp.Header, cl, closeConn), cl)
		return false, nil
	}
	if !skip {
		// A body delimited by the upstream closing leaves nothing to reuse.
		closeConn = closeConn || cl == -2
		resp.StreamBody = false
		err = resp.ReadBody(br, 0)
		if err == nil && resp.Header.ContentLength() == -1 {
			if err = resp.Header.ReadTrailer(br); err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
		}
		if err != nil {
			c.releaseReader(br)
			c.closeConn(pc)
			return false, err // an answer began: not resent
		}
	}
	// Bytes already read past the answer's end are not an answer to anything the edge
	// sent: pooled, they would become the next request's answer. Such a connection is
	// closed.
	closeConn = closeConn || br.Buffered() > 0
	c.releaseReader(br)
	if closeConn {
		c.closeConn(pc)
	} else {
		// Idle since the attempt began, as far as the idle cleaner can tell: that is
		// earlier than the truth (by the exchange's time, within the route's timeout), so
		// the connection may be closed sooner, never later, than maxIdle after its last
		// use, and the clock is not read again here.
		c.releaseAt(pc, now)
	}
	return false, nil
}

// maxInterimResponses bounds the 1xx responses read before the final one.
const maxInterimResponses = 100

var errTooManyInterim = errors.New("upstream sent too many 1xx informational responses")

// readResponseHeader reads the final response header, skipping interim (1xx) ones but
// 101 Switching Protocols.
func readResponseHeader(h *fasthttp.ResponseHeader, br *bufio.Reader) error {
	for n := 0; ; n++ {
		if err := h.Read(br); err != nil {
			return err
		}
		if s := h.StatusCode(); s < 100 || s > 199 || s == fasthttp.StatusSwitchingProtocols {
			return nil
		}
		if n >= maxInterimResponses {
			return errTooManyInterim
		}
	}
}

// NoBody reports a status whose response has no body: 1xx, 204 and 304.
func NoBody(status int) bool {
	if status < 100 || status == fasthttp.StatusOK {
		return false
	}
	return status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified
}

// upstreamConnOf returns the dialer's connection under c (also under TLS), or nil.
func upstreamConnOf(c net.Conn) *conn.Upstream {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn() // tls.Conn passes deadlines to the connection below it
	}
	uc, _ := c.(*conn.Upstream)
	return uc
}

// setDeadlines bounds the exchange on a connection the dialer did not make (none
// today) by deadline, on conn.MonoNow's clock.
func setDeadlines(c net.Conn, deadline int64) error {
	t := conn.MonoTime(deadline)
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// upstreamBody is a response body relayed while it is read from the upstream
// connection: Content-Length framed (length ≥ 0), chunked (-1; the trailer is read into
// the response header, from which the server writes it) or delimited by the upstream
// closing the connection (-2). The server reads it and then closes it with
// CloseWithError (fasthttp.ReadCloserWithError), always from the connection's goroutine;
// the connection goes back to the pool when the body was read to its end, and is closed
// otherwise.
type upstreamBody struct {
	c       *Client
	pc      *poolConn
	br      *bufio.Reader
	h       *fasthttp.ResponseHeader
	length  int
	left    int         // bytes left of the body (length ≥ 0) or of the current chunk (-1)
	done    bool        // the body ended where its framing said
	close   bool        // the connection may not be reused after the body
	closed  bool        // CloseWithError was called: the body is back in the pool
	err     error       // the error that stopped the body
	sent    int64       // body bytes handed to the reader (fasthttp, writing them to the client)
	use     meter.Usage // the request's meter record, made at close
	metered bool
}

var upstreamBodyPool sync.Pool

func newUpstreamBody(c *Client, pc *poolConn, br *bufio.Reader, h *fasthttp.ResponseHeader, length int, closeAfter bool) *upstreamBody {
	b, _ := upstreamBodyPool.Get().(*upstreamBody)
	if b == nil {
		b = new(upstreamBody)
	}
	*b = upstreamBody{c: c, pc: pc, br: br, h: h, length: length, close: closeAfter}
	if length >= 0 {
		b.left = length
	}
	return b
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	switch {
	case b.closed:
		return 0, io.ErrClosedPipe
	case b.done:
		return 0, io.EOF
	case b.err != nil:
		return 0, b.err
	}
	n, err := b.read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	// Counted as relayed when read: fasthttp writes each piece it read before reading
	// the next, so a client that leaves midway is charged at most the last piece (one
	// copy buffer, 32 KiB at most) beyond what its connection took.
	b.sent += int64(n)
	return n, err
}

// RecordAtClose has the body record u, with the body bytes it relayed as Out, when it is
// closed: a streamed answer's size is known only then.
func (b *upstreamBody) RecordAtClose(u meter.Usage) { b.use, b.metered = u, true }

func (b *upstreamBody) read(p []byte) (int, error) {
	switch {
	case b.length >= 0:
		if b.left == 0 {
			b.done = true
			return 0, io.EOF
		}
		if len(p) > b.left {
			p = p[:b.left]
		}
		n, err := b.br.Read(p)
		b.left -= n
		if b.left == 0 {
			b.done = true
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	case b.length == -1:
		if b.left == 0 {
			size, err := readChunkSize(b.br)
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return 0, err
			}
			if size == 0 {
				if err := b.h.ReadTrailer(b.br); err != nil {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return 0, err
				}
				b.done = true
				return 0, io.EOF
			}
			b.left = size
		}
		if len(p) > b.left {
			p = p[:b.left]
		}
		n, err := b.br.Read(p)
		b.left -= n
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err == nil && b.left == 0 {
			err = readCRLF(b.br)
		}
		return n, err
	default:
		n, err := b.br.Read(p)
		if err == io.EOF {
			b.done, b.close = true, true // the upstream closed the connection
		}
		return n, err
	}
}

// CloseWithError ends the relay: the connection goes back to the pool when the body was
// read to its end without error, and is closed otherwise.
func (b *upstreamBody) CloseWithError(err error) error {
	if b.closed {
		return nil
	}
	if b.metered {
		b.use.Out = b.sent
		b.use.Record()
	}
	c, pc := b.c, b.pc
	extra := b.done && b.br.Buffered() > 0 // bytes past the body's end: see roundTrip
	c.releaseReader(b.br)
	if err != nil || !b.done || b.err != nil || b.close || extra {
		c.closeConn(pc)
	} else {
		c.release(pc)
	}
	*b = upstreamBody{closed: true}
	upstreamBodyPool.Put(b)
	return nil
}

// Chunked framing errors.
var (
	errChunkSize = errors.New("upstream sent a malformed chunk size")
	errChunkEnd  = errors.New("upstream chunk not followed by CRLF")
)

// maxChunkSizeDigits bounds a chunk size to what an int holds.
const maxChunkSizeDigits = 15

// readChunkSize reads a chunk-size line: hex digits, optional whitespace or a chunk
// extension (";…", ignored), CRLF. It is as strict as fasthttp's parser of request
// bodies: no bare LF, no extension after whitespace.
func readChunkSize(br *bufio.Reader) (int, error) {
	n, digits := 0, 0
	for {
		c, err := br.ReadByte()
		if err != nil {
			if digits > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		k := hexValue(c)
		if k < 0 {
			if digits == 0 {
				return 0, errChunkSize
			}
			_ = br.UnreadByte()
			break
		}
		if digits == maxChunkSizeDigits {
			return 0, errChunkSize
		}
		n = n<<4 | k
		digits++
	}
	inExt, ows := false, false
	for {
		c, err := br.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		switch {
		case c == '\r':
			_ = br.UnreadByte()
			return n, readCRLF(br)
		case c == '\n':
			return 0, errChunkSize
		case inExt:
		case c == ' ' || c == '\t':
			ows = true
		case c == ';' && !ows:
			inExt = true
		default:
			return 0, errChunkSize
		}
	}
}

func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func readCRLF(br *bufio.Reader) error {
	for _, want := range [2]byte{'\r', '\n'} {
		c, err := br.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if c != want {
			return errChunkEnd
		}
	}
	return nil
}
