package edge_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/edge"
	"tollgate/edge/meter"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// The metered bytes are the body bytes that went through, counted where they went
// through (meter.go): these tests send known bodies through the real edge handler
// and real upstream servers on loopback and compare the meter's counts with what each
// end actually sent and received.

// bytesUpstream answers by its query: n body bytes, with a Content-Length
// (mode=cl, the default) or chunked in odd-sized flushed pieces (mode=chunked); with
// send=k it declares n but sends k bytes and closes the connection. It reads the whole
// request body first and reports its length in X-Got-Body and its SHA-256 in X-Body-Sum.
func bytesUpstream(t testing.TB) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.New()
		got, _ := io.Copy(sum, r.Body)
		q := r.URL.Query()
		n, _ := strconv.Atoi(q.Get("n"))
		w.Header().Set("X-Got-Body", strconv.FormatInt(got, 10))
		w.Header().Set("X-Body-Sum", hex.EncodeToString(sum.Sum(nil)))
		w.Header().Set("Content-Type", "application/octet-stream")
		body := pattern(n)
		switch q.Get("mode") {
		case "chunked":
			f := w.(http.Flusher)
			w.WriteHeader(200)
			for i, size := 0, 7919; len(body) > 0; i++ {
				k := min(size+i%13*101, len(body)) // odd, varying piece sizes
				w.Write(body[:k])
				f.Flush()
				body = body[k:]
			}
		case "cut":
			send, _ := strconv.Atoi(q.Get("send"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.WriteHeader(200)
			w.Write(body[:send])
			w.(http.Flusher).Flush()
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close() // a FIN where the rest of the body should be
			}
		default:
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.Write(body)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

// chunkedBody is body in HTTP/1.1 chunked framing, in odd-sized chunks.
func chunkedBody(body []byte) string {
	var b strings.Builder
	for i := 0; len(body) > 0; i++ {
		k := min(1+i*977%8191, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", k, body[:k])
		body = body[k:]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// meteredHarness is an edge metering into a sink the test reads.
func meteredHarness(t *testing.T, opts ...func(*edge.Config)) (*harness, *meter.Meter, *memSink) {
	sink := &memSink{}
	m := newMeter(t, sink)
	h := newHarness(t, append([]func(*edge.Config){func(c *edge.Config) { c.Meter = m }}, opts...)...)
	return h, m, sink
}

// waitCounts flushes the meter until the cell "tenant route consumer class" holds want
// (a streamed body or a tunnel is recorded when it ends, a moment after the client
// has seen its last byte).
func waitCounts(t *testing.T, m *meter.Meter, sink *memSink, cell string, want usage.Counts) {
	t.Helper()
	var got usage.Counts
	waitFor(t, 5*time.Second, func() string {
		if err := m.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got = sink.sum()[cell]; got != want {
			return fmt.Sprintf("%q: %+v, want %+v", cell, got, want)
		}
		return ""
	})
	// Nothing more comes later.
	time.Sleep(20 * time.Millisecond)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got = sink.sum()[cell]; got != want {
		t.Fatalf("%q: %+v after settling, want %+v", cell, got, want)
	}
}

// TestMeteredBytesAreTheBodies: bodies of known sizes, in memory and streamed, with a
// Content-Length and chunked each way, are counted exactly; HEAD counts no body.
func TestMeteredBytesAreTheBodies(t *testing.T) {
	h, m, sink := meteredHarness(t)
	up := bytesUpstream(t)
	acme := h.tenant("acme")
	host := "acme." + domain
	const mib = 1 << 20
	cases := []struct {
		name, method, query string
		in                  int
		chunkedIn           bool
		out                 int
	}{
		{"small", "POST", "n=5000", 1000, false, 5000},            // both in memory
		{"streamed", "POST", "n=300000", 200_000, false, 300_000}, // both stream (over 64 KiB)
		{"chunked", "POST", "mode=chunked&n=" + strconv.Itoa(3*mib), 150_001, true, 3 * mib},
		{"chunkedsmall", "PUT", "mode=chunked&n=10", 7, true, 10},
		{"get", "GET", "n=65537", 0, false, 65537},
		{"head", "HEAD", "n=5000", 0, false, 0},
		{"headstream", "HEAD", "mode=chunked&n=300000", 0, false, 0},
	}
	for _, c := range cases {
		h.route(acme, c.name, []string{"/" + c.name}, nil, tenants.AuthNone, up.URL)
	}
	h.e.Loaded()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := string(pattern(c.in))
			sum := sha256.Sum256([]byte(body))
			var hdr []string
			if c.chunkedIn {
				hdr = append(hdr, "Transfer-Encoding: chunked")
				body = chunkedBody([]byte(body))
			}
			r := send(t, h.public, c.method, host, "/"+c.name+"/x?"+c.query, hdr, body)
			if r.status != 200 || len(r.body) != c.out {
				t.Fatalf("%d with %d body bytes, want 200 with %d", r.status, len(r.body), c.out)
			}
			if got := r.header.Get("X-Got-Body"); got != strconv.Itoa(c.in) {
				t.Fatalf("the upstream got %s body bytes, want %d", got, c.in)
			}
			if got := r.header.Get("X-Body-Sum"); c.method != "HEAD" && got != hex.EncodeToString(sum[:]) {
				t.Fatalf("the upstream got another body than the client sent")
			}
			if c.method != "HEAD" && r.body != string(pattern(c.out)) {
				t.Fatalf("the client got another body than the upstream sent")
			}
			waitCounts(t, m, sink, acme+" "+c.name+"  2", usage.Counts{Requests: 1, Billable: 1, BytesIn: int64(c.in), BytesOut: int64(c.out)})
		})
	}
}

// TestMeteredBytesCutShort: a body that ends early counts what went through, never its
// declared length.
func TestMeteredBytesCutShort(t *testing.T) {
	h, m, sink := meteredHarness(t)
	up := bytesUpstream(t)
	acme := h.tenant("acme")
	host := "acme." + domain
	for _, r := range []string{"upcut", "gonecl", "gonechunked", "upload"} {
		h.route(acme, r, []string{"/" + r}, nil, tenants.AuthNone, up.URL)
	}
	h.e.Loaded()

	t.Run("upstream closes mid-body", func(t *testing.T) {
		r := send(t, h.public, "GET", host, "/upcut/x?mode=cut&n=1000000&send=300000", nil, "")
		if r.status != 200 || len(r.body) != 300_000 {
			t.Fatalf("%d with %d body bytes, want 200 cut at 300000", r.status, len(r.body))
		}
		waitCounts(t, m, sink, acme+" upcut  2", usage.Counts{Requests: 1, Billable: 1, BytesOut: 300_000})
	})

	for _, mode := range []string{"cl", "chunked"} {
		t.Run("client leaves mid-body, "+mode, func(t *testing.T) {
			const total, read = 64 << 20, 4 << 20
			c, err := net.Dial("tcp", h.public)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			fmt.Fprintf(c, "GET /gone%s/x?mode=%s&n=%d HTTP/1.1\r\nHost: %s\r\n\r\n", mode, mode, total, host)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", resp, err)
			}
			if _, err := io.CopyN(io.Discard, resp.Body, read); err != nil {
				t.Fatal(err)
			}
			c.Close()
			var out int64
			waitFor(t, 10*time.Second, func() string {
				if err := m.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				got := sink.sum()[acme+" gone"+mode+"  2"]
				out = got.BytesOut
				if got.Requests != 1 {
					return fmt.Sprintf("not recorded yet: %+v", got)
				}
				return ""
			})
			// Between what the client read and what the edge handed to its socket lie
			// the kernel's buffers (the edge's send buffer, the client's receive buffer)
			// and at most one copy buffer.
			t.Logf("client read %d of %d body bytes and left; metered bytes_out %d (%d beyond what it read)", read, total, out, out-read)
			if out < read || out >= total || out-read > 12<<20 {
				t.Fatalf("bytes_out %d: want between what the client read (%d) and that plus the socket buffers, far from %d", out, read, total)
			}
		})
	}

	t.Run("client stops uploading", func(t *testing.T) {
		c, err := net.Dial("tcp", h.public)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST /upload/x?n=10 HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", host, 1<<20)
		c.Write(pattern(100_000))
		c.(*net.TCPConn).CloseWrite()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 502 {
			t.Fatalf("status %d, want the edge's 502", resp.StatusCode)
		}
		waitCounts(t, m, sink, acme+" upload  5", usage.Counts{Requests: 1, BytesIn: 100_000, BytesOut: resp.ContentLength})
	})
}

// TestMeteredBytesEdgeAnswers: the edge's own answers (error envelopes, cache hits)
// count the bodies they wrote, and a request body the edge never read counts nothing.
func TestMeteredBytesEdgeAnswers(t *testing.T) {
	h, m, sink := meteredHarness(t)
	up := bytesUpstream(t)
	acme := h.tenant("acme")
	host := "acme." + domain
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.URL)
	small := &tenants.Route{ID: "small", TenantID: acme, Name: "small", Paths: []string{"/small"}, MaxBodyBytes: 1000,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}
	h.put(small)
	h.put(cacheRoute(acme, "cached", "/cached", "", up.URL, tenants.Cache{TTLMS: 60_000}))
	h.e.Loaded()

	r := send(t, h.public, "POST", host, "/keyed/x?n=10", nil, string(pattern(5000)))
	if r.status != 401 || r.errCode() == "" {
		t.Fatalf("no key: %s", r)
	}
	waitCounts(t, m, sink, acme+" keyed  4", usage.Counts{Requests: 1, BytesOut: int64(len(r.body))})

	r = send(t, h.public, "POST", host, "/small/x?n=10", nil, string(pattern(5000)))
	if r.status != 413 {
		t.Fatalf("over the body limit: %s", r)
	}
	waitCounts(t, m, sink, acme+" small  4", usage.Counts{Requests: 1, BytesOut: int64(len(r.body))})

	r = h.get(host, "/nowhere")
	if r.status != 404 || len(r.body) == 0 {
		t.Fatalf("no route: %s", r)
	}
	if rh := send(t, h.public, "HEAD", host, "/nowhere", nil, ""); rh.status != 404 || rh.body != "" {
		t.Fatalf("HEAD, no route: %s", rh)
	}
	waitCounts(t, m, sink, acme+"   4", usage.Counts{Requests: 2, BytesOut: int64(len(r.body))})

	miss := h.get(host, "/cached/x?n=40000")
	hit := h.get(host, "/cached/x?n=40000")
	if miss.header.Get("X-Cache") != "MISS" || hit.header.Get("X-Cache") != "HIT" || len(hit.body) != 40_000 || len(miss.body) != 40_000 {
		t.Fatalf("cache: %s %d, then %s %d", miss.header.Get("X-Cache"), len(miss.body), hit.header.Get("X-Cache"), len(hit.body))
	}
	waitCounts(t, m, sink, acme+" cached  2", usage.Counts{Requests: 2, Billable: 2, BytesOut: 80_000})
}

