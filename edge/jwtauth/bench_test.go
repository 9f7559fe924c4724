package jwtauth_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/edge/jwtauth"
)

// BenchmarkVerify: one token verified repeatedly. "cold" disables the verified-token
// cache, so every iteration parses and checks the signature; "cached" is the repeat of a
// token already verified.
func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	cases := []struct {
		name string
		m    jwt.SigningMethod
		priv any
		is   jwtauth.Issuer
	}{
		{"RS256", jwt.SigningMethodRS256, rsaKey(0), jwtauth.Issuer{Keys: []jwtauth.JWK{rsaJWK(rsaKey(0), "k", "RS256")}}},
		{"PS256", jwt.SigningMethodPS256, rsaKey(0), jwtauth.Issuer{Algorithms: []string{"PS256"}, Keys: []jwtauth.JWK{rsaJWK(rsaKey(0), "k", "PS256")}}},
		{"ES256", jwt.SigningMethodES256, p256Key(), jwtauth.Issuer{Algorithms: []string{"ES256"}, Keys: []jwtauth.JWK{ecJWK(p256Key(), "k")}}},
		{"EdDSA", jwt.SigningMethodEdDSA, edKey(), jwtauth.Issuer{Algorithms: []string{"EdDSA"}, Keys: []jwtauth.JWK{edJWK(edKey(), "k")}}},
		{"HS256", jwt.SigningMethodHS256, []byte(hsSecret), jwtauth.Issuer{HS256Secret: hsSecret}},
	}
	for _, c := range cases {
		c.is.Issuer, c.is.Audiences = issA, []string{audA}
		tok := []byte(sign(b, c.m, c.priv, "k", claims(issA, audA, now), nil))
		for _, mode := range []struct {
			name  string
			cache int
		}{{"cold", -1}, {"cached", 0}} {
			if mode.name == "cached" && c.name != "RS256" && c.name != "HS256" {
				continue
			}
			v := mustVerifier(b, "a", jwtauth.Options{TokenCache: mode.cache}, c.is)
			if _, err := v.Verify(tok, now); err != nil {
				b.Fatal(err)
			}
			b.Run(c.name+"/"+mode.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := v.Verify(tok, now); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkVerifyRejectGarbage: the cost of refusing a token no key signed (a
// well-formed RS256 token of an unknown key).
func BenchmarkVerifyReject(b *testing.B) {
	now := time.Now()
	v := mustVerifier(b, "a", jwtauth.Options{}, jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{rsaJWK(rsaKey(0), "k", "RS256")}})
	bad := []byte(sign(b, jwt.SigningMethodRS256, rsaKey(1), "k", claims(issA, audA, now), nil))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(bad, now); err == nil {
			b.Fatal("accepted")
		}
	}
}
