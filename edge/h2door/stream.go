package h2door

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stream is one stream of the door's own server (door.go): the protocol's state of it,
// kept by the reader under the connection's lock, its request body's buffer, and the
// context.Context of the call (Stream.Context), which ends when the peer resets it.
type stream struct {
	sc   *serverConn
	id   uint32
	cond sync.Cond // signalled when body arrives or the stream's window grows; sc.mu

	// The request, as the HEADERS gave it (the handler reads them once it runs).
	fields    []hpack.HeaderField
	method    string
	path      string
	authority string
	hasBody   bool
	truncated bool // its header list was over the bound
	declared  int64

	// Under sc.mu.
	remoteDone bool // END_STREAM came
	localDone  bool // END_STREAM went
	closed     bool // no longer open on the protocol's side
	body       []byte
	off        int
	bodyErr    error // io.EOF once remoteDone, or why the body ends early
	received   int64
	recvWindow int64
	unacked    int64 // body bytes read, not yet returned to the peer
	owed       bool  // in sc.updates
	sendWindow int64
	ended      bool               // the context's end came
	ctx        context.Context    // made when first asked for (Context)
	ctxCancel  context.CancelFunc //
	lent       bool               // the context or body was handed out
	readTimer  *time.Timer
	waitTimer  *time.Timer // bounds a wait of the answer's for the peer (wait)
}

var (
	errStreamReset  = errors.New("h2door: stream reset")
	errBodyTimeout  = errors.New("h2door: request body not read within the read timeout")
	errStreamClosed = errors.New("h2door: stream closed")
)

// processHeaders opens a stream, or ends one's body with trailer fields.
func (sc *serverConn) processHeaders(f *http2.MetaHeadersFrame) (http2.ErrCode, bool) {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ErrCodeProtocol, true
	}
	if st := sc.streams[id]; st != nil {
		// Trailer fields: they end the body, and carry no pseudo-header.
		if st.remoteDone {
			sc.resetStream(st, http2.ErrCodeStreamClosed)
			return 0, false
		}
		if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
			sc.resetStream(st, http2.ErrCodeProtocol)
			return 0, false
		}
		return sc.endBody(st)
	}
	if id <= sc.maxID {
		return http2.ErrCodeStreamClosed, true // a stream that was closed
	}
	sc.maxID = id
	if sc.goingAway {
		return 0, false // after GOAWAY: ignored (RFC 9113 6.8)
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		sc.queueReset(id, http2.ErrCodeProtocol)
		return 0, false
	}
	cfg := &sc.s.cfg
	if uint32(len(sc.streams)) >= cfg.MaxStreams {
		sc.queueReset(id, http2.ErrCodeRefusedStream)
		return 0, false
	}
	st := newStream(sc, id)
	st.truncated = f.Truncated
	if !st.readFields(f) {
		sc.queueReset(id, http2.ErrCodeProtocol)
		putStream(st)
		return 0, false
	}
	st.remoteDone = f.StreamEnded()
	if st.remoteDone {
		st.bodyErr = io.EOF
		if st.declared > 0 {
			sc.queueReset(id, http2.ErrCodeProtocol)
			putStream(st)
			return 0, false
		}
	}
	st.hasBody = !st.remoteDone
	sc.streams[id] = st
	sc.idle()
	if st.hasBody && cfg.ReadTimeout > 0 {
		st.readTimer = time.AfterFunc(cfg.ReadTimeout, st.readTimedOut)
	}
	if sc.running < int(cfg.MaxStreams) {
		sc.running++
		sc.start(st)
		return 0, false
	}
	if len(sc.queued) >= maxQueuedRatio*int(cfg.MaxStreams) {
		return http2.ErrCodeEnhanceYourCalm, true
	}
	sc.queued = append(sc.queued, st)
	return 0, false
}

// readFields takes the request's pseudo-header fields and checks what RFC 9113 8.2 and
// 8.3 require of a request; false: the stream is malformed.
func (st *stream) readFields(f *http2.MetaHeadersFrame) bool {
	st.declared = -1
	for _, hf := range f.Fields {
		if hf.IsPseudo() {
			switch hf.Name {
			case ":method":
				st.method = hf.Value
			case ":path":
				st.path = hf.Value
			case ":authority":
				st.authority = hf.Value
			case ":scheme":
			default:
				return false // :protocol (extended CONNECT) is not served; :status is no request's
			}
			continue
		}
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return false
		case "te":
			if hf.Value != "trailers" {
				return false
			}
		case "content-length":
			n, err := strconv.ParseInt(hf.Value, 10, 64)
			if err != nil || n < 0 || st.declared >= 0 && st.declared != n {
				return false
			}
			st.declared = n
		}
	}
	st.fields = append(st.fields[:0], f.RegularFields()...)
	if st.method == "" {
		return false
	}
	if st.method == "CONNECT" {
		return true // refused with the envelope by the handler
	}
	return st.path != "" && f.PseudoValue("scheme") != ""
}

