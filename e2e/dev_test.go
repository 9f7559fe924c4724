package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"tollgate/infra/testenv"
)

// The banner's curl lines:
//
//	curl -i -H 'X-API-Key: tg_...' http://demo.localhost:8000/hello
//	curl -i http://demo.localhost:8000/hello                # no key: 401 envelope
var (
	curlKeyLine   = regexp.MustCompile(`(?m)^\s*curl -i -H 'X-API-Key: ([^']+)' (http://\S+)\s*$`)
	curlNoKeyLine = regexp.MustCompile(`(?m)^\s*curl -i (http://\S+)\s+#.*$`)
)

// TestDevSmoke: `tollgate dev` against a fresh database, embedded NATS, prints curl lines
// that work exactly as printed, and exits 0 on SIGTERM.
func TestDevSmoke(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	var (
		p        *proc
		keyLine  []string
		noKeyURL string
		admin    string
	)
	for attempt := 1; ; attempt++ {
		admin = freeAddr(t)
		env := []string{
			"TOLLGATE_API_ADMIN_ADDR=" + admin,
			"TOLLGATE_DATABASE_URL=" + db,
			"TOLLGATE_API_ADDR=" + freeAddr(t),
			"TOLLGATE_EDGE_ADDR=" + freeAddr(t),
			"TOLLGATE_EDGE_ADMIN_ADDR=" + freeAddr(t),
		}
		p = startProc(t, "dev", []string{"dev"}, env)
		_, err := poll(60*time.Second, func() error {
			if p.exited() {
				return nil
			}
			out := p.stdout.String()
			keyLine = curlKeyLine.FindStringSubmatch(out)
			if m := curlNoKeyLine.FindStringSubmatch(out); m != nil {
				noKeyURL = m[1]
			}
			if keyLine == nil || noKeyURL == "" {
				return errNotYet
			}
			return nil
		})
		if p.exited() && p.bindFailed() && attempt < 5 {
			continue
		}
		if p.exited() {
			t.Fatalf("tollgate dev exited (%v) before printing its curl lines (its output is below)", p.err)
		}
		if err != nil {
			t.Fatalf("tollgate dev printed no curl lines within 60s (its output is below)")
		}
		break
	}
	key, keyURL := keyLine[1], keyLine[2]
	t.Logf("banner: curl -i -H 'X-API-Key: %s' %s", key, keyURL)

	r := curlLike(t, keyURL, "X-API-Key", key)
	if r.Status != 200 {
		t.Fatalf("the printed keyed curl line: got %s, want 200", r)
	}
	if !strings.Contains(string(r.Body), `"/hello"`) {
		t.Errorf("the demo upstream's answer does not echo the path /hello: %s", r)
	}
	wantEnvelope(t, curlLike(t, noKeyURL), 401, "unauthenticated")

	// One admin listener serves the api's and billing's series.
	_, metrics := adminGet(t, admin, "/metrics")
	for _, series := range []string{`tollgate_billing_batches_total{result="folded"}`, "tollgate_outbox_unsent_rows", "tollgate_relay_publish_errors_total"} {
		if sampleOf(metrics, series) < 0 {
			t.Errorf("dev's admin listener lacks %s", series)
		}
	}

	p.stopClean(t, stopTimeout)
}

// curlLike performs GET rawURL the way curl does, with headers as name, value pairs. The
// URL's host (demo.localhost) is sent as the Host header while the connection goes to
// 127.0.0.1 on the URL's port: curl resolves *.localhost to loopback itself, Go's
// resolver does not everywhere.
func curlLike(t *testing.T, rawURL string, header ...string) *edgeResp {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("printed URL %q: %v", rawURL, err)
	}
	if !strings.HasSuffix(u.Hostname(), ".localhost") {
		t.Fatalf("printed URL %q is not on *.localhost", rawURL)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	return &edgeResp{Status: resp.StatusCode, Header: resp.Header, Body: body}
}
