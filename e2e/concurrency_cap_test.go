package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// holdUpstream holds every request under /hold until release is called, and under
// /stream sends its headers and a first chunk at once, then holds the rest of the body
// until release; anything else is answered at once. Each held request's arrival is sent
// on arrived.
type holdUpstream struct {
	srv     *httptest.Server
	arrived chan string
	once    sync.Once
	gate    chan struct{}
}

func newHoldUpstream(t *testing.T) *holdUpstream {
	t.Helper()
	h := &holdUpstream{arrived: make(chan string, 64), gate: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Upstream", "hold")
		hold := func() {
			h.arrived <- r.URL.Path
			select {
			case <-h.gate:
			case <-r.Context().Done():
			}
		}
		switch {
		case len(r.URL.Path) >= 5 && r.URL.Path[:5] == "/hold":
			hold()
			io.WriteString(w, "held")
		case len(r.URL.Path) >= 7 && r.URL.Path[:7] == "/stream":
			io.WriteString(w, "first chunk\n")
			w.(http.Flusher).Flush()
			hold()
			io.WriteString(w, "last chunk\n")
		default:
			io.WriteString(w, "at once")
		}
	}))
	t.Cleanup(func() {
		h.release()
		h.srv.Close()
	})
	return h
}

func (h *holdUpstream) release() { h.once.Do(func() { close(h.gate) }) }

// waitArrivals waits for n held requests to reach the upstream.
func (h *holdUpstream) waitArrivals(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-h.arrived:
		case <-deadline:
			t.Fatalf("%d of %d held requests reached the upstream within 30 s", i, n)
		}
	}
}