// processData takes a DATA frame into its stream's body.
func (sc *serverConn) processData(f *http2.DataFrame) (http2.ErrCode, bool) {
	n := int64(f.Length) // padding included: flow control counts it
	if n > sc.recvWindow {
		return http2.ErrCodeFlowControl, true
	}
	sc.recvWindow -= n
	st := sc.streams[f.StreamID]
	if st == nil || st.remoteDone {
		if f.StreamID > sc.maxID {
			return http2.ErrCodeProtocol, true // an idle stream
		}
		sc.connUnacked += n
		sc.maybeUpdateConn()
		if st != nil {
			sc.resetStream(st, http2.ErrCodeStreamClosed)
		} else {
			sc.queueReset(f.StreamID, http2.ErrCodeStreamClosed)
		}
		return 0, false
	}
	if n > st.recvWindow {
		sc.connUnacked += n
		sc.resetStream(st, http2.ErrCodeFlowControl)
		return 0, false
	}
	st.recvWindow -= n
	data := f.Data()
	if pad := n - int64(len(data)); pad > 0 {
		sc.connUnacked += pad
		st.unacked += pad
	}
	st.received += int64(len(data))
	if st.declared >= 0 && st.received > st.declared {
		sc.connUnacked += int64(len(data))
		sc.resetStream(st, http2.ErrCodeProtocol)
		return 0, false
	}
	if len(data) > 0 {
		if st.off > 0 && st.off == len(st.body) {
			st.body, st.off = st.body[:0], 0
		}
		st.body = append(st.body, data...)
		st.cond.Signal()
	}
	if f.StreamEnded() {
		return sc.endBody(st)
	}
	return 0, false
}

// endBody marks st's request body whole.
func (sc *serverConn) endBody(st *stream) (http2.ErrCode, bool) {
	if st.declared >= 0 && st.received != st.declared {
		sc.resetStream(st, http2.ErrCodeProtocol)
		return 0, false
	}
	st.remoteDone = true
	st.bodyErr = io.EOF
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	st.cond.Broadcast()
	if st.localDone {
		sc.closeStream(st, nil)
	}
	return 0, false
}

// readTimedOut resets a stream whose body did not all come within the read timeout.
func (st *stream) readTimedOut() {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !st.remoteDone && !st.closed {
		sc.queueReset(st.id, http2.ErrCodeCancel)
		sc.closeStream(st, errBodyTimeout)
	}
}

var streams = sync.Pool{New: func() any { return new(stream) }}

func newStream(sc *serverConn, id uint32) *stream {
	st := streams.Get().(*stream)
	st.sc, st.id = sc, id
	st.cond.L = &sc.mu
	st.sendWindow = sc.peerWindow
	st.recvWindow = StreamWindow
	return st
}

// putStream gives st back for another stream. The caller knows that nothing holds st:
// not its connection, not a timer, not whoever was lent its context or body.
func putStream(st *stream) {
	fields, body := st.fields[:0], st.body[:0]
	if cap(body) > 64<<10 {
		body = nil
	}
	clear(st.fields[:cap(st.fields)])
	*st = stream{fields: fields, body: body}
	streams.Put(st)
}

func (st *stream) ran() {}

// start runs st's handler on a worker; under sc.mu.
func (sc *serverConn) start(st *stream) {
	if w := sc.s.h.workers; w != nil {
		w.start(st)
	} else {
		go st.run()
	}
}

// handlerDone is the end of st's handler: the next stream waiting gets its turn, and a
// stream whose answer is whole but whose body still comes is reset (NO_ERROR: the peer
// need not send the rest).
func (sc *serverConn) handlerDone(st *stream, aborted bool) {
	sc.mu.Lock()
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	// Another stream may reuse st only if nothing can still reach it: a WINDOW_UPDATE
	// owed, a read timer that may have fired, a context or body lent to the chain
	// (an HTTP/2 upstream's transport may read the body after the answer).
	reuse := !st.owed && st.readTimer == nil && st.waitTimer == nil && !st.lent
	switch {
	case st.closed:
	case aborted || !st.localDone:
		sc.resetStream(st, http2.ErrCodeInternal)
	case !st.remoteDone:
		sc.resetStream(st, http2.ErrCodeNo)
	default:
		sc.closeStream(st, nil)
	}
	sc.running--
	for len(sc.queued) > 0 && sc.running < int(sc.s.cfg.MaxStreams) {
		next := sc.queued[0]
		copy(sc.queued, sc.queued[1:])
		sc.queued[len(sc.queued)-1] = nil
		sc.queued = sc.queued[:len(sc.queued)-1]
		if next.closed {
			continue // reset while it waited: nothing to answer
		}
		sc.running++
		sc.start(next)
	}
	sc.idle()
	sc.mu.Unlock()
	if reuse {
		putStream(st)
	}
}

// Read is the request body's: what came, as it is read, each byte read returned to the
// peer's windows.
func (st *stream) Read(p []byte) (int, error) {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for st.off == len(st.body) {
		if st.bodyErr != nil {
			return 0, st.bodyErr
		}
		st.cond.Wait()
	}
	return st.take(p), nil
}

