package web

import (
	"testing"
	"time"
	"tollgate/infra/testenv"

	"tollgate/tenants"
)

// The README's trust model states the console's numbers; these tests hold the defaults
// to them, so neither changes without the other.

// readmeNumbers returns the numbers each pattern captures in the README and docs/, failing
// unless every pattern matches once.
func readmeNumbers(t *testing.T, patterns ...string) [][]int {
	t.Helper()
	var out [][]int
	for _, p := range patterns {
		out = append(out, testenv.DocNumbers(t, p))
	}
	return out
}

// sameEverywhere fails unless every statement gives the same numbers, and returns them.
func sameEverywhere(t *testing.T, stated [][]int) []int {
	t.Helper()
	for _, s := range stated[1:] {
		if !equalInts(s, stated[0]) {
			t.Fatalf("the README disagrees with itself: %v against %v", s, stated[0])
		}
	}
	return stated[0]
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func wantRule(t *testing.T, name string, got, want tenants.ThrottleRule) {
	t.Helper()
	if got != want {
		t.Errorf("the console's default %s throttle is %+v; the README states %+v: change both or neither", name, got, want)
	}
}

func TestREADMESignUpFloor(t *testing.T) {
	n := sameEverywhere(t, readmeNumbers(t, `its timing \(a floor of (\d+) ms\)`))
	if want := time.Duration(n[0]) * time.Millisecond; signUpFloor != want {
		t.Errorf("the sign-up floor is %s; the README states %s", signUpFloor, want)
	}
}

func TestREADMESignUpThrottle(t *testing.T) {
	n := sameEverywhere(t, readmeNumbers(t,
		`(\d+) sign-ups per client address per hour`,
		`Sign-up: (\d+) per client address per hour`))
	wantRule(t, "sign-up", Limits{}.withDefaults().SignUp, tenants.ThrottleRule{Limit: n[0], Window: time.Hour})
}

func TestREADMESignInThrottle(t *testing.T) {
	n := sameEverywhere(t, readmeNumbers(t,
		`(\d+) attempts per client address per (\d+) min;`,
		`Sign-in: (\d+) attempts per client address per (\d+) minutes`))
	wantRule(t, "sign-in", Limits{}.withDefaults().SignIn, tenants.ThrottleRule{Limit: n[0], Window: time.Duration(n[1]) * time.Minute})
}

func TestREADMEAccountThrottle(t *testing.T) {
	n := sameEverywhere(t, readmeNumbers(t,
		`per \(account, address\) (\d+), then a pause doubling from (\d+) s to (\d+) min`,
		`per \(account, client address\) (\d+) attempts, then a pause of (\d+) s doubling with each further attempt up to (\d+) minutes`))
	got := Limits{}.withDefaults().Account
	// The README does not state the window the attempts are counted over (an hour).
	wantRule(t, "per-account", got, tenants.ThrottleRule{Limit: n[0], Window: got.Window,
		Backoff: time.Duration(n[1]) * time.Second, MaxBackoff: time.Duration(n[2]) * time.Minute})
}

func TestREADMEMailThrottle(t *testing.T) {
	n := sameEverywhere(t, readmeNumbers(t, `reset and resend requests: (\d+) per client address \(and per user\) per hour`))
	wantRule(t, "mail", Limits{}.withDefaults().Mail, tenants.ThrottleRule{Limit: n[0], Window: time.Hour})
}

// ReadmeNumbers is readmeNumbers for the behavioural tests of package web_test.
var ReadmeNumbers = readmeNumbers
