package edge_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge"
	"tollgate/infra/testcert"
	"tollgate/tenants"
)

// tlsHarness is a harness with a TLS listener and the wildcard certificate of the edge
// domain, issued by a CA of the test's own.
type tlsHarness struct {
	*harness
	ca  *testcert.CA
	tls string // host:port of the TLS listener
}

func newTLSHarness(t *testing.T) *tlsHarness {
	ca := testcert.NewCA(t)
	wild := ca.Issue(t, []string{"*." + domain}, time.Time{}, time.Time{})
	h := newHarness(t, func(c *edge.Config) { c.TLSCertificate = &wild.TLS })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := h.e.ServeTLS(ln); err != nil {
			t.Errorf("ServeTLS: %v", err)
		}
	}()
	return &tlsHarness{harness: h, ca: ca, tls: ln.Addr().String()}
}

// putDomain applies a custom domain entry.
func (h *tlsHarness) putDomain(d *tenants.Domain) {
	h.t.Helper()
	b, err := json.Marshal(&tenants.Entry{Rev: h.rev.Add(1), Domain: d})
	if err != nil {
		h.t.Fatal(err)
	}
	h.e.Apply(tenants.ObjectKey(d.TenantID, tenants.KindDomain, d.ID), b, h.kvRev.Add(1))
}

// tlsGet sends one request over a new TLS 1.3 connection with the SNI and Host given,
// and returns the response and the certificate the edge presented.
func (h *tlsHarness) tlsGet(sni, host, target string) (result, *tls.ConnectionState) {
	h.t.Helper()
	return h.tlsRequest(&tls.Config{ServerName: sni, RootCAs: h.ca.Pool, MinVersion: tls.VersionTLS13}, host, target)
}

