package edge_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// TestAnswerBeforeBodyReachesClient: when the edge refuses a request before reading its
// body (too large, or unauthenticated), a client still sending that body gets the answer,
// not a connection reset: the edge closes gracefully (lingering close).
func TestAnswerBeforeBodyReachesClient(t *testing.T) {
	h := newTLSHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	r := &tenants.Route{ID: "small", TenantID: acme, Name: "small", Paths: []string{"/small"}, MaxBodyBytes: 1 << 10,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}
	h.put(r)
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.URL)
	h.e.Loaded()

	// The TLS requests name the tenant's host (SNI and Host); every dial goes to the edge.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "acme.") {
			addr = h.tls
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: h.ca.Pool}}}
	body := bytes.Repeat([]byte("x"), 16<<20) // far more than the socket buffers hold
	for _, base := range []string{"http://" + h.public, "https://acme." + domain + ":443"} {
		for _, c := range []struct {
			path, code string
			status     int
			chunked    bool
		}{
			{"/small", tenants.EBodyTooLarge, 413, false},
			{"/small", tenants.EBodyTooLarge, 413, true},
			{"/keyed", tenants.EUnauthenticated, 401, false},
		} {
			post := func() (*http.Response, error) {
				var rd io.Reader = bytes.NewReader(body)
				if c.chunked {
					rd = io.MultiReader(rd) // hides the length: sent chunked
				}
				req, _ := http.NewRequest("POST", base+c.path, rd)
				req.Host = "acme." + domain
				return client.Do(req)
			}
			resp, err := post()
			for try := 0; err != nil && strings.Contains(err.Error(), "use of closed network connection") && try < 3; try++ {
				// Go's client, not the edge: its read loop took the answer and closed
				// the connection (the answer says close), and its round trip then
				// reported the write loop's error on that closed connection instead of
				// the answer. A reset by the edge reads "connection reset by peer".
				resp, err = post()
			}
			if err != nil {
				t.Errorf("POST %s%s (chunked %v) with 16 MiB: %v, want the %d answer", base, c.path, c.chunked, err, c.status)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !bytes.Contains(b, []byte(`"`+c.code+`"`)) {
				t.Errorf("POST %s%s (chunked %v): %d %s, want %d %s", base, c.path, c.chunked, resp.StatusCode, b, c.status, c.code)
			}
		}
	}
}
