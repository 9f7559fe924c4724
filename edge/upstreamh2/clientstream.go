package upstreamh2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// clientStream is one request and its answer on a clientConn.
type clientStream struct {
	cc         *clientConn
	id         uint32
	cond       sync.Cond // signalled when the answer's head or body comes, the stream's window grows, or it ends; cc.mu
	h          *Transport
	req        *http.Request
	res        *http.Response
	stop       func() bool // context.AfterFunc's
	body       io.ReadCloser
	bodyClosed atomic.Bool

	// Under cc.mu.
	gotHead    bool
	remoteDone bool // END_STREAM came
	localDone  bool // END_STREAM went
	closed     bool // no longer open on the protocol's side
	released   bool // the answer's body was closed
	err        error
	buf        []byte // the answer's body, come and not read
	off        int
	recvWindow int64
	unacked    int64 // body bytes read, not yet returned to the upstream
	owed       bool  // in cc.updates
	sendWindow int64
	trailer    http.Header
	interim    int // 1xx heads come so far
}

// roundTrip sends r on one of the pool's connections and waits for its answer's head.
// A request the upstream did not process (a GOAWAY past it, REFUSED_STREAM) goes again on
// another connection, when its body, if any, was read whole before it was first sent.
func (p *pool) roundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	var chunk *[]byte
	n, whole := 0, true
	for try := 0; ; try++ {
		cc, err := p.get(ctx)
		if err != nil {
			closeBody(r)
			putChunk(chunk)
			return nil, err
		}
		// The body is read once there is a connection: a request that never got one
		// can go to another target with its body unread (RequestBody.Unread).
		if try == 0 && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			chunk = bodyChunks.Get().(*[]byte)
			n, whole = readNow(r.Body, *chunk, r.ContentLength)
		}
		res, handed, err := cc.roundTrip(p.h, r, chunk, n, whole)
		if !handed {
			if err == errUnprocessed && whole && try < maxRetries {
				continue
			}
			putChunk(chunk)
		}
		if err == errUnprocessed {
			err = &lostError{cause: err} // its body went in part, or it went too often
		}
		return res, err
	}
}

func putChunk(c *[]byte) {
	if c != nil {
		bodyChunks.Put(c)
	}
}

var bodyChunks = sync.Pool{New: func() any { b := make([]byte, bodyChunk); return &b }}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// nowReader is a body that can give what it holds without waiting for more: the door's
// HTTP/2 stream, or a RequestBody over one. n 0 and a nil error: more is to come.
type nowReader interface {
	ReadNow(p []byte) (int, error)
}

// readNow reads into p what body holds without waiting, and reports whether that is
// the whole body.
func readNow(body io.Reader, p []byte, declared int64) (int, bool) {
	nr, ok := body.(nowReader)
	if !ok {
		return 0, false
	}
	n := 0
	for n < len(p) {
		m, err := nr.ReadNow(p[n:])
		n += m
		if err == io.EOF || declared >= 0 && int64(n) == declared {
			return n, true
		}
		if err != nil || m == 0 {
			return n, false
		}
	}
	return n, false
}

