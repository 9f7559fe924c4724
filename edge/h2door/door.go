package h2door

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The door's own HTTP/2 server (Server), in place of Go's net/http one.
//
// Go's server costs the edge, per stream and per answer, what nginx does not pay: a
// goroutine started for every stream, another for every flush (whose TLS write grows its
// stack on each), every frame handed between goroutines over channels to a serve loop,
// and the request and answer turned into net/http's header maps. This server frames
// HTTP/2 itself with x/net's Framer and HPACK coder, and a connection has two goroutines
// of its own, whatever its streams:
//   - the reader reads frames and keeps the protocol's state (streams, windows,
//     settings); a stream's HEADERS start its run through the chain on a pooled worker
//     (workers.go), and its DATA go to the stream's body buffer;
//   - the writer sends what the streams' workers and the reader queued, in one write per
//     pass of the scheduler, as conn.BatchWrites does for Go's server; over TLS it writes
//     the batch through the TLS layer at once, so the records of many answers are one.
//
// A worker writes its stream's answer into the connection's queue itself (HEADERS,
// DATA within the peer's windows, trailers), under the connection's lock, which also
// orders the HPACK blocks as the encoder made them. The reader never waits for the
// writer: what it owes the peer (SETTINGS and PING acknowledgements, WINDOW_UPDATE,
// RST_STREAM, GOAWAY) is kept as state the writer turns into frames, bounded, so that a
// peer that sends without reading costs a bounded amount of memory.
//
// The protections Go's server has are kept: MAX_CONCURRENT_STREAMS, a header list
// bound (over it: the chain refuses the request with its envelope, as on HTTP/1.1, and
// the connection goes on), the Framer's bounds on CONTINUATION and
// HPACK, a limit on the streams waiting for a worker (rapid reset: a reset stream's
// run is not cut short, so the handlers of reset streams count until they end, and a
// queue past four times the stream limit is answered GOAWAY ENHANCE_YOUR_CALM), and on
// unsent control frames (PING floods).

// Server serves HTTP/2 connections through the chain.
type Server struct {
	cfg Config
	h   *handler

	mu      sync.Mutex
	conns   map[*serverConn]struct{}
	closing bool
}

// NewOwnServer is the door's own HTTP/2 server of chain (TOLLGATE_EDGE_HTTP2_OWN_SERVER).
func NewOwnServer(cfg Config, chain Chain) *Server {
	h := NewHandler(cfg, chain).(*handler)
	return &Server{cfg: cfg, h: h, conns: map[*serverConn]struct{}{}}
}

// Serve serves the connections l accepts until l fails or is closed.
func (s *Server) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return http.ErrServerClosed
			}
			return err
		}
		go s.ServeConn(c)
	}
}

// Shutdown sends every connection GOAWAY (NO_ERROR), lets the streams in flight end,
// and returns when every connection is closed, or closes them when ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*serverConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	for _, sc := range conns {
		sc.shutdown()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			s.mu.Lock()
			for sc := range s.conns {
				_ = sc.nc.Close()
			}
			s.mu.Unlock()
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Bounds on what a connection keeps for a peer.
const (
	maxOut         = 64 << 10 // queued frames past which a stream's writer waits
	keepOut        = 16 << 10 // the most queue buffer an idle connection keeps
	maxControl     = 1000     // unsent PING acknowledgements and resets
	maxQueuedRatio = 4        // streams waiting for a handler, per MAX_CONCURRENT_STREAMS
	maxPeerWindow  = 1<<31 - 1
	initialWindow  = 65535 // RFC 9113 6.9.2
)

// headerListSize is the SETTINGS_MAX_HEADER_LIST_SIZE for a HeaderBytes bound: HTTP/2
// counts 32 bytes a field on top of its name and value, where HTTP/1.1's head counts
// ": " and CRLF, so the list may be a little larger than the head it becomes.
func headerListSize(headerBytes int) uint32 { return uint32(headerBytes + 4096) }

