package tenants_test

import (
	"net/netip"
	"testing"

	"tollgate/tenants"
)

// The issuer and policy entries are filed under their own keys, and a misfiled one is
// refused like any other.
func TestAuthEntryKeys(t *testing.T) {
	for _, c := range []struct {
		key, value string
		ok         bool
		kind, id   string
	}{
		{"t.jwt-issuer.i", `{"rev":1,"jwt_issuer":{"id":"i","tenant_id":"t","issuer":"x"}}`, true, tenants.KindJWTIssuer, "i"},
		{"t.policy", `{"rev":1,"policy":{"tenant_id":"t","rules":[]}}`, true, tenants.KindAccessRules, ""},
		{"t.policy", `{"rev":1,"policy":{"tenant_id":"u","rules":[]}}`, false, "", ""},
		{"t.policy.p", `{"rev":1,"policy":{"tenant_id":"t"}}`, false, "", ""},
		{".policy", `{"rev":1,"policy":{"tenant_id":""}}`, false, "", ""},
		{"t.jwt-issuer.i", `{"rev":1,"jwt_issuer":{"id":"j","tenant_id":"t"}}`, false, "", ""},
		{"t.jwt-issuer.i", `{"rev":1,"jwt_issuer":{"id":"i","tenant_id":"t"},"policy":{"tenant_id":"t"}}`, false, "", ""},
		{"t.route.i", `{"rev":1,"jwt_issuer":{"id":"i","tenant_id":"t"}}`, false, "", ""},
		{"t.jwt-issuer", `{"rev":1,"jwt_issuer":{"id":"","tenant_id":"t"}}`, false, "", ""},
	} {
		pk, e, err := tenants.DecodeEntry(c.key, []byte(c.value))
		if (err == nil) != c.ok {
			t.Errorf("%s %s: err %v, want ok=%v", c.key, c.value, err, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		if pk.Kind != c.kind || pk.ID != c.id || pk.TenantID != "t" {
			t.Errorf("%s: parsed %+v", c.key, pk)
		}
		if k, err := e.EntryKey(); err != nil || k != c.key {
			t.Errorf("%s: EntryKey %q %v", c.key, k, err)
		}
	}
}

// A jwks_url's host is judged by the upstream policy at save time.
func TestIssuerJWKSHost(t *testing.T) {
	strict := &tenants.UpstreamAddressRule{}
	dev := &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, EdgeDomain: "edge.example", GatewayPorts: []int{443}}
	for _, c := range []struct {
		url        string
		strict, ok bool // refused by the strict policy, by the dev one
	}{
		{"https://idp.example/jwks?x=1", true, true},
		{"https://10.0.0.1/jwks", false, false},
		{"https://169.254.169.254/latest/meta-data", false, false},
		{"https://[::1]:8443/jwks", false, false}, // ::1 is not in 127.0.0.0/8
		{"https://127.0.0.1:8443/jwks", false, true},
		{"https://localhost:8443/jwks", false, true},
		{"https://acme.edge.example/jwks", true, false},      // the gateway's own edge
		{"https://100.64.0.7/jwks", false, false},            // shared address space
		{"https://[64:ff9b::7f00:1]:8443/jwks", false, true}, // NAT64 of 127.0.0.1: dev allows 127/8
		{"https://[64:ff9b::808:808]/jwks", true, true},      // NAT64 of a public address
		{"https://[2001:db8::1]/jwks", false, false},         // documentation
		{"https://192.0.0.9/jwks", true, true},               // globally reachable inside 192.0.0.0/24
	} {
		is := &tenants.Issuer{JWKSURL: c.url}
		if err := is.CheckJWKSHost(strict); (err == nil) != c.strict {
			t.Errorf("%s strict: %v", c.url, err)
		}
		err := is.CheckJWKSHost(dev)
		if (err == nil) != c.ok {
			t.Errorf("%s dev: %v", c.url, err)
		}
		if err != nil {
			if e, _ := err.(*tenants.Error); e == nil || e.Field != "jwks_url" || e.Code != tenants.EValidation {
				t.Errorf("%s: %v is not a validation error on jwks_url", c.url, err)
			}
		}
	}
}