// roundTrip opens a stream for r on cc, reserved by the pool, and waits for the head of
// its answer. chunk holds the n bytes of the body read so far, whole if they are all of
// it; handed: chunk went to the goroutine that sends the rest.
func (cc *clientConn) roundTrip(h *Transport, r *http.Request, chunk *[]byte, n int, whole bool) (res *http.Response, handed bool, err error) {
	ctx := r.Context()
	st := &clientStream{cc: cc, h: h, req: r, body: r.Body}
	st.cond.L = &cc.mu
	hasBody := n > 0 || !whole
	if err := checkFields(r); err != nil {
		cc.mu.Lock()
		cc.unreserve()
		cc.mu.Unlock()
		st.closeReqBody()
		return nil, false, err
	}
	if ctx.Done() != nil {
		st.stop = context.AfterFunc(ctx, st.canceled)
	}

	cc.mu.Lock()
	switch {
	case st.err != nil:
		err := st.err
		cc.unreserve()
		cc.mu.Unlock()
		st.closeReqBody()
		return nil, false, err
	case cc.err != nil || cc.goingAway:
		cc.unreserve()
		cc.mu.Unlock()
		st.stopCtx()
		return nil, false, errUnprocessed
	}
	st.id = cc.nextID
	cc.nextID += 2
	st.sendWindow = cc.peerWindow
	st.recvWindow = streamWindow
	cc.streams[st.id] = st
	cc.encodeHead(r)
	st.writeBlock(!hasBody)
	if hasBody && whole {
		_ = st.writeData((*chunk)[:n], true)
	}
	cc.mu.Unlock()
	if hasBody && !whole {
		handed = true
		go st.sendBody(chunk, n)
	} else {
		st.closeReqBody()
	}

	cc.mu.Lock()
	for !st.gotHead && st.err == nil {
		st.cond.Wait()
	}
	if !st.gotHead {
		err := st.err
		cc.mu.Unlock()
		st.stopCtx()
		return nil, handed, err
	}
	res = st.res
	cc.mu.Unlock()
	return res, handed, nil
}

func (st *clientStream) stopCtx() {
	if st.stop != nil {
		st.stop()
	}
}

// canceled resets the stream when the request's context ends: RoundTrip and the body's
// Read return the context's error. An answer already whole stays readable.
func (st *clientStream) canceled() {
	cc := st.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	err := st.req.Context().Err()
	switch {
	case st.id == 0:
		st.err = err // not opened yet
	case !st.closed:
		cc.resetStream(st, http2.ErrCodeCancel, err)
	}
}

// checkFields refuses a request whose fields HTTP/2 cannot carry, before a stream is
// opened for it.
func checkFields(r *http.Request) error {
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("upstreamh2: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("upstreamh2: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// encodeHead HPACK-encodes r's head into cc.hbuf; under cc.mu, which keeps the blocks in
// the encoder's order.
func (cc *clientConn) encodeHead(r *http.Request) {
	cc.hbuf.Reset()
	e := cc.enc
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	_ = e.WriteField(hpack.HeaderField{Name: ":method", Value: method})
	scheme := "http"
	if cc.p.cfg.TLS {
		scheme = "https"
	}
	_ = e.WriteField(hpack.HeaderField{Name: ":scheme", Value: scheme})
	_ = e.WriteField(hpack.HeaderField{Name: ":authority", Value: host})
	_ = e.WriteField(hpack.HeaderField{Name: ":path", Value: requestPath(r)})
	ua := false
	for k, vs := range r.Header {
		name := lowerKey(k)
		switch name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "content-length", "trailer":
			continue
		case "te":
			// Only "trailers" may go over HTTP/2 (RFC 9113 8.2.2).
			for _, v := range vs {
				if strings.EqualFold(v, "trailers") {
					_ = e.WriteField(hpack.HeaderField{Name: "te", Value: "trailers"})
					break
				}
			}
			continue
		case "user-agent":
			ua = true
		}
		for _, v := range vs {
			_ = e.WriteField(hpack.HeaderField{Name: name, Value: v})
		}
	}
	if !ua {
		_ = e.WriteField(hpack.HeaderField{Name: "user-agent", Value: "Go-http-client/2.0"})
	}
	if n := r.ContentLength; n > 0 || n == 0 && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch) {
		_ = e.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(n, 10)})
	}
}

// requestPath is r's :path: a target NewRequest kept as it came, without building it
// again.
func requestPath(r *http.Request) string {
	u := r.URL
	if u.Opaque != "" && u.RawQuery == "" && !u.ForceQuery && strings.HasPrefix(u.Opaque, "/") && !strings.HasPrefix(u.Opaque, "//") {
		return u.Opaque
	}
	return u.RequestURI()
}

// lowerKeys holds the lower-case wire names of canonical field names seen so far, as
// headerKeys does the other way: a name already lower-case is used as it is.
var lowerKeys nameCache

