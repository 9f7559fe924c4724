package upstreamh2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tollgate/edge/conn"
	"tollgate/edge/upstreamclient"
)

// The edge's own HTTP/2 client (Config.GoTransport false), in place of net/http's.
//
// Go's transport costs the edge, per request, a goroutine that writes it and waits on
// channels for its answer, its header fields lower-cased into new strings, and a select
// at each step; the gRPC calls the edge relays pay that on top of what nginx pays. This
// client frames HTTP/2 itself with x/net's Framer and HPACK coder, as the door's own
// server does (h2door), and a connection has two goroutines of its own, whatever its
// streams:
//   - the reader reads frames and keeps the protocol's state (streams, windows,
//     settings); an answer's head and DATA go to its stream, which the edge's goroutine
//     waits on (RoundTrip, then the body's Read) under the connection's lock;
//   - the writer sends what the streams and the reader queued, in one write per pass of
//     the scheduler.
//
// RoundTrip writes its request's HEADERS, and a body it can read without waiting (a
// unary call's, in memory or already come on the client's stream), into the queue
// itself; only a body still to come (a client's stream) gets a goroutine that sends it
// as it is read. The reader never waits on a stream: what it owes the upstream (SETTINGS
// and PING acknowledgements, WINDOW_UPDATE, RST_STREAM) is state the writer turns into
// frames, bounded, and an answer's unread body is bounded by the window granted to it.

// Bounds of the own client.
const (
	streamWindow   = 256 << 10 // an answer's body the edge has not read yet, at most
	connWindow     = 32 << 20  // all answers' on one connection
	initialWindow  = 65535     // RFC 9113 6.9.2
	maxPeerWindow  = 1<<31 - 1 //
	maxOut         = 64 << 10  // queued frames past which a request body's sender waits
	keepOut        = 16 << 10  // the most queue buffer an idle connection keeps
	maxControl     = 1000      // unsent PING acknowledgements and resets
	bodyChunk      = 16 << 10  // a request body's read
	noLimitStreams = 1000      // streams a connection takes when the upstream sets no limit
	pingAfter      = 30 * time.Second
	pingTimeout    = 5 * time.Second
	maxStreamID    = 1<<31 - 1
	maxRetries     = 3 // of a request the upstream did not process (GOAWAY, REFUSED_STREAM)
	maxInterim     = 8 // 1xx heads before an answer's
)

// maxHeaderList bounds the answer heads an upstream can make the edge decode: the door's
// bound on a request's, 16 KiB and HTTP/2's 32 bytes a field.
const maxHeaderList = 16<<10 + 4096

var (
	errConnLost    = errors.New("upstreamh2: connection to the upstream lost")
	errUnprocessed = errors.New("upstreamh2: the upstream did not process the stream (GOAWAY or REFUSED_STREAM)")
	errBodyClosed  = errors.New("upstreamh2: read on a closed answer body")
	errIdle        = errors.New("upstreamh2: connection closed idle")
	errPingTimeout = timeoutError("upstreamh2: the upstream did not answer a PING")
)

// timeoutError is a net.Error that timed out, so the edge sorts it as a timeout.
type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// lostError is a connection's failure as its streams see it: an upstream that hung up
// reads as one to the edge (io.ErrUnexpectedEOF), whatever the cause.
type lostError struct{ cause error }

func (e *lostError) Error() string {
	if e.cause == nil {
		return errConnLost.Error()
	}
	return errConnLost.Error() + ": " + e.cause.Error()
}

func (e *lostError) Unwrap() []error { return []error{errConnLost, io.ErrUnexpectedEOF, e.cause} }

// pool is the connections of one target.
type pool struct {
	cfg  Config
	host string
	h    *Transport

	mu      sync.Mutex
	conns   []*clientConn
	dialing *dialCall
}

type dialCall struct {
	done chan struct{}
	err  error
}

