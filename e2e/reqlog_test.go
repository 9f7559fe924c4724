package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestRequestLogNamesTheRefusedUpstream: one call to a route whose upstream port is
// closed is in GET /v1/tenants/{slug}/logs?status=502 within seconds, with a reason
// naming the refused host:port, its request id, route and latency split; a call that
// succeeds is left out at the default 1% sample (counted in not_logged) unless drawn;
// a bad filter is a 400 envelope.
func TestRequestLogNamesTheRefusedUpstream(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	startProc(t, "billing", []string{"billing"}, s.env())
	api.createTenant("acme")
	down := downUpstream(t)
	up := echoUpstream(t, "ok")
	api.createRoute("acme", routeSpec("down", "/down", down, "none"))
	api.createRoute("acme", routeSpec("fine", "/fine", up.URL, "none"))
	eventually(t, 15*time.Second, "the route to the closed port answers 502", answers(edge, "acme", "/down?token=secret", 502, "upstream_failed"))
	r := edge.get(t, "acme", "/down?token=secret")
	reqID := r.Header.Get("X-Request-Id")
	if reqID == "" {
		t.Fatalf("no X-Request-Id on %s", r)
	}
	eventually(t, 15*time.Second, "the fine route answers", served(edge, "acme", "/fine", "ok"))

	hostport := strings.TrimPrefix(down, "http://")
	var item map[string]any
	var page map[string]any
	eventually(t, 20*time.Second, "the 502 is in the request log", func() error {
		res := api.call("GET", "/v1/tenants/acme/logs?status=502&request_id="+url.QueryEscape(reqID), nil)
		if res.Status != 200 {
			return fmt.Errorf("logs: %s", res)
		}
		items, _ := res.Body["items"].([]any)
		if len(items) != 1 {
			return fmt.Errorf("logs: %d items, want 1: %s", len(items), res)
		}
		item, page = items[0].(map[string]any), res.Body
		return nil
	})
	reason, _ := item["reason"].(string)
	if !strings.Contains(reason, hostport) || !strings.Contains(reason, "refused") {
		t.Errorf("reason %q does not name the refused connection to %s", reason, hostport)
	}
	if item["path"] != "/down" || item["route"] != "down" || item["method"] != "GET" || item["code"] != "upstream_failed" {
		t.Errorf("entry %v: want path /down (no query), route down, GET, upstream_failed", item)
	}
	for _, f := range []string{"gateway_ms", "upstream_ms", "time", "bytes_in", "bytes_out"} {
		if _, ok := item[f]; !ok {
			t.Errorf("entry lacks %s: %v", f, item)
		}
	}
	if b, _ := json.Marshal(page); strings.Contains(string(b), "secret") {
		t.Errorf("the log kept the query string: %s", b)
	}
	if _, ok := page["not_logged"].(map[string]any); !ok {
		t.Errorf("page lacks not_logged: %v", page)
	}

	// Every 502 the test made is there; the 200s are counted as sampled out unless drawn.
	eventually(t, 20*time.Second, "the 200s are counted", func() error {
		res := api.call("GET", "/v1/tenants/acme/logs?route=fine", nil)
		nl, _ := res.Body["not_logged"].(map[string]any)
		items, _ := res.Body["items"].([]any)
		if res.Status != 200 || nl == nil {
			return fmt.Errorf("logs: %s", res)
		}
		if sampled, _ := nl["sampled"].(float64); int(sampled)+len(items) < 1 {
			return fmt.Errorf("the successful call is neither logged nor counted: %s", res)
		}
		return nil
	})

	for _, bad := range []string{"status=abc", "since=yesterday", "cursor=%%%", "limit=0", "since=2026-12-06&until=2026-12-05", "colour=red"} {
		res := api.call("GET", "/v1/tenants/acme/logs?"+bad, nil)
		if res.Status != 400 || !strings.Contains(string(res.Raw), `"invalid_request"`) {
			t.Errorf("?%s: %s, want 400 invalid_request", bad, res)
		}
	}

	// Paging: one entry a page, the next page older, the last without next.
	for i := 0; i < 2; i++ {
		edge.get(t, "acme", "/down")
	}
	eventually(t, 20*time.Second, "three 502s are logged", func() error {
		res := api.call("GET", "/v1/tenants/acme/logs?status=5xx", nil)
		if items, _ := res.Body["items"].([]any); len(items) < 3 {
			return fmt.Errorf("%d items", len(items))
		}
		return nil
	})
	seen := map[string]bool{}
	cursor := ""
	for n := 0; ; n++ {
		res := api.must(200, "GET", "/v1/tenants/acme/logs?status=502&limit=1&cursor="+url.QueryEscape(cursor), nil)
		items, _ := res["items"].([]any)
		for _, it := range items {
			id := it.(map[string]any)["request_id"].(string)
			if seen[id] {
				t.Fatalf("page %d repeats %s", n, id)
			}
			seen[id] = true
		}
		cursor, _ = res["next"].(string)
		if cursor == "" || n > 10 {
			break
		}
	}
	if len(seen) < 3 {
		t.Errorf("paging saw %d entries, want at least 3", len(seen))
	}
}