// tlsRequest sends one request over a new connection set up with cfg.
func (h *tlsHarness) tlsRequest(cfg *tls.Config, host, target string) (result, *tls.ConnectionState) {
	h.t.Helper()
	c, err := tls.Dial("tcp", h.tls, cfg)
	if err != nil {
		h.t.Fatalf("handshake with SNI %q: %v", cfg.ServerName, err)
	}
	defer c.Close()
	st := c.ConnectionState()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		h.t.Fatalf("read response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}, &st
}

func TestTLSSNISelectsCertificate(t *testing.T) {
	h := newTLSHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/hello"}, nil, "", up.URL)
	other := h.tenant("other")
	h.route(other, "o", []string{"/hello"}, nil, "", up.URL)
	leaf := h.ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	h.putDomain(&tenants.Domain{ID: "d1", TenantID: acme, Hostname: "api.acme.example", CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM, Status: tenants.DomainVerified})
	h.e.Loaded()

	// The custom domain: its own certificate, over TLS 1.3, routed to its tenant.
	r, st := h.tlsGet("api.acme.example", "api.acme.example", "/hello")
	if st.Version != tls.VersionTLS13 {
		t.Errorf("TLS version %x, want 1.3", st.Version)
	}
	if got := st.PeerCertificates[0]; !got.Equal(leaf.Cert) {
		t.Errorf("SNI api.acme.example got certificate %v, want the tenant's", got.DNSNames)
	}
	if r.status != 200 {
		t.Fatalf("custom domain over TLS: %v", r)
	}
	// The edge domain: the wildcard certificate.
	r, st = h.tlsGet("acme."+domain, "acme."+domain, "/hello")
	if names := st.PeerCertificates[0].DNSNames; len(names) != 1 || names[0] != "*."+domain {
		t.Errorf("SNI acme.%s got certificate for %v, want the wildcard", domain, names)
	}
	if r.status != 200 {
		t.Fatalf("edge domain over TLS: %v", r)
	}
	// TLS 1.2 is accepted too.
	c, err := tls.Dial("tcp", h.tls, &tls.Config{ServerName: "api.acme.example", RootCAs: h.ca.Pool, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS 1.2: %v", err)
	}
	c.Close()
	// And the custom domain routes on the plain listener too (Host with a port, any case).
	if r := h.get("API.acme.example:8000", "/hello"); r.status != 200 {
		t.Errorf("custom domain on the plain listener: %v", r)
	}
	if r := h.get("api.nobody.example", "/hello"); r.status != 404 || r.errCode() != tenants.ETenantNotFound {
		t.Errorf("unknown host: %v", r)
	}
}

func TestTLSSNIHostMismatch(t *testing.T) {
	h := newTLSHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/hello"}, nil, "", up.URL)
	other := h.tenant("other")
	h.route(other, "o", []string{"/hello"}, nil, "", up.URL)
	leaf := h.ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	h.putDomain(&tenants.Domain{ID: "d1", TenantID: acme, Hostname: "api.acme.example", CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM, Status: tenants.DomainVerified})
	h.e.Loaded()

	cases := []struct {
		sni, host string
		status    int
		code      string
	}{
		{"acme." + domain, "acme." + domain, 200, ""},
		{"acme." + domain, "api.acme.example", 200, ""}, // both name acme
		{"api.acme.example", "acme." + domain, 200, ""},
		{"acme." + domain, "other." + domain, 421, tenants.EMisdirected},
		{"other." + domain, "api.acme.example", 421, tenants.EMisdirected},
		{"api.acme.example", "other." + domain, 421, tenants.EMisdirected},
		{"nobody." + domain, "acme." + domain, 421, tenants.EMisdirected},
	}
	for _, c := range cases {
		r, _ := h.tlsGet(c.sni, c.host, "/hello")
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("SNI %s, Host %s: got %v, want %d %s", c.sni, c.host, r, c.status, c.code)
		}
		if c.status == 421 && !strings.Contains(r.body, `"request_id":"`) {
			t.Errorf("421 without the error envelope: %s", r.body)
		}
	}
}

func TestTLSDomainHotSwap(t *testing.T) {
	h := newTLSHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/hello"}, nil, "", up.URL)
	h.e.Loaded()

	dial := func() (*tls.Conn, error) {
		return tls.Dial("tcp", h.tls, &tls.Config{ServerName: "shop.acme.example", RootCAs: h.ca.Pool})
	}
	// Before the upload: the wildcard certificate, which does not cover the name.
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("handshake for a domain not uploaded yet verified")
	}
	first := h.ca.Issue(t, []string{"shop.acme.example"}, time.Time{}, time.Time{})
	h.putDomain(&tenants.Domain{ID: "d1", TenantID: acme, Hostname: "shop.acme.example", CertificatePEM: first.CertPEM, PrivateKeyPEM: first.KeyPEM, Status: tenants.DomainVerified})
	waitFor(t, 2*time.Second, func() string {
		c, err := dial()
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		if !c.ConnectionState().PeerCertificates[0].Equal(first.Cert) {
			return "not the uploaded certificate"
		}
		return ""
	})
	// A renewed certificate replaces it without a restart.
	second := h.ca.Issue(t, []string{"shop.acme.example", "www.shop.acme.example"}, time.Time{}, time.Time{})
	h.putDomain(&tenants.Domain{ID: "d1", TenantID: acme, Hostname: "shop.acme.example", CertificatePEM: second.CertPEM, PrivateKeyPEM: second.KeyPEM, Status: tenants.DomainVerified})
	waitFor(t, 2*time.Second, func() string {
		c, err := dial()
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		if !c.ConnectionState().PeerCertificates[0].Equal(second.Cert) {
			return "still the old certificate"
		}
		return ""
	})
	if r, _ := h.tlsGet("shop.acme.example", "shop.acme.example", "/hello"); r.status != 200 {
		t.Errorf("after the swap: %v", r)
	}
	// Deleted: the name falls back to the wildcard, and Host routing stops.
	h.del(tenants.ObjectKey(acme, tenants.KindDomain, "d1"))
	waitFor(t, 2*time.Second, func() string {
		if r := h.get("shop.acme.example", "/hello"); r.status != 404 {
			return fmt.Sprintf("still routed after delete: %d", r.status)
		}
		return ""
	})
	if c, err := dial(); err == nil {
		c.Close()
		t.Error("deleted domain's certificate still served")
	}
}