// serverConn is one HTTP/2 connection.
type serverConn struct {
	s     *Server
	nc    net.Conn
	sconn net.Conn // what a stream's RequestCtx holds (streamConn)
	fr    *http2.Framer

	mu    sync.Mutex
	room  sync.Cond // broadcast when the queue is sent, the connection's window grows, or it fails
	wake  chan struct{}
	out   []byte // frames queued, not sent yet
	spare []byte
	wfr   *http2.Framer // writes into out
	enc   *hpack.Encoder
	hbuf  bytes.Buffer
	block fieldBlock // an answer's fields before they are encoded

	// Owed to the peer, sent by the writer.
	ackSettings bool
	pings       [][8]byte
	resets      []http2.RSTStreamFrame
	connUnacked int64     // request body bytes consumed, not yet returned to the peer
	updates     []*stream // streams owed a WINDOW_UPDATE
	goAway      *http2.GoAwayFrame
	closeAfter  bool // close the connection once the queue is sent

	streams     map[uint32]*stream // open, or half-closed either way
	maxID       uint32             // the highest stream the peer opened
	running     int                // streams whose handler runs
	queued      []*stream          // streams waiting for a handler
	sendWindow  int64              // the connection's, for DATA to the peer
	recvWindow  int64              // what the peer may send the connection
	peerWindow  int64              // SETTINGS_INITIAL_WINDOW_SIZE of the peer
	peerFrame   int                // SETTINGS_MAX_FRAME_SIZE of the peer
	err         error              // set once: the connection failed or is closing
	goingAway   bool               // GOAWAY sent: no new stream
	idleSince   bool               // the read deadline is the idle timeout's
	writerEnded chan struct{}
}

var errConnClosed = errors.New("h2door: connection closed")

// outWriter appends to the connection's queue; the Framer that writes into it is used
// under the connection's lock.
type outWriter struct{ sc *serverConn }

func (w outWriter) Write(p []byte) (int, error) {
	w.sc.out = append(w.sc.out, p...)
	return len(p), nil
}

// ServeConn serves one HTTP/2 connection until it closes. The connection has not
// been read from: its first bytes are the client's preface.
func (s *Server) ServeConn(c net.Conn) {
	sc := &serverConn{
		s: s, nc: c,
		wake:        make(chan struct{}, 1),
		streams:     map[uint32]*stream{},
		sendWindow:  initialWindow,
		recvWindow:  ConnWindow,
		peerWindow:  initialWindow,
		peerFrame:   16 << 10,
		writerEnded: make(chan struct{}),
	}
	sc.room.L = &sc.mu
	sc.sconn = streamConn{c}
	if tc, ok := c.(*tls.Conn); ok {
		sc.sconn = tlsStreamConn{streamConn{c}, tc}
	}
	sc.wfr = http2.NewFramer(outWriter{sc}, nil)
	sc.enc = hpack.NewEncoder(&sc.hbuf)
	sc.enc.SetMaxDynamicTableSizeLimit(s.cfg.HeaderTable)

	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = c.Close()
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}()

	go sc.writeLoop()
	sc.serve()
	<-sc.writerEnded
}

// serve is the reader: the preface, then frames until the connection ends.
func (sc *serverConn) serve() {
	cfg := &sc.s.cfg
	sc.mu.Lock()
	_ = sc.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: cfg.MaxStreams},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: MaxReadFrameSize},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: headerListSize(cfg.HeaderBytes)},
	)
	_ = sc.wfr.WriteWindowUpdate(0, ConnWindow-initialWindow)
	sc.kick()
	sc.mu.Unlock()

	br := bufio.NewReaderSize(sc.nc, 16<<10)
	wait := cfg.ReadTimeout
	if wait <= 0 {
		wait = cfg.IdleTimeout
	}
	if wait > 0 {
		_ = sc.nc.SetReadDeadline(time.Now().Add(wait))
	}
	var preface [len(Preface)]byte
	if _, err := io.ReadFull(br, preface[:]); err != nil || string(preface[:]) != Preface {
		sc.fail(http2.ErrCodeProtocol, err == nil)
		return
	}
	sc.fr = http2.NewFramer(nil, br)
	sc.fr.SetMaxReadFrameSize(MaxReadFrameSize)
	sc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	sc.fr.MaxHeaderListSize = headerListSize(cfg.HeaderBytes)
	sc.mu.Lock()
	sc.idle()
	sc.mu.Unlock()

	first := true
	for {
		f, err := sc.fr.ReadFrame()
		if err != nil {
			if !sc.readFailed(err) {
				return
			}
			continue
		}
		if first {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				sc.fail(http2.ErrCodeProtocol, true) // RFC 9113 3.4: SETTINGS comes first
				return
			}
			first = false
		}
		// A connection shut down and drained, or failed by the writer, is closed by
		// the writer; the reader reads on until then.
		sc.mu.Lock()
		code, fatal := sc.process(f)
		sc.mu.Unlock()
		if fatal {
			sc.fail(code, true)
			return
		}
	}
}

