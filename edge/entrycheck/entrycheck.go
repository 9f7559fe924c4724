// Package entrycheck judges a config entry beyond its JSON shape, as the edge does when
// it takes one in: whatever holds entries for the edge (its apply path, its local store)
// refuses the same ones.
package entrycheck

import (
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"tollgate/tenants"
)

// Validate checks the object beyond its JSON shape, so an entry the api would never
// have written cannot break a tenant's snapshot. Upstream addresses are not judged here:
// the dialer checks them on every connect, so a target the operator's address rule refuses
// answers 502 with a clear code instead of the route vanishing.
func Validate(pk tenants.ParsedKey, ent *tenants.Entry) error {
	switch pk.Kind {
	case tenants.KindTenant:
		t := *ent.Tenant
		if err := t.Validate(); err != nil {
			return err
		}
		ent.Tenant = &t
	case tenants.KindRoute:
		// The route is kept as decoded (Apply decoded it, nothing else holds it), with
		// its slices copied to their length: the JSON decoder leaves spare capacity.
		r := ent.Route
		r.Paths = append([]string(nil), r.Paths...)
		r.Methods = append([]string(nil), r.Methods...)
		r.Upstream.Targets = append([]tenants.Target(nil), r.Upstream.Targets...)
		if err := r.Validate(anyUpstream); err != nil {
			return err
		}
		// The edge keeps every route it holds decoded: the ids are the key's own
		// strings, kept anyway, rather than copies of them (about 100 bytes a route).
		if r.TenantID == pk.TenantID {
			r.TenantID = pk.TenantID
		}
		if r.ID == pk.ID {
			r.ID = pk.ID
		}
	case tenants.KindConsumer:
		c := *ent.Consumer
		if err := c.Validate(); err != nil {
			return err
		}
	case tenants.KindKey:
		if ent.Key.ConsumerID == "" {
			return errors.New("key entry has no consumer_id")
		}
		if _, err := KeyHash(ent.Key.Hash); err != nil {
			return err
		}
	case tenants.KindPlan:
		p := *ent.Plan
		if err := p.Validate(); err != nil {
			return err
		}
		ent.Plan = &p
	case tenants.KindJWTIssuer:
		// The issuer's shape. Whether its jwks_url may be http:// (a test setting) is
		// judged when the tenant compiles, which leaves out an issuer it cannot use.
		is := *ent.JWTIssuer
		if err := is.ValidateWithLoopback(true); err != nil {
			return err
		}
		ent.JWTIssuer = &is
	case tenants.KindAccessRules:
		// Compiled, and so checked, when the tenant compiles: access rules that do not
		// compile deny every call of the routes that check access, rather than older ones
		// staying in force.
	}
	return nil
}

// anyUpstream admits every unicast address, for validating a route's shape at the edge.
var anyUpstream = &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"),
}}

// KeyHash decodes a key entry's hash: the SHA-256 of the plaintext key, in hex.
func KeyHash(h string) ([32]byte, error) {
	var sum [32]byte
	if len(h) != 64 {
		return sum, fmt.Errorf("hash must be 64 hex digits, got %d characters", len(h))
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return sum, fmt.Errorf("hash is not hex: %v", err)
	}
	return sum, nil
}

// Domain is a custom domain as the edge holds it: parsed once, when its entry
// arrives. cert is nil while the domain is not verified.
type Domain struct {
	Host     string
	Verified bool
	Cert     *tls.Certificate
}

// ParseDomain checks a domain entry and, for a verified domain, parses its key pair (a
// pending one's is parsed when its verified entry comes).
func ParseDomain(d *tenants.Domain) (Domain, error) {
	h := strings.TrimSuffix(strings.ToLower(d.Hostname), ".")
	if h == "" {
		return Domain{}, errors.New("domain entry has no hostname")
	}
	if !d.Verified() {
		return Domain{Host: h}, nil
	}
	c, err := d.KeyPair()
	if err != nil {
		return Domain{}, err
	}
	return Domain{Host: h, Verified: true, Cert: c}, nil
}