// TestConcurrencyCaps holds a real edge process to the README's concurrency caps: a
// consumer plan's `concurrency` and a platform plan's, each its own counter. Over a cap the
// edge answers 503 overloaded with Retry-After: 1 at once (the upstream is still holding
// the requests in flight, so an answer that queued could not arrive), the refused request
// never reaches the upstream, another consumer on the same plan and another tenant are
// served meanwhile, a place is free again once its request is answered, and a request
// whose response headers are in no longer holds its place while its body streams.
func TestConcurrencyCaps(t *testing.T) {
	t.Parallel()
	const capN = 3
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	t.Cleanup(edge.close)

	t.Run("consumer-plan", func(t *testing.T) {
		up := newHoldUpstream(t)
		api.createTenant("capc")
		api.must(201, "POST", "/v1/tenants/capc/plans", map[string]any{"name": "three", "concurrency": capN})
		api.createRoute("capc", routeSpec("r", "/", up.srv.URL, "key"))
		alice := api.must(201, "POST", "/v1/tenants/capc/consumers", map[string]any{"name": "alice", "plan": "three"})
		bob := api.must(201, "POST", "/v1/tenants/capc/consumers", map[string]any{"name": "bob", "plan": "three"})
		_, aliceKey := api.createKey("capc", str(t, alice, "id"))
		_, bobKey := api.createKey("capc", str(t, bob, "id"))
		asAlice, asBob := []string{"X-API-Key", aliceKey}, []string{"X-API-Key", bobKey}
		eventually(t, 30*time.Second, "alice is served", served(edge, "capc", "/now", "hold", asAlice...))
		// Bob's key was made last, and may reach the edge in a later relay batch than hers.
		eventually(t, 30*time.Second, "bob is served", served(edge, "capc", "/now", "hold", asBob...))

		// Alice fills her plan's places with requests the upstream holds.
		held := make(chan *edgeResp, capN)
		for i := range capN {
			go func() {
				r, err := edge.do("GET", "capc", fmt.Sprintf("/hold/%d", i), asAlice...)
				if err != nil {
					r = &edgeResp{Body: []byte(err.Error())}
				}
				held <- r
			}()
		}
		up.waitArrivals(t, capN)
		assertOverloaded(t, edge, "capc", "/hold/over", asAlice...)
		select {
		case p := <-up.arrived:
			t.Fatalf("the refused request reached the upstream (%s)", p)
		default:
		}
		// Bob's counter is his own.
		if err := served(edge, "capc", "/now", "hold", asBob...)(); err != nil {
			t.Fatalf("bob, while alice is at her cap: %v", err)
		}

		up.release()
		for range capN {
			if r := <-held; r.Status != 200 || string(r.Body) != "held" {
				t.Fatalf("a held request of alice's: %s", r)
			}
		}
		if err := served(edge, "capc", "/now", "hold", asAlice...)(); err != nil {
			t.Fatalf("alice once her requests were answered: %v", err)
		}
	})

	t.Run("streamed-body-frees-its-place", func(t *testing.T) {
		up := newHoldUpstream(t)
		api.createTenant("caps")
		api.must(201, "POST", "/v1/tenants/caps/plans", map[string]any{"name": "three", "concurrency": capN})
		api.createRoute("caps", routeSpec("r", "/", up.srv.URL, "key"))
		c := api.must(201, "POST", "/v1/tenants/caps/consumers", map[string]any{"name": "carol", "plan": "three"})
		_, key := api.createKey("caps", str(t, c, "id"))
		asCarol := []string{"X-API-Key", key}
		eventually(t, 30*time.Second, "carol is served", served(edge, "caps", "/now", "hold", asCarol...))

		// capN answers whose headers and first chunk are in, bodies still streaming.
		var bodies []io.ReadCloser
		for i := range capN {
			req, err := http.NewRequest("GET", "http://"+edge.addr+fmt.Sprintf("/stream/%d", i), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "caps.localhost:" + portOf(edge.addr)
			req.Header.Set("X-API-Key", key)
			resp, err := edge.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("stream %d: status %d", i, resp.StatusCode)
			}
			buf := make([]byte, len("first chunk\n"))
			if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first chunk\n" {
				t.Fatalf("stream %d: first chunk %q, %v", i, buf, err)
			}
		}
		up.waitArrivals(t, capN)
		if err := served(edge, "caps", "/now", "hold", asCarol...)(); err != nil {
			t.Fatalf("carol with %d bodies streaming (their headers in): %v", capN, err)
		}
		up.release()
		for i, b := range bodies {
			rest, err := io.ReadAll(b)
			b.Close()
			if err != nil || string(rest) != "last chunk\n" {
				t.Fatalf("stream %d: rest %q, %v", i, rest, err)
			}
		}
	})

	t.Run("platform-plan", func(t *testing.T) {
		up := newHoldUpstream(t)
		api.must(200, "PUT", "/v1/platform/plans/e2e-cap", map[string]any{"concurrency": capN}, "If-Match", "*")
		api.must(201, "POST", "/v1/tenants", map[string]any{"slug": "capt", "plan": "e2e-cap"})
		api.createRoute("capt", routeSpec("r", "/", up.srv.URL, "none"))
		api.createTenant("capo")
		api.createRoute("capo", routeSpec("r", "/", up.srv.URL, "none"))
		eventually(t, 30*time.Second, "the capped tenant is served", served(edge, "capt", "/now", "hold"))
		eventually(t, 30*time.Second, "the other tenant is served", served(edge, "capo", "/now", "hold"))

		held := make(chan *edgeResp, capN)
		for i := range capN {
			go func() {
				r, err := edge.do("GET", "capt", fmt.Sprintf("/hold/%d", i))
				if err != nil {
					r = &edgeResp{Body: []byte(err.Error())}
				}
				held <- r
			}()
		}
		up.waitArrivals(t, capN)
		assertOverloaded(t, edge, "capt", "/hold/over")
		if err := served(edge, "capo", "/now", "hold")(); err != nil {
			t.Fatalf("another tenant while capt is at its cap: %v", err)
		}
		up.release()
		for range capN {
			if r := <-held; r.Status != 200 {
				t.Fatalf("a held request of capt's: %s", r)
			}
		}
		if err := served(edge, "capt", "/now", "hold")(); err != nil {
			t.Fatalf("capt once its requests were answered: %v", err)
		}
	})

	if n := meterSample(t, s.edgeAdm, `tollgate_edge_limited_total{code="overloaded"}`); n != 2 {
		t.Errorf("tollgate_edge_limited_total{code=\"overloaded\"} = %v, want 2 (one refusal per capped subtest)", n)
	}
}

// assertOverloaded sends one request that a full cap must refuse at once: 503 overloaded
// with Retry-After: 1. The requests holding the cap are still held by the upstream, so a
// request that queued behind them would not be answered before the deadline.
func assertOverloaded(t *testing.T, edge *edgeClient, slug, path string, header ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := edge.doCtx(ctx, "GET", slug, path, header...)
	if err != nil {
		t.Fatalf("a request over the cap was not answered while the cap's requests were held (it queued?): %v", err)
	}
	wantEnvelope(t, r, 503, "overloaded")
	if got := r.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
}