// readFailed handles ReadFrame's error and reports whether reading goes on.
func (sc *serverConn) readFailed(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		sc.mu.Lock()
		if se.StreamID > sc.maxID && se.StreamID%2 == 1 && sc.streams[se.StreamID] == nil {
			sc.maxID = se.StreamID // a stream opened with bad fields is closed at once
		}
		if st := sc.streams[se.StreamID]; st != nil {
			sc.resetStream(st, se.Code)
		} else {
			sc.queueReset(se.StreamID, se.Code)
		}
		sc.mu.Unlock()
		return true
	case errors.As(err, &ce):
		sc.fail(http2.ErrCode(ce), true)
	case errors.Is(err, http2.ErrFrameTooLarge):
		sc.fail(http2.ErrCodeFrameSize, true)
	default:
		var ne net.Error
		sc.mu.Lock()
		idle := sc.idleSince && errors.As(err, &ne) && ne.Timeout()
		sc.mu.Unlock()
		sc.fail(http2.ErrCodeNo, idle) // an idle connection is told why it closes
	}
	return false
}

// process handles one frame under sc.mu; fatal: the connection fails with code.
func (sc *serverConn) process(f http2.Frame) (code http2.ErrCode, fatal bool) {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return sc.processHeaders(f)
	case *http2.DataFrame:
		return sc.processData(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return 0, false
		}
		// The streams' windows move once a frame, by the last INITIAL_WINDOW_SIZE it
		// sets: the same end as each in turn, and a frame of thousands of them costs
		// one pass over the streams, not thousands.
		window := int64(-1)
		err := f.ForeachSetting(func(s http2.Setting) error {
			if err := s.Valid(); err != nil {
				return err
			}
			if s.ID == http2.SettingInitialWindowSize {
				window = int64(s.Val)
				return nil
			}
			sc.applySetting(s)
			return nil
		})
		if err == nil && window >= 0 {
			err = sc.setPeerWindow(window)
		}
		if err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				return http2.ErrCode(ce), true
			}
			return http2.ErrCodeProtocol, true
		}
		// One acknowledgement owed is a flag, not a queue: a flood of SETTINGS from a
		// peer that does not read queues nothing.
		sc.ackSettings = true
		sc.kick()
	case *http2.PingFrame:
		if f.IsAck() {
			return 0, false
		}
		if len(sc.pings)+len(sc.resets) >= maxControl {
			return http2.ErrCodeEnhanceYourCalm, true
		}
		sc.pings = append(sc.pings, f.Data)
		sc.kick()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			if sc.sendWindow+int64(f.Increment) > maxPeerWindow {
				return http2.ErrCodeFlowControl, true
			}
			sc.sendWindow += int64(f.Increment)
			sc.room.Broadcast()
			return 0, false
		}
		st := sc.streams[f.StreamID]
		if st == nil {
			if f.StreamID > sc.maxID {
				return http2.ErrCodeProtocol, true // an idle stream
			}
			return 0, false // a closed one: the update crossed its end
		}
		if st.sendWindow+int64(f.Increment) > maxPeerWindow {
			sc.resetStream(st, http2.ErrCodeFlowControl)
			return 0, false
		}
		st.sendWindow += int64(f.Increment)
		st.cond.Signal()
	case *http2.RSTStreamFrame:
		if f.StreamID > sc.maxID {
			return http2.ErrCodeProtocol, true
		}
		if st := sc.streams[f.StreamID]; st != nil {
			sc.closeStream(st, errStreamReset)
		}
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			sc.queueReset(f.StreamID, http2.ErrCodeProtocol) // RFC 9113 5.3.1
		}
	case *http2.GoAwayFrame:
		// The peer opens no more streams; those in flight end as they would.
	case *http2.PushPromiseFrame:
		return http2.ErrCodeProtocol, true // a client must not push
	case *http2.ContinuationFrame:
		return http2.ErrCodeProtocol, true // the Framer joins the valid ones to HEADERS
	}
	return 0, false
}

