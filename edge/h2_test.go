package edge_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"tollgate/edge"
)

// h2Tenant files tenant acme with a route /echo to an echo upstream, and waits until the
// edge serves it.
func h2Tenant(t *testing.T, h *harness) *upstream {
	t.Helper()
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r-echo", []string{"/echo"}, nil, "", up.URL)
	h.e.Loaded()
	waitFor(t, 2*time.Second, func() string {
		if r := h.get("acme."+domain, "/echo"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	return up
}

// h2cClient speaks HTTP/2 with prior knowledge to every address.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p}}
}

// h2Do sends one request and reads the whole answer.
func h2Do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

func TestH2CPriorKnowledge(t *testing.T) {
	h := newHarness(t)
	h2Tenant(t, h)
	c := h2cClient()

	req, _ := http.NewRequest("GET", "http://"+h.public+"/echo?q=1", nil)
	req.Host = "acme." + domain
	req.Header.Set("X-Request-Id", "h2-req-1")
	req.Header.Set("X_Consumer_Id", "forged")
	resp, body := h2Do(t, c, req)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("got %s %d %s, want HTTP/2.0 200", resp.Proto, resp.StatusCode, body)
	}
	var ec echo
	if err := json.Unmarshal([]byte(body), &ec); err != nil {
		t.Fatalf("echo: %v: %s", err, body)
	}
	if ec.RequestURI != "/echo?q=1" || ec.get("X-Request-Id") != "h2-req-1" || ec.has("X_Consumer_Id") ||
		ec.get("X-Forwarded-Proto") != "http" || ec.get("X-Forwarded-For") != "127.0.0.1" || ec.Host == "acme."+domain {
		t.Errorf("upstream saw %+v", ec)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "h2-req-1" {
		t.Errorf("X-Request-Id %q", got)
	}
	if resp.Header.Get("X-Echo") != "up" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("answer headers %v", resp.Header)
	}

	// Metered and counted like HTTP/1.1: the chain is the same.
	if n := h.metric("http_requests_total", map[string]string{"tenant": "acme", "route": "r-echo", "status": "2xx"}); n < 2 {
		t.Errorf("http_requests_total for r-echo: %v, want the HTTP/1.1 check and this request", n)
	}

	// A body of unknown length streams to the upstream.
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 3; i++ {
			_, _ = io.WriteString(pw, "chunk-")
			time.Sleep(5 * time.Millisecond)
		}
		_ = pw.Close()
	}()
	req, _ = http.NewRequest("POST", "http://"+h.public+"/echo", pr)
	req.Host = "acme." + domain
	resp, body = h2Do(t, c, req)
	if resp.StatusCode != 200 || !strings.Contains(body, `"body":"chunk-chunk-chunk-"`) {
		t.Fatalf("streamed POST: %d %s", resp.StatusCode, body)
	}

	// The gateway's own answers keep their envelope.
	req, _ = http.NewRequest("GET", "http://"+h.public+"/nowhere", nil)
	req.Host = "acme." + domain
	resp, body = h2Do(t, c, req)
	if resp.StatusCode != 404 || !strings.Contains(body, `"code":"route_not_found"`) {
		t.Errorf("unknown route: %d %s", resp.StatusCode, body)
	}

	// HTTP/1.1 on the same listener is unchanged.
	if r := h.get("acme."+domain, "/echo"); r.status != 200 || r.echo == nil {
		t.Errorf("HTTP/1.1 beside h2c: %s", r)
	}
}

func TestH2CConnectRefused(t *testing.T) {
	h := newHarness(t)
	h2Tenant(t, h)
	fc := dialH2(t, h.public)
	fc.writeHeaders(1, true, ":method", "CONNECT", ":authority", "acme."+domain+":443")
	st, body := fc.readAnswer(1)
	if st != "400" || !strings.Contains(body, `"code":"invalid_request"`) {
		t.Fatalf("CONNECT over h2: %s %s", st, body)
	}
}

func TestH2Off(t *testing.T) {
	h := newHarness(t, func(c *edge.Config) { c.DisableHTTP2 = true })
	h2Tenant(t, h)
	req, _ := http.NewRequest("GET", "http://"+h.public+"/echo", nil)
	req.Host = "acme." + domain
	if resp, err := h2cClient().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("h2c with HTTP/2 off: %s %d", resp.Proto, resp.StatusCode)
	}
}

