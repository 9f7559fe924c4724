package edge_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/tenants"
)

// rawUpstream answers every request on a connection with answer(path), written as is,
// and closes the connection when closeAfter says so. It counts the connections made.
type rawUpstream struct {
	ln    net.Listener
	conns atomic.Int64
}

func newRawUpstream(t testing.TB, answer func(path string) (resp string, closeAfter bool)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					resp, closeAfter := answer(req.URL.Path)
					if _, err := io.WriteString(c, resp); err != nil || closeAfter {
						return
					}
				}
			}(c)
		}
	}()
	return u
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

// TestResponseFraming relays every way an upstream can frame a response body: small
// bodies read whole, large and chunked ones streamed, trailers passed on, bodiless
// statuses, and a body delimited by the upstream closing the connection.
func TestResponseFraming(t *testing.T) {
	big := strings.Repeat("b", 64<<10+1) // one byte over what the edge reads whole
	limit := strings.Repeat("l", 64<<10)
	answers := map[string]struct {
		resp  string
		close bool
	}{
		"/small":      {"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", false},
		"/empty":      {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
		"/limit":      {"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n" + limit, false},
		"/big":        {"HTTP/1.1 200 OK\r\nContent-Length: 65537\r\n\r\n" + big, false},
		"/chunked":    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n", false},
		"/trailer":    {"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n", false},
		"/nobody":     {"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", false},
		"/304":        {"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", false},
		"/untilclose": {"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", true},
		"/interim": {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	}
	up := newRawUpstream(t, func(path string) (string, bool) {
		a, ok := answers[path]
		if !ok {
			return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false
		}
		return a.resp, a.close
	})
	h := newHarness(t)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.url())
	h.e.Loaded()
	host := "acme." + domain

	for _, c := range []struct {
		path, body string
		status     int
		header     map[string]string
	}{
		{"/small", "hello", 200, map[string]string{"Content-Type": "text/plain", "Content-Length": "5"}},
		{"/empty", "", 200, map[string]string{"Content-Length": "0"}},
		{"/limit", limit, 200, map[string]string{"Content-Length": "65536"}},
		{"/big", big, 200, map[string]string{"Content-Length": "65537"}},
		{"/chunked", "hello world", 200, nil},
		{"/nobody", "", 204, map[string]string{"X-A": "1"}},
		{"/304", "", 304, map[string]string{"Etag": `"x"`}},
		{"/untilclose", "until the end", 200, nil},
		{"/interim", "ok", 200, nil},
		{"/small", "hello", 200, nil}, // after the close-delimited one: a new connection
	} {
		r := h.get(host, c.path)
		if r.status != c.status || r.body != c.body {
			t.Errorf("%s: %d %.60q, want %d %.60q", c.path, r.status, r.body, c.status, c.body)
		}
		for k, v := range c.header {
			if got := r.header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", c.path, k, got, v)
			}
		}
	}

	// The trailer of a chunked body reaches a client that reads it.
	c, err := net.Dial("tcp", h.public)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /trailer HTTP/1.1\r\nHost: %s\r\nTE: trailers\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "abc" || resp.Trailer.Get("X-Sum") != "42" {
		t.Errorf("/trailer: %q %v, trailer %v", b, err, resp.Trailer)
	}

	// Keep-alive upstream connections are reused: one for the whole test but the one
	// the close-delimited body ended. A streamed body's connection goes back to the pool
	// only after its last byte reached the client, so the next request may race it and
	// dial: the two streamed bodies (/big, /chunked) may each cost one connection more.
	if n := up.conns.Load(); n < 2 || n > 4 {
		t.Errorf("the edge opened %d upstream connections for 11 calls, want 2 (at most 4)", n)
	}
}