func (sc *serverConn) applySetting(s http2.Setting) {
	switch s.ID {
	case http2.SettingMaxFrameSize:
		sc.peerFrame = int(s.Val)
	case http2.SettingHeaderTableSize:
		sc.enc.SetMaxDynamicTableSize(s.Val)
	}
}

// setPeerWindow applies the peer's SETTINGS_INITIAL_WINDOW_SIZE to the open streams'
// windows, which may go negative (RFC 9113 6.9.2).
func (sc *serverConn) setPeerWindow(v int64) error {
	delta := v - sc.peerWindow
	sc.peerWindow = v
	for _, st := range sc.streams {
		if st.sendWindow+delta > maxPeerWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		st.sendWindow += delta
		st.cond.Signal()
	}
	return nil
}

// kick wakes the writer for what was queued.
func (sc *serverConn) kick() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// queueReset owes the peer RST_STREAM for id.
func (sc *serverConn) queueReset(id uint32, code http2.ErrCode) {
	if len(sc.pings)+len(sc.resets) >= maxControl {
		sc.failLocked(http2.ErrCodeEnhanceYourCalm)
		return
	}
	sc.resets = append(sc.resets, http2.RSTStreamFrame{FrameHeader: http2.FrameHeader{StreamID: id}, ErrCode: code})
	sc.kick()
}

// resetStream ends st with RST_STREAM code to the peer.
func (sc *serverConn) resetStream(st *stream, code http2.ErrCode) {
	sc.queueReset(st.id, code)
	sc.closeStream(st, errStreamReset)
}

// closeStream ends st on the protocol's side: it leaves the open streams, its body and
// answer fail with err unless they ended, and what of its body the handler will not
// read goes back to the connection's window.
func (sc *serverConn) closeStream(st *stream, err error) {
	if sc.streams[st.id] == st {
		delete(sc.streams, st.id)
	}
	if st.closed {
		return
	}
	st.closed = true
	if !st.remoteDone {
		st.bodyErr = err
	}
	sc.connUnacked += int64(len(st.body) - st.off)
	st.body, st.off = st.body[:0], 0
	st.cancel()
	st.cond.Broadcast()
	sc.maybeUpdateConn()
	sc.idle()
}

// idle sets the read deadline of a connection with no stream to the idle timeout, and
// clears it when a stream starts; under sc.mu.
func (sc *serverConn) idle() {
	now := len(sc.streams) == 0 && sc.running == 0
	if now && sc.goingAway && !sc.closeAfter {
		sc.closeAfter = true // drained after GOAWAY
		sc.kick()
	}
	if now == sc.idleSince {
		return
	}
	sc.idleSince = now
	t := time.Time{}
	if now && sc.s.cfg.IdleTimeout > 0 {
		t = time.Now().Add(sc.s.cfg.IdleTimeout)
	}
	_ = sc.nc.SetReadDeadline(t)
}

// maybeUpdateConn owes the peer a WINDOW_UPDATE of the connection once a quarter of
// its window was consumed.
func (sc *serverConn) maybeUpdateConn() {
	if sc.connUnacked >= ConnWindow/4 {
		sc.kick()
	}
}

