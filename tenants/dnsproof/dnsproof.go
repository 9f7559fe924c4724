// Package dnsproof checks the DNS records that prove a tenant controls a custom domain's
// host name, and runs the background checks that move domains between pending and
// verified (see tenants.Domain and tenants.DomainSchedule).
//
// It only reads DNS and calls the domain store: it never writes DNS, never serves
// traffic, and holds no state a restart would lose.
package dnsproof

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"tollgate/tenants"
)

// NewResolver returns a resolver that asks the DNS server at addr (host:port, over UDP,
// and TCP for truncated answers), or the system's resolver when addr is empty.
func NewResolver(addr string) *net.Resolver {
	if addr == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{
		PreferGo: true, // the cgo resolver would ignore Dial
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

// Checker looks for a claim's TXT record (tenants.ProofChecker).
type Checker struct {
	// Resolver answers the lookups. Default: the system's resolver.
	Resolver *net.Resolver
	// Timeout bounds one check. Default: 5s.
	Timeout time.Duration
}

// DefaultTimeout is Checker.Timeout's default.
const DefaultTimeout = 5 * time.Second

// New returns a checker asking the DNS server at addr ("" for the system's resolver).
func New(addr string) *Checker { return &Checker{Resolver: NewResolver(addr)} }

// CheckProof looks up the TXT records at tenants.DomainChallengePrefix+hostname and
// judges them (see Judge).
func (c *Checker) CheckProof(ctx context.Context, hostname, token string) tenants.Proof {
	r, timeout := c.Resolver, c.Timeout
	if r == nil {
		r = net.DefaultResolver
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name := tenants.DomainChallengePrefix + hostname
	// Rooted, so no search domain of the resolver's configuration is ever appended.
	records, err := r.LookupTXT(ctx, name+".")
	return Judge(name, token, records, err)
}

// Judge is the proof rule, given what a TXT lookup of name returned:
//
//   - the proof is found when one TXT record's text (its strings joined, as resolvers
//     return them) is the token, ignoring case, surrounding spaces and surrounding
//     double quotes (which some DNS consoles keep as part of the text);
//   - an answer that the name has no TXT record (NXDOMAIN or no data) is ProofMissing;
//     TXT records none of which is the token are ProofMismatch;
//   - any other failure (timeout, SERVFAIL, an unreachable resolver) is ProofUnresolved,
//     which says nothing about the claim.
//
// A CNAME at name is followed: the resolver returns the records at its target, so a
// tenant may delegate the challenge name to a zone it automates.
func Judge(name, token string, records []string, err error) tenants.Proof {
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return tenants.Proof{Outcome: tenants.ProofMissing, Reason: fmt.Sprintf("no TXT record at %s", name)}
		}
		msg := err.Error()
		if errors.As(err, &de) {
			msg = de.Err
			if de.IsTimeout {
				msg = "timed out"
			}
		}
		return tenants.Proof{Outcome: tenants.ProofUnresolved, Reason: fmt.Sprintf("the DNS resolver failed to look up %s: %s", name, msg)}
	}
	if len(records) == 0 {
		return tenants.Proof{Outcome: tenants.ProofMissing, Reason: fmt.Sprintf("no TXT record at %s", name)}
	}
	for _, r := range records {
		if strings.EqualFold(strings.Trim(strings.TrimSpace(r), `"`), token) {
			return tenants.Proof{Outcome: tenants.ProofFound}
		}
	}
	return tenants.Proof{Outcome: tenants.ProofMismatch, Reason: fmt.Sprintf(
		"the TXT records at %s do not hold this claim's token (found %s)", name, quoteSome(records))}
}

// quoteSome lists the first few records, each cut short, for an error message: the
// records are the tenant's own DNS, shown back so a typo is easy to spot.
func quoteSome(records []string) string {
	const most, width = 3, 80
	var b strings.Builder
	for i, r := range records {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(records)-most)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if len(r) > width {
			r = r[:width] + "…"
		}
		b.WriteString(strconv.Quote(r))
	}
	return b.String()
}

var _ tenants.ProofChecker = (*Checker)(nil)