func lowerKey(k string) string {
	lower := true
	for i := 0; i < len(k); i++ {
		if 'A' <= k[i] && k[i] <= 'Z' {
			lower = false
			break
		}
	}
	if lower {
		return k
	}
	if s, ok := lowerKeys.names()[k]; ok {
		return s
	}
	s := strings.ToLower(k)
	lowerKeys.add(k, s)
	return s
}

// canonicalKey is the canonical form of an answer's field name, from the same cache as
// the requests' names.
func canonicalKey(k string) string {
	if s, ok := headerKeys.names()[k]; ok {
		return s
	}
	return headerKey([]byte(k))
}

// writeBlock queues cc.hbuf as HEADERS and CONTINUATION frames of at most the
// upstream's frame size; under cc.mu.
func (st *clientStream) writeBlock(end bool) {
	cc := st.cc
	blk := cc.hbuf.Bytes()
	n := min(len(blk), cc.peerFrame)
	_ = cc.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: blk[:n], EndStream: end, EndHeaders: n == len(blk)})
	for blk = blk[n:]; len(blk) > 0; blk = blk[n:] {
		n = min(len(blk), cc.peerFrame)
		_ = cc.wfr.WriteContinuation(st.id, n == len(blk), blk[:n])
	}
	if end {
		st.localDone = true
	}
	cc.kick()
}

// writeData queues p as DATA frames within the upstream's windows and frame size,
// waiting for the windows as needed; end: the last ends the stream. Under cc.mu.
func (st *clientStream) writeData(p []byte, end bool) error {
	cc := st.cc
	if len(p) == 0 && !end {
		return nil
	}
	for {
		if st.closed || st.err != nil {
			return errBodyClosed
		}
		if len(cc.out) >= maxOut {
			cc.room.Wait()
			continue
		}
		n := int64(0)
		if len(p) > 0 {
			n = min(int64(len(p)), int64(cc.peerFrame), st.sendWindow, cc.sendWindow)
		}
		if len(p) > 0 && n <= 0 {
			if st.sendWindow <= 0 {
				st.cond.Wait()
			} else {
				cc.room.Wait()
			}
			continue
		}
		last := end && n == int64(len(p))
		_ = cc.wfr.WriteData(st.id, last, p[:n])
		st.sendWindow -= n
		cc.sendWindow -= n
		p = p[n:]
		cc.kick()
		if last {
			st.localDone = true
			if st.remoteDone {
				cc.closeStream(st, nil)
			}
			return nil
		}
		if len(p) == 0 {
			return nil
		}
	}
}

// sendBody sends the rest of a request body that is still to come (a client's stream),
// as it is read, on a goroutine of its own: the answer may stream down meanwhile. The
// first n bytes of chunk were read already; chunk is its buffer after.
func (st *clientStream) sendBody(chunk *[]byte, n int) {
	cc := st.cc
	defer st.closeReqBody()
	defer bodyChunks.Put(chunk)
	buf := *chunk
	cc.mu.Lock()
	err := st.writeData(buf[:n], false)
	cc.mu.Unlock()
	if err != nil {
		return
	}
	sent, declared := int64(n), st.req.ContentLength
	for {
		n, rerr := st.body.Read(buf)
		sent += int64(n)
		end := rerr == io.EOF || declared > 0 && sent == declared
		if rerr != nil && rerr != io.EOF {
			// The answer fails with the body's error: the edge tells a body over its
			// limit from an upstream's failure by it.
			cc.mu.Lock()
			cc.resetStream(st, http2.ErrCodeCancel, rerr)
			cc.mu.Unlock()
			return
		}
		cc.mu.Lock()
		err := st.writeData(buf[:n], end)
		cc.mu.Unlock()
		if err != nil || end {
			return
		}
	}
}

func (st *clientStream) closeReqBody() {
	if st.body != nil && !st.bodyClosed.Swap(true) {
		_ = st.body.Close()
	}
}

