package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Upstream resilience through real processes: health checks, retries, balancing.

// target is an upstream whose answers the test controls: status for traffic (0: 200)
// and healthStatus for GET /health (0: 200). It counts traffic (not checks), names
// itself in X-Upstream, and can be stopped and started again on the same address.
type target struct {
	t            *testing.T
	name         string
	addr         string
	srv          *httptest.Server
	hits         atomic.Int64
	status       atomic.Int32
	healthStatus atomic.Int32
	hold         atomic.Pointer[chan struct{}] // non-nil: traffic waits until it is closed
}

func newTarget(t *testing.T, name string) *target {
	tg := &target{t: t, name: name}
	tg.start(nil)
	tg.addr = tg.srv.Listener.Addr().String()
	t.Cleanup(func() { tg.srv.Close() })
	return tg
}

func (tg *target) url() string { return "http://" + tg.addr }

// start serves on l (a new port when nil).
func (tg *target) start(l net.Listener) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if s := tg.healthStatus.Load(); s != 0 {
				w.WriteHeader(int(s))
			}
			return
		}
		tg.hits.Add(1)
		io.Copy(io.Discard, r.Body)
		if h := tg.hold.Load(); h != nil {
			select {
			case <-*h:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("X-Upstream", tg.name)
		if s := tg.status.Load(); s != 0 {
			w.WriteHeader(int(s))
		}
		io.WriteString(w, tg.name)
	}))
	if l != nil {
		srv.Listener.Close()
		srv.Listener = l
	}
	srv.Start()
	tg.srv = srv
}

// stop shuts the server down: its port refuses connections.
func (tg *target) stop() { tg.srv.Close() }

// restart serves again on the same address.
func (tg *target) restart() {
	var l net.Listener
	_, err := poll(10*time.Second, func() (err error) {
		l, err = net.Listen("tcp", tg.addr)
		return err
	})
	if err != nil {
		tg.t.Fatalf("listening again on %s: %v", tg.addr, err)
	}
	tg.start(l)
}

func upstreamOf(targets ...*target) []map[string]any {
	var out []map[string]any
	for _, tg := range targets {
		out = append(out, map[string]any{"url": tg.url(), "weight": 1})
	}
	return out
}

// onlyFrom returns a poll function that succeeds once n requests in a row are answered
// 200 by the upstream named want.
func onlyFrom(edge *edgeClient, slug, path, want string, n int, header ...string) func() error {
	return func() error {
		for i := range n {
			r, err := edge.do("GET", slug, path, header...)
			if err != nil {
				return err
			}
			if r.Status != 200 || r.Header.Get("X-Upstream") != want {
				return fmt.Errorf("request %d: %s from %q, want 200 from %q", i, r, r.Header.Get("X-Upstream"), want)
			}
		}
		return nil
	}
}

// TestUpstreamHealthChecks: a target failing its health check, and then one whose
// server stops, leaves rotation: once out, every request is answered by the other
// without an error. Each comes back once healthy again. With both out the edge answers
// 503 no_healthy_upstream.
func TestUpstreamHealthChecks(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	a, b := newTarget(t, "a"), newTarget(t, "b")

	api.createTenant("health")
	api.createRoute("health", map[string]any{
		"name": "api", "paths": []string{"/api"}, "auth": "none",
		"upstream": map[string]any{
			"targets": upstreamOf(a, b),
			"health_check": map[string]any{
				"path": "/health", "interval_ms": 150, "timeout_ms": 500,
				"healthy_threshold": 2, "unhealthy_threshold": 2,
			},
		},
	})
	eventually(t, 10*time.Second, "the route is served by both targets", func() error {
		if err := served(edge, "health", "/api", "a")(); err != nil {
			return err
		}
		return served(edge, "health", "/api", "b")()
	})

	// a fails its health check: out of rotation.
	a.healthStatus.Store(503)
	eventually(t, 15*time.Second, "a is taken out", onlyFrom(edge, "health", "/api", "b", 10))
	before := a.hits.Load()
	if err := onlyFrom(edge, "health", "/api", "b", 30)(); err != nil {
		t.Fatalf("a is out, every request must go to b: %v", err)
	}
	if n := a.hits.Load() - before; n != 0 {
		t.Fatalf("a, out of rotation, got %d requests", n)
	}
	a.healthStatus.Store(0)
	eventually(t, 15*time.Second, "a comes back", served(edge, "health", "/api", "a"))

	// b's server stops: its checks fail to connect.
	b.stop()
	eventually(t, 15*time.Second, "b is taken out", onlyFrom(edge, "health", "/api", "a", 10))
	if err := onlyFrom(edge, "health", "/api", "a", 30)(); err != nil {
		t.Fatalf("b is out, every request must go to a: %v", err)
	}
	b.restart()
	eventually(t, 15*time.Second, "b comes back", served(edge, "health", "/api", "b"))

	// Both out.
	a.healthStatus.Store(500)
	b.healthStatus.Store(500)
	eventually(t, 15*time.Second, "no target is healthy", answers(edge, "health", "/api", 503, "no_healthy_upstream"))
	b.healthStatus.Store(0)
	eventually(t, 15*time.Second, "b comes back alone", onlyFrom(edge, "health", "/api", "b", 5))
}

