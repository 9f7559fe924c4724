package upstreamh2_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"tollgate/edge/upstreamclient"
	"tollgate/edge/upstreamh2"
)

// dial is a test's stand-in for the edge's dialer: its errors are DialErrors too.
func dial(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, &upstreamclient.DialError{Addr: addr, Err: err}
	}
	return c, nil
}

func newTransport(t testing.TB, addr string, edit ...func(*upstreamh2.Config)) *upstreamh2.Transport {
	cfg := upstreamh2.Config{Addr: addr, Dial: dial, ConnectTimeout: 2 * time.Second, MaxInFlight: 64, MaxWait: time.Second, IdleTimeout: time.Minute}
	for _, e := range edit {
		e(&cfg)
	}
	h := upstreamh2.New(cfg)
	t.Cleanup(h.CloseIdleConnections)
	return h
}

// request is a request as the edge makes it (NewRequest), with body unless nil.
func request(t testing.TB, h *upstreamh2.Transport, ctx context.Context, method, target string, body io.ReadCloser, n int64, fields ...string) *http.Request {
	t.Helper()
	var rh fasthttp.RequestHeader
	rh.SetMethod(method)
	for i := 0; i+1 < len(fields); i += 2 {
		rh.Add(fields[i], fields[i+1])
	}
	r, err := h.NewRequest(ctx, &rh, []byte(target), []byte("upstream.test"), body, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serveH2 serves handler over h2c with net/http's server, configured by cfg; it returns
// the address and a count of the connections accepted.
func serveH2(t testing.TB, cfg *http.HTTP2Config, handler http.HandlerFunc) (string, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	s := &http.Server{Handler: handler, Protocols: &p, HTTP2: cfg, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return ln.Addr().String(), &conns
}

// A gRPC server (grpc-go) answers the edge's active gRPC health check, and a unary call
// made as the proxy makes it, with its status in the trailer fields.
func TestClientGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	h := newTransport(t, ln.Addr().String())

	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI("/grpc.health.v1.Health/Check")
	req.Header.SetHost("upstream.test")
	if err := h.DoTimeout(&req, &resp, 2*time.Second); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("health check: %v %d", err, resp.StatusCode())
	}

	for i := range 3 {
		body := []byte{0, 0, 0, 0, 0}
		r := request(t, h, context.Background(), "POST", "/grpc.health.v1.Health/Check", upstreamh2.NewRequestBody(bytes.NewReader(body), 1<<20), int64(len(body)),
			"Content-Type", "application/grpc", "Connection", "close", "X-Request-Id", fmt.Sprint(i))
		res, err := h.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if err != nil || !bytes.Equal(b, []byte{0, 0, 0, 0, 2, 8, 1}) || res.Trailer.Get("Grpc-Status") != "0" {
			t.Fatalf("call %d: %q %v, trailer %v", i, b, err, res.Trailer)
		}
	}

	// An unknown method is answered trailers-only: a head that ends the stream.
	r := request(t, h, context.Background(), "POST", "/no.Such/Method", upstreamh2.NewRequestBody(bytes.NewReader([]byte{0, 0, 0, 0, 0}), 1<<20), 5,
		"Content-Type", "application/grpc")
	res, err := h.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.ContentLength != 0 || res.Header.Get("Grpc-Status") != "12" {
		t.Errorf("trailers-only: length %d, head %v", res.ContentLength, res.Header)
	}
}

// A bidirectional stream: each message the edge sends is answered before the next is
// sent, so the request body streams up while the answer streams down; trailers at the
// end, and the fields as HTTP/2 wants them.
func TestClientBidirectional(t *testing.T) {
	var seen http.Header
	addr, _ := serveH2(t, nil, func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		buf := make([]byte, 64)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(append([]byte("echo:"), buf[:n]...))
				w.(http.Flusher).Flush()
			}
			if err != nil {
				break
			}
		}
		w.Header().Set("Grpc-Status", "0")
	})
	h := newTransport(t, addr)
	pr, pw := io.Pipe()
	r := request(t, h, context.Background(), "POST", "/chat?x=1", upstreamh2.NewRequestBody(pr, 1<<20), -1,
		"Content-Type", "application/grpc", "Keep-Alive", "1", "X-Mixed-Case", "v")
	res, err := h.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for _, m := range []string{"one", "two", "three"} {
		if _, err := pw.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
		n, err := res.Body.Read(buf)
		if err != nil || string(buf[:n]) != "echo:"+m {
			t.Fatalf("%s: %q %v", m, buf[:n], err)
		}
	}
	_ = pw.Close()
	rest, err := io.ReadAll(res.Body)
	if err != nil || len(rest) != 0 || res.Trailer.Get("Grpc-Status") != "0" {
		t.Errorf("end: %q %v trailer %v", rest, err, res.Trailer)
	}
	_ = res.Body.Close()
	if seen.Get("Keep-Alive") != "" || seen.Get("Te") != "trailers" || seen.Get("X-Mixed-Case") != "v" {
		t.Errorf("fields upstream: %v", seen)
	}
}

