package api_test

import (
	"strings"
	"testing"
	"time"

	"tollgate/infra/testcert"
)

// TestDomains: a custom domain is stored with its certificate, its private key is never
// returned, and every bad upload is refused with the field at fault, writing nothing.
func TestDomains(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("acme")
	e.tenant("other")
	ca := testcert.NewCA(t)
	good := ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	wrongKey := ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	otherName := ca.Issue(t, []string{"shop.acme.example"}, time.Time{}, time.Time{})
	expired := ca.Issue(t, []string{"old.acme.example"}, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	under := ca.Issue(t, []string{"x.edge.test"}, time.Time{}, time.Time{})
	body := func(host string, l *testcert.Leaf, key string) map[string]any {
		return map[string]any{"hostname": host, "certificate_pem": l.CertPEM, "private_key_pem": key}
	}
	path := "/v1/tenants/acme/domains"

	r := e.do("POST", path, adminToken, body("API.acme.example.", good, good.KeyPEM)).want(201)
	id := r.str("id")
	if h := r.str("hostname"); h != "api.acme.example" {
		t.Errorf("hostname %q, want it normalized", h)
	}
	if strings.Contains(string(r.body), "PRIVATE KEY") || strings.Contains(string(r.body), "private_key_pem") {
		t.Errorf("the private key is in the response: %s", r.body)
	}
	if r.str("not_after") == "" {
		t.Errorf("no not_after: %s", r.body)
	}
	for _, p := range []string{path, path + "/" + id} {
		if r := e.do("GET", p, adminToken, nil).want(200); strings.Contains(string(r.body), "PRIVATE KEY") {
			t.Errorf("GET %s returns the private key", p)
		}
	}

	cases := []struct {
		name   string
		path   string
		body   any
		status int
		code   string
		field  string
	}{
		{"duplicate, same tenant", path, body("api.acme.example", good, good.KeyPEM), 409, "conflict", "hostname"},
		{"duplicate, other tenant", "/v1/tenants/other/domains", body("api.acme.example", good, good.KeyPEM), 409, "conflict", "hostname"},
		{"bad certificate PEM", path, map[string]any{"hostname": "b.acme.example", "certificate_pem": "not pem", "private_key_pem": good.KeyPEM}, 400, "validation_failed", "certificate_pem"},
		{"bad key PEM", path, map[string]any{"hostname": "api2.acme.example", "certificate_pem": good.CertPEM, "private_key_pem": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}, 400, "validation_failed", "certificate_pem"},
		{"key mismatch", path, body("api.acme.example", good, wrongKey.KeyPEM), 400, "validation_failed", "private_key_pem"},
		{"hostname not covered", path, body("api.acme.example", otherName, otherName.KeyPEM), 400, "validation_failed", "certificate_pem"},
		{"expired", path, body("old.acme.example", expired, expired.KeyPEM), 400, "validation_failed", "certificate_pem"},
		{"under the edge domain", path, body("x.edge.test", under, under.KeyPEM), 400, "validation_failed", "hostname"},
		{"not a DNS name", path, body("bad_name!.example", good, good.KeyPEM), 400, "validation_failed", "hostname"},
		{"single label", path, body("localhost", good, good.KeyPEM), 400, "validation_failed", "hostname"},
		{"hostname missing", path, map[string]any{"certificate_pem": good.CertPEM, "private_key_pem": good.KeyPEM}, 400, "validation_failed", "hostname"},
		{"key missing", path, map[string]any{"hostname": "c.acme.example", "certificate_pem": good.CertPEM}, 400, "validation_failed", "private_key_pem"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.do("POST", c.path, adminToken, c.body).wantErr(c.status, c.code, c.field)
		})
	}
	if n := e.count(path); n != 1 {
		t.Errorf("%d domains of acme, want 1", n)
	}
	if n := e.count("/v1/tenants/other/domains"); n != 0 {
		t.Errorf("%d domains of other, want 0", n)
	}
	// Renewal: PUT a new certificate; a stale version is 409, a bad certificate 400.
	renewed := ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	r = e.do("PUT", path+"/"+id, adminToken, map[string]any{"hostname": "api.acme.example", "certificate_pem": renewed.CertPEM,
		"private_key_pem": renewed.KeyPEM, "version": 1}).want(200)
	if v := r.json["version"]; v != float64(2) || strings.Contains(string(r.body), "PRIVATE KEY") {
		t.Errorf("after PUT: %s", r.body)
	}
	e.do("PUT", path+"/"+id, adminToken, map[string]any{"hostname": "api.acme.example", "certificate_pem": renewed.CertPEM,
		"private_key_pem": renewed.KeyPEM, "version": 1}).wantErr(409, "version_conflict", "")
	e.do("PUT", path+"/"+id, adminToken, map[string]any{"hostname": "api.acme.example", "certificate_pem": renewed.CertPEM,
		"private_key_pem": good.KeyPEM, "version": 2}).wantErr(400, "validation_failed", "private_key_pem")
	// Another tenant cannot see or delete it.
	e.do("GET", "/v1/tenants/other/domains/"+id, adminToken, nil).want(404)
	e.do("DELETE", "/v1/tenants/other/domains/"+id, adminToken, nil).want(404)
	e.do("DELETE", path+"/"+id, adminToken, nil).want(204)
	e.do("GET", path+"/"+id, adminToken, nil).want(404)
	// Freed: the other tenant may take the name now.
	e.do("POST", "/v1/tenants/other/domains", adminToken, body("api.acme.example", good, good.KeyPEM)).want(201)
}
