package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/infra/testenv"
)

// largePattern is the bytes the large upstream repeats: position-dependent, so a
// reordered, repeated or dropped block of the relayed body shows as a mismatch.
var largePattern = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}()

// largeUpstream answers GET /big/<n> with n bytes of largePattern, generated as it is
// written (the test never holds the body), with a Content-Length, or chunked when the
// query says ?chunked. Any other path counts as a hit and is echoed.
func largeUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		size, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/big/"), 10, 64)
		if err != nil || !strings.HasPrefix(r.URL.Path, "/big/") {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "read %d", n)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.URL.RawQuery != "chunked" {
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		}
		for left := size; left > 0; {
			n := min(left, int64(len(largePattern)))
			if _, err := w.Write(largePattern[:n]); err != nil {
				return // the edge went away; the client side reports it
			}
			left -= n
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// patternChecker is an io.Writer that counts what it is given and checks it against
// largePattern at the running offset.
type patternChecker struct {
	n   int64
	bad int64 // offset of the first wrong byte, -1 while all are right
}

func (c *patternChecker) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		off := int(c.n % int64(len(largePattern)))
		k := min(len(p), len(largePattern)-off)
		if c.bad < 0 && string(p[:k]) != string(largePattern[off:off+k]) {
			for i := range k {
				if p[i] != largePattern[off+i] {
					c.bad = c.n + int64(i)
					break
				}
			}
		}
		c.n += int64(k)
		p = p[k:]
	}
	return total, nil
}

// getLarge fetches path through the edge, checking the body as it streams by.
func getLarge(t *testing.T, edge *edgeClient, slug, path string) (int, *patternChecker) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+edge.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = slug + ".localhost:" + portOf(edge.addr)
	// A client without a total timeout: the 100 MB transfer under the race detector may
	// outlast edgeClient's 30 s, and the route's own timeout bounds it anyway.
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	c := &patternChecker{bad: -1}
	if _, err := io.Copy(c, resp.Body); err != nil {
		t.Fatalf("GET %s: reading the body after %d bytes: %v", path, c.n, err)
	}
	return resp.StatusCode, c
}

// TestLargeResponses: 1 MB and 100 MB responses through a real edge process arrive
// whole and intact, and the edge streams them: its resident memory grows by less than
// 16 MiB while it relays 100 MB (with a Content-Length, and chunked).
//
// What the RSS bound means depends on how the harness built the edge (raceBuild):
//   - a normal build (the default, and how CI runs e2e: `go test -race ./e2e/` races the
//     test process, not the edge binary, unless E2E_RACE=1): a buffering edge would grow
//     by the body's 100 MB, a streaming one by its relay buffers; 16 MiB separates the
//     two by a wide margin;
//   - a -race build (E2E_RACE=1): the race runtime keeps shadow memory for everything the
//     edge touches and a history per goroutine, so its RSS moves more, but buffering
//     100 MB would still show as 100 MB or more (plus shadow). The same 16 MiB bound is
//     asserted: measured here, a race-built edge grew by 3.4 and 0.5 MiB, a normal one
//     by 0.2 and 0.3 MiB.
func TestLargeResponses(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	edgeProc, edge := s.startEdge()
	defer edge.close()
	up, _ := largeUpstream(t)
	slug := testenv.Name("large")
	api.createTenant(slug)
	// The route's timeout bounds the whole relay of a streamed body: room for 100 MB
	// under the race detector on a busy machine.
	api.createRoute(slug, routeSpec("big", "/big", up.URL, "none", "timeout_ms", 120_000))
	eventually(t, applyDeadline, "the route at the edge", func() error {
		r, err := edge.do("GET", slug, "/big/1")
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("status %s", r)
		}
		return nil
	})

	const mb = 1 << 20
	// 1 MB: also the warm-up, so the edge's pools and buffers for a streamed body exist
	// before the baseline RSS is read.
	for range 3 {
		status, c := getLarge(t, edge, slug, "/big/"+strconv.Itoa(mb))
		if status != 200 || c.n != mb || c.bad >= 0 {
			t.Fatalf("1 MB response: status %d, %d bytes (want %d), first wrong byte at %d", status, c.n, mb, c.bad)
		}
	}

	pid := edgeProc.cmd.Process.Pid
	for _, tc := range []struct{ name, query string }{{"content-length", ""}, {"chunked", "?chunked"}} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 100 * mb
			time.Sleep(200 * time.Millisecond) // let the previous transfer's buffers settle
			before := procRSS(t, pid)
			var peak atomic.Int64
			peak.Store(before)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if r := vmRSS(pid); r > peak.Load() {
							peak.Store(r)
						}
					}
				}
			}()
			start := time.Now()
			status, c := getLarge(t, edge, slug, "/big/"+strconv.Itoa(size)+tc.query)
			took := time.Since(start)
			close(stop)
			wg.Wait()
			if status != 200 {
				t.Fatalf("status %d", status)
			}
			if c.n != size {
				t.Errorf("got %d bytes, want exactly %d", c.n, size)
			}
			if c.bad >= 0 {
				t.Errorf("body differs from what the upstream sent at byte %d", c.bad)
			}
			growth := peak.Load() - before
			t.Logf("100 MiB (%s) in %v (%.0f MiB/s); edge RSS %.1f MiB before, peak %.1f MiB: +%.1f MiB (race build: %v)",
				tc.name, took.Round(time.Millisecond), float64(size)/mb/took.Seconds(),
				float64(before)/mb, float64(peak.Load())/mb, float64(growth)/mb, raceBuild)
			if growth >= 16*mb {
				t.Errorf("edge RSS grew by %.1f MiB while relaying 100 MB, want < 16 MiB: the body is buffered, not streamed", float64(growth)/mb)
			}
		})
	}
}

