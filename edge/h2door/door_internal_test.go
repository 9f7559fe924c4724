package h2door

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// echoChain answers a request with what it was (method, target and body), so that a test
// can tell that a body came through whole and in order. workers_internal_test.go has
// the package's testChain, which echoes no body.
type echoChain struct{}

func (echoChain) Serve(ctx *fasthttp.RequestCtx) {
	body := ctx.Request.Body()
	if ctx.Request.IsBodyStream() {
		var err error
		if body, err = io.ReadAll(ctx.RequestBodyStream()); err != nil {
			ctx.SetStatusCode(fasthttp.StatusInternalServerError)
			return
		}
	}
	ctx.Response.AppendBodyString(string(ctx.Method()) + " " + string(ctx.RequestURI()) + "\n")
	ctx.Response.AppendBody(body)
}

func (echoChain) Refuse(ctx *fasthttp.RequestCtx, r Refusal) {
	ctx.SetStatusCode([...]int{RefuseBadRequest: 400, RefuseHeaderTooLarge: 431, RefuseConnect: 400}[r])
}

var doorConfig = Config{MaxStreams: 100, HeaderBytes: 16 << 10, IdleTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}

// testWait bounds every wait of these tests, so that a server that stalls fails them.
const testWait = 5 * time.Second

// request is the fields of a request for target, then the name, value pairs of more.
func request(method, target string, more ...string) []string {
	return append([]string{":method", method, ":scheme", "https", ":authority", "acme.edge.test", ":path", target}, more...)
}

// block is the header block of the name, value pairs of kv. A fresh encoder refers to
// no entry of the dynamic table, so its blocks decode in any order.
func block(kv ...string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return b.Bytes()
}

// srvFrame is a frame the server sent, copied: the Framer reuses its read buffer.
type srvFrame struct {
	http2.FrameHeader
	fields   []hpack.HeaderField
	data     []byte
	code     http2.ErrCode
	incr     uint32
	settings []http2.Setting
}

func (f srvFrame) ends() bool {
	return (f.Type == http2.FrameData || f.Type == http2.FrameHeaders) && f.Flags&http2.FlagDataEndStream != 0
}

// h2client drives a connection to the door's server as an HTTP/2 client does. It keeps
// both directions' windows: it sends no more than the server allowed, and fails the test
// when the server sends more than the client allowed.
type h2client struct {
	t       *testing.T
	fr      *http2.Framer // the client's writes
	frames  chan srvFrame
	pending []srvFrame      // read while waiting for a window, not yet looked at
	held    map[uint32]bool // streams whose window the client does not give back

	sendConn, sendInit, recvConn, recvInit int64
	sendStream, recvStream                 map[uint32]int64
}

// startDoor serves one end of a pipe with the door's server and returns a client on the
// other end, its preface and SETTINGS (its streams' window) sent.
func startDoor(t *testing.T, window uint32) *h2client {
	return startDoorWith(t, doorConfig, window)
}

func startDoorWith(t *testing.T, cfg Config, window uint32) *h2client {
	s := NewOwnServer(cfg, echoChain{})
	cs, ss := net.Pipe()
	served := make(chan struct{})
	go func() { s.ServeConn(ss); close(served) }()
	c := &h2client{t: t, fr: http2.NewFramer(cs, nil), frames: make(chan srvFrame, 1024), held: map[uint32]bool{},
		sendConn: initialWindow, sendInit: initialWindow, recvConn: initialWindow, recvInit: initialWindow,
		sendStream: map[uint32]int64{}, recvStream: map[uint32]int64{}}
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		_ = cs.Close()
		select {
		case <-served:
		case <-time.After(testWait):
			t.Errorf("ServeConn still runs %v after the client closed", testWait)
		}
	})
	// A write on a pipe waits for its reader, the server's as the client's: the client
	// reads all the time, in its own goroutine, or the server could stall on its writes.
	go c.readLoop(cs, stop)
	_ = cs.SetDeadline(time.Now().Add(2 * testWait))
	_, err := io.WriteString(cs, http2.ClientPreface)
	c.must(err)
	c.recvInit = int64(window)
	c.must(c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}))
	return c
}

