package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestDoor pins what the edge's front door does with clients and upstreams that are not
// polite: what a client sees byte for byte, whether its connection stays open, and what
// reached the upstream. It is black-box over TCP against a real edge process, so it holds
// whatever serves the door.
func TestDoor(t *testing.T) {
	t.Parallel()
	d := startDoor(t)

	t.Run("pipelining", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-pipe", rec.url(), d.routed("door-pipe"))
		h := d.host("door-pipe")
		c := d.dial(t)
		c.send("GET /d/1 HTTP/1.1\r\nHost: " + h + "\r\n\r\n" +
			"GET /nope HTTP/1.1\r\nHost: " + h + "\r\n\r\n" +
			"GET /d/3 HTTP/1.1\r\nHost: " + h + "\r\n\r\n")
		if r := c.mustRead("GET"); r.Status != 200 || string(r.Body) != "/d/1" {
			t.Fatalf("first answer %s, want 200 /d/1", r)
		}
		wantEnvelope(t, c.mustRead("GET"), 404, "route_not_found")
		if r := c.mustRead("GET"); r.Status != 200 || string(r.Body) != "/d/3" {
			t.Fatalf("third answer %s, want 200 /d/3", r)
		}
		// The connection is kept: one more on it.
		c.send("GET /d/4 HTTP/1.1\r\nHost: " + h + "\r\n\r\n")
		if r := c.mustRead("GET"); r.Status != 200 || string(r.Body) != "/d/4" {
			t.Fatalf("fourth answer %s, want 200 /d/4", r)
		}
		if got := without(rec.paths(), "GET /d/ready"); !slices.Equal(got, []string{"GET /d/1", "GET /d/3", "GET /d/4"}) {
			t.Fatalf("the upstream saw %q, want /d/1, /d/3, /d/4 in that order", got)
		}
		// One upstream connection, the ready check's, carried them all.
		if n := rec.opened.Load(); n != 1 {
			t.Fatalf("%d upstream connections opened, want 1 kept alive", n)
		}
	})

	t.Run("connection-close-and-http10", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-conn", rec.url(), d.routed("door-conn"))
		h := d.host("door-conn")
		for _, c := range []struct {
			name, req string
			closes    bool
		}{
			{"1.1 Connection: close", "GET /d/a HTTP/1.1\r\nHost: " + h + "\r\nConnection: close\r\n\r\n", true},
			{"1.0", "GET /d/a HTTP/1.0\r\nHost: " + h + "\r\n\r\n", true},
			{"1.0 keep-alive", "GET /d/a HTTP/1.0\r\nHost: " + h + "\r\nConnection: keep-alive\r\n\r\n", false},
		} {
			rc := d.dial(t)
			rc.send(c.req)
			if r := rc.mustRead("GET"); r.Status != 200 || string(r.Body) != "/d/a" {
				t.Fatalf("%s: answer %s, want 200 /d/a", c.name, r)
			}
			if c.closes {
				rc.mustClose(5 * time.Second)
				continue
			}
			rc.send(c.req)
			if r := rc.mustRead("GET"); r.Status != 200 {
				t.Fatalf("%s: second answer on the connection %s, want 200", c.name, r)
			}
		}
	})

	// Whatever the client's HTTP version, the upstream connection is the edge's business.
	t.Run("http10-client-upstream-keepalive", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-http10", rec.url(), d.routed("door-http10"))
		for range 3 {
			rc := d.dial(t)
			rc.send("GET /d/a HTTP/1.0\r\nHost: " + d.host("door-http10") + "\r\n\r\n")
			if r := rc.mustRead("GET"); r.Status != 200 {
				t.Fatalf("answer %s, want 200", r)
			}
			rc.mustClose(5 * time.Second)
		}
		for _, r := range withoutReady(rec.requests()) {
			if v := r.Header.Get("Connection"); v != "" {
				t.Errorf("the upstream got Connection: %s", v)
			}
		}
		if n := rec.opened.Load(); n != 1 {
			t.Fatalf("%d upstream connections opened, want 1 kept alive", n)
		}
	})

	t.Run("expect-100-continue", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-expect", rec.url(), d.routed("door-expect"))
		h := d.host("door-expect")
		c := d.dial(t)
		// The edge sends 100 Continue on the headers alone, before any body byte.
		c.send("POST /d/e HTTP/1.1\r\nHost: " + h + "\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
		if r := c.mustRead("POST"); r.Status != 100 {
			t.Fatalf("answer to the head %s, want 100 Continue", r)
		}
		c.send("hello")
		if r := c.mustRead("POST"); r.Status != 200 || string(r.Body) != "/d/e" {
			t.Fatalf("answer %s, want 200 from the upstream", r)
		}
		reqs := withoutReady(rec.requests())
		if len(reqs) != 1 || reqs[0].Body != "hello" {
			t.Fatalf("the upstream saw %+v, want one POST with body hello", reqs)
		}
		// The expectation was the edge's to meet: the upstream is not asked again.
		if v := reqs[0].Header.Get("Expect"); v != "" {
			t.Errorf("the upstream got Expect: %q, want none", v)
		}
		// The connection is kept.
		c.send("GET /d/again HTTP/1.1\r\nHost: " + h + "\r\n\r\n")
		if r := c.mustRead("GET"); r.Status != 200 {
			t.Fatalf("answer on the same connection %s, want 200", r)
		}
	})

	t.Run("expect-100-continue-refused", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-expect-no", rec.url(), d.routed("door-expect-no"))
		h := d.host("door-expect-no")
		c := d.dial(t)
		// A request the edge refuses on its head (no such route) still gets 100 Continue
		// first: the edge reads the body before it routes. RFC 9110 allows either; this
		// costs the client its upload.
		c.send("POST /nope HTTP/1.1\r\nHost: " + h + "\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
		if r := c.mustRead("POST"); r.Status != 100 {
			t.Fatalf("answer to the head %s, want 100 Continue", r)
		}
		c.send("hello")
		wantEnvelope(t, c.mustRead("POST"), 404, "route_not_found")
		// The connection is kept.
		c.send("GET /d/again HTTP/1.1\r\nHost: " + h + "\r\n\r\n")
		if r := c.mustRead("GET"); r.Status != 200 {
			t.Fatalf("answer on the same connection %s, want 200", r)
		}
		if got := without(rec.paths(), "GET /d/ready"); !slices.Equal(got, []string{"GET /d/again"}) {
			t.Fatalf("the upstream saw %q, want only the later GET", got)
		}
	})

	t.Run("head-content-length", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "1234")
			w.WriteHeader(200)
			if r.Method != "HEAD" {
				w.Write(bytes.Repeat([]byte("x"), 1234))
			}
		})
		d.route(t, "door-head", rec.url(), d.routed("door-head"))
		h := d.host("door-head")
		c := d.dial(t)
		// A GET right behind the HEAD: any body byte after the HEAD's head would show as
		// garbage in front of the GET's status line.
		c.send("HEAD /d/h HTTP/1.1\r\nHost: " + h + "\r\n\r\nGET /d/g HTTP/1.1\r\nHost: " + h + "\r\n\r\n")
		r := c.mustRead("HEAD")
		if r.Status != 200 || r.Header.Get("Content-Length") != "1234" || len(r.Body) != 0 {
			t.Fatalf("HEAD: %d Content-Length %q body %d bytes, want 200, 1234 and none", r.Status, r.Header.Get("Content-Length"), len(r.Body))
		}
		if r := c.mustRead("GET"); r.Status != 200 || len(r.Body) != 1234 {
			t.Fatalf("GET after HEAD: %d with %d bytes, want 200 with 1234", r.Status, len(r.Body))
		}
		if got := without(rec.paths(), "GET /d/ready"); !slices.Equal(got, []string{"HEAD /d/h", "GET /d/g"}) {
			t.Fatalf("the upstream saw %q, want HEAD then GET", got)
		}
		// The answer to HEAD has no body to read: its connection went back to the pool.
		if n := rec.opened.Load(); n != 1 {
			t.Fatalf("%d upstream connections opened, want 1 kept alive", n)
		}
	})

	t.Run("oversized-request-line", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-long-line", rec.url(), d.routed("door-long-line"))
		c := d.dial(t)
		c.send("GET /d/" + strings.Repeat("a", 20<<10) + " HTTP/1.1\r\nHost: " + d.host("door-long-line") + "\r\n\r\n")
		r := c.mustRead("GET")
		wantEnvelope(t, r, 400, "invalid_request")
		if !c.closing {
			t.Errorf("the answer does not say Connection: close")
		}
		c.mustClose(10 * time.Second)
		if got := without(rec.paths(), "GET /d/ready"); len(got) != 0 {
			t.Fatalf("the upstream saw %q, want nothing", got)
		}
	})

	t.Run("oversized-headers", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-big-head", rec.url(), d.routed("door-big-head"))
		var hdr strings.Builder
		for i := range 24 {
			fmt.Fprintf(&hdr, "X-Pad-%d: %s\r\n", i, strings.Repeat("b", 1000))
		}
		c := d.dial(t)
		c.send("GET /d/h HTTP/1.1\r\nHost: " + d.host("door-big-head") + "\r\n" + hdr.String() + "\r\n")
		r := c.mustRead("GET")
		wantEnvelope(t, r, 400, "invalid_request")
		if !c.closing {
			t.Errorf("the answer does not say Connection: close")
		}
		c.mustClose(10 * time.Second)
		if got := without(rec.paths(), "GET /d/ready"); len(got) != 0 {
			t.Fatalf("the upstream saw %q, want nothing", got)
		}
	})

	// A bare LF ends a line of the request head as CRLF does (RFC 9112 lets a server
	// accept it); the request is re-framed for the upstream.
	t.Run("bare-lf-head", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-lf", rec.url(), d.routed("door-lf"))
		h := d.host("door-lf")
		c := d.dial(t)
		c.send("GET /d/lf1 HTTP/1.1\nHost: " + h + "\nX-A: b\n\nGET /d/lf2 HTTP/1.1\r\nHost: " + h + "\r\n\r\n" +
			"GET /d/lf3 HTTP/1.1\r\nHost: " + h + "\nX-A: b\r\n\r\n")
		for _, p := range []string{"/d/lf1", "/d/lf2", "/d/lf3"} {
			if r := c.mustRead("GET"); r.Status != 200 || string(r.Body) != p {
				t.Fatalf("answer %s, want 200 %s", r, p)
			}
		}
		if got := without(rec.paths(), "GET /d/ready"); !slices.Equal(got, []string{"GET /d/lf1", "GET /d/lf2", "GET /d/lf3"}) {
			t.Fatalf("the upstream saw %q", got)
		}
	})

	// The same, when nothing follows the head's bare-LF blank line.
	t.Run("bare-lf-head-alone", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-lf-alone", rec.url(), d.routed("door-lf-alone"))
		h := d.host("door-lf-alone")
		for _, req := range []string{
			"GET /d/lf HTTP/1.1\nHost: " + h + "\n\n",
			"GET /d/lf HTTP/1.1\r\nHost: " + h + "\n\n",
			"POST /d/lf HTTP/1.1\nHost: " + h + "\nContent-Length: 2\n\nab",
		} {
			c := d.dial(t)
			c.send(req)
			r := c.mustRead("GET")
			if r.Status != 200 {
				wantEnvelope(t, r, 400, "invalid_request")
				c.mustClose(10 * time.Second)
			}
		}
	})

	// A client still sending a huge head when the edge has seen enough of it.
	t.Run("oversized-headers-still-sending", func(t *testing.T) {
		t.Parallel()
		rec := newRecorder(t, echoPath)
		d.route(t, "door-huge-head", rec.url(), d.routed("door-huge-head"))
		c := d.dial(t)
		var hdr strings.Builder
		for i := range 1024 {
			fmt.Fprintf(&hdr, "X-Pad-%d: %s\r\n", i, strings.Repeat("b", 1000))
		}
		wrote := make(chan error, 1)
		go func() {
			_ = c.c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			_, err := io.WriteString(c.c, "GET /d/h HTTP/1.1\r\nHost: "+d.host("door-huge-head")+"\r\n"+hdr.String()+"\r\n")
			wrote <- err
		}()
		// The answer reaches the client, not a reset, while it still writes.
		wantEnvelope(t, c.mustRead("GET"), 400, "invalid_request")
		<-wrote
		c.mustClose(10 * time.Second)
		if got := without(rec.paths(), "GET /d/ready"); len(got) != 0 {
			t.Fatalf("the upstream saw %q, want nothing", got)
		}
	})

	for _, c := range []struct {
		name string
		run  func(*testing.T, *door)
	}{
		{"smuggling", doorSmuggling},
		{"slowloris", doorSlowloris},
		{"slow-reader", doorSlowReader},
		{"client-aborts-mid-stream", doorClientAborts},
		{"upstream-closes-mid-chunked-body", doorUpstreamCuts},
		{"upstream-sends-more-than-content-length", doorUpstreamOverruns},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, d)
		})
	}

	t.Run("upstream-interim-answers", func(t *testing.T) {
		t.Parallel()
		up := newRawUpstream(t, func(c net.Conn, head string) {
			if pathOf(head) != "/d/ready" {
				io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
		})
		d.route(t, "door-interim", up.url(), d.routed("door-interim"))
		c := d.dial(t)
		c.send("GET /d/i HTTP/1.1\r\nHost: " + d.host("door-interim") + "\r\n\r\n")
		// The interim answers stay between the edge and the upstream: the client's first
		// answer is the final one.
		if r := c.mustRead("GET"); r.Status != 200 || string(r.Body) != "ok" || r.Header.Get("Link") != "" {
			t.Fatalf("answer %s (Link %q), want 200 ok alone", r, r.Header.Get("Link"))
		}
	})

	t.Run("trickling-upstream-body", func(t *testing.T) {
		t.Parallel()
		doorTrickle(t, d)
	})
}