// A server whose windows are tiny gets a large body anyway, window by window; a large
// answer comes down as the edge reads it; MAX_FRAME_SIZE of the server is kept.
func TestClientFlowControl(t *testing.T) {
	const size = 3<<20 + 17
	addr, _ := serveH2(t, &http.HTTP2Config{MaxReceiveBufferPerStream: 1024, MaxReceiveBufferPerConnection: 65535, MaxReadFrameSize: 16 << 10},
		func(w http.ResponseWriter, r *http.Request) {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			_, _ = fmt.Fprintf(w, "%d\n", n)
			_, _ = w.Write(bytes.Repeat([]byte("x"), size))
		})
	h := newTransport(t, addr)
	body := bytes.Repeat([]byte("y"), size)
	r := request(t, h, context.Background(), "POST", "/up", upstreamh2.NewRequestBody(bytes.NewReader(body), 1<<30), size)
	res, err := h.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	want := fmt.Sprintf("%d\n", size)
	if err != nil || !strings.HasPrefix(string(got), want) || len(got) != len(want)+size {
		t.Fatalf("%d bytes back, %v; starts %q", len(got), err, got[:min(len(got), 20)])
	}
}

// A server that takes one stream at a time has a second request go on a connection of
// its own, and both are answered.
func TestClientMaxConcurrentStreams(t *testing.T) {
	var in sync.WaitGroup
	in.Add(2)
	addr, conns := serveH2(t, &http.HTTP2Config{MaxConcurrentStreams: 1}, func(w http.ResponseWriter, r *http.Request) {
		in.Done()
		in.Wait() // both requests are in flight at once
		_, _ = io.WriteString(w, "ok")
	})
	h := newTransport(t, addr)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := h.RoundTrip(request(t, h, ctx, "GET", "/", nil, 0))
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if err != nil || string(b) != "ok" {
				errs <- fmt.Errorf("%q %v", b, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// MaxInFlight requests at once: one more waits MaxWait, then fails as the edge's pools do.
func TestClientMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	addr, _ := serveH2(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	})
	defer close(release)
	h := newTransport(t, addr, func(c *upstreamh2.Config) { c.MaxInFlight, c.MaxWait = 1, 50*time.Millisecond })
	res, err := h.RoundTrip(request(t, h, context.Background(), "GET", "/", nil, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := h.RoundTrip(request(t, h, context.Background(), "GET", "/", nil, 0)); !errors.Is(err, fasthttp.ErrNoFreeConns) {
		t.Fatalf("past MaxInFlight: %v", err)
	}
}

// A canceled request resets its stream: the server's handler sees its request end, and
// RoundTrip (or the body's Read) returns the context's error. Closing the body early
// resets it too.
func TestClientCancel(t *testing.T) {
	ended := make(chan string, 2)
	addr, _ := serveH2(t, nil, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			w.WriteHeader(200)
			for {
				if _, err := w.Write([]byte("tick")); err != nil {
					break
				}
				w.(http.Flusher).Flush()
				time.Sleep(time.Millisecond)
			}
		}
		<-r.Context().Done()
		ended <- r.URL.Path
	})
	h := newTransport(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := h.RoundTrip(request(t, h, ctx, "GET", "/head", nil, 0))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RoundTrip: %v, want the context's deadline", err)
	}
	res, err := h.RoundTrip(request(t, h, context.Background(), "GET", "/stream", nil, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Body.Read(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	for range 2 {
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("the server's stream was not reset")
		}
	}
}

// handServer frames HTTP/2 by hand, for the upstreams a real server will not be: after
// the prefaces, serve has each connection (n counts them from 0).
func handServer(t testing.TB, serve func(n int, fr *http2.Framer, enc func(...string) []byte)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
					return
				}
				fr := http2.NewFramer(c, c)
				fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				var buf bytes.Buffer
				e := hpack.NewEncoder(&buf)
				enc := func(kv ...string) []byte {
					buf.Reset()
					for i := 0; i+1 < len(kv); i += 2 {
						_ = e.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
					}
					return append([]byte(nil), buf.Bytes()...)
				}
				_ = fr.WriteSettings()
				serve(n, fr, enc)
			}()
		}
	}()
	return ln.Addr().String()
}

// untilHeaders reads frames until a request's HEADERS, acknowledging SETTINGS.
func untilHeaders(fr *http2.Framer) *http2.MetaHeadersFrame {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			return f
		}
	}
}

func drain(fr *http2.Framer) {
	for {
		if _, err := fr.ReadFrame(); err != nil {
			return
		}
	}
}

