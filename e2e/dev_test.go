package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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
// that work exactly as printed, and exits 0 on SIGTERM. The other commands find the
// running stack; restarted, it gives the same admin token, demo key and demo upstream, so
// what a newcomer exported or pasted keeps working.
func TestDevSmoke(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	state := filepath.Join(t.TempDir(), "dev.json")
	var first *devRun
	for attempt := 1; ; attempt++ {
		env := []string{
			"TOLLGATE_DATABASE_URL=" + db,
			"TOLLGATE_API_ADDR=" + freeAddr(t),
			"TOLLGATE_EDGE_ADDR=" + freeAddr(t),
			"TOLLGATE_EDGE_ADMIN_ADDR=" + freeAddr(t),
			"TOLLGATE_DEV_UPSTREAM_ADDR=" + freeAddr(t),
			"TOLLGATE_DEV_STATE=" + state,
		}
		var retry bool
		if first, retry = startDevRun(t, append(env, "TOLLGATE_API_ADMIN_ADDR="+freeAddr(t))); retry && attempt < 5 {
			continue
		}
		break
	}
	first.check(t)

	// One admin listener serves the api's and billing's series.
	_, metrics := adminGet(t, first.admin, "/metrics")
	for _, series := range []string{`tollgate_billing_batches_total{result="folded"}`, "tollgate_outbox_unsent_rows", "tollgate_relay_publish_errors_total"} {
		if sampleOf(metrics, series) < 0 {
			t.Errorf("dev's admin listener lacks %s", series)
		}
	}

	// Without TOLLGATE_NATS_URL, billing's commands use the running stack's embedded NATS,
	// which holds its edge's usage, and say so.
	cmd := exec.Command(bin, "billing", "reconcile", "--period", time.Now().UTC().Format("2006-01"))
	cmd.Env = append(os.Environ(), "TOLLGATE_DATABASE_URL="+db, "TOLLGATE_DEV_STATE="+state, "TOLLGATE_NATS_URL=")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "using the running dev stack's NATS at "+first.nats) {
		t.Errorf("billing reconcile did not find dev's NATS %s:\n%s", first.nats, out)
	}
	first.p.stopClean(t, stopTimeout)

	// Restarted on the same addresses: nothing the banner printed has changed.
	again, _ := startDevRun(t, append(first.env, "TOLLGATE_API_ADMIN_ADDR="+freeAddr(t)))
	again.check(t)
	if again.key != first.key || again.adminToken != first.adminToken || again.upstream != first.upstream {
		t.Errorf("a restart changed the demo key, the admin token or the demo upstream: %s %s %s, then %s %s %s",
			first.key, first.adminToken, first.upstream, again.key, again.adminToken, again.upstream)
	}
	again.p.stopClean(t, stopTimeout)
}

// devRun is one `tollgate dev` and what its banner printed.
type devRun struct {
	p                  *proc
	env                []string
	admin              string
	key, keyURL, noKey string
	adminToken         string
	upstream, nats     string
}

var (
	adminTokenLine = regexp.MustCompile(`(?m)^\s*export TOLLGATE_ADMIN_TOKEN=(\S+)\s*$`)
	upstreamLine   = regexp.MustCompile(`(?m)^\s*demo upstream\s+http://(\S+)`)
	natsLine       = regexp.MustCompile(`(?m)^\s*nats\s+(\S+)`)
)

// startDevRun starts `tollgate dev` with env and waits for its banner; retry says a port
// it was given was taken meanwhile.
func startDevRun(t *testing.T, env []string) (r *devRun, retry bool) {
	t.Helper()
	r = &devRun{env: env[:len(env)-1], admin: strings.TrimPrefix(env[len(env)-1], "TOLLGATE_API_ADMIN_ADDR=")}
	r.p = startProc(t, "dev", []string{"dev"}, env)
	var keyLine, tokenLine, upLine, natsM []string
	_, err := poll(60*time.Second, func() error {
		if r.p.exited() {
			return nil
		}
		out := r.p.stdout.String()
		keyLine = curlKeyLine.FindStringSubmatch(out)
		if m := curlNoKeyLine.FindStringSubmatch(out); m != nil {
			r.noKey = m[1]
		}
		tokenLine, upLine, natsM = adminTokenLine.FindStringSubmatch(out), upstreamLine.FindStringSubmatch(out), natsLine.FindStringSubmatch(out)
		if keyLine == nil || r.noKey == "" || tokenLine == nil || upLine == nil || natsM == nil {
			return errNotYet
		}
		return nil
	})
	if r.p.exited() && r.p.bindFailed() {
		return r, true
	}
	if r.p.exited() {
		t.Fatalf("tollgate dev exited (%v) before printing its banner (its output is below)", r.p.err)
	}
	if err != nil {
		t.Fatalf("tollgate dev printed no banner within 60s (its output is below)")
	}
	r.key, r.keyURL, r.adminToken, r.upstream, r.nats = keyLine[1], keyLine[2], tokenLine[1], upLine[1], natsM[1]
	t.Logf("banner: curl -i -H 'X-API-Key: %s' %s", r.key, r.keyURL)
	return r, false
}

// check calls the banner's curl lines exactly as printed.
func (r *devRun) check(t *testing.T) {
	t.Helper()
	res := curlLike(t, r.keyURL, "X-API-Key", r.key)
	if res.Status != 200 {
		t.Fatalf("the printed keyed curl line: got %s, want 200", res)
	}
	if !strings.Contains(string(res.Body), `"/hello"`) {
		t.Errorf("the demo upstream's answer does not echo the path /hello: %s", res)
	}
	wantEnvelope(t, curlLike(t, r.noKey), 401, "unauthenticated")
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