// TestUpstreamPassiveEjection: a target answering 503 is ejected after failures in a row
// and the other takes all traffic.
func TestUpstreamPassiveEjection(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	a, b := newTarget(t, "a"), newTarget(t, "b")
	a.status.Store(503)

	api.createTenant("passive")
	api.createRoute("passive", map[string]any{
		"name": "api", "paths": []string{"/api"}, "auth": "none",
		"upstream": map[string]any{
			"targets":        upstreamOf(a, b),
			"passive_health": map[string]any{"failures": 2, "eject_ms": 300_000},
		},
	})
	eventually(t, 15*time.Second, "a is ejected", onlyFrom(edge, "passive", "/api", "b", 10))
	before := a.hits.Load()
	if err := onlyFrom(edge, "passive", "/api", "b", 30)(); err != nil {
		t.Fatal(err)
	}
	if n := a.hits.Load() - before; n != 0 {
		t.Fatalf("ejected a got %d requests", n)
	}
}

// TestUpstreamRetries: with one target answering 502, a GET is retried on the other
// (every GET succeeds) and a POST is not (the failing target's 502 reaches the client,
// and no POST reaches both targets).
func TestUpstreamRetries(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	bad, good := newTarget(t, "bad"), newTarget(t, "good")
	bad.status.Store(502)

	api.createTenant("retry")
	api.createRoute("retry", map[string]any{
		"name": "api", "paths": []string{"/api"}, "auth": "none",
		"upstream": map[string]any{
			"targets": upstreamOf(bad, good),
			"retries": map[string]any{"attempts": 1, "budget_percent": 100, "min_per_second": 100},
		},
	})
	eventually(t, applyDeadline, "the route is served", served(edge, "retry", "/api", "good"))

	badBefore, goodBefore := bad.hits.Load(), good.hits.Load()
	for i := range 10 {
		r, err := edge.do("GET", "retry", "/api")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != 200 || r.Header.Get("X-Upstream") != "good" {
			t.Fatalf("GET %d: %s from %q, want 200 from good", i, r, r.Header.Get("X-Upstream"))
		}
	}
	badN, goodN := bad.hits.Load()-badBefore, good.hits.Load()-goodBefore
	if goodN != 10 || badN == 0 {
		t.Fatalf("10 GETs: bad got %d, good %d; want some to bad (each retried on good) and all 10 on good", badN, goodN)
	}

	badBefore, goodBefore = bad.hits.Load(), good.hits.Load()
	var failed, ok int64
	for i := range 10 {
		r, err := edge.do("POST", "retry", "/api")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Status == 502 && r.Header.Get("X-Upstream") == "bad":
			failed++
		case r.Status == 200 && r.Header.Get("X-Upstream") == "good":
			ok++
		default:
			t.Fatalf("POST %d: %s from %q", i, r, r.Header.Get("X-Upstream"))
		}
	}
	badN, goodN = bad.hits.Load()-badBefore, good.hits.Load()-goodBefore
	if failed == 0 || badN != failed || goodN != ok {
		t.Fatalf("10 POSTs: %d got bad's 502, %d good's 200; bad got %d, good %d: want the 502s passed on, not retried",
			failed, ok, badN, goodN)
	}
}

// TestUpstreamBalancing: least_conn sends nothing to a target busy with a request while
// the other is idle; hash on a header keeps each value on one target.
func TestUpstreamBalancing(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	busy, idle := newTarget(t, "busy"), newTarget(t, "idle")
	h1, h2, h3 := newTarget(t, "h1"), newTarget(t, "h2"), newTarget(t, "h3")

	api.createTenant("balance")
	api.createRoute("balance", map[string]any{
		"name": "lc", "paths": []string{"/lc"}, "auth": "none",
		"upstream": map[string]any{"targets": upstreamOf(busy, idle), "balance": "least_conn"},
	})
	api.createRoute("balance", map[string]any{
		"name": "hash", "paths": []string{"/hash"}, "auth": "none",
		"upstream": map[string]any{"targets": upstreamOf(h1, h2, h3), "balance": "hash", "hash_on": "header:X-User"},
	})
	eventually(t, applyDeadline, "the routes are served", func() error {
		if err := served(edge, "balance", "/lc", "")(); err != nil {
			return err
		}
		return served(edge, "balance", "/hash", "", "X-User", "u")()
	})

	// Hold busy's requests, and send requests in the background until one is held there
	// (busy may have answered some of the requests above already).
	release := make(chan struct{})
	busy.hold.Store(&release)
	base := busy.hits.Load()
	done := make(chan struct{})
	defer func() { close(release); <-done }()
	go func() {
		defer close(done)
		for busy.hits.Load() == base {
			select {
			case <-release:
				return
			default:
			}
			edge.do("GET", "balance", "/lc")
		}
	}()
	eventually(t, 10*time.Second, "a request is in flight at busy", func() error {
		if busy.hits.Load() == base {
			return errNotYet
		}
		return nil
	})
	before := busy.hits.Load()
	if err := onlyFrom(edge, "balance", "/lc", "idle", 20)(); err != nil {
		t.Fatalf("least_conn with busy holding a request: %v", err)
	}
	if n := busy.hits.Load() - before; n != 0 {
		t.Fatalf("busy got %d more requests while idle had none in flight", n)
	}

	// hash: each user stays on one target; users spread over the targets.
	owners := map[string]bool{}
	for u := range 20 {
		user := fmt.Sprintf("user-%d", u)
		var first string
		for i := range 5 {
			r, err := edge.do("GET", "balance", "/hash", "X-User", user)
			if err != nil {
				t.Fatal(err)
			}
			got := r.Header.Get("X-Upstream")
			if r.Status != 200 {
				t.Fatalf("%s: %s", user, r)
			}
			if i == 0 {
				first = got
			} else if got != first {
				t.Fatalf("%s went to %s, then %s", user, first, got)
			}
		}
		owners[first] = true
	}
	if len(owners) < 2 {
		t.Fatalf("20 users all hashed to %v", owners)
	}
}