// A GOAWAY before the stream was processed has the request go again on a new
// connection; RST_STREAM from the server fails the request.
func TestClientGoAwayAndReset(t *testing.T) {
	addr := handServer(t, func(n int, fr *http2.Framer, enc func(...string) []byte) {
		for {
			hf := untilHeaders(fr)
			switch {
			case hf == nil:
				return
			case n == 0:
				_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			case hf.PseudoValue("path") == "/reset":
				_ = fr.WriteRSTStream(hf.StreamID, http2.ErrCodeInternal)
			default:
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: hf.StreamID, BlockFragment: enc(":status", "200"), EndHeaders: true})
				_ = fr.WriteData(hf.StreamID, false, []byte("second"))
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: hf.StreamID, BlockFragment: enc("grpc-status", "0"), EndHeaders: true, EndStream: true})
			}
		}
	})
	h := newTransport(t, addr)
	body := upstreamh2.NewRequestBody(bytes.NewReader([]byte("hello")), 1<<20)
	res, err := h.RoundTrip(request(t, h, context.Background(), "POST", "/", body, 5))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || string(b) != "second" || res.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("%q %v %v", b, err, res.Trailer)
	}
	_, err = h.RoundTrip(request(t, h, context.Background(), "GET", "/reset", nil, 0))
	var se http2.StreamError
	if !errors.As(err, &se) || se.Code != http2.ErrCodeInternal {
		t.Fatalf("reset: %v", err)
	}
}

// A hostile upstream: garbage, a head over the bound, a window past 2^31-1, DATA past
// the window granted. Each fails its request, and the edge neither panics nor hangs.
func TestClientHostile(t *testing.T) {
	for name, serve := range map[string]func(fr *http2.Framer, hf *http2.MetaHeadersFrame, enc func(...string) []byte){
		"garbage": func(fr *http2.Framer, hf *http2.MetaHeadersFrame, enc func(...string) []byte) {
			_ = fr.WriteRawFrame(0x77, 0, hf.StreamID, []byte("not a frame"))                    // unknown: ignored
			_ = fr.WriteRawFrame(http2.FrameHeaders, 0x4, hf.StreamID, []byte{0xff, 0xff, 0xff}) // END_HEADERS, not HPACK
		},
		"huge head": func(fr *http2.Framer, hf *http2.MetaHeadersFrame, enc func(...string) []byte) {
			blk := enc(":status", "200", "x-big", strings.Repeat("a", 40<<10))
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: hf.StreamID, BlockFragment: blk[:16<<10]})
			for blk = blk[16<<10:]; len(blk) > 16<<10; blk = blk[16<<10:] {
				_ = fr.WriteContinuation(hf.StreamID, false, blk[:16<<10])
			}
			_ = fr.WriteContinuation(hf.StreamID, true, blk)
		},
		"window overflow": func(fr *http2.Framer, hf *http2.MetaHeadersFrame, enc func(...string) []byte) {
			_ = fr.WriteWindowUpdate(0, 1<<31-1)
		},
		"past the window": func(fr *http2.Framer, hf *http2.MetaHeadersFrame, enc func(...string) []byte) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: hf.StreamID, BlockFragment: enc(":status", "200"), EndHeaders: true})
			chunk := make([]byte, 16<<10)
			for range 20 { // 320 KiB, past the stream's 256 KiB
				if fr.WriteData(hf.StreamID, false, chunk) != nil {
					return
				}
			}
		},
		"no status": func(fr *http2.Framer, hf *http2.MetaHeadersFrame, enc func(...string) []byte) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: hf.StreamID, BlockFragment: enc("x", "y"), EndHeaders: true, EndStream: true})
		},
	} {
		t.Run(name, func(t *testing.T) {
			addr := handServer(t, func(n int, fr *http2.Framer, enc func(...string) []byte) {
				if hf := untilHeaders(fr); hf != nil {
					serve(fr, hf, enc)
					drain(fr)
				}
			})
			h := newTransport(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := h.RoundTrip(request(t, h, ctx, "GET", "/", nil, 0))
			if err == nil {
				time.Sleep(200 * time.Millisecond) // the body unread: no window given back
				_, err = io.ReadAll(res.Body)
				_ = res.Body.Close()
			}
			if err == nil || ctx.Err() != nil {
				t.Fatalf("%v (context: %v), want the upstream's fault", err, ctx.Err())
			}
		})
	}
}

// A connection with no stream closes after the idle timeout; the next request dials
// another.
func TestClientIdleTimeout(t *testing.T) {
	addr, conns := serveH2(t, nil, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	h := newTransport(t, addr, func(c *upstreamh2.Config) { c.IdleTimeout = 50 * time.Millisecond })
	for i := range 2 {
		res, err := h.RoundTrip(request(t, h, context.Background(), "GET", "/", nil, 0))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if i == 0 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the idle one was kept", n)
	}
}

// A TLS target must pick h2 by ALPN.
func TestClientTLSNeedsH2(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			_ = c.Close()
		}
	}()
	h := newTransport(t, ln.Addr().String(), func(c *upstreamh2.Config) { c.TLS = true })
	_, err = h.RoundTrip(request(t, h, context.Background(), "GET", "/", nil, 0))
	var de *upstreamclient.DialError
	if !errors.As(err, &de) {
		t.Fatalf("%v, want a DialError", err)
	}
}
