// Package netaddr holds the address and host-name rules that settings and the domain
// share: CIDR lists as the operator writes them, and the DNS label that names a tenant
// under the edge domain. It is infrastructure: tenants and infra/config both call it, and
// it imports neither.
package netaddr

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseCIDRs parses a comma-separated CIDR list (bare addresses count as /32 or /128).
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			a, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR or an address", part)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %v", part, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// reservedLabels would collide with hosts the service itself uses under the edge domain.
var reservedLabels = map[string]bool{"www": true, "api": true, "admin": true, "console": true, "edge": true, "status": true}

// CheckLabel applies DNS label rules: 1–63 of a–z, 0–9 and '-', not starting or ending
// with '-'; and it refuses the labels the service itself uses under the edge domain. A
// tenant's slug is such a label (the first of its edge host name).
func CheckLabel(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("is required")
	case len(s) > 63:
		return fmt.Errorf("must be at most 63 characters (a DNS label), got %d", len(s))
	case s[0] == '-' || s[len(s)-1] == '-':
		return fmt.Errorf("must not start or end with '-'")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("may contain only lowercase letters, digits and '-' (found %q at %d)", rune(c), i)
		}
	}
	if reservedLabels[s] {
		return fmt.Errorf("%q is reserved", s)
	}
	return nil
}
