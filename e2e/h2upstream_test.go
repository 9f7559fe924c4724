package e2e

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestH2UpstreamOverTLS: a route whose upstream has "protocol": "h2" and https://
// targets reaches them over TLS with ALPN h2, through real api and edge processes (the
// edge trusts the targets' test certificate through SSL_CERT_FILE, as it would a private
// CA): a target that picks h2 serves the call over HTTP/2, with the header the edge
// adds; a target whose TLS offers only http/1.1 is refused 502 upstream_failed, and the
// tenant's request log says the upstream does not speak HTTP/2; and a route whose
// weighted targets mix the two (9 to 1) answers from the h2 target whenever it picks
// that one; and an HTTP/1.1 route's canary, an h2 upstream over TLS, takes the requests
// its header matches.
func TestH2UpstreamOverTLS(t *testing.T) {
	t.Parallel()
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "h2tls")
		fmt.Fprintf(w, "%s tls=%v path=%s request-id=%s", r.Proto, r.TLS != nil, r.URL.Path, r.Header.Get("X-Request-Id"))
	}))
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	// The same certificate for both servers, so one file makes the edge trust both.
	h1 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "h1tls")
		fmt.Fprint(w, r.Proto)
	}))
	h1.TLS = h2.TLS.Clone()
	h1.TLS.NextProtos = []string{"http/1.1"}
	h1.StartTLS()
	t.Cleanup(h1.Close)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h2.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge("SSL_CERT_FILE=" + caFile)
	startProc(t, "billing", []string{"billing"}, s.env()) // files the request log
	api.createTenant("acme")
	h2Route := func(name, path string, targets ...map[string]any) map[string]any {
		r := routeSpec(name, path, "", "none")
		r["upstream"] = map[string]any{"protocol": "h2", "targets": targets}
		return r
	}
	target := func(url string, weight int) map[string]any { return map[string]any{"url": url, "weight": weight} }
	api.createRoute("acme", h2Route("tls", "/tls", target(h2.URL, 1)))
	api.createRoute("acme", h2Route("h1only", "/h1only", target(h1.URL, 1)))
	api.createRoute("acme", h2Route("mixed", "/mixed", target(h2.URL, 9), target(h1.URL, 1)))
	api.createRoute("acme", routeSpec("canary", "/canary", echoUpstream(t, "stable").URL, "none",
		"canary", map[string]any{"weight": 0, "match": map[string]any{"header": "X-Canary", "values": []string{"yes"}},
			"upstream": map[string]any{"protocol": "h2", "targets": []map[string]any{target(h2.URL, 1)}}}))

	eventually(t, 15*time.Second, "the h2 route over TLS is served", served(edge, "acme", "/tls/x", "h2tls"))
	r := edge.get(t, "acme", "/tls/x")
	if body := string(r.Body); !strings.HasPrefix(body, "HTTP/2.0 tls=true path=/tls/x request-id=") || strings.HasSuffix(body, "request-id=") {
		t.Errorf("the upstream saw %q, want HTTP/2.0 over TLS with the edge's X-Request-Id", body)
	}

	eventually(t, 15*time.Second, "the h1-only target is refused", answers(edge, "acme", "/h1only/x", 502, "upstream_failed"))
	eventually(t, 20*time.Second, "the refusal's reason in the request log", func() error {
		res := api.call("GET", "/v1/tenants/acme/logs?status=502&route=h1only&limit=1", nil)
		items, _ := res.Body["items"].([]any)
		if res.Status != 200 || len(items) == 0 {
			return fmt.Errorf("logs: %s", res)
		}
		if reason, _ := items[0].(map[string]any)["reason"].(string); !strings.Contains(reason, "does not speak HTTP/2") {
			return fmt.Errorf("reason %q does not say the upstream lacks HTTP/2", reason)
		}
		return nil
	})

	eventually(t, 15*time.Second, "the mixed route is served", served(edge, "acme", "/mixed/x", ""))
	var fromH2 int
	for range 40 {
		r := edge.get(t, "acme", "/mixed/x")
		switch up := r.Header.Get("X-Upstream"); {
		case r.Status == 200 && up == "h2tls":
			fromH2++
		case r.Status == 502 && checkEnvelope(r, 502, "upstream_failed") == nil:
		default:
			t.Fatalf("mixed: %s (upstream %q), want 200 from h2tls or 502 upstream_failed", r, up)
		}
	}
	if fromH2 == 0 {
		t.Error("the mixed route never answered from its h2 target in 40 calls")
	}

	eventually(t, 15*time.Second, "the canary route is served", served(edge, "acme", "/canary/x", "stable"))
	if r := edge.get(t, "acme", "/canary/x", "X-Canary", "yes"); r.Status != 200 || !strings.HasPrefix(string(r.Body), "HTTP/2.0 tls=true") {
		t.Errorf("the canary's request: %s (upstream %q), want HTTP/2.0 over TLS from h2tls", r, r.Header.Get("X-Upstream"))
	}
	if r := edge.get(t, "acme", "/canary/x"); r.Status != 200 || r.Header.Get("X-Upstream") != "stable" {
		t.Errorf("the stable request: %s (upstream %q), want the HTTP/1.1 upstream", r, r.Header.Get("X-Upstream"))
	}
}
