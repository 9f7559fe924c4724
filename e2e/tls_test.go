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

// TestTLS: the edge terminates TLS 1.3 with the wildcard certificate of the edge domain
// and with a tenant's custom domain certificate uploaded (and proven through DNS) through
// the api (picked by SNI, served without a restart, replaced without a restart); a Host
// that names another tenant than the SNI is refused with 421.
func TestTLS(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ca := testcert.NewCA(t)
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
	dns := testdns.Start(t)
	_, api := s.startAPI("TOLLGATE_DNS_RESOLVER=" + dns.Addr())
	_, edge := s.startEdge("TOLLGATE_EDGE_TLS_ADDR="+tlsAddr, "TOLLGATE_EDGE_TLS_CERT="+certFile, "TOLLGATE_EDGE_TLS_KEY="+keyFile)
	defer edge.close()

	up := echoUpstream(t, "tls-up")
	acme := testenv.Name("acme")
	other := testenv.Name("other")
	for _, slug := range []string{acme, other} {
		api.createTenant(slug)
		api.createRoute(slug, routeSpec("hello", "/hello", up.URL, "none"))
	}
	eventually(t, applyDeadline, "route at the edge", served(edge, acme, "/hello", "tls-up"))

	// get sends one request over a new TLS connection and returns the status, the error
	// code and the certificate the edge presented.
	get := func(sni, host string) (int, string, *x509.Certificate, error) {
		c, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: sni, RootCAs: ca.Pool, MinVersion: tls.VersionTLS13})
		if err != nil {
			return 0, "", nil, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /hello HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, "", nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var env struct{ Error struct{ Code string } }
		_ = json.Unmarshal(b, &env)
		return resp.StatusCode, env.Error.Code, c.ConnectionState().PeerCertificates[0], nil
	}

	// The wildcard certificate on the edge domain.
	status, _, cert, err := get(acme+".localhost", acme+".localhost")
	if err != nil || status != 200 || cert.DNSNames[0] != "*.localhost" {
		t.Fatalf("edge domain over TLS: %d %v %v", status, err, cert)
	}
	// SNI and Host naming different tenants.
	if status, code, _, err := get(acme+".localhost", other+".localhost"); err != nil || status != 421 || code != "misdirected_request" {
		t.Errorf("SNI %s, Host %s: %d %q %v, want 421 misdirected_request", acme, other, status, code, err)
	}

	// Upload a custom domain and prove it (its TXT record, then verify): served by SNI
	// within the apply deadline.
	host := testenv.Name("api") + ".acme-e2e.example"
	first := ca.Issue(t, []string{host}, time.Time{}, time.Time{})
	d := api.must(201, "POST", "/v1/tenants/"+acme+"/domains", map[string]any{
		"hostname": host, "certificate_pem": first.CertPEM, "private_key_pem": first.KeyPEM})
	if _, ok := d["private_key_pem"]; ok {
		t.Errorf("the api returned the private key")
	}
	ver, _ := d["verification"].(map[string]any)
	dns.SetTXT(ver["record_name"].(string), ver["value"].(string))
	if v := api.must(200, "POST", "/v1/tenants/"+acme+"/domains/"+str(t, d, "id")+"/verify", nil); v["status"] != "verified" {
		t.Fatalf("verify: %v", v)
	}
	took := eventually(t, applyDeadline, "the uploaded certificate served", func() error {
		status, _, cert, err := get(host, host)
		switch {
		case err != nil:
			return err
		case !cert.Equal(first.Cert):
			return fmt.Errorf("certificate for %v", cert.DNSNames)
		case status != 200:
			return fmt.Errorf("status %d", status)
		}
		return nil
	})
	t.Logf("custom domain certificate served %v after its verification", took)
	if status, code, _, _ := get(host, other+".localhost"); status != 421 || code != "misdirected_request" {
		t.Errorf("custom SNI with another tenant's Host: %d %q, want 421", status, code)
	}

	// Renew it (PUT a new certificate) without restarting the edge.
	second := ca.Issue(t, []string{host}, time.Time{}, time.Time{})
	api.must(200, "PUT", "/v1/tenants/"+acme+"/domains/"+str(t, d, "id"), map[string]any{
		"hostname": host, "certificate_pem": second.CertPEM, "private_key_pem": second.KeyPEM}, "If-Match", `"2"`)
	eventually(t, applyDeadline, "the renewed certificate served", func() error {
		_, _, cert, err := get(host, host)
		if err != nil {
			return err
		}
		if !cert.Equal(second.Cert) {
			return fmt.Errorf("still the old certificate (serial %v)", cert.SerialNumber)
		}
		return nil
	})

	// The same host name for another tenant, while this one's claim is verified: 409.
	if r := api.call("POST", "/v1/tenants/"+other+"/domains", map[string]any{
		"hostname": host, "certificate_pem": second.CertPEM, "private_key_pem": second.KeyPEM}); r.Status != 409 || !strings.Contains(string(r.Raw), `"conflict"`) {
		t.Errorf("duplicate host name for another tenant: %s", r)
	}
}
