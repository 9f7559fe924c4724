package edge_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/upstreamclient"
	"tollgate/tenants"
)

// scriptedUpstream answers each request with what its script writes on the raw
// connection; the script learns which request of its connection it answers (from 1) and
// may close the connection by returning false. It counts connections and requests by path,
// and Restart closes the listener and every connection, then listens again on the same
// address, as a restarted upstream does.
type scriptedUpstream struct {
	t      *testing.T
	script func(c net.Conn, n int, req *http.Request) bool
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
	seen  map[string]int // "METHOD /path body" → times received
	dials atomic.Int32
}

func newScriptedUpstream(t *testing.T, script func(c net.Conn, n int, req *http.Request) bool) *scriptedUpstream {
	u := &scriptedUpstream{t: t, script: script, seen: map[string]int{}}
	u.listen("127.0.0.1:0")
	t.Cleanup(u.close)
	return u
}

func (u *scriptedUpstream) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		u.t.Fatal(err)
	}
	u.mu.Lock()
	u.ln, u.addr = ln, ln.Addr().String()
	u.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.dials.Add(1)
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			go u.serve(c)
		}
	}()
}

func (u *scriptedUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		u.mu.Lock()
		u.seen[req.Method+" "+req.URL.Path+" "+string(body)]++
		u.mu.Unlock()
		if !u.script(c, n, req) {
			return
		}
	}
}

func (u *scriptedUpstream) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ln.Close()
	for _, c := range u.conns {
		c.Close()
	}
	u.conns = nil
}

// Restart closes every connection and listens again on the same address.
func (u *scriptedUpstream) Restart() {
	u.close()
	u.listen(u.addr)
}

func (u *scriptedUpstream) times(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[key]
}

func (u *scriptedUpstream) url() string { return "http://" + u.addr }

// withReuseCheck runs the test with upstreamclient.SetReuseCheck(on), restoring the default.
func withReuseCheck(t *testing.T, on bool) {
	upstreamclient.SetReuseCheck(on)
	t.Cleanup(func() { upstreamclient.SetReuseCheck(true) })
}

const poison = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\npoisoned"

// TestSurplusBytesNeverAnswerAnotherRequest: an upstream that sends more than its
// Content-Length says (here a whole second answer, in the same write, right after it, or
// a moment later) must not have those bytes read as the answer to the next request on its
// connection, which would then be another client's: every request gets its own answer.
func TestSurplusBytesNeverAnswerAnotherRequest(t *testing.T) {
	up := newScriptedUpstream(t, func(c net.Conn, _ int, req *http.Request) bool {
		first := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfirst"
		switch req.URL.Path {
		case "/together":
			io.WriteString(c, first+poison)
		case "/after":
			io.WriteString(c, first)
			io.WriteString(c, poison)
		case "/late":
			io.WriteString(c, first)
			time.Sleep(30 * time.Millisecond)
			io.WriteString(c, poison)
		default:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nclean")
		}
		return true
	})
	h := newHarness(t)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.url())
	h.e.Loaded()
	host := "acme." + domain
	for i := range 4 {
		for _, p := range []string{"/together", "/after", "/late"} {
			if r := h.get(host, p); r.status != 200 || r.body != "first" {
				t.Fatalf("round %d, %s: %s, want the upstream's 200 first", i, p, r)
			}
			time.Sleep(60 * time.Millisecond) // the late surplus is in by the next request
			if r := h.get(host, "/clean"); r.status != 200 || r.body != "clean" {
				t.Fatalf("round %d, the request after %s: %s, want its own answer (200 clean)", i, p, r)
			}
		}
	}
}

// TestBodyAfterBodilessAnswer: an answer that has no body by its status (204, 304) or by
// the request (HEAD) ends at its head, whatever its Content-Length; bytes sent after it
// are not the next request's answer.
func TestBodyAfterBodilessAnswer(t *testing.T) {
	up := newScriptedUpstream(t, func(c net.Conn, _ int, req *http.Request) bool {
		switch {
		case req.Method == "HEAD":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 91\r\n\r\n"+poison)
		case req.URL.Path == "/204":
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n"+poison)
		case req.URL.Path == "/304":
			io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n")
			time.Sleep(30 * time.Millisecond)
			io.WriteString(c, poison)
		default:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nclean")
		}
		return true
	})
	h := newHarness(t)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", up.url())
	h.e.Loaded()
	host := "acme." + domain
	for i := range 3 {
		for _, c := range []struct {
			method, path string
			status       int
		}{{"HEAD", "/head", 200}, {"GET", "/204", 204}, {"GET", "/304", 304}} {
			if r := send(t, h.public, c.method, host, c.path, nil, ""); r.status != c.status || r.body != "" {
				t.Fatalf("round %d, %s %s: %s, want %d without a body", i, c.method, c.path, r, c.status)
			}
			time.Sleep(60 * time.Millisecond)
			if r := h.get(host, "/clean"); r.status != 200 || r.body != "clean" {
				t.Fatalf("round %d, the request after %s %s: %s, want its own answer (200 clean)", i, c.method, c.path, r)
			}
		}
	}
}