// closeStream ends st on the protocol's side: it leaves the open streams; with err, its
// answer fails with it unless it ended, and what of its body was not read goes back to
// the connection's window. Under cc.mu.
func (cc *clientConn) closeStream(st *clientStream, err error) {
	if st.closed {
		return
	}
	st.closed = true
	if cc.streams[st.id] == st {
		delete(cc.streams, st.id)
	}
	if err != nil && !st.remoteDone {
		if st.err == nil {
			st.err = err
		}
		cc.connUnacked += int64(len(st.buf) - st.off)
		st.buf, st.off = nil, 0
		if cc.connUnacked >= connWindow/4 {
			cc.kick()
		}
	}
	st.stopCtx()
	st.cond.Broadcast()
	cc.room.Broadcast()
	if !st.localDone && st.body != nil && !st.bodyClosed.Load() {
		// The sender may wait in the body's Read (a client's stream): as net/http
		// does, the body is closed under it.
		go st.closeReqBody()
	}
	cc.active--
	cc.maybeIdle()
}

// processHeaders takes an answer's head, or its trailer fields.
func (cc *clientConn) processHeaders(f *http2.MetaHeadersFrame) (http2.ErrCode, bool) {
	id := f.StreamID
	if id%2 == 0 || id >= cc.nextID {
		return http2.ErrCodeProtocol, true // a stream the edge did not open
	}
	st := cc.streams[id]
	if st == nil {
		return 0, false // reset by the edge: the block was decoded, the table is right
	}
	if f.Truncated {
		cc.resetStream(st, http2.ErrCodeProtocol, &lostError{cause: errors.New("the upstream's answer head is over " + strconv.Itoa(maxHeaderList) + " bytes")})
		return 0, false
	}
	if st.gotHead {
		if !f.StreamEnded() || f.PseudoValue("status") != "" {
			cc.resetStream(st, http2.ErrCodeProtocol, &lostError{cause: errors.New("the upstream sent a HEADERS that is not a trailer")})
			return 0, false
		}
		for _, hf := range f.RegularFields() {
			if st.trailer == nil {
				st.trailer = make(http.Header, len(f.Fields))
			}
			k := canonicalKey(hf.Name)
			st.trailer[k] = append(st.trailer[k], hf.Value)
		}
		return cc.remoteEnd(st)
	}
	status, err := strconv.Atoi(f.PseudoValue("status"))
	if err != nil || status < 100 || status > 999 || status == 101 {
		cc.resetStream(st, http2.ErrCodeProtocol, &lostError{cause: errors.New("the upstream's answer has no valid :status")})
		return 0, false
	}
	if status < 200 {
		if st.interim++; st.interim > maxInterim || f.StreamEnded() {
			cc.resetStream(st, http2.ErrCodeProtocol, &lostError{cause: errors.New("the upstream sent 1xx answers only")})
		}
		return 0, false // an interim answer: the real one follows
	}
	regular := f.RegularFields()
	vals := make([]string, len(regular))
	header := make(http.Header, len(regular))
	cl := int64(-1)
	for i, hf := range regular {
		k := canonicalKey(hf.Name)
		vals[i] = hf.Value
		if prev, ok := header[k]; ok {
			header[k] = append(prev, hf.Value)
		} else {
			header[k] = vals[i : i+1 : i+1]
		}
		if k == "Content-Length" {
			if n, err := strconv.ParseInt(hf.Value, 10, 64); err == nil && n >= 0 {
				cl = n
			}
		}
	}
	if f.StreamEnded() {
		cl = 0
	}
	st.res = &http.Response{
		Status:        statusText(status),
		StatusCode:    status,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        header,
		ContentLength: cl,
		Body:          st,
		Request:       st.req,
	}
	st.gotHead = true
	st.cond.Broadcast()
	if f.StreamEnded() {
		return cc.remoteEnd(st)
	}
	return 0, false
}

