package jwtauth_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/edge/jwtauth"
)

const issC = "https://idp.example/"

// jwksEnv is one tenant verifying tokens of a jwks_url issuer served by an httptest
// provider, on a test clock.
type jwksEnv struct {
	t     *testing.T
	clk   *clock
	idp   *idp
	cache *jwtauth.JWKSCache
	v     *jwtauth.Verifier
}

func newJWKSEnv(t *testing.T, keys ...jwtauth.JWK) *jwksEnv {
	e := &jwksEnv{t: t, clk: newClock(), idp: newIDP(t, keys...)}
	e.cache = newCache(e.clk)
	e.v = e.verifier("tenant-a")
	return e
}

func (e *jwksEnv) verifier(tenant string) *jwtauth.Verifier {
	return mustVerifier(e.t, tenant, jwtauth.Options{JWKS: e.cache, TokenCache: -1},
		jwtauth.Issuer{Issuer: issC, Audiences: []string{audA}, JWKSURL: e.idp.url()})
}

// verify checks a token of key i with kid at the test clock's time.
func (e *jwksEnv) verify(i int, kid string) error {
	now := e.clk.Now()
	_, err := e.v.Verify([]byte(sign(e.t, jwt.SigningMethodRS256, rsaKey(i), kid, claims(issC, audA, now), nil)), now)
	return err
}

func (e *jwksEnv) hits() int64 { return e.idp.hits.Load() }

// wantHits waits until the provider has been asked n times and the fetches have
// ended, then checks no more arrive. The provider counts a hit when the request
// arrives, before the cache has read the answer and stored the set (or the failure and
// the next try's time), and a Verify can return while the fetch that stored the set it
// used is still winding up: waiting for the fetch to end too is what lets the caller
// rely on its outcome, and move the test clock on knowing the next touch starts a new
// fetch rather than joining the one still running (which, on the test clock, may look
// minutes old; in production a fetch is bounded by the JWKS timeout).
func (e *jwksEnv) wantHits(n int64) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("provider hits to reach %d and the fetch to end", n), func() bool {
		return e.hits() >= n && e.cache.Idle()
	})
	time.Sleep(10 * time.Millisecond) // and no more arrive
	if got := e.hits(); got != n {
		e.t.Fatalf("provider fetched %d times, want %d", got, n)
	}
}

// A new kid is picked up without a restart: an unknown kid triggers a refetch, at most
// once per MinInterval.
func TestJWKSRotation(t *testing.T) {
	e := newJWKSEnv(t, rsaJWK(rsaKey(0), "r1", "RS256"))
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(1)

	e.idp.setKeys(rsaJWK(rsaKey(0), "r1", "RS256"), rsaJWK(rsaKey(1), "r2", "RS256"))
	if err := e.verify(1, "r2"); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Fatalf("new kid within the rate limit: %v", err)
	}
	e.wantHits(1)

	e.clk.Advance(10 * time.Second)
	if err := e.verify(1, "r2"); err != nil {
		t.Fatalf("new kid after the rate limit: %v", err)
	}
	e.wantHits(2)
	if err := e.verify(2, "r3"); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Fatalf("another unknown kid right after a refetch: %v", err)
	}
	e.wantHits(2)

	// The provider withdraws r1; the periodic refresh (5 min default) drops it. The
	// provider holds its answer until the test has verified with r1, so the refetch
	// really is running in the background then (otherwise it may already have ended,
	// and r1 rightly be gone).
	e.idp.setKeys(rsaJWK(rsaKey(1), "r2", "RS256"))
	release := e.idp.hold(t)
	e.clk.Advance(5*time.Minute + time.Second)
	if err := e.verify(0, "r1"); err != nil {
		t.Fatalf("r1 while the refetch runs in the background: %v", err)
	}
	waitFor(t, "the refetch to reach the provider", func() bool { return e.hits() >= 3 })
	if err := e.verify(0, "r1"); err != nil {
		t.Fatalf("r1 while the provider answers the refetch: %v", err)
	}
	release()
	e.wantHits(3)
	if err := e.verify(0, "r1"); err == nil {
		t.Fatal("r1 still verifies after the refetch without it")
	}
	if err := e.verify(1, "r2"); err != nil {
		t.Fatal(err)
	}
}