func TestTLSBadDomainEntryRejected(t *testing.T) {
	h := newTLSHarness(t)
	acme := h.tenant("acme")
	h.e.Loaded()
	leaf := h.ca.Issue(t, []string{"x.acme.example"}, time.Time{}, time.Time{})
	other := h.ca.Issue(t, []string{"x.acme.example"}, time.Time{}, time.Time{})
	h.putDomain(&tenants.Domain{ID: "d1", TenantID: acme, Hostname: "x.acme.example", CertificatePEM: leaf.CertPEM, PrivateKeyPEM: other.KeyPEM, Status: tenants.DomainVerified})
	if n := h.metric("tollgate_edge_config_rejected_total", map[string]string{"kind": tenants.KindDomain}); n != 1 {
		t.Errorf("rejected entries: %v, want 1", n)
	}
}

// tlsGetAny is tlsGet without verifying the certificate, to see which one a handshake
// for a name the edge holds no certificate of falls back to.
func (h *tlsHarness) tlsGetAny(sni, host, target string) (result, *tls.ConnectionState) {
	h.t.Helper()
	return h.tlsRequest(&tls.Config{ServerName: sni, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, host, target)
}

// TestTLSPendingDomain: a custom domain whose DNS proof is not verified is not served:
// its Host gets 421 misdirected_request (plain and TLS), its SNI the wildcard
// certificate; verified, it is served with its own certificate; pending again, it is
// refused again. Another tenant's pending claim of a verified name changes nothing.
func TestTLSPendingDomain(t *testing.T) {
	h := newTLSHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/hello"}, nil, "", up.URL)
	squatter := h.tenant("squatter")
	h.route(squatter, "s", []string{"/hello"}, nil, "", up.URL)
	leaf := h.ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	dom := func(status string) *tenants.Domain {
		return &tenants.Domain{ID: "d1", TenantID: acme, Hostname: "api.acme.example", CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM, Status: status}
	}
	h.putDomain(dom(tenants.DomainPending))
	// An entry without a status (written before domains were verified) is pending too.
	old := h.ca.Issue(t, []string{"old.acme.example"}, time.Time{}, time.Time{})
	h.putDomain(&tenants.Domain{ID: "d2", TenantID: acme, Hostname: "old.acme.example", CertificatePEM: old.CertPEM, PrivateKeyPEM: old.KeyPEM})
	h.e.Loaded()

	refused := func(host string) string {
		if r := h.get(host, "/hello"); r.status != 421 || r.errCode() != tenants.EMisdirected || !strings.Contains(r.body, "not verified") || !strings.Contains(r.body, `"request_id":"`) {
			return fmt.Sprintf("plain Host %s: %v", host, r)
		}
		r, st := h.tlsGetAny(host, host, "/hello")
		if names := st.PeerCertificates[0].DNSNames; len(names) != 1 || names[0] != "*."+domain {
			return fmt.Sprintf("SNI %s got the certificate of %v, want the wildcard", host, names)
		}
		if r.status != 421 || r.errCode() != tenants.EMisdirected {
			return fmt.Sprintf("TLS %s: %v", host, r)
		}
		return ""
	}
	served := func(host string) string {
		r, st := h.tlsGetAny(host, host, "/hello")
		if !st.PeerCertificates[0].Equal(leaf.Cert) {
			return "not the domain's certificate"
		}
		if r.status != 200 {
			return fmt.Sprintf("TLS %s: %v", host, r)
		}
		if r := h.get(host, "/hello"); r.status != 200 {
			return fmt.Sprintf("plain Host %s: %v", host, r)
		}
		return ""
	}
	for _, host := range []string{"api.acme.example", "API.Acme.Example.:8000", "old.acme.example"} {
		if msg := refused(host); msg != "" {
			t.Error(msg)
		}
	}
	// A pending name in SNI, the tenant's own name in Host: still refused.
	if r, _ := h.tlsGetAny("api.acme.example", "acme."+domain, "/hello"); r.status != 421 || r.errCode() != tenants.EMisdirected {
		t.Errorf("pending SNI, edge-domain Host: %v", r)
	}
	if r, _ := h.tlsGet("acme."+domain, "api.acme.example", "/hello"); r.status != 421 || r.errCode() != tenants.EMisdirected {
		t.Errorf("edge-domain SNI, pending Host: %v", r)
	}

	h.putDomain(dom(tenants.DomainVerified))
	waitFor(t, 2*time.Second, func() string { return served("api.acme.example") })
	// Another tenant's pending claim of the name (allowed: claims do not block) does not
	// take it, whichever entry comes last.
	sq := h.ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	h.putDomain(&tenants.Domain{ID: "s1", TenantID: squatter, Hostname: "api.acme.example", CertificatePEM: sq.CertPEM, PrivateKeyPEM: sq.KeyPEM, Status: tenants.DomainPending})
	time.Sleep(100 * time.Millisecond)
	if msg := served("api.acme.example"); msg != "" {
		t.Errorf("after a squatter's pending claim: %s", msg)
	}
	if r := h.get("api.acme.example", "/hello"); r.status != 200 || r.echo == nil {
		t.Errorf("after a squatter's pending claim: %v", r)
	}

	h.putDomain(dom(tenants.DomainPending))
	waitFor(t, 2*time.Second, func() string { return refused("api.acme.example") })
}

// TestUpstreamTLSVerified: an https upstream whose certificate no trusted CA signed is
// refused (502), not silently accepted.
func TestUpstreamTLSVerified(t *testing.T) {
	h := newHarness(t)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "reached")
	}))
	defer up.Close()
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/hello"}, nil, "", up.URL)
	h.e.Loaded()
	r := h.get("acme."+domain, "/hello")
	if r.status != 502 || r.errCode() != tenants.EUpstreamFailed || strings.Contains(r.body, "reached") {
		t.Errorf("self-signed https upstream: %v, want 502 upstream_failed", r)
	}
}

