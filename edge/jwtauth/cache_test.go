package jwtauth_test

import (
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/edge/jwtauth"
)

// The verified-token cache never accepts what a fresh verification would refuse.
func TestTokenCacheBounds(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	k := rsaKey(0)
	zero := 0
	v := mustVerifier(t, "a", jwtauth.Options{}, jwtauth.Issuer{Issuer: issA, Audiences: []string{audA},
		Keys: []jwtauth.JWK{rsaJWK(k, "k", "RS256")}, LeewaySeconds: &zero})
	mint := func(exp time.Duration, extra ...any) []byte {
		c := claims(issA, audA, now)
		c["exp"] = now.Add(exp).Unix()
		for i := 0; i < len(extra); i += 2 {
			c[extra[i].(string)] = extra[i+1]
		}
		return []byte(sign(t, jwt.SigningMethodRS256, k, "k", c, nil))
	}

	short := mint(10 * time.Second)
	id, err := v.Verify(short, now)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Cached(short, now.Add(time.Second)) {
		t.Fatal("a verified token is not cached")
	}
	if cached, err := v.Verify(short, now.Add(time.Second)); err != nil || cached.Consumer != id.Consumer {
		t.Fatalf("cached answer %+v %v", cached, err)
	}
	if v.Cached(short, now.Add(10*time.Second)) {
		t.Fatal("cache answers at exp")
	}
	if _, err := v.Verify(short, now.Add(11*time.Second)); !errors.Is(err, jwtauth.ErrExpired) {
		t.Fatalf("expired token after caching: %v", err)
	}
	if v.Cached(short, now.Add(-time.Second)) {
		t.Fatal("cache answers before the time it verified the token")
	}

	long := mint(time.Hour)
	if _, err := v.Verify(long, now); err != nil {
		t.Fatal(err)
	}
	if !v.Cached(long, now.Add(59*time.Second)) || v.Cached(long, now.Add(60*time.Second)) {
		t.Fatal("cache lifetime is not 60s")
	}

	// Not cached before nbf (without leeway); a token differing in one byte is its own entry.
	ten := 10
	lv := mustVerifier(t, "a", jwtauth.Options{}, jwtauth.Issuer{Issuer: issA, Audiences: []string{audA},
		Keys: []jwtauth.JWK{rsaJWK(k, "k", "RS256")}, LeewaySeconds: &ten})
	early := mint(time.Hour, "nbf", now.Add(5*time.Second).Unix())
	if _, err := lv.Verify(early, now); err != nil {
		t.Fatal(err)
	}
	if lv.Cached(early, now) {
		t.Fatal("a token inside its nbf leeway was cached")
	}
	tampered := append([]byte(nil), long...)
	tampered[len(tampered)-2] ^= 1
	if _, err := v.Verify(tampered, now); err == nil {
		t.Fatal("tampered token accepted")
	}
}

// A cached token of a jwks_url issuer stops being accepted when its key is withdrawn.
func TestTokenCacheKeyWithdrawn(t *testing.T) {
	e := newJWKSEnv(t, rsaJWK(rsaKey(0), "r1", "RS256"), rsaJWK(rsaKey(1), "r2", "RS256"))
	v := mustVerifier(t, "a", jwtauth.Options{JWKS: e.cache}, jwtauth.Issuer{Issuer: issC, Audiences: []string{audA}, JWKSURL: e.idp.url()})
	now := e.clk.Now()
	tok := []byte(sign(t, jwt.SigningMethodRS256, rsaKey(0), "r1", claims(issC, audA, now), nil))
	if _, err := v.Verify(tok, now); err != nil {
		t.Fatal(err)
	}
	if !v.Cached(tok, now) {
		t.Fatal("not cached")
	}
	// The first Verify can return on the stored set while its fetch is still winding
	// up; a refetch asked for before that ends joins it instead of starting anew.
	waitFor(t, "the first fetch to end", e.cache.Idle)
	e.idp.setKeys(rsaJWK(rsaKey(1), "r2", "RS256"))
	e.clk.Advance(10 * time.Second)
	// An unknown kid makes the set refetch.
	_, _ = v.Verify([]byte(sign(t, jwt.SigningMethodRS256, rsaKey(2), "r3", claims(issC, audA, e.clk.Now()), nil)), e.clk.Now())
	if v.Cached(tok, e.clk.Now()) {
		t.Fatal("cache still answers for a token whose key was withdrawn")
	}
	if _, err := v.Verify(tok, e.clk.Now()); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Fatalf("token of a withdrawn key: %v", err)
	}
}
