package probe_test

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

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
