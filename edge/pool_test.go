package edge_test

import (
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/edge"
)

// TestPoolFullWaitsThenRefuses: with every connection to a target busy, a request waits
// up to MaxConnWait for one to free up and is then refused with 503 overloaded; the edge
// does not dial more connections than MaxConnsPerTarget meanwhile (no redial spin). Once
// the busy request finishes, the connection serves again.
func TestPoolFullWaitsThenRefuses(t *testing.T) {
	release := make(chan struct{})
	var conns atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
			w.Write([]byte("ok"))
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	h := newHarness(t, func(c *edge.Config) {
		c.MaxConnsPerTarget = 1
		c.MaxConnWait = 200 * time.Millisecond
	})
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, "", "http://"+ln.Addr().String())
	h.e.Loaded()
	host := "acme." + domain

	slow := make(chan result, 1)
	go func() { slow <- h.get(host, "/slow") }()
	waitFor(t, 5*time.Second, func() string {
		if conns.Load() == 0 {
			return "the slow request has not reached the upstream"
		}
		return ""
	})

	start := time.Now()
	r := h.get(host, "/fast")
	waited := time.Since(start)
	if r.status != 503 || r.errCode() != "overloaded" {
		t.Fatalf("a request with the pool full: %s, want 503 overloaded", r)
	}
	if waited < 150*time.Millisecond {
		t.Errorf("refused after %v, want a wait of about MaxConnWait (200ms) first", waited)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the upstream saw %d connections, want 1 (MaxConnsPerTarget)", n)
	}

	close(release)
	if r := <-slow; r.status != 200 {
		t.Fatalf("the slow request: %s", r)
	}
	if r := h.get(host, "/fast"); r.status != 200 || r.body != "ok" {
		t.Fatalf("after the pool freed up: %s", r)
	}
}
