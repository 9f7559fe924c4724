package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tollgate/infra/testcert"
	"tollgate/infra/testdns"
	"tollgate/infra/testenv"
)

// customDomainClient speaks to the edge for a custom host name, on the plain listener
// (Host) and the TLS one (SNI and Host).
type customDomainClient struct {
	t        *testing.T
	plain    string // the edge's public address
	tls      string // its TLS listener
	hc       *http.Client
	wildcard *x509.Certificate
}

type domainAnswer struct {
	status int
	code   string
	body   string
	cert   *x509.Certificate // TLS only: the certificate the edge presented
}

func (a domainAnswer) String() string {
	s := fmt.Sprintf("%d %s", a.status, strings.TrimSpace(a.body))
	if a.cert != nil {
		s += fmt.Sprintf(" (certificate for %v)", a.cert.DNSNames)
	}
	return s
}

func decodeCode(b []byte) string {
	var env struct{ Error struct{ Code string } }
	_ = json.Unmarshal(b, &env)
	return env.Error.Code
}

// plainGet sends GET path with Host: host to the plain listener.
func (c *customDomainClient) plainGet(host, path string) (domainAnswer, error) {
	req, err := http.NewRequest("GET", "http://"+c.plain+path, nil)
	if err != nil {
		return domainAnswer{}, err
	}
	req.Host = host
	resp, err := c.hc.Do(req)
	if err != nil {
		return domainAnswer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return domainAnswer{status: resp.StatusCode, code: decodeCode(b), body: string(b)}, nil
}

// tlsGet sends GET path over a new TLS connection with SNI and Host host, without
// verifying the certificate (the answer says which one the edge presented).
func (c *customDomainClient) tlsGet(host, path string) (domainAnswer, error) {
	return c.tlsGetHost(host, host, path)
}

// tlsGetHost is tlsGet with a Host header other than the SNI.
func (c *customDomainClient) tlsGetHost(sni, host, path string) (domainAnswer, error) {
	conn, err := tls.Dial("tcp", c.tls, &tls.Config{ServerName: sni, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		return domainAnswer{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return domainAnswer{}, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return domainAnswer{status: resp.StatusCode, code: decodeCode(b), body: string(b), cert: conn.ConnectionState().PeerCertificates[0]}, nil
}

// refused is a poll function that succeeds once host gets 421 misdirected_request in
// the error envelope on both listeners, and the wildcard certificate on TLS.
func (c *customDomainClient) refused(host string) func() error {
	return func() error {
		a, err := c.plainGet(host, "/hello")
		if err != nil {
			return err
		}
		if a.status != 421 || a.code != "misdirected_request" || !strings.Contains(a.body, `"request_id":"`) {
			return fmt.Errorf("plain, Host %s: %s", host, a)
		}
		if a, err = c.tlsGet(host, "/hello"); err != nil {
			return err
		}
		if !a.cert.Equal(c.wildcard) || a.status != 421 || a.code != "misdirected_request" {
			return fmt.Errorf("TLS, SNI and Host %s: %s", host, a)
		}
		return nil
	}
}

// served is a poll function that succeeds once host is served by the upstream on both
// listeners, with cert on TLS.
func (c *customDomainClient) served(host string, cert *x509.Certificate) func() error {
	return func() error {
		a, err := c.plainGet(host, "/hello")
		if err != nil {
			return err
		}
		if a.status != 200 {
			return fmt.Errorf("plain, Host %s: %s", host, a)
		}
		if a, err = c.tlsGet(host, "/hello"); err != nil {
			return err
		}
		if !a.cert.Equal(cert) || a.status != 200 {
			return fmt.Errorf("TLS, SNI and Host %s: %s", host, a)
		}
		return nil
	}
}

// startTLSEdge starts an edge with a TLS listener and the wildcard certificate of
// *.localhost, issued by ca.
func startTLSEdge(t *testing.T, s *stack, ca *testcert.CA) (*customDomainClient, *edgeClient) {
	t.Helper()
	wild := ca.Issue(t, []string{"*.localhost"}, time.Time{}, time.Time{})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "wild.pem"), filepath.Join(dir, "wild.key")
	if err := os.WriteFile(certFile, []byte(wild.CertPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(wild.KeyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsAddr := freeAddr(t)
	_, edge := s.startEdge("TOLLGATE_EDGE_TLS_ADDR="+tlsAddr, "TOLLGATE_EDGE_TLS_CERT="+certFile, "TOLLGATE_EDGE_TLS_KEY="+keyFile)
	t.Cleanup(edge.close)
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &customDomainClient{t: t, plain: s.edgeAddr, tls: tlsAddr, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}, wildcard: wild.Cert}, edge
}

// fastDomainChecks makes the api's automatic domain checks run in milliseconds.
var fastDomainChecks = []string{"TOLLGATE_DOMAIN_CHECK_MIN=100ms", "TOLLGATE_DOMAIN_CHECK_MAX=300ms", "TOLLGATE_DOMAIN_RECHECK=200ms"}

// TestCustomDomainProof: through real api and edge processes and a DNS server in
// process as the api's resolver, a custom domain is not served until its DNS TXT proof is
// seen: 421 misdirected_request on Host and SNI (with the wildcard certificate); once
// the record is published the api's automatic check verifies it and the edge serves it
// with its own certificate; a squatter's claim of the name neither blocks nor takes it;
// once the record is removed, the re-checks set it back to pending and the edge refuses
// it again.
func TestCustomDomainProof(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	dns := testdns.Start(t)
	ca := testcert.NewCA(t)
	_, api := s.startAPI(append([]string{"TOLLGATE_DNS_RESOLVER=" + dns.Addr()}, fastDomainChecks...)...)
	c, edge := startTLSEdge(t, s, ca)

	up := echoUpstream(t, "domain-up")
	acme, squatter := testenv.Name("acme"), testenv.Name("squat")
	for _, slug := range []string{acme, squatter} {
		api.createTenant(slug)
		api.createRoute(slug, routeSpec("hello", "/hello", up.URL, "none"))
	}
	eventually(t, applyDeadline, "route at the edge", served(edge, acme, "/hello", "domain-up"))

	// A squatter claims the name first: its claim stays pending and blocks nobody.
	host := testenv.Name("api") + ".acme-e2e.example"
	leaf := ca.Issue(t, []string{host}, time.Time{}, time.Time{})
	body := map[string]any{"hostname": host, "certificate_pem": leaf.CertPEM, "private_key_pem": leaf.KeyPEM}
	fake := ca.Issue(t, []string{host}, time.Time{}, time.Time{})
	api.must(201, "POST", "/v1/tenants/"+squatter+"/domains", map[string]any{
		"hostname": host, "certificate_pem": fake.CertPEM, "private_key_pem": fake.KeyPEM})
	d := api.must(201, "POST", "/v1/tenants/"+acme+"/domains", body)
	if d["status"] != "pending" {
		t.Fatalf("a new domain: %v", d)
	}
	ver, _ := d["verification"].(map[string]any)
	name, _ := ver["record_name"].(string)
	token, _ := ver["value"].(string)
	if name != "_tollgate-challenge."+host || token == "" {
		t.Fatalf("verification: %v", ver)
	}

	// Pending: refused at the edge, on Host and on SNI.
	eventually(t, applyDeadline, "the pending domain refused with 421", c.refused(host))
	// The automatic checks ran and found nothing.
	path := "/v1/tenants/" + acme + "/domains/" + str(t, d, "id")
	eventually(t, 5*time.Second, "an automatic check of the claim", func() error {
		got := api.must(200, "GET", path, nil)
		if e, _ := got["last_error"].(string); !strings.Contains(e, "no TXT record") {
			return fmt.Errorf("last_error %q", e)
		}
		return nil
	})
	if err := c.refused(host)(); err != nil {
		t.Fatalf("still pending: %v", err)
	}

	// Published: the next automatic check verifies it and the edge serves it.
	dns.SetTXT(name, token)
	published := time.Now()
	eventually(t, 10*time.Second, "the verified domain served", c.served(host, leaf.Cert))
	t.Logf("custom domain served %v after its TXT record was published (checks back off from 100ms to 300ms)", time.Since(published).Round(time.Millisecond))
	if got := api.must(200, "GET", path, nil); got["status"] != "verified" || got["verified_at"] == nil {
		t.Errorf("after the record: %v", got)
	}
	// The squatter's pending claim did not take it: the squatter's Host on a connection
	// set up for the name is 421 (SNI and Host must name one tenant).
	if a, err := c.tlsGetHost(host, squatter+".localhost", "/hello"); err != nil || a.status != 421 || a.code != "misdirected_request" {
		t.Errorf("SNI %s, Host of the squatter: %v %v", host, a, err)
	}

	// Removed: after 3 re-checks miss it, pending again and refused again.
	dns.Remove(name)
	removed := time.Now()
	eventually(t, 10*time.Second, "the domain refused again after its record was removed", c.refused(host))
	t.Logf("custom domain refused %v after its TXT record was removed (re-checks every 200ms, 3 misses)", time.Since(removed).Round(time.Millisecond))
	got := api.must(200, "GET", path, nil)
	if e, _ := got["last_error"].(string); got["status"] != "pending" || !strings.Contains(e, "pending again") {
		t.Errorf("after the record was removed: %v", got)
	}
}