// TestLargeRequestBodyRefused: a route's max_body_bytes refuses a larger request body
// with 413 body_too_large and the upstream never sees it — a declared Content-Length over
// the limit, a small body that arrived with the headers, and a chunked body once the
// limit is passed — while a body of exactly the limit goes through.
//
// The refusals of a body still on the wire are sent over a raw connection that keeps
// reading while it writes: the edge answers and closes without reading the rest, and a
// client that only notices its failed write (as net/http's does) never sees the 413.
func TestLargeRequestBodyRefused(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	defer edge.close()
	up, hits := largeUpstream(t)
	slug := testenv.Name("bodylimit")
	api.createTenant(slug)
	const limit = 1 << 20
	api.createRoute(slug, routeSpec("upload", "/upload", up.URL, "none", "max_body_bytes", limit))
	api.createRoute(slug, routeSpec("small", "/small", up.URL, "none", "max_body_bytes", 1024))
	eventually(t, applyDeadline, "the routes at the edge", func() error {
		if err := served(edge, slug, "/upload", "")(); err != nil {
			return err
		}
		return served(edge, slug, "/small", "")()
	})
	host := slug + ".localhost:" + portOf(edge.addr)

	// post sends size bytes (generated, not held) with net/http, with a Content-Length or
	// chunked.
	post := func(path string, size int64, chunked bool) *edgeResp {
		t.Helper()
		var body io.Reader = io.LimitReader(zeros{}, size)
		if chunked {
			body = struct{ io.Reader }{body} // hides the size: net/http sends it chunked
		}
		req, err := http.NewRequest("POST", "http://"+edge.addr+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if !chunked {
			req.ContentLength = size
		}
		req.Host = host
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := edge.hc.Do(req)
		if err != nil {
			t.Fatalf("POST %s, %d bytes (chunked %v): %v", path, size, chunked, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("POST %s, %d bytes (chunked %v): reading the answer: %v", path, size, chunked, err)
		}
		return &edgeResp{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}

	// raw sends head, then body (if any) while reading the answer.
	raw := func(head string, body func(io.Writer)) *edgeResp {
		t.Helper()
		c, err := net.Dial("tcp", edge.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		if body != nil {
			go body(c) // fails once the edge has closed; the answer is what matters
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to %q: %v", strings.SplitN(head, "\r\n", 2)[0], err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return &edgeResp{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}

	refused := func(name string, r *edgeResp, before int64) {
		t.Helper()
		if err := checkEnvelope(r, 413, "body_too_large"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if n := hits.Load() - before; n != 0 {
			t.Errorf("%s: the upstream was called %d times", name, n)
		}
	}

	// Declared over the limit. The body is sent too: the edge's server reads the start
	// of a body before the route's step sees the declared length, so a client that
	// waits for an answer before sending (without Expect: 100-continue) waits in vain.
	before := hits.Load()
	refused("Content-Length 8 MiB", raw(fmt.Sprintf(
		"POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", host, 8<<20),
		func(w io.Writer) { io.Copy(w, io.LimitReader(zeros{}, 8<<20)) }), before)

	// A small body over a small limit, read whole with the headers.
	before = hits.Load()
	refused("4 KiB over a 1 KiB limit", post("/small", 4<<10, false), before)

	// Chunked: the edge reads up to the limit, then refuses.
	before = hits.Load()
	refused("chunked 2 MiB", raw(fmt.Sprintf(
		"POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n", host),
		func(w io.Writer) {
			chunk := make([]byte, 64<<10)
			for range 32 {
				if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return
				}
			}
			io.WriteString(w, "0\r\n\r\n")
		}), before)

	for _, chunked := range []bool{false, true} {
		r := post("/upload", limit, chunked)
		if r.Status != 200 || string(r.Body) != fmt.Sprintf("read %d", limit) {
			t.Errorf("a body of exactly the limit (chunked %v): %s, want 200 \"read %d\"", chunked, r, limit)
		}
	}
}

// vmRSS is the process's resident memory in bytes, 0 when it cannot be read (the
// sampler runs off the test goroutine, where procRSS's t.Fatal may not be called).
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