// Many concurrent requests with unknown kids cause one fetch.
func TestJWKSUnknownKidStorm(t *testing.T) {
	e := newJWKSEnv(t, rsaJWK(rsaKey(0), "r1", "RS256"))
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(1) // the first fetch has ended, so the next touch starts one
	e.clk.Advance(time.Minute)
	e.idp.mu.Lock()
	e.idp.delay = 50 * time.Millisecond
	e.idp.mu.Unlock()
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := e.verify(1, "nope-"+itoa(i)); err == nil {
				t.Error("unknown kid accepted")
			}
		}(i)
	}
	wg.Wait()
	e.wantHits(2)
}

// With the provider down, the last good set keeps serving, retries are rate-limited,
// and the set is picked up again when the provider recovers.
func TestJWKSProviderDown(t *testing.T) {
	e := newJWKSEnv(t, rsaJWK(rsaKey(0), "r1", "RS256"))
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(1) // the first fetch has ended, so the next touch starts one
	e.idp.set(500, []byte("oops"))
	e.clk.Advance(6 * time.Minute)
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(2)
	e.clk.Advance(5 * time.Second)
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(2) // within MinInterval of the failure
	e.clk.Advance(6 * time.Second)
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(3)

	e.idp.srv.CloseClientConnections()
	e.idp.srv.Close() // connection refused from now on
	e.clk.Advance(time.Hour)
	for i := 0; i < 3; i++ {
		if err := e.verify(0, "r1"); err != nil {
			t.Fatalf("with the provider gone: %v", err)
		}
	}
}

// A provider that never answered leaves the issuer's tokens refused (ErrNoKeys) until
// it does.
func TestJWKSColdStartProviderDown(t *testing.T) {
	clk := newClock()
	p := newIDP(t)
	p.set(503, nil)
	cache := newCache(clk)
	v := mustVerifier(t, "a", jwtauth.Options{JWKS: cache, TokenCache: -1}, jwtauth.Issuer{Issuer: issC, Audiences: []string{audA}, JWKSURL: p.url()})
	tok := func() []byte {
		return []byte(sign(t, jwt.SigningMethodRS256, rsaKey(0), "r1", claims(issC, audA, clk.Now()), nil))
	}
	if _, err := v.Verify(tok(), clk.Now()); !errors.Is(err, jwtauth.ErrNoKeys) {
		t.Fatalf("no key set yet: %v", err)
	}
	p.setKeys(rsaJWK(rsaKey(0), "r1", "RS256"))
	if _, err := v.Verify(tok(), clk.Now()); !errors.Is(err, jwtauth.ErrNoKeys) {
		t.Fatalf("within the rate limit: %v", err)
	}
	clk.Advance(10 * time.Second)
	if _, err := v.Verify(tok(), clk.Now()); err != nil {
		t.Fatalf("after the provider came up: %v", err)
	}
}

// Garbage from the provider keeps the last good set: not JSON, not a set, only
// unusable keys, too large, a redirect (never followed), an error status.
func TestJWKSGarbageKeepsLastGoodSet(t *testing.T) {
	evil, evilHits := attacker(t)
	garbage := []struct {
		name   string
		status int
		body   string
	}{
		{"html", 200, "<html>login</html>"},
		{"truncated", 200, `{"keys":[{"kty":"RSA",`},
		{"keys not an array", 200, `{"keys":"x"}`},
		{"no keys member", 200, `{"data":[]}`},
		{"only unusable keys", 200, `{"keys":[{"kty":"RSA","kid":"r1","n":"AQAB","e":"AQAB"},{"kty":"EC","crv":"P-521","x":"AA","y":"AA"},{"kty":"oct","k":"c2VjcmV0"}]}`},
		{"a private key", 200, `{"keys":[{"kty":"RSA","kid":"r9","n":"` + rsaJWK(rsaKey(1), "", "").N + `","e":"AQAB","d":"AQAB"}]}`},
		{"too large", 200, `{"keys":[],"pad":"` + strings.Repeat("x", jwtauth.DefaultJWKSMaxBytes) + `"}`},
		{"server error", 500, `{"keys":[]}`},
	}
	e := newJWKSEnv(t, rsaJWK(rsaKey(0), "r1", "RS256"))
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(1) // the first fetch has ended, so the next touch starts one
	hits := e.hits()
	for _, g := range garbage {
		e.idp.set(g.status, []byte(g.body))
		e.clk.Advance(6 * time.Minute)
		if err := e.verify(0, "r1"); err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		hits++
		e.wantHits(hits)
		if err := e.verify(0, "r1"); err != nil {
			t.Fatalf("after %s: %v", g.name, err)
		}
	}

	// A redirect is not followed.
	e.idp.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.idp.hits.Add(1)
		http.Redirect(w, r, evil.URL+"/jwks", http.StatusFound)
	})
	e.clk.Advance(6 * time.Minute)
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(hits + 1)
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	if evilHits.Load() != 0 {
		t.Fatal("the redirect was followed")
	}
}