// echoPath answers 200 with the request's path.
func echoPath(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, r.URL.Path)
}

func without(list []string, drop string) []string {
	return slices.DeleteFunc(list, func(s string) bool { return s == drop })
}

func withoutReady(reqs []seen) []seen {
	return slices.DeleteFunc(reqs, func(r seen) bool { return r.Path == "/d/ready" })
}

// ---------------------------------------------------------------------------------------
// Request smuggling

// A smuggling form is a request whose framing two parsers could read differently, built so
// that under one reading a second request, GET /smuggled, is part of the body and under
// the other it is a request of its own. Whatever the edge makes of it, the upstream must
// never receive GET /smuggled: the edge refuses the request (400 envelope, connection
// closed) or frames it one way and closes the connection after answering.
type smugglingForm struct {
	name string
	// build returns the bytes to send; hidden is the smuggled request for that host.
	build func(host, hidden string) string
	// want is what the client gets today: "refused" (400 invalid_request, connection
	// closed) or "answered-closed" (the upstream's 200 for the first request, then the
	// connection closed).
	want string
	// known, when set, is a skip message: today's behaviour is unsafe, the test states
	// the safe one.
	known string
}

// teThenCL builds a POST whose head has the te line(s) (Transfer-Encoding in some form),
// then a Content-Length covering an empty chunked body followed by the hidden request.
func teThenCL(proto, te string) func(host, hidden string) string {
	return func(host, hidden string) string {
		body := "0\r\n\r\n" + hidden
		return "POST /d/x " + proto + "\r\nHost: " + host + "\r\n" + te + "\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
}

var smugglingForms = []smugglingForm{
	{name: "cl-and-te", want: "answered-closed", build: func(host, hidden string) string {
		body := "0\r\n\r\n" + hidden
		return "POST /d/x HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + strconv.Itoa(len(body)) +
			"\r\nTransfer-Encoding: chunked\r\n\r\n" + body
	}},
	{name: "te-and-cl", want: "answered-closed", build: teThenCL("HTTP/1.1", "Transfer-Encoding: chunked")},
	{name: "two-content-lengths", want: "refused", build: func(host, hidden string) string {
		return "POST /d/x HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 0\r\nContent-Length: " +
			strconv.Itoa(len(hidden)) + "\r\n\r\n" + hidden
	}},
	{name: "two-content-lengths-reversed", want: "refused", build: func(host, hidden string) string {
		return "POST /d/x HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + strconv.Itoa(len(hidden)) +
			"\r\nContent-Length: 0\r\n\r\n" + hidden
	}},
	{name: "content-length-list", want: "refused", build: func(host, hidden string) string {
		return "POST /d/x HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 0, " + strconv.Itoa(len(hidden)) +
			"\r\n\r\n" + hidden
	}},
	{name: "te-chunked-identity", want: "refused", build: teThenCL("HTTP/1.1", "Transfer-Encoding: chunked, identity")},
	{name: "te-space-before-colon", want: "refused", build: teThenCL("HTTP/1.1", "Transfer-Encoding : chunked")},
	{name: "te-tab-chunked", want: "answered-closed", build: teThenCL("HTTP/1.1", "Transfer-Encoding:\tchunked")},
	{name: "te-obs-fold", want: "answered-closed", build: teThenCL("HTTP/1.1", "Transfer-Encoding:\r\n chunked")},
	{name: "two-te-headers", want: "refused", build: teThenCL("HTTP/1.1", "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity")},
	{name: "te-xchunked", want: "refused", build: teThenCL("HTTP/1.1", "Transfer-Encoding: xchunked")},
	{name: "te-uppercase", want: "answered-closed", build: teThenCL("HTTP/1.1", "Transfer-Encoding: CHUNKED")},
	{name: "content-length-plus-sign", want: "refused", build: func(host, hidden string) string {
		return "POST /d/x HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: +" + strconv.Itoa(len(hidden)) +
			"\r\n\r\n" + hidden
	}},
	{name: "te-http10", want: "refused", build: teThenCL("HTTP/1.0", "Transfer-Encoding: chunked")},
	{name: "chunk-size-negative", want: "refused", build: chunkedWith("-1\r\nx\r\n0\r\n\r\n")},
	{name: "chunk-size-0x-prefix", want: "refused", build: chunkedWith("0x5\r\nhello\r\n0\r\n\r\n")},
	{name: "chunk-size-overflow", want: "refused", build: chunkedWith("10000000000000001\r\nx\r\n0\r\n\r\n")},
	{name: "chunk-size-not-hex", want: "refused", build: chunkedWith("5g\r\nhello\r\n0\r\n\r\n")},
	{name: "chunk-data-longer-than-size", want: "refused", build: chunkedWith("3\r\nhello\r\n0\r\n\r\n")},
	{name: "chunk-ext-bare-lf", want: "refused", build: chunkedWith("5;a\nb\r\nhello\r\n0\r\n\r\n")},
	{name: "chunk-lines-bare-lf", want: "refused", build: chunkedWith("5\nhello\n0\n\n")},
	{name: "head-bare-lf-with-cl-and-te", want: "refused", build: func(host, hidden string) string {
		body := "0\n\n" + hidden
		return "POST /d/x HTTP/1.1\nHost: " + host + "\nContent-Length: " + strconv.Itoa(len(body)) +
			"\nTransfer-Encoding: chunked\n\n" + body
	}},
}

// chunkedWith is a chunked POST whose body is chunks followed by the hidden request.
func chunkedWith(chunks string) func(host, hidden string) string {
	return func(host, hidden string) string {
		return "POST /d/x HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + hidden
	}
}

func doorSmuggling(t *testing.T, d *door) {
	for i, f := range smugglingForms {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			if f.known != "" {
				t.Skip(f.known)
			}
			slug := fmt.Sprintf("door-smuggle-%d", i)
			rec := newRecorder(t, echoPath)
			d.route(t, slug, rec.url(), d.routed(slug))
			host := d.host(slug)
			hidden := "GET /smuggled HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
			c := d.dial(t)
			c.send(f.build(host, hidden))
			r, err := c.read("POST")
			if err != nil {
				t.Fatalf("no answer: %v (%s)", err, r)
			}
			if !c.closing {
				t.Errorf("the answer does not say Connection: close")
			}
			switch f.want {
			case "refused":
				wantEnvelope(t, r, 400, "invalid_request")
			case "answered-closed":
				if r.Status != 200 || string(r.Body) != "/d/x" {
					t.Fatalf("answer %s, want the upstream's 200", r)
				}
				// Framed as chunked (Transfer-Encoding wins over Content-Length): the
				// body ended at its last chunk, and the upstream got it re-framed.
				for _, s := range rec.requests() {
					if s.Path == "/d/x" && (s.Body != "" || s.Header.Get("Transfer-Encoding") != "") {
						t.Fatalf("the upstream got body %q, Transfer-Encoding %q; want an empty body", s.Body, s.Header.Get("Transfer-Encoding"))
					}
				}
			}
			c.mustClose(10 * time.Second)
			// A request on another connection: were the hidden request waiting in an
			// upstream connection's stream, the upstream would read it now.
			if r := d.ec.get(t, slug, "/d/after"); r.Status != 200 {
				t.Fatalf("a later request: %s", r)
			}
			for _, p := range rec.paths() {
				if strings.Contains(p, "/smuggled") {
					t.Fatalf("the upstream received the hidden request: it saw %q", rec.paths())
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------------------
// Slow clients

// doorSlowloris: a client that trickles its request head, a header line now and then,
// each gap well inside the read timeout, is cut off at the edge's request read timeout
// (60 s, the edge's ReadTimeout, which no setting of the edge command changes) without
// an answer, and the upstream never sees the request.
func doorSlowloris(t *testing.T, d *door) {
	rec := newRecorder(t, echoPath)
	d.route(t, "door-slowloris", rec.url(), d.routed("door-slowloris"))
	c := d.dial(t)
	c.send("GET /d/slow HTTP/1.1\r\nHost: " + d.host("door-slowloris") + "\r\n")
	done := make(chan error, 1)
	var got bytes.Buffer
	go func() {
		// Whatever the edge sends before it closes is kept for the report.
		_ = c.c.SetReadDeadline(time.Now().Add(120 * time.Second))
		_, err := io.Copy(&got, c.c)
		done <- err
	}()
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err != nil && !isReset(err) {
				t.Fatalf("reading from the edge: %v", err)
			}
			t.Logf("the edge closed the trickling connection after %s (%d header lines); it sent %q",
				time.Since(start).Round(time.Second), i, got.String())
			// The edge closes without a word, as nginx does: an answer to a head the
			// client never finished is one nobody asked for.
			if got.Len() != 0 {
				t.Errorf("the edge sent %q before closing, want nothing", got.String())
			}
			if p := without(rec.paths(), "GET /d/ready"); len(p) != 0 {
				t.Fatalf("the upstream saw %q", p)
			}
			return
		case <-tick.C:
			_ = c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := fmt.Fprintf(c.c, "X-Trickle-%d: a\r\n", i); err != nil {
				// Closed by the edge: the reader reports it.
				continue
			}
			if time.Since(start) > 100*time.Second {
				t.Fatalf("the edge kept a trickling request head open for %s", time.Since(start).Round(time.Second))
			}
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// endless is a raw upstream that answers every request with a chunked body it writes until
// the connection fails, counting the bytes written; its handlers' ends are sent on done
// with the error that ended them.
type endless struct {
	*rawUpstream
	written atomic.Int64
	done    chan error
}

func newEndless(t *testing.T, chunkSize int, gap time.Duration) *endless {
	e := &endless{done: make(chan error, 8)}
	data := chunk(bytes.Repeat([]byte("z"), chunkSize))
	e.rawUpstream = newRawUpstream(t, func(c net.Conn, head string) {
		if pathOf(head) == "/d/ready" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for err == nil {
			_ = c.SetWriteDeadline(time.Now().Add(90 * time.Second))
			var n int
			n, err = c.Write(data)
			e.written.Add(int64(n))
			if gap > 0 {
				time.Sleep(gap)
			}
		}
		e.done <- err
		c.Close()
	})
	return e
}

// doorSlowReader: a client that stops reading a large streamed answer makes the edge
// stop reading the upstream, so the upstream's writes block: the edge holds a bounded
// amount, never the whole body.
func doorSlowReader(t *testing.T, d *door) {
	up := newEndless(t, 64<<10, 0)
	d.route(t, "door-slow-reader", up.url(), d.routed("door-slow-reader"))
	c := d.dial(t)
	c.send("GET /d/big HTTP/1.1\r\nHost: " + d.host("door-slow-reader") + "\r\n\r\n")
	// Read the status line, then nothing.
	_ = c.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := c.br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	// The upstream's count stops growing (for two seconds): its writes block.
	var last int64 = -1
	still := 0
	eventually(t, 30*time.Second, "the upstream's writes block", func() error {
		time.Sleep(time.Second)
		n := up.written.Load()
		if n != last {
			last, still = n, 0
			return fmt.Errorf("the upstream has written %d bytes and is still writing", n)
		}
		if still++; still < 2 {
			return errNotYet
		}
		return nil
	})
	// Socket buffers on loopback autotune to a few MiB each way and the edge buffers a
	// little: far less than this.
	const bound = 64 << 20
	if last > bound {
		t.Fatalf("the upstream wrote %d MiB before blocking, want under %d MiB: the edge buffers the answer", last>>20, bound>>20)
	}
	t.Logf("the upstream blocked after %.1f MiB", float64(last)/(1<<20))
	// The client goes away: the edge drops the upstream connection, which fails the
	// upstream's blocked write.
	c.c.Close()
	select {
	case err := <-up.done:
		t.Logf("the upstream's write ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream is still writing 30 s after its client went away")
	}
}

// doorClientAborts: a client that goes away in the middle of a streamed answer leaves
// an upstream connection mid-body; the edge closes it instead of pooling it, so the next
// request goes out on another connection.
func doorClientAborts(t *testing.T, d *door) {
	const total = 64 << 20
	wrote := make(chan error, 1)
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/d/big" {
			echoPath(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		buf := bytes.Repeat([]byte("y"), 64<<10)
		var err error
		for n := 0; n < total && err == nil; n += len(buf) {
			_, err = w.Write(buf)
		}
		wrote <- err
	})
	tenant := d.route(t, "door-abort", rec.url(), d.routed("door-abort"))
	c := d.dial(t)
	c.send("GET /d/big HTTP/1.1\r\nHost: " + d.host("door-abort") + "\r\n\r\n")
	_ = c.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.CopyN(io.Discard, c.br, 1<<20); err != nil {
		t.Fatalf("reading the first MiB: %v", err)
	}
	c.c.Close()
	var big seen
	for _, r := range rec.requests() {
		if r.Path == "/d/big" {
			big = r
		}
	}
	if big.Remote == "" {
		t.Fatalf("the upstream never saw /d/big: %q", rec.paths())
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the upstream wrote the whole 64 MiB: the edge read the rest of an answer nobody wanted")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream is still writing 30 s after the client went away")
	}
	eventually(t, 10*time.Second, "the upstream sees the aborted exchange's connection closed", func() error {
		if !rec.isClosed(big.Remote) {
			return errNotYet
		}
		return nil
	})
	opened := rec.opened.Load()
	for range 3 {
		if r := d.ec.get(t, "door-abort", "/d/next"); r.Status != 200 {
			t.Fatalf("a later request: %s", r)
		}
	}
	for _, r := range rec.requests() {
		if r.Path == "/d/next" && r.Remote == big.Remote {
			t.Fatalf("a later request came on the aborted exchange's connection %s", big.Remote)
		}
	}
	if n := rec.opened.Load() - opened; n != 1 {
		t.Fatalf("the later requests opened %d upstream connections, want 1 kept alive", n)
	}
	d.meteredOnce(t, "door-abort", tenant)
}

// ---------------------------------------------------------------------------------------
// Upstreams that fail mid-body

// doorUpstreamCuts: an upstream that closes in the middle of a chunked body. The client
// has its 200 and the bytes relayed; the body then ends without its last chunk and the
// connection closes: no second status line. The request is counted once.
func doorUpstreamCuts(t *testing.T, d *door) {
	up := newRawUpstream(t, func(c net.Conn, head string) {
		if pathOf(head) == "/d/ready" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
		c.Write(chunk([]byte("hello ")))
		time.Sleep(100 * time.Millisecond)
		c.Write(chunk([]byte("wor")))
		c.Close()
	})
	tenant := d.route(t, "door-cut", up.url(), d.routed("door-cut"))
	before := d.requestsOf("door-cut")
	c := d.dial(t)
	c.send("GET /d/cut HTTP/1.1\r\nHost: " + d.host("door-cut") + "\r\n\r\n")
	r, err := c.read("GET")
	if r == nil {
		t.Fatalf("no answer: %v", err)
	}
	if r.Status != 200 {
		t.Fatalf("status %d, want the upstream's 200", r.Status)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the body read %q and ended with %v, want a truncated body (unexpected EOF)", r.Body, err)
	}
	if !strings.HasPrefix("hello wor", string(r.Body)) {
		t.Fatalf("body %q, want a prefix of what the upstream sent", r.Body)
	}
	c.mustClose(5 * time.Second)
	want := before + 1
	eventually(t, 10*time.Second, "the request counted", func() error {
		if n := d.requestsOf("door-cut"); n != want {
			return fmt.Errorf("http_requests_total %v, want %v", n, want)
		}
		return nil
	})
	time.Sleep(1500 * time.Millisecond) // a second count would come with the exchange's end
	if n := d.requestsOf("door-cut"); n != want {
		t.Fatalf("http_requests_total %v after the cut request, want %v: counted twice", n, want)
	}
	d.meteredOnce(t, "door-cut", tenant)
}

// doorTrickle: an upstream that sends its head at once and then its body a byte at a
// time is cut off at the route's timeout (timeout_ms bounds the whole exchange).
func doorTrickle(t *testing.T, d *door) {
	t.Run("chunked", func(t *testing.T) {
		t.Parallel()
		up := newEndless(t, 1, 50*time.Millisecond)
		tenant := d.route(t, "door-trickle", up.url(), d.routed("door-trickle"), "timeout_ms", 1000)
		before := d.requestsOf("door-trickle")
		c := d.dial(t)
		c.send("GET /d/trickle HTTP/1.1\r\nHost: " + d.host("door-trickle") + "\r\n\r\n")
		r, err := c.read("GET")
		t.Logf("answer %s, %v", r, err)
		if r == nil {
			t.Fatalf("no answer: %v", err)
		}
		if r.Status != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("answer %d with %d body bytes, %v; want the upstream's 200 and a truncated body", r.Status, len(r.Body), err)
		}
		c.mustClose(5 * time.Second)
		select {
		case err := <-up.done:
			t.Logf("the upstream's write ended after %d bytes: %v", up.written.Load(), err)
		case <-time.After(30 * time.Second):
			t.Fatal("the upstream is still trickling 30 s on")
		}
		eventually(t, 10*time.Second, "the request counted once", func() error {
			if n := d.requestsOf("door-trickle"); n != before+1 {
				return fmt.Errorf("http_requests_total %v, want %v", n, before+1)
			}
			return nil
		})
		d.meteredOnce(t, "door-trickle", tenant)
	})
	t.Run("content-length", func(t *testing.T) {
		t.Parallel()
		const size = 400 // 20 s at a byte per 50 ms
		ended := make(chan error, 1)
		up := newRawUpstream(t, func(c net.Conn, head string) {
			if pathOf(head) == "/d/ready" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return
			}
			_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(size)+"\r\n\r\n")
			for i := 0; i < size && err == nil; i++ {
				time.Sleep(50 * time.Millisecond)
				_, err = c.Write([]byte("t"))
			}
			ended <- err
		})
		tenant := d.route(t, "door-trickle-cl", up.url(), d.routed("door-trickle-cl"), "timeout_ms", 1000)
		before := d.requestsOf("door-trickle-cl")
		c := d.dial(t)
		c.send("GET /d/trickle HTTP/1.1\r\nHost: " + d.host("door-trickle-cl") + "\r\n\r\n")
		r, err := c.read("GET")
		t.Logf("answer %s, %v", r, err)
		if r == nil {
			t.Fatalf("no answer: %v", err)
		}
		if r.Status == 200 {
			if len(r.Body) >= size || err == nil {
				t.Fatalf("the whole trickled body came through (%d bytes, %v): the route's timeout did not end it", len(r.Body), err)
			}
			c.mustClose(5 * time.Second)
		} else {
			wantEnvelope(t, r, 504, "upstream_timeout")
			// The client's connection is kept.
			c.send("GET /d/ready HTTP/1.1\r\nHost: " + d.host("door-trickle-cl") + "\r\n\r\n")
			if r := c.mustRead("GET"); r.Status != 200 {
				t.Fatalf("the next request on the connection: %s", r)
			}
			before++
		}
		select {
		case err := <-ended:
			if err == nil {
				t.Fatal("the upstream wrote its whole body: nothing cut the exchange off at the route's timeout")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the upstream is still trickling 30 s on")
		}
		eventually(t, 10*time.Second, "the request counted once", func() error {
			if n := d.requestsOf("door-trickle-cl"); n != before+1 {
				return fmt.Errorf("http_requests_total %v, want %v", n, before+1)
			}
			return nil
		})
		d.meteredOnce(t, "door-trickle-cl", tenant)
	})
}

// doorUpstreamOverruns: an upstream whose answer carries more bytes than its
// Content-Length says (here a whole second response, at once or a moment later) must not
// have those bytes taken for the answer to a later request on its connection: the edge
// closes such a connection instead of pooling it (nginx: "upstream sent more data than
// specified").
func doorUpstreamOverruns(t *testing.T, d *door) {
	up := newRawUpstream(t, func(c net.Conn, head string) {
		if pathOf(head) == "/d/ready" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfirst")
		if pathOf(head) == "/d/late" {
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\npoisoned")
	})
	d.route(t, "door-overrun", up.url(), d.routed("door-overrun"))
	for i := range 8 {
		path := "/d/now"
		if i%2 == 1 {
			path = "/d/late"
		}
		if r := d.ec.get(t, "door-overrun", path); r.Status != 200 || string(r.Body) != "first" {
			t.Fatalf("request %d (%s): %s, want the upstream's 200 first", i, path, r)
		}
		time.Sleep(200 * time.Millisecond) // the late leftover is in by the next request
	}
}