// TestTruncatedResponses: a body that ends before its Content-Length is never passed
// off as whole. A small one (read whole) fails the exchange: 502, and the GET is not
// sent again (its answer had begun, on a new connection); a streamed one breaks the
// client's connection mid-body. Neither connection goes back to the pool.
func TestTruncatedResponses(t *testing.T) {
	var hits atomic.Int64
	up := newRawUpstream(t, func(path string) (string, bool) {
		hits.Add(1)
		if path == "/small" {
			return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly forty bytes of the hundred declared.", true
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" + strings.Repeat("x", 100000), true
	})
	h := newHarness(t)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.url())
	h.e.Loaded()
	host := "acme." + domain

	r := h.get(host, "/small")
	if r.status != 502 || r.errCode() != tenants.EUpstreamFailed {
		t.Errorf("/small: %s, want 502 %s", r, tenants.EUpstreamFailed)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("/small: upstream hit %d times, want 1 (an answer that began is not resent)", n)
	}

	c, err := net.Dial("tcp", h.public)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || err == nil || n >= 200000 {
		t.Errorf("/big: %d, %d bytes, %v: want a broken 200", resp.StatusCode, n, err)
	}
}

// TestHugeResponseStreams: a 100 MB response streams through; the edge's heap does not
// grow with it.
func TestHugeResponseStreams(t *testing.T) {
	const size = 100 << 20
	chunk := []byte(strings.Repeat("0123456789abcdef", 4096)) // 64 KiB
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
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(size)+"\r\n\r\n"); err != nil {
						return
					}
					for sent := 0; sent < size; sent += len(chunk) {
						if _, err := c.Write(chunk); err != nil {
							return
						}
					}
				}
			}(c)
		}
	}()
	h := newHarness(t)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", "http://"+ln.Addr().String())
	h.e.Loaded()

	var before, peak runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, _ := http.NewRequest("GET", "http://"+h.public+"/huge", nil)
	req.Host = "acme." + domain
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		if n%(16<<20) < int64(m) {
			runtime.ReadMemStats(&peak)
			if grown := int64(peak.HeapInuse) - int64(before.HeapInuse); grown > 32<<20 {
				t.Fatalf("heap grew by %d MB after %d MB relayed: the body is being buffered", grown>>20, n>>20)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", n, err)
		}
	}
	if n != size {
		t.Fatalf("relayed %d bytes, want %d", n, size)
	}
}

// TestOneProcYield runs requests of every kind with GOMAXPROCS=1, where the edge's
// connections yield before reading an answer (conn.Upstream.YieldsReads), many at a time.
func TestOneProcYield(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	up := newUpstream(t, "up")
	big := strings.Repeat("z", 200<<10)
	raw := newRawUpstream(t, func(path string) (string, bool) {
		if path == "/raw/big" {
			return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big, false
		}
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false
	})
	h := newHarness(t)
	acme := h.tenant("acme")
	h.route(acme, "echo", []string{"/echo"}, nil, "", up.URL)
	h.route(acme, "raw", []string{"/raw"}, nil, "", raw.url())
	h.e.Loaded()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		go func(g int) {
			var err error
			defer func() { errs <- err }()
			for i := 0; i < 30 && err == nil; i++ {
				var req *http.Request
				var want string
				switch i % 3 {
				case 0:
					body := fmt.Sprintf("body %d/%d", g, i)
					req, _ = http.NewRequest("POST", "http://"+h.public+"/echo/x", strings.NewReader(body))
					want = `"body":"` + body + `"`
				case 1:
					req, _ = http.NewRequest("GET", "http://"+h.public+"/raw/big", nil)
					want = big
				default:
					req, _ = http.NewRequest("GET", "http://"+h.public+"/raw/chunked", nil)
					want = "ok"
				}
				req.Host = "acme." + domain
				resp, rerr := client.Do(req)
				if rerr != nil {
					err = rerr
					return
				}
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr != nil || resp.StatusCode != 200 || !strings.Contains(string(b), want) {
					err = fmt.Errorf("%s %s: %d %.80q %v", req.Method, req.URL.Path, resp.StatusCode, b, rerr)
				}
			}
		}(g)
	}
	for g := 0; g < 16; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
