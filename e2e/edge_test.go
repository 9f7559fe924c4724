package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestKeyAuthFlow: a tenant, route, consumer and key made through the api serve a keyed
// request at the edge; the upstream sees the path unchanged and the consumer; every way of
// getting it wrong is the error envelope with its stable code.
func TestKeyAuthFlow(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "hello-upstream")

	api.createTenant("acme")
	route := api.createRoute("acme", routeSpec("hello", "/hello", up.URL, "key", "methods", []string{"GET"}))
	consumer := api.createConsumer("acme", "mobile-app")
	_, key := api.createKey("acme", consumer)
	took := eventually(t, applyDeadline, "the new key works at the edge",
		served(edge, "acme", "/hello", "hello-upstream", "X-API-Key", key))
	t.Logf("route %s and key served %s after the key was created", route["id"], took.Round(time.Millisecond))

	// The upstream receives the request path unchanged (no strip_prefix), with the query
	// and the authenticated consumer.
	got := decodeEcho(t, edge.get(t, "acme", "/hello/a/b%20c?x=1&y=2", "X-API-Key", key))
	if got.Method != "GET" || got.RawPath != "/hello/a/b%20c" || got.Query != "x=1&y=2" {
		t.Errorf("upstream saw %s %s?%s, want GET /hello/a/b%%20c?x=1&y=2", got.Method, got.RawPath, got.Query)
	}
	if ids := got.Headers["X-Consumer-Id"]; len(ids) != 1 || ids[0] != consumer {
		t.Errorf("upstream saw X-Consumer-Id %q, want [%s]", ids, consumer)
	}
	got = decodeEcho(t, edge.get(t, "acme", "/hello", "X-API-Key", key))
	if got.Path != "/hello" {
		t.Errorf("upstream saw path %q, want /hello", got.Path)
	}

	// The gateway's own errors.
	for _, c := range []struct {
		name, method, slug, path string
		header                   []string
		status                   int
		code                     string
	}{
		{"no key", "GET", "acme", "/hello", nil, 401, "unauthenticated"},
		{"invalid key", "GET", "acme", "/hello", []string{"X-API-Key", key + "x"}, 401, "invalid_credential"},
		{"garbage key", "GET", "acme", "/hello", []string{"X-API-Key", "nope"}, 401, "invalid_credential"},
		{"unknown host", "GET", "nosuchtenant", "/hello", []string{"X-API-Key", key}, 404, "tenant_not_found"},
		{"unknown path", "GET", "acme", "/nothing/here", []string{"X-API-Key", key}, 404, "route_not_found"},
		{"not a segment boundary", "GET", "acme", "/helloworld", []string{"X-API-Key", key}, 404, "route_not_found"},
		{"method not routed", "DELETE", "acme", "/hello", []string{"X-API-Key", key}, 405, "method_not_allowed"},
	} {
		r, err := edge.do(c.method, c.slug, c.path, c.header...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := checkEnvelope(r, c.status, c.code); err != nil {
			t.Errorf("%s (%s %s.localhost%s): %v", c.name, c.method, c.slug, c.path, err)
		}
	}
}

// TestUpstreamErrors: an upstream that refuses connections is 502 upstream_failed; one
// slower than the route's timeout_ms is 504 upstream_timeout.
func TestUpstreamErrors(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	slow, _ := slowUpstream(t, 10*time.Second)
	ok := echoUpstream(t, "ok")

	api.createTenant("errs")
	api.createRoute("errs", routeSpec("down", "/down", downUpstream(t), "none", "connect_timeout_ms", 1000))
	api.createRoute("errs", routeSpec("slow", "/slow", slow.URL, "none", "timeout_ms", 200))
	api.createRoute("errs", routeSpec("ok", "/ok", ok.URL, "none"))
	eventually(t, applyDeadline, "the routes are served", served(edge, "errs", "/ok", "ok"))

	wantEnvelope(t, edge.get(t, "errs", "/down"), 502, "upstream_failed")

	start := time.Now()
	r := edge.get(t, "errs", "/slow")
	wantEnvelope(t, r, 504, "upstream_timeout")
	// Not a timing assertion: the upstream would have answered 200 after 10 s, so a 504
	// well before that can only be the route's timeout.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("504 came after %s; the route's timeout_ms is 200", d)
	}

	// The edge is still healthy afterwards.
	decodeEcho(t, edge.get(t, "errs", "/ok"))
}