func (c *h2client) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *h2client) readLoop(conn net.Conn, stop <-chan struct{}) {
	defer close(c.frames)
	r := http2.NewFramer(nil, conn)
	r.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return
		}
		sf := srvFrame{FrameHeader: f.Header()}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			sf.fields = f.Fields
		case *http2.DataFrame:
			sf.data = bytes.Clone(f.Data())
		case *http2.RSTStreamFrame:
			sf.code = f.ErrCode
		case *http2.GoAwayFrame:
			sf.code = f.ErrCode
		case *http2.WindowUpdateFrame:
			sf.incr = f.Increment
		case *http2.SettingsFrame:
			_ = f.ForeachSetting(func(s http2.Setting) error { sf.settings = append(sf.settings, s); return nil })
		}
		select {
		case c.frames <- sf:
		case <-stop:
			return
		}
	}
}

// recv is the server's next frame, acted on as a client does: SETTINGS and WINDOW_UPDATE
// open the client's windows, and DATA is checked against the client's window and, but
// on a held stream, given back at once.
func (c *h2client) recv() srvFrame {
	c.t.Helper()
	var f srvFrame
	select {
	case g, ok := <-c.frames:
		if !ok {
			c.t.Fatal("the server closed the connection")
		}
		f = g
	case <-time.After(testWait):
		c.t.Fatalf("no frame from the server within %v", testWait)
	}
	switch f.Type {
	case http2.FrameSettings:
		for _, s := range f.settings {
			if s.ID == http2.SettingInitialWindowSize {
				for id := range c.sendStream {
					c.sendStream[id] += int64(s.Val) - c.sendInit
				}
				c.sendInit = int64(s.Val)
			}
		}
		if !f.Flags.Has(http2.FlagSettingsAck) {
			_ = c.fr.WriteSettingsAck()
		}
	case http2.FrameWindowUpdate:
		if f.StreamID == 0 {
			c.sendConn += int64(f.incr)
		} else {
			c.sendStream[f.StreamID] += int64(f.incr)
		}
	case http2.FrameData:
		n := int64(f.Length)
		c.recvConn -= n
		c.recvStream[f.StreamID] -= n
		if c.recvConn < 0 || c.recvStream[f.StreamID] < 0 {
			c.t.Errorf("stream %d: %d bytes of DATA past the window the client gave", f.StreamID, n)
		}
		if n > 0 && !c.held[f.StreamID] {
			_ = c.fr.WriteWindowUpdate(0, uint32(n))
			c.recvConn += n
			if !f.ends() {
				_ = c.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				c.recvStream[f.StreamID] += n
			}
		}
	}
	return f
}

func (c *h2client) next() srvFrame {
	c.t.Helper()
	if len(c.pending) > 0 {
		f := c.pending[0]
		c.pending = c.pending[1:]
		return f
	}
	return c.recv()
}

// open starts stream id with the fields kv (name, value pairs).
func (c *h2client) open(id uint32, end bool, kv ...string) {
	c.t.Helper()
	c.sendStream[id], c.recvStream[id] = c.sendInit, c.recvInit
	c.must(headers(c.fr, id, end, kv...))
}

// sendBody sends body on stream id in DATA frames of at most piece bytes, never past the
// windows the server gave, the last one ending the stream.
func (c *h2client) sendBody(id uint32, body []byte, piece int) {
	c.t.Helper()
	for len(body) > 0 {
		n := int(min(int64(min(len(body), piece)), c.sendStream[id], c.sendConn))
		if n <= 0 {
			c.pending = append(c.pending, c.recv())
			continue
		}
		c.must(c.fr.WriteData(id, n == len(body), body[:n]))
		c.sendStream[id] -= int64(n)
		c.sendConn -= int64(n)
		body = body[n:]
	}
}

