package dnsproof_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"tollgate/infra/testdns"
	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
)

const token = "0123456789abcdef0123456789abcdef"

// TestJudge: the proof rule on what a lookup returned.
func TestJudge(t *testing.T) {
	const name = "_tollgate-challenge.api.acme.example"
	notFound := &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	cases := []struct {
		name    string
		records []string
		err     error
		want    tenants.ProofOutcome
		reason  string
	}{
		{"the token", []string{token}, nil, tenants.ProofFound, ""},
		{"among other records", []string{"v=spf1 -all", "google-site-verification=x", token}, nil, tenants.ProofFound, ""},
		{"upper case", []string{strings.ToUpper(token)}, nil, tenants.ProofFound, ""},
		{"quoted, with spaces", []string{` "` + token + `" `}, nil, tenants.ProofFound, ""},
		{"another claim's token", []string{"ffffffffffffffffffffffffffffffff"}, nil, tenants.ProofMismatch, `"ffffffffffffffffffffffffffffffff"`},
		{"the token as a prefix only", []string{token + "x"}, nil, tenants.ProofMismatch, "do not hold this claim's token"},
		{"many wrong records, listed briefly", []string{"a", "b", "c", "d", "e"}, nil, tenants.ProofMismatch, "and 2 more"},
		{"no records", nil, nil, tenants.ProofMissing, "no TXT record at " + name},
		{"NXDOMAIN", nil, notFound, tenants.ProofMissing, "no TXT record at " + name},
		{"timeout", nil, &net.DNSError{Err: "i/o timeout", IsTimeout: true}, tenants.ProofUnresolved, "timed out"},
		{"SERVFAIL", nil, &net.DNSError{Err: "server misbehaving", IsTemporary: true}, tenants.ProofUnresolved, "server misbehaving"},
		{"not a DNS error", nil, errors.New("boom"), tenants.ProofUnresolved, "boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := dnsproof.Judge(name, token, c.records, c.err)
			if p.Outcome != c.want || !strings.Contains(p.Reason, c.reason) {
				t.Errorf("got %v %q, want %v with %q", p.Outcome, p.Reason, c.want, c.reason)
			}
			if p.Outcome == tenants.ProofFound && p.Reason != "" {
				t.Errorf("found, with reason %q", p.Reason)
			}
		})
	}
}

// TestCheckerAgainstDNSServer: the checker through a real resolver (Go's, dialing a DNS
// server in process over UDP, and TCP for a truncated answer).
func TestCheckerAgainstDNSServer(t *testing.T) {
	t.Parallel()
	srv := testdns.Start(t)
	c := dnsproof.New(srv.Addr())
	c.Timeout = 3 * time.Second
	challenge := func(host string) string { return tenants.DomainChallengePrefix + host }

	srv.SetTXT(challenge("ok.example"), token)
	srv.SetTXT(challenge("several.example"), "v=spf1 -all", token, "other")
	srv.SetTXTStrings(challenge("split.example"), token[:10], token[10:]) // one record, two strings
	srv.SetTXT(challenge("wrong.example"), "ffffffffffffffffffffffffffffffff")
	srv.SetTXT("elsewhere.example", "x") // the name exists, the challenge name does not
	srv.SetTXT(challenge("mixed.example"), token)
	srv.SetCNAME(challenge("alias.example"), "acme-dns.provider.example")
	srv.SetTXT("acme-dns.provider.example", token)
	srv.SetCNAME(challenge("dangling.example"), "nothing.provider.example")
	srv.Fail(challenge("servfail.example"), dns.RcodeServerFailure)
	srv.Fail(challenge("refused.example"), dns.RcodeRefused)
	// Over 1232 bytes (what Go's resolver offers over UDP): truncated, then over TCP.
	big := make([]string, 0, 40)
	for i := range 40 {
		big = append(big, strings.Repeat(string(rune('a'+i%26)), 60))
	}
	srv.SetTXT(challenge("big.example"), append(big, token)...)

	cases := []struct {
		host string
		want tenants.ProofOutcome
	}{
		{"ok.example", tenants.ProofFound},
		{"several.example", tenants.ProofFound},
		{"split.example", tenants.ProofFound},
		{"wrong.example", tenants.ProofMismatch},
		{"elsewhere.example", tenants.ProofMissing},
		{"nothing.example", tenants.ProofMissing},
		{"MIXED.Example", tenants.ProofFound}, // DNS names have no case
		{"alias.example", tenants.ProofFound},
		{"dangling.example", tenants.ProofMissing},
		{"servfail.example", tenants.ProofUnresolved},
		{"refused.example", tenants.ProofUnresolved},
		{"big.example", tenants.ProofFound},
	}
	for _, tc := range cases {
		tcp := srv.TCPQueries()
		p := c.CheckProof(context.Background(), tc.host, token)
		if p.Outcome != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.host, p.Outcome, p.Reason, tc.want)
		}
		if tc.host == "big.example" && srv.TCPQueries() == tcp {
			t.Errorf("the big answer did not come over TCP")
		}
	}

	// A resolver that does not answer: unresolved, within the timeout.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	mute := dnsproof.New(pc.LocalAddr().String())
	mute.Timeout = 300 * time.Millisecond
	start := time.Now()
	if p := mute.CheckProof(context.Background(), "ok.example", token); p.Outcome != tenants.ProofUnresolved || !strings.Contains(p.Reason, "resolver failed") {
		t.Errorf("mute resolver: %v %q", p.Outcome, p.Reason)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("mute resolver took %v", d)
	}
}