// A well-formed empty set is the provider withdrawing every key.
func TestJWKSEmptySetIsAuthoritative(t *testing.T) {
	e := newJWKSEnv(t, rsaJWK(rsaKey(0), "r1", "RS256"))
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(1) // the first fetch has ended, so the next touch starts one
	e.idp.set(200, []byte(`{"keys":[]}`))
	e.clk.Advance(6 * time.Minute)
	_ = e.verify(0, "r1")
	e.wantHits(2)
	if err := e.verify(0, "r1"); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Fatalf("after the set was emptied: %v", err)
	}
}

// Cache-Control max-age sets the refresh period, within [1m, 1h].
func TestJWKSMaxAge(t *testing.T) {
	cases := []struct {
		cc           string
		before, past time.Duration
	}{
		{"public, max-age=120", 119 * time.Second, 121 * time.Second},
		{"max-age=5", 59 * time.Second, 61 * time.Second},                 // raised to 1m
		{"max-age=999999", 59 * time.Minute, 61 * time.Minute},            // lowered to 1h
		{"no-store", 59 * time.Second, 61 * time.Second},                  // 0 → 1m
		{"", 4*time.Minute + 59*time.Second, 5*time.Minute + time.Second}, // default 5m
	}
	for _, c := range cases {
		t.Run(c.cc, func(t *testing.T) {
			clk := newClock()
			p := newIDP(t, rsaJWK(rsaKey(0), "r1", "RS256"))
			p.setCacheControl(c.cc)
			e := &jwksEnv{t: t, clk: clk, idp: p, cache: newCache(clk)}
			e.v = e.verifier("a")
			start := clk.Now()
			if err := e.verify(0, "r1"); err != nil {
				t.Fatal(err)
			}
			e.wantHits(1)
			clk.ns.Store(start.Add(c.before).UnixNano())
			_ = e.verify(0, "r1")
			e.wantHits(1)
			clk.ns.Store(start.Add(c.past).UnixNano())
			_ = e.verify(0, "r1")
			e.wantHits(2)
		})
	}
}

// Verifiers of successive snapshots of a tenant share its key set; another tenant with
// the same URL has its own; a set no verifier holds is dropped.
func TestJWKSSharingAndRelease(t *testing.T) {
	e := newJWKSEnv(t, rsaJWK(rsaKey(0), "r1", "RS256"))
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.v = e.verifier("tenant-a") // a recompiled snapshot
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(1)
	e.v = e.verifier("tenant-b")
	if err := e.verify(0, "r1"); err != nil {
		t.Fatal(err)
	}
	e.wantHits(2)
	if n := e.cache.Len(); n != 2 {
		t.Fatalf("cache holds %d sets, want 2", n)
	}
	e.v = nil
	waitFor(t, "sets released", func() bool {
		runtime.GC()
		return e.cache.Len() == 0
	})
}

// Without AllowHTTPLoopback a key set URL on a loopback (or private) address is never
// connected to, even over https.
func TestJWKSAddressPolicy(t *testing.T) {
	var connects int
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener = countingListener{srv.Listener, func() { mu.Lock(); connects++; mu.Unlock() }}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	var logs bytes.Buffer
	cache := jwtauth.NewJWKSCache(jwtauth.JWKSConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	v := mustVerifier(t, "a", jwtauth.Options{JWKS: cache}, jwtauth.Issuer{Issuer: issC, Audiences: []string{audA}, JWKSURL: srv.URL + "/jwks"})
	now := time.Now()
	_, err := v.Verify([]byte(sign(t, jwt.SigningMethodRS256, rsaKey(0), "r1", claims(issC, audA, now), nil)), now)
	if !errors.Is(err, jwtauth.ErrNoKeys) {
		t.Fatalf("err = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if connects != 0 {
		t.Fatalf("connected %d times to a loopback key set URL", connects)
	}
	if !strings.Contains(logs.String(), "loopback") {
		t.Fatalf("log does not say why: %s", logs.String())
	}
}

type countingListener struct {
	net.Listener
	onAccept func()
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.onAccept()
	}
	return c, err
}
