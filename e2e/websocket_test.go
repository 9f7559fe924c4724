package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/infra/testenv"
)

// wsEchoUpstream is a minimal WebSocket server: 101 with the right accept key, then an
// echo of every byte (the edge relays bytes, so frames need no parsing here).
func wsEchoUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
				if err != nil || !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
					return
				}
				sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
					base64.StdEncoding.EncodeToString(sum[:]))
				io.Copy(c, br)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// wsOpen upgrades a connection to the edge; the status is 101 on success.
func wsOpen(addr, host, path string, hdr ...string) (net.Conn, *bufio.Reader, int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, 0, err
	}
	extra := ""
	for i := 0; i+1 < len(hdr); i += 2 {
		extra += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s\r\n", path, host, extra)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, nil, 0, err
	}
	_ = c.SetDeadline(time.Time{})
	if resp.StatusCode != 101 {
		c.Close()
		return nil, nil, resp.StatusCode, nil
	}
	return c, br, 101, nil
}

func procRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestWebSocketIdle: 2,000 idle WebSockets through a real edge process, key auth at the
// upgrade; the edge's RSS growth per connection is measured; SIGTERM closes every one
// with a 1001 close frame and the edge exits 0.
func TestWebSocketIdle(t *testing.T) {
	t.Parallel()
	const n = 2000
	s := newStack(t)
	_, api := s.startAPI()
	edgeProc, edge := s.startEdge()
	defer edge.close()
	up := wsEchoUpstream(t)
	slug := testenv.Name("ws")
	api.createTenant(slug)
	api.createRoute(slug, routeSpec("ws", "/ws", up, "key", "websocket", true))
	cid := api.createConsumer(slug, "alice")
	_, key := api.createKey(slug, cid)
	host := slug + ".localhost"

	eventually(t, applyDeadline, "websocket route at the edge", func() error {
		c, _, st, err := wsOpen(s.edgeAddr, host, "/ws", "X-API-Key", key)
		if err != nil {
			return err
		}
		if st != 101 {
			return fmt.Errorf("upgrade: %d", st)
		}
		c.Close()
		return nil
	})
	if _, _, st, err := wsOpen(s.edgeAddr, host, "/ws"); err != nil || st != 401 {
		t.Errorf("upgrade without a key: %d %v, want 401", st, err)
	}

	pid := edgeProc.cmd.Process.Pid
	time.Sleep(200 * time.Millisecond)
	rss0 := procRSS(t, pid)
	conns := make([]net.Conn, 0, n)
	readers := make([]*bufio.Reader, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		c, br, st, err := wsOpen(s.edgeAddr, host, "/ws", "X-API-Key", key)
		if err != nil || st != 101 {
			t.Fatalf("upgrade %d: %d %v", i, st, err)
		}
		conns = append(conns, c)
		readers = append(readers, br)
	}
	opened := time.Since(start)
	// Every one is alive: a message through a sample of them.
	for i := 0; i < n; i += n / 20 {
		msg := fmt.Sprintf("ping %d", i)
		io.WriteString(conns[i], msg)
		_ = conns[i].SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(readers[i], b); err != nil || string(b) != msg {
			t.Fatalf("echo through tunnel %d: %q %v", i, b, err)
		}
		_ = conns[i].SetReadDeadline(time.Time{})
	}
	time.Sleep(500 * time.Millisecond)
	rss1 := procRSS(t, pid)
	t.Logf("%d idle WebSockets opened in %v; edge RSS %.1f MiB → %.1f MiB: %.1f KiB per connection",
		n, opened.Round(time.Millisecond), float64(rss0)/(1<<20), float64(rss1)/(1<<20), float64(rss1-rss0)/n/1024)

	// SIGTERM: each client gets 1001 and its connection closes; the edge exits 0.
	var wg sync.WaitGroup
	var bad sync.Map
	for i := range conns {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_ = conns[i].SetReadDeadline(time.Now().Add(20 * time.Second))
			b, _ := io.ReadAll(readers[i])
			if !bytes.Equal(b, []byte{0x88, 0x02, 0x03, 0xe9}) {
				bad.Store(i, fmt.Sprintf("%x", b))
			}
		}(i)
	}
	edgeProc.stopClean(t, stopTimeout)
	wg.Wait()
	nbad := 0
	bad.Range(func(k, v any) bool {
		if nbad < 5 {
			t.Errorf("tunnel %v on shutdown: got %v, want a 1001 close frame", k, v)
		}
		nbad++
		return true
	})
	if nbad > 0 {
		t.Errorf("%d of %d tunnels did not close cleanly", nbad, n)
	}
}
