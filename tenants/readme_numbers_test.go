package tenants_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// readmeNumber returns the number each pattern captures in the README and docs/ (whitespace
// collapsed, so a statement may wrap), failing unless every pattern matches exactly once
// and all of them state the same number.
func readmeNumber(t *testing.T, patterns ...string) int {
	t.Helper()
	text := strings.Join(strings.Fields(docsText(t, "..")), " ")
	n := -1
	for _, p := range patterns {
		m := regexp.MustCompile(p).FindAllStringSubmatch(text, -1)
		if len(m) != 1 {
			t.Fatalf("the README states %q %d times, want once", p, len(m))
		}
		v, err := strconv.Atoi(m[0][1])
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
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

// docsText is the README and every page of docs/ under root, joined: the documentation
// a pinned statement may live in.
func docsText(t *testing.T, root string) string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}