// ReadNow is Read without the wait: what came so far, 0 and no error when the rest is
// still to come. A proxy sends a body that came whole with its head, without a
// goroutine to wait for the rest.
func (st *stream) ReadNow(p []byte) (int, error) {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if st.off == len(st.body) {
		return 0, st.bodyErr
	}
	return st.take(p), nil
}

// take copies what came into p and gives it back to the peer's windows; under sc.mu.
func (st *stream) take(p []byte) int {
	sc := st.sc
	n := copy(p, st.body[st.off:])
	st.off += n
	sc.connUnacked += int64(n)
	sc.maybeUpdateConn()
	if !st.remoteDone {
		st.unacked += int64(n)
		if st.unacked >= StreamWindow/4 && !st.owed {
			st.owed = true
			sc.updates = append(sc.updates, st)
			sc.kick()
		}
	}
	return n
}

// Context is the stream's: it ends when the peer resets the stream or the connection
// ends. It is made when first asked for: most calls never ask.
func (st *stream) Context() context.Context {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if st.ctx == nil {
		st.lent = true
		st.ctx, st.ctxCancel = context.WithCancel(context.Background())
		if st.ended {
			st.ctxCancel()
		}
	}
	return st.ctx
}

func (st *stream) Body() io.Reader {
	if !st.hasBody {
		return nil
	}
	st.sc.mu.Lock()
	st.lent = true
	st.sc.mu.Unlock()
	return st
}

// cancel ends the context; under sc.mu.
func (st *stream) cancel() {
	if st.ended {
		return
	}
	st.ended = true
	if st.ctxCancel != nil {
		st.ctxCancel()
	}
}

// writeErr is why nothing more can be written on st; under sc.mu.
func (st *stream) writeErr() error {
	switch {
	case st.sc.err != nil:
		return st.sc.err
	case st.localDone:
		return errStreamClosed
	case st.closed:
		return errStreamReset
	}
	return nil
}

// writeBlock queues a header block (the head, or trailer fields) as HEADERS and
// CONTINUATION frames of at most the peer's frame size; sc.hbuf holds it; under sc.mu.
func (st *stream) writeBlock(end bool) error {
	sc := st.sc
	for len(sc.out) >= maxOut {
		if err := st.writeErr(); err != nil {
			return err
		}
		st.wait(&sc.room)
	}
	if err := st.writeErr(); err != nil {
		return err
	}
	blk := sc.hbuf.Bytes()
	n := min(len(blk), sc.peerFrame)
	_ = sc.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: blk[:n], EndStream: end, EndHeaders: n == len(blk)})
	for blk = blk[n:]; len(blk) > 0; blk = blk[n:] {
		n = min(len(blk), sc.peerFrame)
		_ = sc.wfr.WriteContinuation(st.id, n == len(blk), blk[:n])
	}
	if end {
		st.localDone = true
		if st.remoteDone {
			sc.closeStream(st, nil)
		}
	}
	sc.kick()
	return nil
}

// writeData queues p as DATA frames within the peer's windows and frame size, waiting
// for the windows as needed; end: the last ends the stream.
func (st *stream) writeData(p []byte, end bool) error {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for {
		if err := st.writeErr(); err != nil {
			return err
		}
		if len(sc.out) >= maxOut {
			st.wait(&sc.room)
			continue
		}
		n := int64(0)
		if len(p) > 0 {
			n = min(int64(len(p)), int64(sc.peerFrame), st.sendWindow, sc.sendWindow)
		}
		if len(p) > 0 && n <= 0 {
			if st.sendWindow <= 0 {
				st.wait(&st.cond)
			} else {
				st.wait(&sc.room)
			}
			continue
		}
		last := end && n == int64(len(p))
		_ = sc.wfr.WriteData(st.id, last, p[:n])
		st.sendWindow -= n
		sc.sendWindow -= n
		p = p[n:]
		sc.kick()
		if last {
			st.localDone = true
			if st.remoteDone {
				sc.closeStream(st, nil)
			}
			return nil
		}
		if len(p) == 0 {
			return nil
		}
	}
}

// wait waits on c (under sc.mu) for the peer to read or open its windows. A wait longer
// than the write timeout resets the stream (CANCEL), as a write to an HTTP/1.1 client
// that makes no progress fails: a peer that never opens its window holds no handler for
// ever.
func (st *stream) wait(c *sync.Cond) {
	t := st.sc.s.cfg.WriteTimeout
	if t <= 0 {
		c.Wait()
		return
	}
	if st.waitTimer == nil {
		st.waitTimer = time.AfterFunc(t, st.writeTimedOut)
	} else {
		st.waitTimer.Reset(t)
	}
	c.Wait()
	st.waitTimer.Stop()
}

func (st *stream) writeTimedOut() {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !st.closed && !st.localDone {
		sc.resetStream(st, http2.ErrCodeCancel)
		sc.room.Broadcast() // the stream may wait for the connection's window or queue
	}
}
