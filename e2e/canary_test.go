package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestCanarySplit: a route with a canary of weight 5, made through the api, sends exactly
// 500 of 10,000 requests (keep-alive, concurrent) to the canary's upstream, a request with
// the match header always, and the edge's counter by side agrees. Exactly: an unmatched,
// unsticky request is placed by the route's schedule, one atomic counter walking a cycle
// whose length divides 100, so any 100·k consecutive requests it places hold weight·k
// canary ones, wherever the polls before them left the counter.
func TestCanarySplit(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	primary, canary := echoUpstream(t, "primary"), echoUpstream(t, "canary")

	api.createTenant("shop")
	api.createRoute("shop", routeSpec("orders", "/orders", primary.URL, "none", "canary", map[string]any{
		"upstream": map[string]any{"targets": []map[string]any{{"url": canary.URL}}},
		"weight":   5,
		"match":    map[string]any{"header": "X-Canary", "values": []string{"on"}},
	}))
	eventually(t, applyDeadline, "the route is served", served(edge, "shop", "/orders", ""))

	// The match header: the canary every time.
	for i := range 20 {
		if got := edge.get(t, "shop", "/orders/1", "X-Canary", "on").Header.Get("X-Upstream"); got != "canary" {
			t.Fatalf("request %d with X-Canary: on served by %q, want canary", i, got)
		}
	}

	const n, workers = 10_000, 16
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	var failed sync.Once
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				r, err := edge.do("GET", "shop", "/orders/"+strconv.Itoa(i))
				if err == nil && r.Status != 200 {
					err = fmt.Errorf("status %s", r)
				}
				if err != nil {
					failed.Do(func() { t.Errorf("request %d: %v", i, err) })
					return
				}
				mu.Lock()
				counts[r.Header.Get("X-Upstream")]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("10,000 requests at weight 5: %v", counts)
	if counts["primary"]+counts["canary"] != n {
		t.Fatalf("answers by upstream %v, want %d from primary and canary", counts, n)
	}
	if c := counts["canary"]; c != n*5/100 {
		t.Errorf("%d of %d requests on the canary, want exactly %d (weight 5)", c, n, n*5/100)
	}

	// The edge counts each side; the polls and the match requests above add to them.
	side := edgeCanaryCounts(t, s.edgeAdm, "orders")
	if side["canary"] < counts["canary"]+20 || side["primary"] < counts["primary"] {
		t.Errorf("tollgate_edge_canary_requests_total %v, want at least canary %d, primary %d", side, counts["canary"]+20, counts["primary"])
	}
}

// edgeCanaryCounts reads tollgate_edge_canary_requests_total of a route from the edge's
// /metrics, by side.
func edgeCanaryCounts(t *testing.T, admin, route string) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tollgate_edge_canary_requests_total{") || !strings.Contains(line, `route="`+route+`"`) {
			continue
		}
		for _, side := range []string{"primary", "canary"} {
			if strings.Contains(line, `side="`+side+`"`) {
				v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				if err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				out[side] = int(v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