// get is a connection with room for one more stream, reserved for it: an open one, or
// a new one when every one is full (the upstream's SETTINGS_MAX_CONCURRENT_STREAMS) or
// going away. One dial at a time: the requests that wait for it share it.
func (p *pool) get(ctx context.Context) (*clientConn, error) {
	for {
		p.mu.Lock()
		live := p.conns[:0]
		var got *clientConn
		for _, cc := range p.conns {
			if cc.dead.Load() {
				continue
			}
			live = append(live, cc)
			if got == nil && cc.reserve() {
				got = cc
			}
		}
		clear(p.conns[len(live):])
		p.conns = live
		if got != nil {
			p.mu.Unlock()
			return got, nil
		}
		d := p.dialing
		if d == nil {
			d = &dialCall{done: make(chan struct{})}
			p.dialing = d
			p.mu.Unlock()
			cc, err := p.dial(ctx)
			p.mu.Lock()
			p.dialing = nil
			if err == nil {
				p.conns = append(p.conns, cc)
			}
			d.err = err
			p.mu.Unlock()
			close(d.done)
			if err != nil {
				return nil, err
			}
			continue
		}
		p.mu.Unlock()
		select {
		case <-d.done:
			if d.err != nil {
				return nil, d.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// closeIdle closes the connections with no stream.
func (p *pool) closeIdle() {
	p.mu.Lock()
	conns := append([]*clientConn(nil), p.conns...)
	p.mu.Unlock()
	for _, cc := range conns {
		cc.closeIfIdle()
	}
}

// dial connects to the target, through the edge's dialer, and speaks the preface.
func (p *pool) dial(ctx context.Context) (*clientConn, error) {
	timeout := dialTimeout(ctx, p.cfg.ConnectTimeout)
	c, err := p.cfg.Dial(p.cfg.Addr, timeout)
	if err != nil {
		return nil, err
	}
	if p.cfg.TLS {
		tc := tls.Client(c, &tls.Config{ServerName: p.host, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
		hctx, cancel := context.WithTimeout(ctx, p.cfg.ConnectTimeout)
		err := tc.HandshakeContext(hctx)
		timedOut := hctx.Err() != nil
		cancel()
		if err != nil {
			_ = c.Close()
			return nil, &upstreamclient.DialError{Addr: p.cfg.Addr, TimedOut: timedOut, Err: err}
		}
		if proto := tc.ConnectionState().NegotiatedProtocol; proto != "h2" {
			_ = tc.Close()
			return nil, &upstreamclient.DialError{Addr: p.cfg.Addr, Err: errors.New("the upstream does not speak HTTP/2 (ALPN chose " + proto + ")")}
		}
		c = tc
	}
	cc, err := newClientConn(p, c, timeout)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return cc, nil
}

// clientConn is one HTTP/2 connection to the target.
type clientConn struct {
	p    *pool
	nc   net.Conn
	fr   *http2.Framer // the reader's
	dead atomic.Bool   // takes no new stream: failed, closing or gone away
	seen atomic.Bool   // a frame came since the liveness timer last looked

	mu    sync.Mutex
	room  sync.Cond // broadcast when the queue is sent, the connection's window grows, or it fails
	wake  chan struct{}
	out   []byte // frames queued, not sent yet
	spare []byte
	wfr   *http2.Framer // writes into out
	enc   *hpack.Encoder
	hbuf  bytes.Buffer

	// Owed to the upstream, sent by the writer.
	ackSettings bool
	pings       [][8]byte
	resets      []http2.RSTStreamFrame
	connUnacked int64           // answer bytes read, not yet returned to the upstream
	updates     []*clientStream // streams owed a WINDOW_UPDATE
	goAway      bool            // send GOAWAY (NO_ERROR or failCode) before closing
	failCode    http2.ErrCode
	closeAfter  bool // close the connection once the queue is sent

	streams    map[uint32]*clientStream
	nextID     uint32
	active     int    // streams reserved or open
	maxStreams uint32 // the upstream's SETTINGS_MAX_CONCURRENT_STREAMS
	sendWindow int64  // the connection's, for DATA to the upstream
	recvWindow int64  // what the upstream may send the connection
	peerWindow int64  // SETTINGS_INITIAL_WINDOW_SIZE of the upstream
	peerFrame  int    // SETTINGS_MAX_FRAME_SIZE of the upstream
	err        error  // set once: the connection failed or is closing
	goingAway  bool   // the upstream sent GOAWAY: no new stream
	idleSince  int64  // conn.MonoNow when its last stream ended; 0: busy
	idleArmed  bool
	pingOut    bool
	idleTimer  *time.Timer
	liveTimer  *time.Timer
}

// newClientConn speaks the preface on c and reads the upstream's SETTINGS before the
// connection takes a stream, so that its stream limit and windows are known: one
// round trip per connection, and no stream refused for going past a limit not yet read.
func newClientConn(p *pool, c net.Conn, timeout time.Duration) (*clientConn, error) {
	cc := &clientConn{
		p: p, nc: c,
		wake:       make(chan struct{}, 1),
		streams:    map[uint32]*clientStream{},
		nextID:     1,
		maxStreams: noLimitStreams,
		sendWindow: initialWindow,
		recvWindow: connWindow,
		peerWindow: initialWindow,
		peerFrame:  16 << 10,
	}
	cc.room.L = &cc.mu
	cc.wfr = http2.NewFramer(outWriter{cc}, nil)
	cc.enc = hpack.NewEncoder(&cc.hbuf)
	// The requests' own fields (X-Request-Id, traceparent) would enter the table and
	// evict another each time: with HeaderTable 0 none is kept.
	cc.enc.SetMaxDynamicTableSizeLimit(p.cfg.HeaderTable)

	cc.out = append(cc.out, http2.ClientPreface...)
	_ = cc.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderList},
	)
	_ = cc.wfr.WriteWindowUpdate(0, connWindow-initialWindow)
	if timeout <= 0 {
		timeout = writeStall // an upstream that never answers the preface holds no dial for ever
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(cc.out); err != nil {
		return nil, &lostError{cause: err}
	}
	cc.out = cc.out[:0]

	br := bufio.NewReaderSize(c, 16<<10)
	cc.fr = http2.NewFramer(nil, br)
	cc.fr.SetReuseFrames()
	cc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cc.fr.MaxHeaderListSize = maxHeaderList
	f, err := cc.fr.ReadFrame()
	if err != nil {
		return nil, &lostError{cause: fmt.Errorf("the upstream's HTTP/2 preface: %w", err)}
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return nil, &lostError{cause: errors.New("the upstream's HTTP/2 preface is not SETTINGS")}
	}
	cc.mu.Lock()
	code, fatal := cc.settings(sf)
	cc.mu.Unlock()
	if fatal {
		return nil, &lostError{cause: http2.ConnectionError(code)}
	}
	_ = c.SetDeadline(time.Time{})
	cc.liveTimer = time.AfterFunc(pingAfter, cc.checkLive)
	go cc.writeLoop()
	go cc.readLoop()
	return cc, nil
}

// outWriter appends to the connection's queue, under its lock.
type outWriter struct{ cc *clientConn }

func (w outWriter) Write(p []byte) (int, error) {
	w.cc.out = append(w.cc.out, p...)
	return len(p), nil
}

// reserve takes room for one stream, or reports there is none.
func (cc *clientConn) reserve() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil || cc.goingAway || cc.active >= int(cc.maxStreams) || cc.nextID+2*uint32(cc.active) > maxStreamID {
		return false
	}
	cc.active++
	cc.idleSince = 0
	return true
}

// unreserve gives back a reservation no stream was opened for; under cc.mu.
func (cc *clientConn) unreserve() {
	cc.active--
	cc.maybeIdle()
}

// maybeIdle notes a connection whose last stream ended: it closes after the idle
// timeout, or now if the upstream is sending it away; under cc.mu.
func (cc *clientConn) maybeIdle() {
	if cc.active > 0 || cc.err != nil {
		return
	}
	if cc.goingAway {
		cc.failLocked(errConnLost, http2.ErrCodeNo, true)
		return
	}
	cc.idleSince = conn.MonoNow()
	if idle := cc.p.cfg.IdleTimeout; idle > 0 && !cc.idleArmed {
		cc.idleArmed = true
		if cc.idleTimer == nil {
			cc.idleTimer = time.AfterFunc(idle, cc.checkIdle)
		} else {
			cc.idleTimer.Reset(idle)
		}
	}
}

// checkIdle closes the connection if it has been idle for the idle timeout. The timer
// is armed once an idle spell, not at every stream's end.
func (cc *clientConn) checkIdle() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.idleArmed = false
	if cc.active > 0 || cc.idleSince == 0 || cc.err != nil {
		return
	}
	left := cc.p.cfg.IdleTimeout - time.Duration(conn.MonoNow()-cc.idleSince)
	if left <= 0 {
		cc.failLocked(errIdle, http2.ErrCodeNo, true)
		return
	}
	cc.idleArmed = true
	cc.idleTimer.Reset(left)
}

func (cc *clientConn) closeIfIdle() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.active == 0 && cc.err == nil {
		cc.failLocked(errIdle, http2.ErrCodeNo, true)
	}
}

// checkLive runs every pingAfter: a connection that read nothing since is sent a PING,
// and one that reads nothing pingTimeout after it fails, so that a dead upstream is
// found by the PING, not by each request waiting on it for its whole timeout.
func (cc *clientConn) checkLive() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return
	}
	switch {
	case cc.seen.Swap(false):
		cc.pingOut = false
		cc.liveTimer.Reset(pingAfter)
	case cc.pingOut:
		cc.failLocked(&lostError{cause: errPingTimeout}, http2.ErrCodeNo, false)
	default:
		cc.pingOut = true
		_ = cc.wfr.WritePing(false, [8]byte{'t', 'o', 'l', 'l', 'g', 'a', 't', 'e'})
		cc.kick()
		cc.liveTimer.Reset(pingTimeout)
	}
}