// TestStaleConnectionAfterUpstreamRestart: an upstream that restarted closed the edge's
// pooled connections; the next request still succeeds, on a new connection, whether the
// pool notices the close before sending (the reuse check) or only when the request fails
// on the stale connection (then it is sent once more on a new one). With the check a POST
// may go first after a restart; without it only an idempotent request may be sent again,
// so the GET goes first and the others find the connection it made.
func TestStaleConnectionAfterUpstreamRestart(t *testing.T) {
	for _, check := range []bool{true, false} {
		name := "reuse-check-on"
		if !check {
			name = "reuse-check-off"
		}
		t.Run(name, func(t *testing.T) {
			withReuseCheck(t, check)
			up := newScriptedUpstream(t, func(c net.Conn, _ int, req *http.Request) bool {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
				return true
			})
			h := newHarness(t)
			acme := h.tenant("acme")
			h.route(acme, "r", []string{"/"}, nil, "", up.url())
			h.e.Loaded()
			host := "acme." + domain
			for i := range 3 {
				methods := []string{"POST", "DELETE", "GET"} // the check finds the close before any is sent
				if !check {
					methods = []string{"GET", "POST", "DELETE"}
				}
				for _, m := range methods {
					body := "body"
					if m == "GET" {
						body = "" // a body streams through to the upstream and cannot be sent twice
					}
					if r := send(t, h.public, m, host, "/x", nil, body); r.status != 200 || r.body != "ok" {
						t.Fatalf("restart %d, %s: %s, want 200 ok", i, m, r)
					}
				}
				up.Restart()
				time.Sleep(20 * time.Millisecond) // the upstream's FIN reaches the pooled connection
			}
		})
	}
}

// TestRequestNotReplayedAfterItWasSent: a request lost on a reused connection (the
// upstream read it and closed without an answer) is sent again on a new connection only
// when its method is idempotent; a POST whose body went out is answered 502, never
// replayed.
func TestRequestNotReplayedAfterItWasSent(t *testing.T) {
	for _, check := range []bool{true, false} {
		name := "reuse-check-on"
		if !check {
			name = "reuse-check-off"
		}
		t.Run(name, func(t *testing.T) {
			withReuseCheck(t, check)
			up := newScriptedUpstream(t, func(c net.Conn, n int, req *http.Request) bool {
				if n > 1 && req.URL.Path != "/warm" {
					return false // the second request on a connection: read, then closed
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
				return true
			})
			h := newHarness(t)
			acme := h.tenant("acme")
			h.route(acme, "r", []string{"/"}, nil, "", up.url())
			h.e.Loaded()
			host := "acme." + domain

			if r := h.get(host, "/warm"); r.status != 200 {
				t.Fatalf("GET /warm: %s", r)
			}
			r := send(t, h.public, "POST", host, "/pay", nil, "once")
			if r.status != 502 || r.errCode() != tenants.EUpstreamFailed {
				t.Errorf("POST lost on a reused connection: %s, want 502 %s", r, tenants.EUpstreamFailed)
			}
			if n := up.times("POST /pay once"); n != 1 {
				t.Errorf("the upstream received the POST %d times, want 1", n)
			}

			if r := h.get(host, "/warm"); r.status != 200 {
				t.Fatalf("GET /warm: %s", r)
			}
			if r := h.get(host, "/read"); r.status != 200 || r.body != "ok" {
				t.Errorf("GET lost on a reused connection: %s, want 200 ok from the new connection", r)
			}
			if n := up.times("GET /read "); n != 2 {
				t.Errorf("the upstream received the GET %d times, want 2 (lost, then sent again)", n)
			}
		})
	}
}

// BenchmarkReuseCheck is BenchmarkHandler's whole request over loopback (client → edge →
// upstream and back, in this process) with the pool's reuse check on and off: what the one
// system call per reused connection costs a request.
func BenchmarkReuseCheck(b *testing.B) {
	upURL := benchUpstream(b)
	h := newHarness(b)
	acme := h.tenant("acme")
	h.route(acme, "open", []string{"/open"}, nil, tenants.AuthNone, upURL)
	h.e.Loaded()
	client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
	for _, on := range []bool{true, false} {
		name := "check=on"
		if !on {
			name = "check=off"
		}
		b.Run(name, func(b *testing.B) {
			upstreamclient.SetReuseCheck(on)
			defer upstreamclient.SetReuseCheck(true)
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI("/open/items/42")
			req.Header.SetHost("acme." + domain)
			b.ReportAllocs()
			for b.Loop() {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}
