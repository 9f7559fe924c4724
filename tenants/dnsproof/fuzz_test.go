package dnsproof_test

import (
	"strings"
	"testing"

	"tollgate/tenants"
	"tollgate/tenants/dnsproof"
)

// FuzzJudge: TXT records are whatever the zone's owner (or a hostile one) publishes. The
// rule never panics, finds the proof exactly when one record is the token (give or take
// case, spaces and quotes), and keeps its reason short whatever the records hold.
func FuzzJudge(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef", "v=spf1 -all")
	f.Add("0123456789abcdef0123456789abcdef", `"0123456789ABCDEF0123456789ABCDEF"`, "")
	f.Add("0123456789abcdef0123456789abcdef", strings.Repeat("\xff", 300), "\x00")
	f.Fuzz(func(t *testing.T, token, a, b string) {
		if token == "" {
			return // a claim always has a token
		}
		p := dnsproof.Judge("_tollgate-challenge.x.example", token, []string{a, b}, nil)
		norm := func(s string) string { return strings.Trim(strings.TrimSpace(s), `"`) }
		want := strings.EqualFold(norm(a), token) || strings.EqualFold(norm(b), token)
		if (p.Outcome == tenants.ProofFound) != want {
			t.Fatalf("token %q, records %q %q: %v", token, a, b, p.Outcome)
		}
		if p.Outcome != tenants.ProofFound && (p.Reason == "" || len(p.Reason) > 1000) {
			t.Fatalf("reason of %d bytes: %q", len(p.Reason), p.Reason)
		}
	})
}