// reply is what the server sent on one stream.
type reply struct {
	status string
	body   []byte
	reset  bool
	code   http2.ErrCode
}

// await reads frames until stream id ends or is reset; a GOAWAY fails the test.
func (c *h2client) await(id uint32) reply {
	c.t.Helper()
	var r reply
	for {
		f := c.next()
		if f.Type == http2.FrameGoAway {
			c.t.Fatalf("GOAWAY %v while waiting for stream %d", f.code, id)
		}
		if f.StreamID != id {
			continue
		}
		switch f.Type {
		case http2.FrameHeaders:
			for _, hf := range f.fields {
				if hf.Name == ":status" {
					r.status = hf.Value
				}
			}
		case http2.FrameData:
			r.body = append(r.body, f.data...)
		case http2.FrameRSTStream:
			r.reset, r.code = true, f.code
			return r
		}
		if f.ends() {
			return r
		}
	}
}

// The answer comes in pieces of at most the client's window of 10 (recv fails the test
// on a DATA past it), each sent once the client's WINDOW_UPDATE came.
func TestDoorFlowControl(t *testing.T) {
	c := startDoor(t, 10)
	target := "/flow/" + strings.Repeat("0123456789", 10) + "z" // not a multiple of the window
	c.open(1, true, request("GET", target)...)
	r := c.await(1)
	if want := "GET " + target + "\n"; r.reset || r.status != "200" || string(r.body) != want {
		t.Fatalf("status %q, reset %v (%v), body %q, want 200 and %q", r.status, r.reset, r.code, r.body, want)
	}
}

// A body past the server's stream window comes through as the server opens its window.
func TestDoorRequestBody(t *testing.T) {
	c := startDoor(t, initialWindow)
	body := make([]byte, 600<<10)
	for i := range body {
		body[i] = byte(i % 251) // a period prime to the frame size: a lost or repeated frame shows
	}
	c.open(1, false, request("POST", "/echo")...)
	c.sendBody(1, body, 16<<10)
	r := c.await(1)
	want := append([]byte("POST /echo\n"), body...)
	if r.reset || r.status != "200" || !bytes.Equal(r.body, want) {
		t.Fatalf("status %q, reset %v (%v), %d bytes back, want 200 and %d bytes as sent", r.status, r.reset, r.code, len(r.body), len(want))
	}
}

// A client's resets end streams, not the connection.
func TestDoorReset(t *testing.T) {
	c := startDoor(t, 10)
	// Stream 1's chain waits for a body that will not come; stream 3's answer waits for a
	// window the client does not give: both are reset while their handlers run.
	c.open(1, false, request("POST", "/wait")...)
	c.must(c.fr.WriteData(1, false, []byte("part")))
	c.held[3] = true
	c.open(3, true, request("GET", "/"+strings.Repeat("x", 100))...)
	// Once stream 3's first piece came, its answer waits for the window held back.
	for f := c.next(); f.StreamID != 3 || f.Type != http2.FrameData; f = c.next() {
	}
	for _, id := range []uint32{1, 3} {
		c.must(c.fr.WriteRSTStream(id, http2.ErrCodeCancel))
	}
	c.open(5, true, request("GET", "/after")...)
	if r := c.await(5); r.reset || r.status != "200" || string(r.body) != "GET /after\n" {
		t.Fatalf("after the resets: status %q, reset %v (%v), body %q", r.status, r.reset, r.code, r.body)
	}
}

