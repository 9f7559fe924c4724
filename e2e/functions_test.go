package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/edge/function/functiontest"
)

// putModule uploads module as the tenant's function name (raw body, Content-Type ctype).
func (c *apiClient) putModule(slug, name string, module []byte, ctype string) apiResp {
	c.t.Helper()
	req, err := http.NewRequest("PUT", c.base+"/v1/tenants/"+slug+"/functions/"+name, bytes.NewReader(module))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", ctype)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("PUT function %s/%s: %v", slug, name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := apiResp{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

// TestFunctions: a tenant uploads proxy-wasm filters built from source in this run, a
// route runs them through the api and edge processes: the upstream sees the header a
// filter adds, the client sees the response header it adds, and a filter's local reply
// answers the request it refuses; a module that is not Wasm is refused with the
// envelope; another tenant's filter that never returns is cut off with 500
// function_failed within a couple of seconds while the first tenant's calls keep
// succeeding.
func TestFunctions(t *testing.T) {
	t.Parallel()
	// WAT guests: a Go-built one takes long to compile in race-enabled binaries.
	headers := functiontest.Build(t, functiontest.WatHeaders)
	deny := functiontest.Build(t, functiontest.WatDeny)
	loop := functiontest.Build(t, functiontest.Loop)

	s := newStack(t)
	_, api := s.startAPI()
	// Under the race detector the host side of every guest call runs many times slower,
	// and a callback's budget is wall time: acme's callbacks get more of it, as the edge
	// package's function tests do, so that only the rogue's loops are cut off.
	var fnTimeout []string
	if raceBuild {
		fnTimeout = append(fnTimeout, "TOLLGATE_EDGE_FUNCTION_TIMEOUT=250ms")
	}
	_, edge := s.startEdge(fnTimeout...)
	startProc(t, "billing", []string{"billing"}, s.env())
	up := echoUpstream(t, "fn")
	api.createTenant("acme")
	api.createTenant("rogue")

	if r := api.putModule("acme", "junk", []byte("#!/bin/sh\necho not wasm\n"), "application/wasm"); r.Status != 400 ||
		!bytes.Contains(r.Raw, []byte(`"validation_failed"`)) {
		t.Fatalf("a module that is not Wasm: %s, want 400 validation_failed", r)
	}
	for name, mod := range map[string][]byte{"stamp": headers, "gate": deny} {
		r := api.putModule("acme", name, mod, "application/wasm")
		if r.Status != 200 && r.Status != 201 {
			t.Fatalf("upload %s: %s", name, r)
		}
		if sha, _ := r.Body["sha256"].(string); len(sha) != 64 || int(num(t, r.Body, "size")) != len(mod) {
			t.Fatalf("upload %s: answer lacks sha256/size: %s", name, r)
		}
	}
	api.createRoute("acme", routeSpec("fn", "/fn", up.URL, "none",
		"functions", []map[string]any{{"name": "stamp"}, {"name": "gate"}}))
	eventually(t, 15*time.Second, "the function route is served", served(edge, "acme", "/fn/x", "fn"))

	r := edge.get(t, "acme", "/fn/x")
	if got := decodeEcho(t, r).Headers["X-Function"]; !slices.Equal(got, []string{"request"}) {
		t.Errorf("upstream saw X-Function %q, want [request]", got)
	}
	if got := r.Header.Get("X-Function"); got != "response" {
		t.Errorf("client saw X-Function %q, want response", got)
	}
	r = edge.get(t, "acme", "/fn/x", "X-Deny", "1")
	if r.Status != 403 || r.Header.Get("X-Denied-By") == "" {
		t.Errorf("the filter's local reply: %s %v, want 403 with X-Denied-By", r, r.Header)
	}

	if r := api.putModule("rogue", "spin", loop, "application/wasm"); r.Status != 200 && r.Status != 201 {
		t.Fatalf("upload spin: %s", r)
	}
	api.createRoute("rogue", routeSpec("spin", "/spin", up.URL, "none", "functions", []map[string]any{{"name": "spin"}}))
	eventually(t, applyDeadline, "the looping function is cut off", answers(edge, "rogue", "/spin", 500, "function_failed"))

	// The rogue tenant's loops, four at a time, while acme's calls go on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rogueMu sync.Mutex
	var rogueWorst time.Duration
	var rogueBad []string
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				r, err := edge.do("GET", "rogue", "/spin")
				d := time.Since(start)
				rogueMu.Lock()
				rogueWorst = max(rogueWorst, d)
				if err != nil {
					rogueBad = append(rogueBad, err.Error())
				} else if cerr := checkEnvelope(r, 500, "function_failed"); cerr != nil {
					// Past the tenant's concurrency cap on this edge, its calls wait briefly, then get 503.
					if busy := checkEnvelope(r, 503, "function_busy"); busy != nil {
						rogueBad = append(rogueBad, cerr.Error())
					}
				}
				rogueMu.Unlock()
			}
		}()
	}
	var lat []time.Duration
	for range 200 {
		start := time.Now()
		r, err := edge.do("GET", "acme", "/fn/x")
		lat = append(lat, time.Since(start))
		if err != nil || r.Status != 200 {
			t.Errorf("acme's call during the rogue loops: %v %s", err, r)
			break
		}
	}
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	p99 := lat[len(lat)*99/100]
	t.Logf("acme's p99 beside the rogue tenant's loops: %v (p50 %v); the rogue's slowest cut-off: %v", p99, lat[len(lat)/2], rogueWorst)
	if len(rogueBad) > 0 {
		t.Errorf("rogue calls not answered 500 function_failed (or 503 function_busy): %d, first: %s", len(rogueBad), rogueBad[0])
	}
	// The bounds are loose: the machine is shared, and a race-enabled edge beside the rest
	// of the race-enabled suite may wait seconds for a core; the figures for the docs are
	// the ones logged above, from a plain build.
	cutOff, acmeP99 := 2*time.Second, time.Second
	if raceBuild {
		cutOff, acmeP99 = 8*time.Second, 5*time.Second
	}
	if rogueWorst > cutOff {
		t.Errorf("a looping filter ran %v before it was cut off, want under %v", rogueWorst, cutOff)
	}
	if p99 > acmeP99 {
		t.Errorf("acme's p99 %v beside the rogue tenant's loops, want under %v", p99, acmeP99)
	}

	// The request log says which function failed and why.
	eventually(t, 30*time.Second, "the rogue's failure in its request log", func() error {
		r := api.call("GET", "/v1/tenants/rogue/logs?status=500&route=spin&limit=1", nil)
		items, _ := r.Body["items"].([]any)
		if r.Status != 200 || len(items) == 0 {
			return fmt.Errorf("logs: %s", r)
		}
		if reason, _ := items[0].(map[string]any)["reason"].(string); !strings.HasPrefix(reason, "function spin failed: ") {
			return fmt.Errorf("reason %q does not name the function spin", reason)
		}
		return nil
	})

	// The filters' guest time is metered with the calls and reaches the finance export.
	period := billing.PeriodOf(time.Now()).String()
	eventually(t, 30*time.Second, "acme's function time in the export", func() error {
		r := api.call("GET", "/v1/billing/export?format=json&period="+period, nil)
		var doc billing.ExportDocument
		if r.Status != 200 || json.Unmarshal(r.Raw, &doc) != nil {
			return fmt.Errorf("export: %s", r)
		}
		var us int64
		for _, row := range doc.Items {
			if row.Tenant == "acme" {
				us += row.FunctionUS
			}
		}
		if us < int64(len(lat)) {
			return fmt.Errorf("acme's function time in the export is %d µs after %d calls through two filters", us, len(lat))
		}
		t.Logf("acme's function time in the export: %d µs over at least %d calls", us, len(lat))
		return nil
	})
}
