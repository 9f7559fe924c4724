package api_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/api"
	"tollgate/infra/testcert"
	"tollgate/infra/testdns"
	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
)

// fastChecks is the schedule of domain checks in these tests: seconds become
// milliseconds.
var fastChecks = tenants.DomainSchedule{PendingMin: 50 * time.Millisecond, PendingMax: 200 * time.Millisecond,
	Recheck: 100 * time.Millisecond, Failures: 3}

// newDomainEnv is an env whose api checks domain proofs against a DNS server of the
// test's own.
func newDomainEnv(t *testing.T) (*env, *testdns.Server) {
	t.Helper()
	srv := testdns.Start(t)
	e := newEnv(t, func(c *api.Config) {
		c.Proofs = dnsproof.New(srv.Addr())
		c.DomainChecks = fastChecks
		c.Audit, _ = c.Domains.(tenants.AuditService) // the same store
	})
	return e, srv
}

// runChecks runs the automatic checks beside the api until the test ends.
func (e *env) runChecks(srv *testdns.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l := &dnsproof.Loop{Store: e.db, Checker: dnsproof.New(srv.Addr()), Schedule: fastChecks, Every: 20 * time.Millisecond}
		_ = l.Run(ctx)
	}()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitStatus polls a domain until its status is want.
func (e *env) waitStatus(path, want string, within time.Duration) *resp {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := e.do("GET", path, adminToken, nil).want(200)
		if r.str("status") == want {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s is still %s after %v (want %s): %s", path, r.str("status"), within, want, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func challengeOf(r *resp) (name, value string) {
	v, _ := r.json["verification"].(map[string]any)
	name, _ = v["record_name"].(string)
	value, _ = v["value"].(string)
	return name, value
}

// TestDomains: a custom domain is stored with its certificate, as a pending claim with
// its DNS challenge; its private key is never returned, and every bad upload is refused
// with the field at fault, writing nothing.
func TestDomains(t *testing.T) {
	t.Parallel()
	e, _ := newDomainEnv(t)
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
	if r.str("status") != "pending" {
		t.Errorf("a new domain is %q, want pending", r.str("status"))
	}
	if name, value := challengeOf(r); name != "_tollgate-challenge.api.acme.example" || len(value) != 32 || !strings.Contains(string(r.body), `"record_type":"TXT"`) {
		t.Errorf("verification: %s", r.body)
	}
	if r.str("next_check_at") == "" {
		t.Errorf("no automatic check scheduled: %s", r.body)
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
	// Another tenant cannot see, verify or delete it.
	e.do("GET", "/v1/tenants/other/domains/"+id, adminToken, nil).want(404)
	e.do("POST", "/v1/tenants/other/domains/"+id+"/verify", adminToken, nil).want(404)
	e.do("DELETE", "/v1/tenants/other/domains/"+id, adminToken, nil).want(404)
	e.do("DELETE", path+"/"+id, adminToken, nil).want(204)
	e.do("GET", path+"/"+id, adminToken, nil).want(404)
	e.do("POST", path+"/"+id+"/verify", adminToken, nil).want(404)
}

// TestDomainVerification: the DNS proof through the api and a DNS server. A squatter's
// pending claim does not block the owner; each claim has its own token; the owner's
// record verifies only the owner's claim; once verified, no other tenant can claim or
// verify the name; a renewal keeps the status, a new host name is a new claim.
func TestDomainVerification(t *testing.T) {
	t.Parallel()
	e, dns := newDomainEnv(t)
	e.tenant("owner")
	e.tenant("squatter")
	e.tenant("third")
	ca := testcert.NewCA(t)
	leaf := ca.Issue(t, []string{"api.owner.example", "www.owner.example"}, time.Time{}, time.Time{})
	body := map[string]any{"hostname": "api.owner.example", "certificate_pem": leaf.CertPEM, "private_key_pem": leaf.KeyPEM}

	sq := e.do("POST", "/v1/tenants/squatter/domains", adminToken, body).want(201)
	own := e.do("POST", "/v1/tenants/owner/domains", adminToken, body).want(201) // not blocked
	sqPath := "/v1/tenants/squatter/domains/" + sq.str("id")
	ownPath := "/v1/tenants/owner/domains/" + own.str("id")
	name, ownToken := challengeOf(own)
	_, sqToken := challengeOf(sq)
	if ownToken == sqToken {
		t.Fatalf("two claims share the token %s", ownToken)
	}
	verify := func(path string) *resp { return e.do("POST", path+"/verify", adminToken, nil) }

	// No record; then a wrong one: pending, with the reason.
	r := verify(ownPath).want(200)
	if r.str("status") != "pending" || !strings.Contains(r.str("last_error"), "no TXT record at "+name) || r.str("checked_at") == "" {
		t.Errorf("no record: %s", r.body)
	}
	dns.SetTXT(name, "not-the-token")
	if r := verify(ownPath).want(200); r.str("status") != "pending" || !strings.Contains(r.str("last_error"), `"not-the-token"`) {
		t.Errorf("wrong record: %s", r.body)
	}
	// The owner publishes its token (beside an unrelated record): the owner's claim is
	// verified, the squatter's is not.
	dns.SetTXT(name, "v=spf1 -all", ownToken)
	if r := verify(sqPath).want(200); r.str("status") != "pending" {
		t.Errorf("the squatter's claim verified by the owner's record: %s", r.body)
	}
	r = verify(ownPath).want(200)
	if r.str("status") != "verified" || r.str("verified_at") == "" || r.str("last_error") != "" || r.etag() != `"2"` {
		t.Fatalf("owner's claim with its record: %s (ETag %s)", r.body, r.etag())
	}
	// The name is taken now: even with its token in DNS too, the squatter cannot verify,
	// and nobody else can claim it.
	dns.SetTXT(name, ownToken, sqToken)
	r = verify(sqPath).wantErr(409, "conflict", "hostname")
	if !strings.Contains(r.message(), "verified by another tenant") {
		t.Errorf("conflict message: %s", r.message())
	}
	if r := e.do("GET", sqPath, adminToken, nil).want(200); r.str("status") != "pending" || !strings.Contains(r.str("last_error"), "another tenant") {
		t.Errorf("the squatter's claim after the refused verify: %s", r.body)
	}
	e.do("POST", "/v1/tenants/third/domains", adminToken, body).wantErr(409, "conflict", "hostname")
	e.do("POST", "/v1/tenants/owner/domains", adminToken, body).wantErr(409, "conflict", "hostname")
	// Nor move another claim onto it.
	other := ca.Issue(t, []string{"shop.squatter.example", "api.owner.example"}, time.Time{}, time.Time{})
	sq2 := e.do("POST", "/v1/tenants/squatter/domains", adminToken, map[string]any{
		"hostname": "shop.squatter.example", "certificate_pem": other.CertPEM, "private_key_pem": other.KeyPEM}).want(201)
	e.do("PUT", "/v1/tenants/squatter/domains/"+sq2.str("id"), adminToken, map[string]any{
		"hostname": "api.owner.example", "certificate_pem": other.CertPEM, "private_key_pem": other.KeyPEM, "version": 1}).wantErr(409, "conflict", "hostname")

	// A renewal keeps the status and the token.
	renewed := ca.Issue(t, []string{"api.owner.example", "www.owner.example"}, time.Time{}, time.Time{})
	r = e.do("PUT", ownPath, adminToken, map[string]any{"hostname": "api.owner.example", "certificate_pem": renewed.CertPEM,
		"private_key_pem": renewed.KeyPEM}, "If-Match", "*").want(200)
	if _, tok := challengeOf(r); r.str("status") != "verified" || tok != ownToken {
		t.Errorf("renewal: %s", r.body)
	}
	// Another host name is a new claim: pending, with a new token; the old name is free.
	r = e.do("PUT", ownPath, adminToken, map[string]any{"hostname": "www.owner.example", "certificate_pem": renewed.CertPEM,
		"private_key_pem": renewed.KeyPEM}, "If-Match", "*").want(200)
	if n, tok := challengeOf(r); r.str("status") != "pending" || tok == ownToken || n != "_tollgate-challenge.www.owner.example" || r.str("verified_at") != "" {
		t.Errorf("renamed: %s", r.body)
	}
	if r := verify(sqPath).want(200); r.str("status") != "verified" {
		t.Errorf("the name freed, the squatter's token in DNS: %s", r.body)
	}
	// A check asked for is in the audit log as such.
	if r := e.do("GET", "/v1/tenants/owner/audit", adminToken, nil).want(200); !strings.Contains(string(r.body), `"domains.verify"`) {
		t.Errorf("no domains.verify in the audit log: %s", r.body)
	}
}

// TestDomainChecksLoop: the automatic checks verify a claim once its record appears,
// keep it verified through lookups that fail, and set it back to pending after the
// configured number of re-checks in a row miss the record.
func TestDomainChecksLoop(t *testing.T) {
	t.Parallel()
	e, dns := newDomainEnv(t)
	e.tenant("acme")
	e.runChecks(dns)
	ca := testcert.NewCA(t)
	leaf := ca.Issue(t, []string{"api.acme.example"}, time.Time{}, time.Time{})
	r := e.do("POST", "/v1/tenants/acme/domains", adminToken, map[string]any{
		"hostname": "api.acme.example", "certificate_pem": leaf.CertPEM, "private_key_pem": leaf.KeyPEM}).want(201)
	path := "/v1/tenants/acme/domains/" + r.str("id")
	name, token := challengeOf(r)

	// Checked soon after the claim, without a record.
	deadline := time.Now().Add(5 * time.Second)
	for e.do("GET", path, adminToken, nil).want(200).str("last_error") == "" {
		if time.Now().After(deadline) {
			t.Fatal("no automatic check after the claim")
		}
		time.Sleep(20 * time.Millisecond)
	}
	dns.SetTXT(name, token)
	e.waitStatus(path, "verified", 5*time.Second)
	// A failing resolver does not count against it.
	dns.Fail(name, 2) // SERVFAIL
	time.Sleep(10 * fastChecks.Recheck)
	if r := e.do("GET", path, adminToken, nil).want(200); r.str("status") != "verified" || !strings.Contains(r.str("last_error"), "resolver") {
		t.Errorf("after resolver failures: %s", r.body)
	}
	// The record removed: pending again after 3 re-checks.
	dns.Remove(name)
	start := time.Now()
	r = e.waitStatus(path, "pending", 5*time.Second)
	if took := time.Since(start); took < time.Duration(fastChecks.Failures-1)*fastChecks.Recheck {
		t.Errorf("pending again after %v: sooner than %d re-checks", took, fastChecks.Failures)
	}
	if !strings.Contains(r.str("last_error"), "pending again") || r.str("verified_at") != "" {
		t.Errorf("unverified: %s", r.body)
	}
	// And verified again once the record is back.
	dns.SetTXT(name, token)
	e.waitStatus(path, "verified", 5*time.Second)
}
