package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"tollgate/infra/usage"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The door suite's plumbing: one stack and edge shared by the suite's parallel cases (a
// tenant and an upstream of their own each), clients that write bytes by hand, and
// upstreams that record what reached them.

// door is the suite's deployment.
type door struct {
	s    *stack
	api  *apiClient
	edge *proc
	ec   *edgeClient
}

func startDoor(t *testing.T) *door {
	t.Helper()
	s := newStack(t)
	_, api := s.startAPI()
	p, ec := s.startEdge()
	return &door{s: s, api: api, edge: p, ec: ec}
}

// route gives the case a tenant of its own (named after it) with one route, /d, to
// upstream, and waits until the edge serves it. extra is routeSpec's.
// It returns the tenant's id.
func (d *door) route(t *testing.T, slug, upstream string, ready func() error, extra ...any) string {
	t.Helper()
	id := str(t, d.api.createTenant(slug), "id")
	d.api.createRoute(slug, routeSpec("door", "/d", upstream, "none", extra...))
	eventually(t, 10*time.Second, "route "+slug+" served", ready)
	return id
}

// routed is a ready check for route: the edge knows the route (whatever the upstream
// answers to /d/ready, the edge's own 404 is gone).
func (d *door) routed(slug string) func() error {
	return func() error {
		r, err := d.ec.do("GET", slug, "/d/ready")
		if err != nil {
			return err
		}
		if r.Status == 404 && strings.Contains(string(r.Body), `"route_not_found"`) ||
			strings.Contains(string(r.Body), `"tenant_not_found"`) {
			return fmt.Errorf("not yet: %s", r)
		}
		return nil
	}
}

func (d *door) host(slug string) string { return slug + ".localhost:" + portOf(d.s.edgeAddr) }

// requestsOf is the edge's http_requests_total for tenant slug, every route and status.
func (d *door) requestsOf(slug string) float64 {
	resp, err := http.Get("http://" + d.s.edgeAdm + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, "http_requests_total{") || !strings.Contains(line, `tenant="`+slug+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// metered is what the edge's meter has published for tenant id so far: the requests of
// every usage batch in the stack's usage stream (the edge publishes a batch a second).
func (d *door) metered(tenantID string) (int64, error) {
	nc, err := nats.Connect(d.s.natsURL())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, usage.Stream(d.s.prefix))
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return 0, fmt.Errorf("usage batch %d: %w", seq, err)
		}
		b, err := usage.DecodeBatch(m.Data)
		if err != nil {
			return 0, err
		}
		for _, r := range b.Records {
			if r.TenantID == tenantID {
				n += r.Requests
			}
		}
	}
	return n, nil
}

// meteredOnce waits until the meter has published as many requests of the tenant as the
// edge's http_requests_total counts for it, and fails the test if it publishes more.
func (d *door) meteredOnce(t *testing.T, slug, tenantID string) {
	t.Helper()
	want := int64(d.requestsOf(slug))
	eventually(t, 15*time.Second, "the meter publishes the tenant's requests", func() error {
		n, err := d.metered(tenantID)
		if err != nil {
			return err
		}
		if n < want {
			return fmt.Errorf("metered %d requests, want %d", n, want)
		}
		if n > want {
			return fmt.Errorf("metered %d requests, want %d: counted twice", n, want)
		}
		return nil
	})
}

// ---------------------------------------------------------------------------------------
// Clients that write bytes by hand

// rawConn is one client connection to the edge's public port.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
	// closing: the last answer read said Connection: close.
	closing bool
}

func (d *door) dial(t *testing.T) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", d.s.edgeAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial the edge: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes s in one write.
func (rc *rawConn) send(s string) {
	rc.t.Helper()
	_ = rc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatalf("write to the edge: %v", err)
	}
}