// TestRouteUpdateUnderLoad: while several clients call the edge without pause, the
// route's upstream is switched between A and B a few times with PUT. No request fails,
// and each switch is seen within the apply deadline and then sticks.
func TestRouteUpdateUnderLoad(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	ups := map[string]string{"A": echoUpstream(t, "A").URL, "B": echoUpstream(t, "B").URL}

	api.createTenant("busy")
	route := api.createRoute("busy", routeSpec("svc", "/svc", ups["A"], "none"))
	id := str(t, route, "id")
	version := num(t, route, "version")
	eventually(t, applyDeadline, "the route is served by A", served(edge, "busy", "/svc", "A"))

	// The load: workers call the edge back to back until stopped, on their own client.
	const workers = 4
	var (
		stop     atomic.Bool
		total    atomic.Int64
		failed   atomic.Int64
		seen     [2]atomic.Int64 // answers from A, from B
		mu       sync.Mutex
		failures []string
		wg       sync.WaitGroup
	)
	load := newEdgeClient(edge.addr)
	defer load.close()
	for w := range workers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				r, err := load.do("GET", "busy", fmt.Sprintf("/svc/w%d/%d", w, i))
				total.Add(1)
				switch {
				case err == nil && r.Status == 200 && r.Header.Get("X-Upstream") == "A":
					seen[0].Add(1)
					continue
				case err == nil && r.Status == 200 && r.Header.Get("X-Upstream") == "B":
					seen[1].Add(1)
					continue
				}
				failed.Add(1)
				mu.Lock()
				if len(failures) < 10 {
					if err != nil {
						failures = append(failures, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
					} else {
						failures = append(failures, fmt.Sprintf("%s: %s", time.Now().Format("15:04:05.000"), r))
					}
				}
				mu.Unlock()
			}
		})
	}
	stopLoad := func() {
		if !stop.Swap(true) {
			wg.Wait()
		}
	}
	defer stopLoad()
	// Let the load get going before the first switch.
	eventually(t, 5*time.Second, "load running", func() error {
		if total.Load() < 50 {
			return errNotYet
		}
		return nil
	})

	probe := newEdgeClient(edge.addr)
	defer probe.close()
	for i, to := range []string{"B", "A", "B", "A", "B"} {
		before := total.Load()
		body := routeSpec("svc", "/svc", ups[to], "none", "version", version)
		updated := api.must(200, "PUT", "/v1/tenants/busy/routes/"+id, body)
		version = num(t, updated, "version")
		took := eventually(t, applyDeadline, fmt.Sprintf("switch %d: upstream %s at the edge", i+1, to),
			served(probe, "busy", "/svc/probe", to))
		// Once seen, the new upstream stays: the edge never goes back to the old one.
		for j := range 20 {
			r, err := probe.do("GET", "busy", "/svc/probe")
			if err != nil || r.Status != 200 || r.Header.Get("X-Upstream") != to {
				t.Fatalf("switch %d: request %d after upstream %s was seen: %v %s", i+1, j, to, err, r)
			}
		}
		// Let some load run on the new config before the next switch.
		eventually(t, 10*time.Second, "load continues", func() error {
			if total.Load() < before+100 {
				return errNotYet
			}
			return nil
		})
		t.Logf("switch %d to %s: applied at the edge %s after the PUT returned", i+1, to, took.Round(time.Millisecond))
	}
	stopLoad()

	t.Logf("load: %d requests (%d by A, %d by B), %d failed", total.Load(), seen[0].Load(), seen[1].Load(), failed.Load())
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during the route updates; first ones:\n%s", n, total.Load(), strings.Join(failures, "\n"))
	}
	if seen[0].Load() == 0 || seen[1].Load() == 0 {
		t.Errorf("load saw A %d times and B %d times; both should have served", seen[0].Load(), seen[1].Load())
	}
}

// TestKeyRevocation: a key deleted through the api is refused at the edge within the
// apply deadline; the consumer's other key keeps working.
func TestKeyRevocation(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")

	api.createTenant("revoke")
	api.createRoute("revoke", routeSpec("r", "/r", up.URL, "key"))
	c := api.createConsumer("revoke", "client")
	doomedID, doomed := api.createKey("revoke", c)
	_, kept := api.createKey("revoke", c)
	eventually(t, applyDeadline, "both keys work", func() error {
		if err := served(edge, "revoke", "/r", "up", "X-API-Key", doomed)(); err != nil {
			return err
		}
		return served(edge, "revoke", "/r", "up", "X-API-Key", kept)()
	})

	api.must(204, "DELETE", "/v1/tenants/revoke/consumers/"+c+"/keys/"+doomedID, nil)
	took := eventually(t, applyDeadline, "the deleted key is refused",
		answers(edge, "revoke", "/r", 401, "invalid_credential", "X-API-Key", doomed))
	t.Logf("deleted key refused %s after the DELETE returned", took.Round(time.Millisecond))
	if err := served(edge, "revoke", "/r", "up", "X-API-Key", kept)(); err != nil {
		t.Errorf("the consumer's other key: %v", err)
	}
}

// TestEdgeGracefulShutdown: SIGTERM while a request is in flight lets it finish with 200,
// then the edge exits 0.
func TestEdgeGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	edgeProc, edge := s.startEdge()
	slow, arrived := slowUpstream(t, time.Second)

	api.createTenant("drain")
	api.createRoute("drain", routeSpec("slow", "/slow", slow.URL, "none"))
	eventually(t, applyDeadline, "the slow route is served", served(edge, "drain", "/slow/warmup", ""))
	for len(arrived) > 0 {
		<-arrived
	}

	type result struct {
		r   *edgeResp
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := edge.do("GET", "drain", "/slow/inflight")
		done <- result{r, err}
	}()
	select {
	case p := <-arrived:
		if p != "/slow/inflight" {
			t.Fatalf("upstream got %s, want /slow/inflight", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
	// The request is now at the upstream, which answers in about a second.
	edgeProc.signal(syscall.SIGTERM)
	var res result
	select {
	case res = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the in-flight request did not complete after SIGTERM")
	}
	if res.err != nil {
		t.Fatalf("in-flight request failed after SIGTERM: %v", res.err)
	}
	if res.r.Status != http.StatusOK || string(res.r.Body) != "slow hello" {
		t.Fatalf("in-flight request: got %s, want 200 slow hello", res.r)
	}
	edgeProc.waitExit(t, stopTimeout)
	if code := edgeProc.exitCode(); code != 0 {
		t.Fatalf("edge exit status %d after SIGTERM (%v), want 0", code, edgeProc.err)
	}
	// And it no longer accepts requests.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := newEdgeClient(edge.addr).doCtx(ctx, "GET", "drain", "/slow/after"); err == nil {
		t.Errorf("the edge still answered after exiting")
	} else if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "refused") {
		t.Logf("request after exit: %v", err)
	}
}