// TestTLSWebSocket: a WebSocket tunnel through the TLS listener.
func TestTLSWebSocket(t *testing.T) {
	h := newTLSHarness(t)
	up := newWSUpstream(t, false)
	putWSRoute(h.harness, up.url)
	c, err := tls.Dial("tcp", h.tls, &tls.Config{ServerName: "acme." + domain, RootCAs: h.ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: acme.%s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", domain)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade over TLS: %v %v", resp, err)
	}
	echoOnce(t, c, br, "over tls")
	shutdownEdge(t, h.harness)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(br)
	if string(b) != "\x88\x02\x03\xe9" {
		t.Errorf("shutdown over TLS: got %x, want a 1001 close frame", b)
	}
}

// BenchmarkCustomDomainHost is one whole request over loopback (as BenchmarkHandler) whose
// Host is a custom domain: a verified one, proxied, and a pending one, refused with 421.
// Neither costs an allocation in the edge: the pending name is found by the lookup every
// request makes.
func BenchmarkCustomDomainHost(b *testing.B) {
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{"hello":"world"}`) }}
	go up.Serve(upLn)
	b.Cleanup(func() { _ = up.Shutdown() })

	h := newHarness(b)
	acme := h.tenant("acme")
	h.route(acme, "open", []string{"/open"}, nil, tenants.AuthNone, "http://"+upLn.Addr().String())
	ca := testcert.NewCA(b)
	for _, d := range []struct{ id, host, status string }{
		{"v", "api.acme.example", tenants.DomainVerified},
		{"p", "new.acme.example", tenants.DomainPending},
	} {
		leaf := ca.Issue(b, []string{d.host}, time.Time{}, time.Time{})
		e, err := json.Marshal(&tenants.Entry{Rev: h.rev.Add(1), Domain: &tenants.Domain{ID: d.id, TenantID: acme, Hostname: d.host,
			CertificatePEM: leaf.CertPEM, PrivateKeyPEM: leaf.KeyPEM, Status: d.status}})
		if err != nil {
			b.Fatal(err)
		}
		h.e.Apply(tenants.ObjectKey(acme, tenants.KindDomain, d.id), e, h.kvRev.Add(1))
	}
	h.e.Loaded()
	client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
	b.Cleanup(client.CloseIdleConnections) // before the harness shuts the edge down
	for _, c := range []struct {
		name, host string
		status     int
	}{{"verified", "api.acme.example", 200}, {"pending", "new.acme.example", 421}} {
		b.Run(c.name, func(b *testing.B) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI("/open/items/42")
			req.Header.SetHost(c.host)
			b.ReportAllocs()
			for b.Loop() {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != c.status {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}
