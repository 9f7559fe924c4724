package main

// The seeds' payload and routing scenarios beside S1 (README, "Benchmarks"):
//
//   - S3: a POST with a ~1 KB JSON body that the route rewrites (transform.request.json:
//     set, remove, rename). nginx has no JSON rewrite, so it proxies the same POST
//     unchanged: the reference for the cost of proxying the body at all. S3b is the
//     same POST through a plain Tollgate route: S3 ÷ S3b is the rewrite's own cost.
//   - S4: a canary of s4Weight % to a second upstream; nginx splits with a weighted
//     upstream block (smooth weighted round-robin). The split is counted at the two
//     upstreams (nginx stub_status), not trusted from the gateway.
//   - S5: 1 MiB responses, served by the upstream nginx from a file. The gateway's peak
//     RSS during the window shows whether it streams or buffers.
//
// S6 (WebSocket) is in websocket.go, S9 (TLS) in tls.go, S1h2 and S1grpc (HTTP/2) in h2.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"

	"tollgate/e2e/bench/harness"
)

const (
	s4Weight = harness.CanaryWeight // S4: percent of requests to the canary
	s5Path   = harness.BigPath      // S5: the upstream's 1 MiB file
	s5Size   = harness.BigSize      // S5: its size
	s4Answer = "canary"             // what the canary upstream answers
	s3Check  = "/s3-chk"            // S3: the route that shows the rewrite to the bench
)

// s3Body is S3's request: a JSON object of about 1 KB, as an order API might get.
var s3Body = func() string {
	items := make([]map[string]any, 8)
	for i := range items {
		items[i] = map[string]any{"sku": fmt.Sprintf("SKU-%06d", 1000+i), "qty": i + 1, "price": 9.99 + float64(i),
			"note": "gift wrap, deliver to the side door"}
	}
	b, _ := json.Marshal(map[string]any{
		"user": "ann", "password": "s3cret-s3cret", "order_id": "ord_7f3a9c2e41b8",
		"currency": "EUR", "items": items, "shipping": map[string]any{"street": "1 Main Street", "city": "Utrecht", "zip": "3511"},
	})
	return string(b)
}()

// s3Transform is S3's rewrite: set a nested key, remove the password, rename user.
var s3Transform = map[string]any{"request": map[string]any{"json": map[string]any{
	"set":    map[string]any{"meta.via": "tollgate", "meta.version": 2},
	"remove": []string{"password"},
	"rename": map[string]string{"user": "login"},
}}}

// splitCount is how many requests each upstream of S4 answered in a window.
type splitCount struct{ main, canary int64 }

func (s *splitCount) String() string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("  split %d/%d (canary %.2f%%)", s.main, s.canary, s.canaryPct())
}

func (s *splitCount) canaryPct() float64 {
	if s.main+s.canary == 0 {
		return 0
	}
	return 100 * float64(s.canary) / float64(s.main+s.canary)
}

// countSplit reads both upstreams' request counters.
func (b *bench) countSplit(ctx context.Context) (splitCount, error) {
	m, err := b.UpstreamRequests(ctx, b.upPort)
	if err != nil {
		return splitCount{}, err
	}
	c, err := b.UpstreamRequests(ctx, b.CanaryPort)
	return splitCount{main: m, canary: c}, err
}

// scenarioServices starts what the asked-for scenarios need beside the shared upstream:
// S4's canary upstream, S6's WebSocket echo upstream, S9's and S1h2's certificate,
// S1grpc's gRPC upstream. Each starts once.
func (b *bench) scenarioServices(ctx context.Context, ids []string) error {
	for _, id := range ids {
		switch id {
		case "S4":
			if b.CanaryPort != 0 {
				continue
			}
			port, err := harness.FreePort()
			if err != nil {
				return err
			}
			if _, err := b.StartUpstreamNamed(ctx, "canary upstream nginx", "upstream-canary", port, s4Answer); err != nil {
				return err
			}
			b.CanaryPort = port
		case "S6":
			if b.WSPort != 0 {
				continue
			}
			if err := b.startWSEcho(ctx); err != nil {
				return err
			}
		case "S1grpc":
			if err := b.startGRPCUpstream(ctx); err != nil {
				return err
			}
		case "S9", "S1h2":
			if b.TLSCert != "" {
				continue
			}
			cert, key, err := b.WriteCert()
			if err != nil {
				return err
			}
			b.TLSCert, b.TLSKey = cert, key
		}
	}
	return nil
}

