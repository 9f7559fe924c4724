package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"tollgate/web"
)

// The README's trust-model numbers, held by the console's real handlers with their
// defaults (web.Limits{}) on a real Postgres: the numbers come from the README, so a
// default that changes without it fails here.

// TestREADMESignUpAnswerFloor: a sign-up takes at least the README's floor, for a new
// address and for a taken one alike. A lower bound only: what a busy machine adds on top
// is not the product's.
func TestREADMESignUpAnswerFloor(t *testing.T) {
	floor := time.Duration(web.ReadmeNumbers(t, `its timing \(a floor of (\d+) ms\)`)[0][0]) * time.Millisecond
	e := newIDEnv(t, web.Limits{})
	for i, ip := range []string{"203.0.113.90", "203.0.113.91"} { // new, then taken
		c := e.client(ip)
		c.get("/console/signup")
		start := time.Now()
		p := c.do(http.MethodPost, "/console/signup", url.Values{"_csrf": {c.csrf}, "email": {"floor@example.com"},
			"password": {idPassword}, "slug": {fmt.Sprint("floor", i)}, "name": {"Floor"}})
		took := time.Since(start)
		if p.status != http.StatusOK {
			t.Fatalf("sign-up %d: %d", i+1, p.status)
		}
		if took < floor {
			t.Errorf("sign-up %d (%s address) answered in %s, under the README's floor of %s", i+1, []string{"new", "taken"}[i], took, floor)
		}
	}
}

// concurrently sends n forms at once from one client and counts the answers by status.
func concurrently(c *idClient, n int, path string, form func(i int) url.Values) map[int]int {
	c.mu.Lock()
	csrf := c.csrf
	c.mu.Unlock()
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			f := form(i)
			f.Set("_csrf", csrf)
			p := c.do(http.MethodPost, path, f)
			mu.Lock()
			counts[p.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return counts
}

func TestREADMEDefaultSignUpThrottle(t *testing.T) {
	n := web.ReadmeNumbers(t, `(\d+) sign-ups per client address per hour`)[0][0]
	e := newIDEnv(t, web.Limits{})
	c := e.client("203.0.113.92")
	c.get("/console/signup")
	counts := concurrently(c, n+2, "/console/signup", func(i int) url.Values {
		return url.Values{"email": {fmt.Sprintf("su%d@example.com", i)}, "password": {idPassword},
			"slug": {fmt.Sprint("su", i)}, "name": {"S"}}
	})
	if counts[http.StatusOK] != n || counts[http.StatusTooManyRequests] != 2 {
		t.Fatalf("%d sign-ups at once from one address: %v, want %d×200 and 2×429 (README: %d per address per hour)", n+2, counts, n, n)
	}
}

func TestREADMEDefaultSignInThrottle(t *testing.T) {
	n := web.ReadmeNumbers(t, `(\d+) attempts per client address per (\d+) min;`)[0][0]
	e := newIDEnv(t, web.Limits{})
	c := e.client("203.0.113.93")
	c.get("/console/login")
	// Each attempt names another address, so only the per-address count is reached.
	counts := concurrently(c, n+3, "/console/login", func(i int) url.Values {
		return url.Values{"email": {fmt.Sprintf("nobody%d@example.com", i)}, "password": {"guess guess guess"}}
	})
	if counts[http.StatusUnauthorized] != n || counts[http.StatusTooManyRequests] != 3 {
		t.Fatalf("%d sign-ins at once from one address: %v, want %d×401 and 3×429", n+3, counts, n)
	}
}

func TestREADMEDefaultAccountThrottle(t *testing.T) {
	stated := web.ReadmeNumbers(t, `per \(account, address\) (\d+), then a pause doubling from (\d+) s to (\d+) min`)[0]
	n, pause := stated[0], stated[1]
	e := newIDEnv(t, web.Limits{})
	e.client("198.51.100.94").signUp("kim@example.com", "kim")
	c := e.client("203.0.113.94")
	c.get("/console/login")
	// All n+1 attempts go at once: the throttle counts each before its password check, so
	// the one past n is refused however slowly the n wrong passwords are checked (a
	// sequential attempt after them could come when the first pause is already over).
	c.mu.Lock()
	csrf := c.csrf
	c.mu.Unlock()
	var mu sync.Mutex
	counts, retryAfter := map[int]int{}, []string{}
	var wg sync.WaitGroup
	for range n + 1 {
		wg.Go(func() {
			p := c.do(http.MethodPost, "/console/login", url.Values{"email": {"kim@example.com"}, "password": {"guess guess guess"}, "_csrf": {csrf}})
			mu.Lock()
			defer mu.Unlock()
			counts[p.status]++
			if p.status == http.StatusTooManyRequests {
				retryAfter = append(retryAfter, p.header.Get("Retry-After"))
			}
		})
	}
	wg.Wait()
	if counts[http.StatusUnauthorized] != n || counts[http.StatusTooManyRequests] != 1 || retryAfter[0] != fmt.Sprint(pause) {
		t.Fatalf("%d wrong sign-ins at once on one account: %v, Retry-After %q; want %d×401 and one 429 with Retry-After %d", n+1, counts, retryAfter, n, pause)
	}
}

func TestREADMEDefaultMailThrottle(t *testing.T) {
	n := web.ReadmeNumbers(t, `reset and resend requests: (\d+) per client address \(and per user\) per hour`)[0][0]
	e := newIDEnv(t, web.Limits{})
	c := e.client("203.0.113.95")
	c.get("/console/forgot")
	counts := concurrently(c, n+1, "/console/forgot", func(i int) url.Values {
		return url.Values{"email": {fmt.Sprintf("who%d@example.com", i)}}
	})
	if counts[http.StatusTooManyRequests] != 1 || counts[http.StatusTooManyRequests]+counts[http.StatusOK]+counts[http.StatusSeeOther] != n+1 {
		t.Fatalf("%d reset requests at once from one address: %v, want %d answered and 1×429", n+1, counts, n)
	}
}