// kick wakes the writer for what was queued.
func (cc *clientConn) kick() {
	select {
	case cc.wake <- struct{}{}:
	default:
	}
}

// fail ends the connection with err for its streams: GOAWAY with code first when tell.
func (cc *clientConn) fail(err error, code http2.ErrCode, tell bool) {
	cc.mu.Lock()
	cc.failLocked(err, code, tell)
	cc.mu.Unlock()
}

func (cc *clientConn) failLocked(err error, code http2.ErrCode, tell bool) {
	if cc.err != nil {
		return
	}
	cc.err = err
	cc.dead.Store(true)
	if tell {
		cc.goAway, cc.failCode = true, code
	}
	cc.closeAfter = true
	for _, st := range cc.streams {
		cc.closeStream(st, err)
	}
	if cc.idleTimer != nil {
		cc.idleTimer.Stop()
	}
	if cc.liveTimer != nil {
		cc.liveTimer.Stop()
	}
	cc.room.Broadcast()
	cc.kick()
}

// readLoop is the reader: frames until the connection ends.
func (cc *clientConn) readLoop() {
	for {
		f, err := cc.fr.ReadFrame()
		if err != nil {
			if !cc.readFailed(err) {
				return
			}
			continue
		}
		cc.seen.Store(true)
		cc.mu.Lock()
		code, fatal := cc.process(f)
		cc.mu.Unlock()
		if fatal {
			cc.fail(&lostError{cause: http2.ConnectionError(code)}, code, true)
			return
		}
	}
}