// wsFrame is one binary WebSocket frame around payload, masked as a client sends it or
// not as a server does.
func wsFrame(payload []byte, masked bool) []byte {
	f := []byte{0x82}
	var maskBit byte
	if masked {
		maskBit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		f = append(f, maskBit|byte(n))
	case n <= 0xffff:
		f = append(f, maskBit|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, maskBit|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	if !masked {
		return append(f, payload...)
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	f = append(f, key[:]...)
	for i, b := range payload {
		f = append(f, b^key[i%4])
	}
	return f
}

// wsPeer is the upstream's end of one tunnel.
type wsPeer struct {
	c  net.Conn
	br *bufio.Reader
}

// wsFrameUpstream accepts WebSocket upgrades, answers 101 with early (a server frame)
// in the same write, and hands each tunnel's upstream end to the test.
func wsFrameUpstream(t testing.TB, early []byte) (string, chan wsPeer) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	peers := make(chan wsPeer, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil {
				c.Close()
				continue
			}
			sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
			head := fmt.Sprintf("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
				base64.StdEncoding.EncodeToString(sum[:]))
			c.Write(append([]byte(head), early...))
			peers <- wsPeer{c, br}
		}
	}()
	return "http://" + ln.Addr().String(), peers
}

// TestMeteredBytesWebSocket: a tunnel's frames count as relayed, headers included
// (the edge does not parse them): client→upstream as bytes_in, upstream→client as
// bytes_out, the upstream's frame sent right behind its 101 included. The upgrade is
// one request; the bytes are recorded while the tunnel is open (here every 50 ms) and
// the rest when it closes.
func TestMeteredBytesWebSocket(t *testing.T) {
	h, m, sink := meteredHarness(t)
	edge.SetWSMeterInterval(h.e, 50*time.Millisecond)
	early := wsFrame([]byte("hello"), false)
	upURL, peers := wsFrameUpstream(t, early)
	acme := putWSRoute(h, upURL)
	host := "acme." + domain

	c, br, st := wsDial(t, h.public, host, "/ws")
	if st != 101 {
		t.Fatalf("upgrade: %d", st)
	}
	defer c.Close()
	var peer wsPeer
	select {
	case peer = <-peers:
	case <-time.After(5 * time.Second):
		t.Fatal("no tunnel reached the upstream")
	}
	defer peer.c.Close()

	// exchange sends client frames up and server frames down, and reads each side in
	// full at the other end.
	exchange := func(client, server [][]byte, alsoRead int) (in, out int64) {
		t.Helper()
		var up, down []byte
		for _, p := range client {
			up = append(up, wsFrame(p, true)...)
		}
		for _, p := range server {
			down = append(down, wsFrame(p, false)...)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(up)
			errc <- err
		}()
		if _, err := peer.c.Write(down); err != nil {
			t.Fatal(err)
		}
		_ = peer.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(up))
		if _, err := io.ReadFull(peer.br, got); err != nil || !bytes.Equal(got, up) {
			t.Fatalf("upstream read: %v", err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got = make([]byte, alsoRead+len(down))
		if _, err := io.ReadFull(br, got); err != nil || !bytes.Equal(got[alsoRead:], down) {
			t.Fatalf("client read: %v", err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		return int64(len(up)), int64(len(down) + alsoRead)
	}

	in1, out1 := exchange(
		[][]byte{[]byte("hi"), pattern(200), pattern(70_000)},
		[][]byte{pattern(300), pattern(100_000), pattern(3)},
		len(early))
	// Frame headers: 6, 8 and 14 bytes masked; 2, 4 and 10 not.
	if in1 != (2+6)+(200+8)+(70_000+14) || out1 != (5+2)+(300+4)+(100_000+10)+(3+2) {
		t.Fatalf("frame sizes: %d up, %d down", in1, out1)
	}
	cell := acme + " ws  1"
	// Recorded while the tunnel is still open.
	waitCounts(t, m, sink, cell, usage.Counts{Requests: 1, Billable: 1, BytesIn: in1, BytesOut: out1})

	in2, out2 := exchange([][]byte{pattern(1000)}, [][]byte{pattern(126)}, 0)
	closeFrame := []byte{0x88, 0x82, 1, 2, 3, 4, 0x03 ^ 1, 0xe8 ^ 2} // 1000, masked
	if _, err := c.Write(closeFrame); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(closeFrame))
	if _, err := io.ReadFull(peer.br, got); err != nil {
		t.Fatal(err)
	}
	peer.c.Close()
	waitFor(t, 5*time.Second, func() string {
		if n := h.e.WebSockets(); n != 0 {
			return fmt.Sprintf("%d tunnels open", n)
		}
		return ""
	})
	waitCounts(t, m, sink, cell, usage.Counts{Requests: 1, Billable: 1,
		BytesIn: in1 + in2 + int64(len(closeFrame)), BytesOut: out1 + out2})
}

// TestMeteredBytesRewrittenAndRetried: bytes_in is what the client sent, read once,
// whether the edge rewrote the body before forwarding it or sent it to a second target
// after the first refused the connection.
func TestMeteredBytesRewrittenAndRetried(t *testing.T) {
	h, m, sink := meteredHarness(t)
	up := bytesUpstream(t)
	acme := h.tenant("acme")
	host := "acme." + domain
	h.put(&tenants.Route{ID: "rewrite", TenantID: acme, Name: "rewrite", Paths: []string{"/rewrite"},
		Transform: &tenants.Transform{Request: &tenants.RequestTransform{JSON: &tenants.JSONTransform{Remove: []string{"secret"}}}},
		Upstream:  tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}})
	h.resilientRoute(acme, "retry", tenants.Upstream{Retries: &tenants.Retries{Attempts: 1, BudgetPercent: 100, MinPerSecond: 100}},
		deadURL(t), up.URL)
	h.e.Loaded()

	doc := `{"keep":"` + strings.Repeat("k", 1000) + `","secret":"` + strings.Repeat("s", 99_000) + `"}`
	r := send(t, h.public, "POST", host, "/rewrite/x?n=10", []string{"Content-Type: application/json"}, doc)
	if r.status != 200 || r.header.Get("X-Got-Body") != strconv.Itoa(len(`{"keep":"`)+1000+len(`"}`)) {
		t.Fatalf("rewrite: %s, the upstream got %s bytes", r, r.header.Get("X-Got-Body"))
	}
	waitCounts(t, m, sink, acme+" rewrite  2", usage.Counts{Requests: 1, Billable: 1, BytesIn: int64(len(doc)), BytesOut: 10})

	body := pattern(50_000)
	for i := 0; i < 4; i++ { // round-robin: some start on the dead target
		r = send(t, h.public, "PUT", host, "/retry/x?n=20", nil, string(body))
		if sum := sha256.Sum256(body); r.status != 200 || r.header.Get("X-Body-Sum") != hex.EncodeToString(sum[:]) {
			t.Fatalf("retry: %s", r)
		}
	}
	if n := h.metric("tollgate_edge_upstream_retries_total", map[string]string{"result": "success"}); n == 0 {
		t.Fatal("no request was retried")
	}
	waitCounts(t, m, sink, acme+" retry  2", usage.Counts{Requests: 4, Billable: 4, BytesIn: 4 * 50_000, BytesOut: 4 * 20})
}