func statusText(code int) string {
	if code == http.StatusOK {
		return "200 OK"
	}
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// remoteEnd is the answer's END_STREAM. A request body still being sent is cut short:
// the upstream has answered without it.
func (cc *clientConn) remoteEnd(st *clientStream) (http2.ErrCode, bool) {
	st.remoteDone = true
	st.cond.Broadcast()
	if !st.localDone {
		cc.queueReset(st.id, http2.ErrCodeCancel)
	}
	cc.closeStream(st, nil)
	return 0, false
}

// processData takes a DATA frame into its stream's buffer, within the window granted.
func (cc *clientConn) processData(f *http2.DataFrame) (http2.ErrCode, bool) {
	id := f.StreamID
	if id%2 == 0 || id >= cc.nextID {
		return http2.ErrCodeProtocol, true
	}
	size := int64(f.Length) // padding counts against the windows too
	if size > cc.recvWindow {
		return http2.ErrCodeFlowControl, true
	}
	cc.recvWindow -= size
	st := cc.streams[id]
	if st == nil || st.remoteDone {
		cc.connUnacked += size // a stream the edge reset: its window is the connection's again
		if cc.connUnacked >= connWindow/4 {
			cc.kick()
		}
		return 0, false
	}
	if !st.gotHead {
		cc.connUnacked += size
		cc.resetStream(st, http2.ErrCodeProtocol, &lostError{cause: errors.New("the upstream sent DATA before its head")})
		return 0, false
	}
	if size > st.recvWindow {
		cc.connUnacked += size
		cc.resetStream(st, http2.ErrCodeFlowControl, &lostError{cause: errors.New("the upstream sent past the stream's window")})
		return 0, false
	}
	st.recvWindow -= size
	data := f.Data()
	if pad := size - int64(len(data)); pad > 0 {
		cc.giveBack(st, pad) // padding is never read
	}
	if len(data) > 0 {
		// What was read is dropped before the buffer grows, so that it holds no more
		// than the window granted, however the edge reads it.
		if st.off > 0 && len(st.buf)+len(data) > cap(st.buf) {
			n := copy(st.buf, st.buf[st.off:])
			st.buf, st.off = st.buf[:n], 0
		}
		st.buf = append(st.buf, data...)
		st.cond.Broadcast()
	}
	if f.StreamEnded() {
		return cc.remoteEnd(st)
	}
	return 0, false
}

// Read is the answer's body's: what came, as it is read, each byte read given back to
// the upstream's windows. The stream is the body, which saves the answer an allocation.
func (st *clientStream) Read(p []byte) (int, error) {
	cc := st.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for st.off == len(st.buf) {
		switch {
		case st.released:
			return 0, errBodyClosed
		case st.remoteDone:
			st.res.Trailer = st.trailer
			return 0, io.EOF
		case st.err != nil:
			return 0, st.err
		}
		st.cond.Wait()
	}
	n := copy(p, st.buf[st.off:])
	st.off += n
	cc.giveBack(st, int64(n))
	return n, nil
}

// giveBack owes the upstream n bytes of the connection's and st's windows, sent once a
// quarter of either is owed; under cc.mu.
func (cc *clientConn) giveBack(st *clientStream, n int64) {
	cc.connUnacked += n
	if cc.connUnacked >= connWindow/4 {
		cc.kick()
	}
	if !st.remoteDone && !st.closed {
		st.unacked += n
		if st.unacked >= streamWindow/4 && !st.owed {
			st.owed = true
			cc.updates = append(cc.updates, st)
			cc.kick()
		}
	}
}

// Close ends the exchange: a stream still open is reset (CANCEL), and the request's
// place in the target's MaxInFlight is given back.
func (st *clientStream) Close() error {
	cc := st.cc
	cc.mu.Lock()
	if st.released {
		cc.mu.Unlock()
		return nil
	}
	st.released = true
	if !st.closed {
		cc.resetStream(st, http2.ErrCodeCancel, errBodyClosed)
	}
	cc.connUnacked += int64(len(st.buf) - st.off)
	st.buf, st.off = nil, 0
	if cc.connUnacked >= connWindow/4 {
		cc.kick()
	}
	cc.mu.Unlock()
	st.h.release()
	return nil
}

var _ io.ReadCloser = (*clientStream)(nil)
