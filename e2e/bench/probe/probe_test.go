package probe_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/e2e/bench/probe"
)

// Gets go out on one kept-alive connection with the virtual host asked for, and one the
// server closes is dialled again on the next Get.
func TestGet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns, n atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 2 {
				w.Header().Set("Connection", "close")
			}
			io.WriteString(w, r.Host+r.URL.Path)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	defer srv.Close()

	p, err := probe.New(ln.Addr().String(), "a.localhost", "/x", "0")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 4 {
		body, code, err := p.Get()
		if err != nil || code != 200 || body != "a.localhost/x" {
			t.Fatalf("Get %d: %q %d %v, want \"a.localhost/x\" 200", i+1, body, code, err)
		}
	}
	if c := conns.Load(); c != 2 {
		t.Errorf("%d connections, want 2: one kept alive, then one after the server closed it", c)
	}
	if _, err := probe.New(ln.Addr().String(), "a.localhost", "/x", "x"); err == nil {
		t.Error("a CPU list that is none: no error")
	}
}

// Change times from put's return to the first answer with the new body, and counts the
// polls meanwhile that were not answered 200.
func TestChange(t *testing.T) {
	var state atomic.Int64 // 0 old answer, 1 a 503, 2 new answer
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch state.Load() {
		case 0:
			io.WriteString(w, "old")
		case 1:
			state.Store(2)
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			io.WriteString(w, "new")
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	p, err := probe.New(ln.Addr().String(), "a.localhost", "/x", "0")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	api, edge, failed, err := p.Change(func() error { state.Store(1); return nil }, "new", time.Millisecond, 5*time.Second)
	if err != nil || failed != 1 || api < 0 || edge <= 0 {
		t.Fatalf("Change: api %s edge %s failed %d err %v, want one failed poll and no error", api, edge, failed, err)
	}
	if _, _, _, err := p.Change(func() error { return nil }, "never", time.Millisecond, 20*time.Millisecond); err == nil || !strings.Contains(err.Error(), `"new"`) {
		t.Errorf("a change never served: error %v, want one giving the last answer", err)
	}
	if _, _, _, err := p.Change(func() error { return io.ErrUnexpectedEOF }, "new", time.Millisecond, time.Second); err != io.ErrUnexpectedEOF {
		t.Errorf("a failed put: error %v, want put's", err)
	}
}
