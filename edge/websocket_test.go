package edge_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/edge"
	"tollgate/edge/conn"
	"tollgate/tenants"
)

// wsUpstream is a minimal WebSocket server: it answers the upgrade with 101 (checking
// the key) and then echoes bytes (the edge relays bytes, so no framing is needed here).
// It records the headers of each upgrade it saw.
type wsUpstream struct {
	ln       net.Listener
	url      string
	upgrades atomic.Int64
	lastHdr  atomic.Pointer[http.Header]
}

func newWSUpstream(t testing.TB, refuse bool) *wsUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &wsUpstream{ln: ln, url: "http://" + ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				h := req.Header.Clone()
				h.Set("X-Path", req.URL.RequestURI())
				u.lastHdr.Store(&h)
				if refuse || !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
					io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nno")
					return
				}
				u.upgrades.Add(1)
				sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
					base64.StdEncoding.EncodeToString(sum[:]))
				if strings.HasSuffix(req.URL.Path, "/bye") {
					// The first message gets a last word, and the connection closes right
					// behind it: its FIN and data arrive at the edge together.
					if _, err := br.ReadByte(); err == nil {
						io.WriteString(c, "bye")
					}
					return
				}
				io.Copy(c, br)
			}()
		}
	}()
	return u
}

// wsDial upgrades a connection to the edge; it returns the connection (positioned after
// the 101) or the status of the refusal.
func wsDial(t testing.TB, addr, host, path string, hdr ...string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	extra := ""
	for i := 0; i+1 < len(hdr); i += 2 {
		extra += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s\r\n", path, host, extra)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		t.Fatalf("upgrade: %v", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if resp.StatusCode != 101 {
		io.Copy(io.Discard, resp.Body)
		c.Close()
		return nil, nil, resp.StatusCode
	}
	if resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Errorf("101 without the upstream's Sec-WebSocket-Accept: %v", resp.Header)
	}
	return c, br, 101
}

// putWSRoute gives tenant acme the WebSocket route /ws to upURL and marks h's edge
// loaded; it returns acme's id.
func putWSRoute(h *harness, upURL string) string {
	acme := h.tenant("acme")
	h.put(&tenants.Route{ID: "ws", TenantID: acme, Name: "ws", Paths: []string{"/ws"}, WebSocket: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upURL, Weight: 1}}}})
	h.e.Loaded()
	return acme
}

func echoOnce(t testing.TB, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(br, b); err != nil || string(b) != msg {
		t.Fatalf("echo: %q %v", b, err)
	}
	_ = c.SetReadDeadline(time.Time{})
}

func TestWebSocket(t *testing.T) {
	h := newHarness(t)
	up := newWSUpstream(t, false)
	acme := h.tenant("acme")
	r := &tenants.Route{ID: "ws", TenantID: acme, Name: "ws", Paths: []string{"/ws"}, Auth: tenants.AuthKey, WebSocket: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.url, Weight: 1}}}}
	h.put(r)
	plain := &tenants.Route{ID: "plain", TenantID: acme, Name: "plain", Paths: []string{"/plain"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.url, Weight: 1}}}}
	h.put(plain)
	h.put(&tenants.Consumer{ID: "c1", TenantID: acme, Name: "alice"})
	key := h.key(acme, "c1", "k1")
	h.e.Loaded()
	host := "acme." + domain

	// Auth applies at the upgrade.
	if _, _, st := wsDial(t, h.public, host, "/ws"); st != 401 {
		t.Errorf("upgrade without a key: %d, want 401", st)
	}
	// A route without websocket: the upgrade headers are stripped, the upstream refuses.
	if _, _, st := wsDial(t, h.public, host, "/plain"); st != 403 {
		t.Errorf("upgrade on a plain route: %d, want the upstream's 403", st)
	}
	c, br, st := wsDial(t, h.public, host, "/ws/chat?room=1", "X-API-Key", key)
	if st != 101 {
		t.Fatalf("upgrade: %d", st)
	}
	defer c.Close()
	hdr := *up.lastHdr.Load()
	if hdr.Get("X-Consumer-Name") != "alice" || hdr.Get("X-Api-Key") != "" || hdr.Get("X-Path") != "/ws/chat?room=1" {
		t.Errorf("upstream saw %v", hdr)
	}
	echoOnce(t, c, br, "hello")
	echoOnce(t, c, br, strings.Repeat("x", 100<<10))
	if n := h.e.WebSockets(); n != 1 {
		t.Errorf("WebSockets() = %d", n)
	}
	c.Close()
	waitFor(t, 2*time.Second, func() string {
		if n := h.e.WebSockets(); n != 0 {
			return fmt.Sprintf("%d tunnels open after the client closed", n)
		}
		return ""
	})
}

// Bytes a client sent right behind its upgrade request, which fasthttp read with it,
// reach the upstream first and in order; an upstream's last message followed at once by
// its close reaches the client, and so does the close, without waiting for the idle
// timeout. Both ways of relaying: reading to EAGAIN and waiting on an empty socket
// (edge.SetShortReadWait; without raw I/O, as under the race detector, both read to
// EAGAIN).
func TestWebSocketEdges(t *testing.T) {
	defer edge.SetShortReadWait(conn.ShortReadWait())
	for _, wait := range []bool{false, true} {
		edge.SetShortReadWait(wait)
		t.Run(map[bool]string{false: "drain", true: "wait"}[wait], testWebSocketEdges)
	}
}