func TestH2OverTLS(t *testing.T) {
	h := newTLSHarness(t)
	h2Tenant(t, h.harness)
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: h.ca.Pool, ServerName: "acme." + domain},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", h.tls)
		},
	}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, _ := http.NewRequest("GET", "https://acme."+domain+"/echo", nil)
	resp, body := h2Do(t, c, req)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.Contains(body, `"X-Forwarded-Proto":["https"]`) {
		t.Fatalf("got %s %d %s", resp.Proto, resp.StatusCode, body)
	}

	// The connection's SNI names acme: another tenant's Host on it is misdirected.
	h.tenant("other")
	req, _ = http.NewRequest("GET", "https://acme."+domain+"/echo", nil)
	req.Host = "other." + domain
	resp, body = h2Do(t, c, req)
	if resp.StatusCode != 421 || !strings.Contains(body, `"code":"misdirected_request"`) {
		t.Errorf("Host of another tenant over acme's connection: %d %s", resp.StatusCode, body)
	}

	// HTTP/1.1 clients still get HTTP/1.1.
	if r, st := h.tlsGet("acme."+domain, "acme."+domain, "/echo"); r.status != 200 || st.NegotiatedProtocol == "h2" {
		t.Errorf("HTTP/1.1 over TLS: %s (ALPN %q)", r, st.NegotiatedProtocol)
	}
}

func TestH2Curl(t *testing.T) {
	h := newTLSHarness(t)
	h2Tenant(t, h.harness)
	_, tlsPort, _ := net.SplitHostPort(h.tls)
	_, port, _ := net.SplitHostPort(h.public)
	host := "acme." + domain
	caFile := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(caFile, []byte(h.ca.PEM), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--http2", "--cacert", caFile, "--resolve", host + ":" + tlsPort + ":127.0.0.1", "https://" + host + ":" + tlsPort + "/echo"},
		{"--http2-prior-knowledge", "--resolve", host + ":" + port + ":127.0.0.1", "http://" + host + ":" + port + "/echo"},
	} {
		cmd := exec.Command("curl", append([]string{"-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--max-time", "10"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "2 200" {
			t.Errorf("curl %s: %q %v", strings.Join(args, " "), out, err)
		}
	}
}

// A streamed answer reaches the client piece by piece, and with its trailers.
func TestH2StreamedAnswerAndTrailers(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	first := make(chan struct{})
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "first;")
		w.(http.Flusher).Flush()
		<-first
		_, _ = io.WriteString(w, "second")
		w.Header().Set("X-Checksum", "abc")
	})
	acme := h.tenant("acme")
	h.route(acme, "r-stream", []string{"/stream"}, nil, "", up.URL)
	h.e.Loaded()
	waitFor(t, 2*time.Second, func() string {
		if s := h.e.Snapshot("acme"); s == nil || s.Routes() != 1 {
			return "route not compiled yet"
		}
		return ""
	})
	req, _ := http.NewRequest("GET", "http://"+h.public+"/stream", nil)
	req.Host = "acme." + domain
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first;" {
		close(first)
		t.Fatalf("first piece before the upstream finished: %q %v", buf, err)
	}
	close(first)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "second" {
		t.Fatalf("rest: %q %v", rest, err)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("trailer X-Checksum = %q (trailers %v, headers %v)", got, resp.Trailer, resp.Header)
	}
}

func TestH2GracefulShutdown(t *testing.T) {
	h := newHarness(t)
	up := h2Tenant(t, h)
	up.setDelay(300 * time.Millisecond)
	hits := up.hits.Load()
	fc := dialH2(t, h.public)
	fc.get(1, "/echo")
	waitFor(t, 2*time.Second, func() string {
		if up.hits.Load() == hits {
			return "request not at the upstream yet"
		}
		return ""
	})
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- h.e.Shutdown(ctx)
	}()
	if st, body := fc.readAnswerAfterGoAway(1); st != "200" {
		t.Errorf("in-flight stream: %s %s", st, body)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