// readFailed handles ReadFrame's error and reports whether reading goes on.
func (cc *clientConn) readFailed(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		cc.mu.Lock()
		if st := cc.streams[se.StreamID]; st != nil {
			cc.resetStream(st, se.Code, se)
		} else if se.StreamID >= cc.nextID {
			cc.mu.Unlock()
			cc.fail(&lostError{cause: se}, http2.ErrCodeProtocol, true)
			return false
		}
		cc.mu.Unlock()
		return true
	case errors.As(err, &ce):
		cc.fail(&lostError{cause: ce}, http2.ErrCode(ce), true)
	case errors.Is(err, http2.ErrFrameTooLarge):
		cc.fail(&lostError{cause: err}, http2.ErrCodeFrameSize, true)
	default:
		cc.fail(&lostError{cause: err}, http2.ErrCodeNo, false)
	}
	_ = cc.nc.Close() // the writer may be waiting on a write that will not end
	return false
}

// process handles one frame under cc.mu; fatal: the connection fails with code.
func (cc *clientConn) process(f http2.Frame) (code http2.ErrCode, fatal bool) {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return cc.processHeaders(f)
	case *http2.DataFrame:
		return cc.processData(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return 0, false
		}
		return cc.settings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return 0, false
		}
		if len(cc.pings)+len(cc.resets) >= maxControl {
			return http2.ErrCodeEnhanceYourCalm, true
		}
		cc.pings = append(cc.pings, f.Data)
		cc.kick()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			if cc.sendWindow+int64(f.Increment) > maxPeerWindow {
				return http2.ErrCodeFlowControl, true
			}
			cc.sendWindow += int64(f.Increment)
			cc.room.Broadcast()
			return 0, false
		}
		st := cc.streams[f.StreamID]
		if st == nil {
			if f.StreamID >= cc.nextID {
				return http2.ErrCodeProtocol, true // an idle stream
			}
			return 0, false // a closed one: the update crossed its end
		}
		if st.sendWindow+int64(f.Increment) > maxPeerWindow {
			cc.resetStream(st, http2.ErrCodeFlowControl, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeFlowControl})
			return 0, false
		}
		st.sendWindow += int64(f.Increment)
		st.cond.Broadcast()
	case *http2.RSTStreamFrame:
		if f.StreamID >= cc.nextID {
			return http2.ErrCodeProtocol, true
		}
		if st := cc.streams[f.StreamID]; st != nil {
			var err error = http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode, Cause: errors.New("reset by the upstream")}
			if f.ErrCode == http2.ErrCodeRefusedStream && !st.gotHead {
				err = errUnprocessed // RFC 9113 8.7: safe to send again
			}
			cc.closeStream(st, err)
		}
	case *http2.GoAwayFrame:
		// The streams past the last one the upstream will process can go elsewhere; the
		// others end as they would, and the connection closes when they have.
		cc.goingAway = true
		cc.dead.Store(true)
		for id, st := range cc.streams {
			if id > f.LastStreamID {
				cc.closeStream(st, errUnprocessed)
			}
		}
		cc.maybeIdle()
	case *http2.PushPromiseFrame:
		return http2.ErrCodeProtocol, true // SETTINGS_ENABLE_PUSH is 0
	case *http2.ContinuationFrame:
		return http2.ErrCodeProtocol, true // the Framer joins the valid ones to HEADERS
	}
	return 0, false
}