// read reads one whole response to a request of method. The edge's answers come
// within a few seconds in every case here; 20 s means it sent none.
func (rc *rawConn) read(method string) (*edgeResp, error) {
	_ = rc.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rc.closing = resp.Close
	body, err := io.ReadAll(resp.Body)
	r := &edgeResp{Status: resp.StatusCode, Header: resp.Header, Body: body}
	if err != nil {
		return r, err
	}
	return r, nil
}

// mustRead is read that fails the test on an error.
func (rc *rawConn) mustRead(method string) *edgeResp {
	rc.t.Helper()
	r, err := rc.read(method)
	if err != nil {
		rc.t.Fatalf("reading the answer to %s: %v (got %s)", method, err, r)
	}
	return r
}

// closed returns nil once the edge has closed the connection (EOF or a reset), an
// error if a byte arrives instead or nothing happens within within.
func (rc *rawConn) closed(within time.Duration) error {
	_ = rc.c.SetReadDeadline(time.Now().Add(within))
	b, err := rc.br.ReadByte()
	switch {
	case err == nil:
		rest, _ := rc.br.Peek(rc.br.Buffered())
		return fmt.Errorf("the connection is open: the edge sent more: %q", append([]byte{b}, rest...))
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("the connection is still open after %s", within)
	default:
		return err
	}
}

func (rc *rawConn) mustClose(within time.Duration) {
	rc.t.Helper()
	if err := rc.closed(within); err != nil {
		rc.t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------------------
// Upstreams that record

// seen is one request as an upstream received it.
type seen struct {
	Method, Path, Remote string
	Header               http.Header
	Body                 string
	BodyErr              error
}

// recordingUpstream is a Go net/http upstream that records every request and counts the
// connections opened and closed on it; handle answers (nil: 200 "ok").
type recordingUpstream struct {
	srv            *httptest.Server
	mu             sync.Mutex
	reqs           []seen
	opened, closes atomic.Int64
	closedConns    sync.Map // remote address → true once closed
}

func newRecorder(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *recordingUpstream {
	t.Helper()
	rec := &recordingUpstream{}
	rec.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr, Header: r.Header.Clone(), Body: string(body), BodyErr: err})
		rec.mu.Unlock()
		if handle != nil {
			handle(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok")
	}))
	rec.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			rec.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			rec.closes.Add(1)
			rec.closedConns.Store(c.RemoteAddr().String(), true)
		}
	}
	rec.srv.Start()
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recordingUpstream) url() string { return rec.srv.URL }

func (rec *recordingUpstream) requests() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seen(nil), rec.reqs...)
}

// paths lists the paths of the requests received, in order.
func (rec *recordingUpstream) paths() []string {
	var out []string
	for _, r := range rec.requests() {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

func (rec *recordingUpstream) isClosed(remote string) bool {
	_, ok := rec.closedConns.Load(remote)
	return ok
}

// rawUpstream is an upstream written over net.Listener, for answers net/http would not
// give: each accepted connection is handed to serve after its request head is read.
type rawUpstream struct {
	ln     net.Listener
	opened atomic.Int64
}

func newRawUpstream(t *testing.T, serve func(c net.Conn, head string)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	// The edge keeps idle upstream connections for a minute: close them at the end.
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.opened.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					head, err := readHead(br)
					if err != nil {
						return
					}
					serve(&bufConn{Conn: c, br: br}, head)
					if strings.Contains(strings.ToLower(head), "connection: close") {
						return
					}
				}
			}()
		}
	}()
	return u
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

// bufConn reads through the bufio.Reader that read the request head.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.br.Read(p) }

// readHead reads a request's head up to its blank line (requests sent to a raw
// upstream here have no body).
func readHead(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		line, err := br.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			return sb.String(), err
		}
		if line == "\r\n" || line == "\n" {
			return sb.String(), nil
		}
	}
}

// pathOf is the request target of a request head.
func pathOf(head string) string {
	f := strings.Fields(head)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// chunk is one chunk of a chunked body.
func chunk(b []byte) []byte {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%x\r\n", len(b))
	buf.Write(b)
	buf.WriteString("\r\n")
	return buf.Bytes()
}
