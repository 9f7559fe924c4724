package portal

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

// The README says the portal throttles like the console; its rules are held to the
// numbers the README's console section states, so neither changes without the other.

func readmeNumbers(t *testing.T, pattern string) []int {
	t.Helper()
	text := strings.Join(strings.Fields(docsText(t, "../..")), " ")
	m := regexp.MustCompile(pattern).FindAllStringSubmatch(text, -1)
	if len(m) != 1 {
		t.Fatalf("the README states %q %d times, want once", pattern, len(m))
	}
	var out []int
	for _, s := range m[0][1:] {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%q: %v", pattern, err)
		}
		out = append(out, n)
	}
	return out
}

func TestREADMEPortalThrottles(t *testing.T) {
	signIn := readmeNumbers(t, `Sign-in: (\d+) attempts per client address per (\d+) minutes`)
	account := readmeNumbers(t, `per \(account, client address\) (\d+) attempts, then a pause of (\d+) s doubling with each further attempt up to (\d+) minutes`)
	signUp := readmeNumbers(t, `Sign-up: (\d+) per client address per hour`)
	mail := readmeNumbers(t, `reset and resend requests: (\d+) per client address \(and per user\) per hour`)
	for _, c := range []struct {
		name      string
		got, want tenants.ThrottleRule
	}{
		{"sign-in", signInRule, tenants.ThrottleRule{Limit: signIn[0], Window: time.Duration(signIn[1]) * time.Minute}},
		// The README does not state the window an account's attempts are counted over.
		{"per-account", accountRule, tenants.ThrottleRule{Limit: account[0], Window: accountRule.Window,
			Backoff: time.Duration(account[1]) * time.Second, MaxBackoff: time.Duration(account[2]) * time.Minute}},
		{"sign-up", signUpRule, tenants.ThrottleRule{Limit: signUp[0], Window: time.Hour}},
		{"mail", mailRule, tenants.ThrottleRule{Limit: mail[0], Window: time.Hour}},
	} {
		if c.got != c.want {
			t.Errorf("the portal's %s throttle is %+v; the README states %+v", c.name, c.got, c.want)
		}
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
