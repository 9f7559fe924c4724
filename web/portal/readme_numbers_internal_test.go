package portal

import (
	"testing"
	"time"
	"tollgate/infra/testenv"

	"tollgate/tenants"
)

// The README says the portal throttles like the console; its rules are held to the
// numbers the README's console section states, so neither changes without the other.

// readmeNumbers is what pattern captures in the README and docs/, stated once.
func readmeNumbers(t *testing.T, pattern string) []int {
	t.Helper()
	return testenv.DocNumbers(t, pattern)
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
