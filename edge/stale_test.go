package edge_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/tenants"
)

// TestStreamedBodyNotResent: a request whose body streams through (over the in-memory
// threshold) cannot be sent twice: the first attempt uses the stream up. When its pooled
// connection turns out stale, the edge must answer with the failure, not resend the
// request without its body (the upstream then saw an empty PUT and answered 200).
func TestStreamedBodyNotResent(t *testing.T) {
	const size = 256 << 10
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var puts []int64 // body sizes of the PUTs the upstream received
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				n, _ := io.Copy(io.Discard, req.Body)
				if req.Method == "PUT" {
					mu.Lock()
					puts = append(puts, n)
					mu.Unlock()
				}
				// One answer per connection, without Connection: close: the edge pools
				// the connection, which is stale by the next request.
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}(c)
		}
	}()
	h := newHarness(t)
	acme := h.tenant("acme")
	h.put(&tenants.Route{ID: "r", TenantID: acme, Name: "r", Paths: []string{"/"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://" + ln.Addr().String(), Weight: 1}}}})
	h.e.Loaded()
	host := "acme." + domain

	for i := 0; i < 3; i++ {
		if r := h.get(host, "/warm"); r.status != 200 {
			t.Fatalf("GET /warm: %s", r)
		}
		time.Sleep(50 * time.Millisecond) // the upstream's close reaches the pooled connection
		req, _ := http.NewRequest("PUT", "http://"+h.public+"/put", strings.NewReader(strings.Repeat("p", size)))
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 502 {
			t.Fatalf("PUT over a stale connection: %d, want 200 or 502", resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range puts {
		if n != size {
			t.Errorf("the upstream received a PUT with %d bytes of body, want %d (the request resent without its body)", n, size)
		}
	}
}