// settings applies the upstream's SETTINGS and owes it the acknowledgement.
func (cc *clientConn) settings(f *http2.SettingsFrame) (http2.ErrCode, bool) {
	window := int64(-1)
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			window = int64(s.Val) // applied once, by the last one
		case http2.SettingMaxFrameSize:
			cc.peerFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			cc.enc.SetMaxDynamicTableSize(s.Val)
		case http2.SettingMaxConcurrentStreams:
			cc.maxStreams = s.Val
			cc.room.Broadcast()
		}
		return nil
	})
	if err == nil && window >= 0 {
		delta := window - cc.peerWindow
		cc.peerWindow = window
		for _, st := range cc.streams {
			if st.sendWindow+delta > maxPeerWindow {
				return http2.ErrCodeFlowControl, true
			}
			st.sendWindow += delta
			st.cond.Broadcast()
		}
	}
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return http2.ErrCode(ce), true
		}
		return http2.ErrCodeProtocol, true
	}
	// One acknowledgement owed is a flag, not a queue.
	cc.ackSettings = true
	cc.kick()
	return 0, false
}

// queueReset owes the upstream RST_STREAM for id.
func (cc *clientConn) queueReset(id uint32, code http2.ErrCode) {
	if len(cc.pings)+len(cc.resets) >= maxControl {
		cc.failLocked(&lostError{cause: http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)}, http2.ErrCodeEnhanceYourCalm, true)
		return
	}
	cc.resets = append(cc.resets, http2.RSTStreamFrame{FrameHeader: http2.FrameHeader{StreamID: id}, ErrCode: code})
	cc.kick()
}