// fail ends the connection: GOAWAY with code (when tell), then close.
func (sc *serverConn) fail(code http2.ErrCode, tell bool) {
	sc.mu.Lock()
	if tell {
		sc.failLocked(code)
	} else {
		sc.failQuietly()
	}
	sc.mu.Unlock()
}

func (sc *serverConn) failLocked(code http2.ErrCode) {
	if sc.goAway == nil || sc.goAway.ErrCode == http2.ErrCodeNo {
		sc.goAway = &http2.GoAwayFrame{LastStreamID: sc.maxID, ErrCode: code}
	}
	sc.failQuietly()
}

func (sc *serverConn) failQuietly() {
	if sc.err == nil {
		sc.err = errConnClosed
	}
	sc.goingAway = true
	sc.closeAfter = true
	for _, st := range sc.streams {
		sc.closeStream(st, errConnClosed)
	}
	for _, st := range sc.queued {
		st.cancel()
	}
	sc.room.Broadcast()
	sc.kick()
}

// shutdown is Server.Shutdown's for sc: GOAWAY NO_ERROR, and the connection closes once
// its streams have ended.
func (sc *serverConn) shutdown() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.goingAway {
		return
	}
	sc.goingAway = true
	sc.goAway = &http2.GoAwayFrame{LastStreamID: sc.maxID, ErrCode: http2.ErrCodeNo}
	sc.kick()
	sc.idle()
}

// writeLoop is the writer: it sends the queue, with what is owed to the peer, in one
// write each time it is woken, after letting the streams ready by then add theirs.
func (sc *serverConn) writeLoop() {
	defer close(sc.writerEnded)
	for range sc.wake {
		runtime.Gosched()
		sc.mu.Lock()
		sc.owed()
		buf := sc.out
		sc.out = sc.spare[:0]
		closing := sc.closeAfter
		sc.mu.Unlock()
		var err error
		if len(buf) > 0 {
			if t := sc.s.cfg.WriteTimeout; t > 0 {
				_ = sc.nc.SetWriteDeadline(time.Now().Add(t))
			}
			_, err = sc.nc.Write(buf)
		}
		sc.mu.Lock()
		if cap(buf) <= keepOut {
			sc.spare = buf[:0]
		} else {
			sc.spare = nil
		}
		if err != nil && sc.err == nil {
			sc.failQuietly()
		}
		more := len(sc.out) > 0
		sc.room.Broadcast()
		sc.mu.Unlock()
		if err != nil || closing && !more {
			_ = sc.nc.Close()
			sc.mu.Lock()
			sc.failQuietly() // wakes any writer still waiting
			sc.mu.Unlock()
			return
		}
		if more {
			sc.kick()
		}
	}
}

// owed queues the frames the reader owes the peer; under sc.mu.
func (sc *serverConn) owed() {
	if sc.ackSettings {
		_ = sc.wfr.WriteSettingsAck()
		sc.ackSettings = false
	}
	for _, p := range sc.pings {
		_ = sc.wfr.WritePing(true, p)
	}
	sc.pings = sc.pings[:0]
	for _, r := range sc.resets {
		_ = sc.wfr.WriteRSTStream(r.StreamID, r.ErrCode)
	}
	sc.resets = sc.resets[:0]
	for _, st := range sc.updates {
		st.owed = false
		if !st.closed && !st.remoteDone && st.unacked > 0 {
			_ = sc.wfr.WriteWindowUpdate(st.id, uint32(st.unacked))
			st.recvWindow += st.unacked
		}
		st.unacked = 0
	}
	clear(sc.updates)
	sc.updates = sc.updates[:0]
	if sc.connUnacked > 0 && (sc.connUnacked >= ConnWindow/4 || sc.recvWindow < ConnWindow/2) {
		_ = sc.wfr.WriteWindowUpdate(0, uint32(sc.connUnacked))
		sc.recvWindow += sc.connUnacked
		sc.connUnacked = 0
	}
	if sc.goAway != nil {
		_ = sc.wfr.WriteGoAway(sc.goAway.LastStreamID, sc.goAway.ErrCode, nil)
		sc.goAway = nil
	}
}