func testWebSocketEdges(t *testing.T) {
	h := newHarness(t)
	up := newWSUpstream(t, false)
	putWSRoute(h, up.url)
	host := "acme." + domain

	c, err := net.Dial("tcp", h.public)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nearly,", host)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade with bytes behind it: %v %v", resp, err)
	}
	io.WriteString(c, "late")
	got := make([]byte, len("early,late"))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "early,late" {
		t.Fatalf("echo of the bytes behind the upgrade, then more: %q %v", got, err)
	}

	bye, br2, st := wsDial(t, h.public, host, "/ws/bye")
	if st != 101 {
		t.Fatalf("upgrade: %d", st)
	}
	defer bye.Close()
	io.WriteString(bye, "x")
	_ = bye.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := io.ReadAll(br2)
	if err != nil || string(rest) != "bye" {
		t.Fatalf("the upstream's last word and close: read %q, %v; want \"bye\" and EOF", rest, err)
	}
}

func TestWebSocketRefusedUpstream(t *testing.T) {
	h := newHarness(t)
	up := newWSUpstream(t, true)
	putWSRoute(h, up.url)
	if _, _, st := wsDial(t, h.public, "acme."+domain, "/ws"); st != 403 {
		t.Errorf("refused upgrade: %d, want the upstream's 403", st)
	}
	if n := h.e.WebSockets(); n != 0 {
		t.Errorf("%d tunnels open", n)
	}
}

func TestWebSocketIdleTimeout(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.WebSocketIdleTimeout = 300 * time.Millisecond })
	up := newWSUpstream(t, false)
	putWSRoute(h, up.url)
	c, br, st := wsDial(t, h.public, "acme."+domain, "/ws")
	if st != 101 {
		t.Fatalf("upgrade: %d", st)
	}
	defer c.Close()
	// Traffic keeps it open past the idle timeout.
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		echoOnce(t, c, br, "ping")
	}
	// Silence closes it with 1001.
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, _ := io.ReadAll(br)
	if !bytes.Equal(b, []byte{0x88, 0x02, 0x03, 0xe9}) {
		t.Errorf("idle close: got %x, want a 1001 close frame", b)
	}
}

// TestWebSocketIdleConnections holds many idle tunnels, measures the edge's memory per
// tunnel, and checks that Shutdown closes every one with a 1001 close frame.
func TestWebSocketIdleConnections(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	h := newHarness(t)
	up := newWSUpstream(t, false)
	putWSRoute(h, up.url)
	host := "acme." + domain
	// Warm up (pools, first-use allocations), then measure from a settled heap.
	c, br, _ := wsDial(t, h.public, host, "/ws")
	echoOnce(t, c, br, "warm")
	c.Close()
	waitFor(t, 2*time.Second, func() string {
		if h.e.WebSockets() != 0 {
			return "warm-up tunnel still open"
		}
		return ""
	})
	runtime.GC()
	rss0, heap0 := rssBytes(t), heapInUse()

	conns := make([]net.Conn, 0, n)
	readers := make([]*bufio.Reader, 0, n)
	for i := 0; i < n; i++ {
		c, br, st := wsDial(t, h.public, host, "/ws")
		if st != 101 {
			t.Fatalf("upgrade %d: %d", i, st)
		}
		conns = append(conns, c)
		readers = append(readers, br)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if got := h.e.WebSockets(); got != n {
		t.Fatalf("%d tunnels open, want %d", got, n)
	}
	echoOnce(t, conns[n/2], readers[n/2], "still alive")
	runtime.GC()
	rss1, heap1 := rssBytes(t), heapInUse()
	// The test process holds the clients and the upstream too: the in-process figures
	// include their share (one client and one upstream connection per tunnel).
	t.Logf("%d idle tunnels: process RSS +%.1f KiB/tunnel, Go heap in use +%.1f KiB/tunnel (edge, clients and upstream in one process; goroutine stacks not in heap)",
		n, float64(rss1-rss0)/float64(n)/1024, float64(heap1-heap0)/float64(n)/1024)

	// Shutdown: each client gets a close frame, and every tunnel ends.
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, br := range readers {
			_ = conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(br)
			if !bytes.Equal(b, []byte{0x88, 0x02, 0x03, 0xe9}) {
				t.Errorf("tunnel %d on shutdown: got %x, want a 1001 close frame", i, b)
				return
			}
		}
	}()
	shutdownEdge(t, h)
	<-done
	t.Logf("shutdown closed %d tunnels in %v", n, time.Since(start).Round(time.Millisecond))
	if got := h.e.WebSockets(); got != 0 {
		t.Errorf("%d tunnels open after Shutdown", got)
	}
}

func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm") // the edge runs on Linux
	if err != nil {
		t.Fatalf("reading the test's RSS: %v", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func heapInUse() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

func shutdownEdge(t testing.TB, h *harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.e.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// BenchmarkWebSocketRelay: one tunnel, a 38-byte frame each way per op (S6's message),
// the client, the edge and the echo upstream all in this process: for profiles of the
// relay (-cpuprofile), whose own share is small beside the system calls and the
// scheduler's wake-ups every message costs each of the three.
func BenchmarkWebSocketRelay(b *testing.B) {
	h := newHarness(b)
	up := newWSUpstream(b, false)
	putWSRoute(h, up.url)
	c, br, st := wsDial(b, h.public, "acme."+domain, "/ws")
	if st != 101 {
		b.Fatalf("upgrade: %d", st)
	}
	defer c.Close()
	msg := make([]byte, 38)
	got := make([]byte, len(msg))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, got); err != nil {
			b.Fatal(err)
		}
	}
}