// resetStream ends st with RST_STREAM code to the upstream, and err for its reader.
func (cc *clientConn) resetStream(st *clientStream, code http2.ErrCode, err error) {
	if st.closed {
		return
	}
	cc.queueReset(st.id, code)
	cc.closeStream(st, err)
}

// writeLoop is the writer: it sends the queue, with what is owed to the upstream, in
// one write each time it is woken, after letting the streams ready by then add theirs.
func (cc *clientConn) writeLoop() {
	for range cc.wake {
		// The streams ready by now, and those the reader's last frames woke, add
		// theirs first: one write for them all.
		runtime.Gosched()
		cc.mu.Lock()
		cc.owed()
		buf := cc.out
		cc.out = cc.spare[:0]
		closing := cc.closeAfter
		cc.mu.Unlock()
		var err error
		if len(buf) > 0 {
			_ = cc.nc.SetWriteDeadline(time.Now().Add(writeStall))
			_, err = cc.nc.Write(buf)
		}
		cc.mu.Lock()
		if cap(buf) <= keepOut {
			cc.spare = buf[:0]
		} else {
			cc.spare = nil
		}
		if err != nil {
			cc.failLocked(&lostError{cause: err}, http2.ErrCodeNo, false)
		}
		more := len(cc.out) > 0
		cc.room.Broadcast()
		cc.mu.Unlock()
		if err != nil || closing && !more {
			_ = cc.nc.Close()
			return
		}
		if more {
			cc.kick()
		}
	}
}

// owed queues the frames the reader owes the upstream; under cc.mu.
func (cc *clientConn) owed() {
	if cc.ackSettings {
		_ = cc.wfr.WriteSettingsAck()
		cc.ackSettings = false
	}
	for _, p := range cc.pings {
		_ = cc.wfr.WritePing(true, p)
	}
	cc.pings = cc.pings[:0]
	for _, r := range cc.resets {
		_ = cc.wfr.WriteRSTStream(r.StreamID, r.ErrCode)
	}
	cc.resets = cc.resets[:0]
	for _, st := range cc.updates {
		st.owed = false
		if !st.closed && !st.remoteDone && st.unacked > 0 {
			_ = cc.wfr.WriteWindowUpdate(st.id, uint32(st.unacked))
			st.recvWindow += st.unacked
		}
		st.unacked = 0
	}
	clear(cc.updates)
	cc.updates = cc.updates[:0]
	if cc.connUnacked > 0 && (cc.connUnacked >= connWindow/4 || cc.recvWindow < connWindow/2) {
		_ = cc.wfr.WriteWindowUpdate(0, uint32(cc.connUnacked))
		cc.recvWindow += cc.connUnacked
		cc.connUnacked = 0
	}
	if cc.goAway {
		_ = cc.wfr.WriteGoAway(0, cc.failCode, nil)
		cc.goAway = false
	}
}
