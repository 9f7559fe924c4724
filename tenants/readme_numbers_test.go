package tenants_test

import (
	"testing"
	"time"
	"tollgate/infra/testenv"

	"tollgate/tenants"
)

// readmeNumber returns the number each pattern captures in the README and docs/ (whitespace
// collapsed, so a statement may wrap), failing unless every pattern matches exactly once
// and all of them state the same number.
func readmeNumber(t *testing.T, patterns ...string) int {
	t.Helper()
	n := -1
	for _, p := range patterns {
		v := testenv.DocNumbers(t, p)[0]
		if n >= 0 && v != n {
			t.Fatalf("the README disagrees with itself: %q says %d, another statement %d", p, v, n)
		}
		n = v
	}
	return n
}

// The lifetimes of the mailed links, as the README's trust model and console sections
// state them: neither changes without the other.

func TestREADMEVerifyLinkLifetime(t *testing.T) {
	h := readmeNumber(t, `the link mailed at sign-up \((\d+) h, single use\)`, "a link `/console/verify\\?token=…` \\((\\d+) h\\)")
	if want := time.Duration(h) * time.Hour; tenants.VerifyTokenTTL != want {
		t.Errorf("a verification link lives %s; the README states %s", tenants.VerifyTokenTTL, want)
	}
}

func TestREADMEResetLinkLifetime(t *testing.T) {
	h := readmeNumber(t, `they follow the reset link \((\d+) h, single use\)`, `mails a reset link \((\d+) h\)`)
	if want := time.Duration(h) * time.Hour; tenants.ResetTokenTTL != want {
		t.Errorf("a password-reset link lives %s; the README states %s", tenants.ResetTokenTTL, want)
	}
}

func TestREADMEInvitationLinkLifetime(t *testing.T) {
	d := readmeNumber(t, `a link mailed to that address \((\d+) days, single use`, `works once and for (\d+) days`)
	if want := time.Duration(d) * 24 * time.Hour; tenants.InviteTTL != want {
		t.Errorf("an invitation link lives %s; the README states %s", tenants.InviteTTL, want)
	}
}