// An answer that waits longer than the write timeout for a window the client never
// opens is reset (CANCEL), and the connection goes on.
func TestDoorWriteTimeout(t *testing.T) {
	cfg := doorConfig
	cfg.WriteTimeout = 200 * time.Millisecond
	c := startDoorWith(t, cfg, 10)
	c.held[1] = true
	c.open(1, true, request("GET", "/"+strings.Repeat("x", 100))...)
	if r := c.await(1); !r.reset || r.code != http2.ErrCodeCancel || len(r.body) > 10 {
		t.Fatalf("stream 1: status %q, reset %v (%v), %d bytes, want RST_STREAM CANCEL after 10 bytes", r.status, r.reset, r.code, len(r.body))
	}
	c.open(3, true, request("GET", "/after")...)
	if r := c.await(3); r.reset || r.status != "200" || string(r.body) != "GET /after\n" {
		t.Fatalf("after the timeout: status %q, reset %v (%v), body %q", r.status, r.reset, r.code, r.body)
	}
}

// A malformed request resets its stream only.
func TestDoorBadStreams(t *testing.T) {
	c := startDoor(t, initialWindow)
	c.open(1, true, request("GET", "/", "connection", "close")...)
	c.open(3, true, ":method", "GET", ":scheme", "https", ":authority", "acme.edge.test")
	for _, id := range []uint32{1, 3} {
		if r := c.await(id); !r.reset || r.code != http2.ErrCodeProtocol || r.status != "" {
			t.Errorf("stream %d: status %q, reset %v (%v), want RST_STREAM PROTOCOL_ERROR alone", id, r.status, r.reset, r.code)
		}
	}
	c.open(5, true, request("GET", "/next")...)
	if r := c.await(5); r.reset || r.status != "200" || string(r.body) != "GET /next\n" {
		t.Fatalf("after the bad streams: status %q, reset %v (%v), body %q", r.status, r.reset, r.code, r.body)
	}
}

// frames is what build writes with a Framer.
func frames(build func(fr *http2.Framer)) []byte {
	var b bytes.Buffer
	build(http2.NewFramer(&b, nil))
	return b.Bytes()
}

func headers(fr *http2.Framer, id uint32, end bool, kv ...string) error {
	return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(kv...), EndStream: end, EndHeaders: true})
}

// FuzzServeConn: whatever a client sends after its preface, the server does not panic,
// and the connection ends soon after the client closes it.
func FuzzServeConn(f *testing.F) {
	for _, build := range []func(fr *http2.Framer){
		func(fr *http2.Framer) { _ = fr.WriteSettings() },
		func(fr *http2.Framer) {
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
			_ = headers(fr, 1, true, request("GET", "/a")...)
		},
		func(fr *http2.Framer) {
			_ = fr.WriteSettings()
			_ = headers(fr, 1, false, request("POST", "/a", "content-length", "5")...)
			_ = fr.WriteData(1, true, []byte("hello"))
		},
		func(fr *http2.Framer) { _ = fr.WriteSettings(); _ = fr.WriteWindowUpdate(0, 1<<20) },
		func(fr *http2.Framer) {
			_ = fr.WriteSettings()
			_ = fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
		},
	} {
		f.Add(frames(build))
	}
	f.Add([]byte("\x00\x00\x04\x01\x05\x00\x00\x00\x01GET / HTTP/1.1\r\n\r\n"))
	// One server for every input, as the edge has: a connection's end must leave it
	// able to serve the next.
	s := NewOwnServer(doorConfig, echoChain{})
	f.Fuzz(func(t *testing.T, in []byte) {
		cs, ss := net.Pipe()
		served := make(chan struct{})
		go func() { s.ServeConn(ss); close(served) }()
		go func() { _, _ = io.Copy(io.Discard, cs) }()
		_ = cs.SetWriteDeadline(time.Now().Add(testWait))
		_, _ = cs.Write(append([]byte(http2.ClientPreface), in...)) // fails once the server closes
		_ = cs.Close()
		select {
		case <-served:
		case <-time.After(testWait):
			t.Fatalf("ServeConn still runs %v after the client closed", testWait)
		}
	})
}