// configureS3 creates S3's rewriting route and, beside it, the same rewrite on a route to
// an upstream of the bench's own that keeps the last body it got: verify compares that
// with the rewrite expected, so S3 cannot measure a transform that does nothing.
func (b *bench) configureS3(ctx context.Context, s *harness.Stack, slug, upURL string, sc *perfScenario) error {
	r := harness.RouteBody("s3", sc.hit, upURL, "none", false)
	r["transform"] = s3Transform
	if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", r, nil); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		b.s3Seen.Lock()
		b.s3Seen.body = body
		b.s3Seen.Unlock()
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	b.Clean.Add(func() { srv.Close() })
	chk := harness.RouteBody("s3-check", s3Check, "http://"+ln.Addr().String(), "none", false)
	chk["transform"] = s3Transform
	return s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", chk, nil)
}

// s3Expected is s3Body as S3's rewrite should leave it.
func s3Expected() map[string]any {
	var m map[string]any
	_ = json.Unmarshal([]byte(s3Body), &m)
	delete(m, "password")
	m["login"] = m["user"]
	delete(m, "user")
	m["meta"] = map[string]any{"via": "tollgate", "version": 2.0}
	return m
}

// verify checks once, before measuring, that a gateway does what the scenario claims:
// S3's rewrite reaches the upstream (Tollgate), S5's body arrives whole.
func (b *bench) verify(ctx context.Context, gw string, sc *perfScenario, base string) error {
	switch {
	case sc.id == "S3" && gw == "tollgate":
		req, err := http.NewRequestWithContext(ctx, "POST", base+s3Check, strings.NewReader(s3Body))
		if err != nil {
			return err
		}
		req.Host = sc.host
		req.Header.Set("Content-Type", "application/json")
		resp, err := b.HTTP.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		b.s3Seen.Lock()
		seen := b.s3Seen.body
		b.s3Seen.Unlock()
		var got map[string]any
		if resp.StatusCode != 200 || json.Unmarshal(seen, &got) != nil || !reflect.DeepEqual(got, s3Expected()) {
			want, _ := json.Marshal(s3Expected())
			return fmt.Errorf("the rewrite did not reach the upstream: status %d, upstream got %s, want %s", resp.StatusCode, seen, want)
		}
	case sc.id == "S5":
		req, err := http.NewRequestWithContext(ctx, "GET", base+sc.hit, nil)
		if err != nil {
			return err
		}
		req.Host = sc.host
		resp, err := b.HTTP.Do(req)
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n != s5Size {
			return fmt.Errorf("GET %s: status %d, %d bytes (%v), want 200 and %d bytes", sc.hit, resp.StatusCode, n, err, s5Size)
		}
	case sc.id == "S4":
		// Both sides answer before the split is measured: the canary is configured.
		seen := map[string]bool{}
		for i := 0; i < 400 && len(seen) < 2; i++ {
			req, err := http.NewRequestWithContext(ctx, "GET", base+sc.hit, nil)
			if err != nil {
				return err
			}
			req.Host = sc.host
			resp, err := b.HTTP.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			seen[string(bytes.TrimSpace(body))] = true
		}
		if !seen[s4Answer] {
			fmt.Fprintf(os.Stderr, "bench: S4: warning: %s sent none of 400 requests to the canary upstream (the split below says how many it sends)\n", gw)
		}
	}
	return nil
}

// s3Seen is the last body S3's check upstream received.
type s3Seen struct {
	sync.Mutex
	body []byte
}
