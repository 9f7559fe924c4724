package jwtauth_test

import (
	"crypto"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/edge/jwtauth"
)

// hostileSetup is tenant A with an inline-key issuer (RS256 "a1", a PS256-pinned key
// "pss", a P-256 key "ec"), an HS256 issuer, and a jwks_url issuer; and the keys and
// servers the attacks use.
type hostileSetup struct {
	v       *jwtauth.Verifier
	clk     *clock
	idp     *idp
	cache   *jwtauth.JWKSCache
	evil    string
	evilHit func() int64
}

const issJWKS = "https://jwks-issuer.tenant-a.example/"

func newHostile(t *testing.T) *hostileSetup {
	clk := newClock()
	p := newIDP(t, rsaJWK(rsaKey(2), "c1", "RS256"))
	evil, hits := attacker(t)
	cache := newCache(clk)
	v := mustVerifier(t, "tenant-a", jwtauth.Options{JWKS: cache, TokenCache: -1},
		jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Algorithms: []string{"RS256", "PS256", "ES256", "ES384"},
			Keys: []jwtauth.JWK{rsaJWK(rsaKey(0), "a1", "RS256"), rsaJWK(rsaKey(1), "pss", "PS256"), ecJWK(p256Key(), "ec")}},
		jwtauth.Issuer{Issuer: issB, Audiences: []string{audA}, HS256Secret: hsSecret},
		jwtauth.Issuer{Issuer: issJWKS, Audiences: []string{audA}, JWKSURL: p.url()},
	)
	return &hostileSetup{v: v, clk: clk, idp: p, cache: cache, evil: evil.URL, evilHit: hits.Load}
}

func pemOf(t *testing.T, pub crypto.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func selfSignedDER(t *testing.T) []byte {
	k := rsaKey(3)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "evil"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Every hostile token fails closed, in the category the comment names, and no server a
// token points at is ever contacted.
func TestHostileTokens(t *testing.T) {
	s := newHostile(t)
	now := s.clk.Now()
	a1, evilKey := rsaKey(0), rsaKey(3)
	good := func() jwt.MapClaims { return claims(issA, audA, now) }
	with := func(kv ...any) jwt.MapClaims {
		c := good()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(c, kv[i].(string))
			} else {
				c[kv[i].(string)] = kv[i+1]
			}
		}
		return c
	}
	rs := func(c jwt.MapClaims, hdr map[string]any) string {
		return sign(t, jwt.SigningMethodRS256, a1, "a1", c, hdr)
	}
	valid := rs(good(), nil)
	head, _, _ := strings.Cut(valid, ".")
	pubPEM := pemOf(t, &a1.PublicKey)
	evilJWK := rsaJWK(evilKey, "a1", "RS256")
	big := strings.Repeat("x", 9000)

	cases := []struct {
		name string
		tok  string
		want error // nil: any error
	}{
		{"alg none", forge(map[string]any{"alg": "none", "typ": "JWT"}, good(), nil), jwtauth.ErrUntrusted},
		{"alg None", forge(map[string]any{"alg": "None"}, good(), nil), jwtauth.ErrUntrusted},
		{"alg none with a signature", forge(map[string]any{"alg": "none"}, good(), func([]byte) []byte { return []byte("x") }), jwtauth.ErrUntrusted},
		{"alg missing", forge(map[string]any{"typ": "JWT", "kid": "a1"}, good(), func([]byte) []byte { return []byte("x") }), jwtauth.ErrUntrusted},
		{"HS256 with the RSA public key PEM as secret", sign(t, jwt.SigningMethodHS256, pubPEM, "a1", good(), nil), jwtauth.ErrUntrusted},
		{"HS256 with the PEM, to the tenant's HS256 issuer", sign(t, jwt.SigningMethodHS256, pubPEM, "", with("iss", issB), nil), jwtauth.ErrUntrusted},
		{"HS256 with the modulus bytes as secret", sign(t, jwt.SigningMethodHS256, a1.N.Bytes(), "a1", good(), nil), jwtauth.ErrUntrusted},
		{"HS256 with the JWK n string as secret", sign(t, jwt.SigningMethodHS256, []byte(rsaJWK(a1, "", "").N), "a1", good(), nil), jwtauth.ErrUntrusted},
		{"HS384 with the PEM", sign(t, jwt.SigningMethodHS384, pubPEM, "a1", good(), nil), jwtauth.ErrUntrusted},
		{"empty signature", valid[:strings.LastIndexByte(valid, '.')+1], jwtauth.ErrUntrusted},
		{"no signature segment", valid[:strings.LastIndexByte(valid, '.')], jwtauth.ErrMalformed},
		{"signature of another token", signingInput(rs(with("sub", "mallory"), nil)) + sigPart(valid), jwtauth.ErrUntrusted},
		{"claims altered after signing", head + "." + b64.EncodeToString([]byte(`{"iss":"`+issA+`","aud":"`+audA+`","sub":"admin","exp":9999999999}`)) + sigPart(valid), jwtauth.ErrUntrusted},
		{"expired", rs(with("exp", now.Add(-time.Hour).Unix()), nil), jwtauth.ErrExpired},
		{"not yet valid", rs(with("nbf", now.Add(time.Hour).Unix()), nil), jwtauth.ErrExpired},
		{"issued in the future", rs(with("iat", now.Add(time.Hour).Unix()), nil), jwtauth.ErrExpired},
		{"wrong issuer", rs(with("iss", "https://evil.example/"), nil), jwtauth.ErrUntrusted},
		{"issuer differs by a slash", rs(with("iss", strings.TrimSuffix(issA, "/")), nil), jwtauth.ErrUntrusted},
		{"issuer missing", rs(with("iss", nil), nil), jwtauth.ErrUntrusted},
		{"issuer not a string", rs(with("iss", []string{issA}), nil), jwtauth.ErrUntrusted},
		{"wrong audience", rs(with("aud", "api://other"), nil), jwtauth.ErrClaims},
		{"audience of another tenant", rs(with("aud", []string{audB}), nil), jwtauth.ErrClaims},
		{"audience missing", rs(with("aud", nil), nil), jwtauth.ErrClaims},
		{"exp missing", rs(with("exp", nil), nil), jwtauth.ErrClaims},
		{"exp not a number", rs(with("exp", "never"), nil), nil},
		{"another tenant's valid token", sign(t, jwt.SigningMethodRS256, rsaKey(1), "b1", claims("https://idp.tenant-c.example/", "api://tenant-c", now), nil), jwtauth.ErrUntrusted},
		{"another tenant's key under our issuer", sign(t, jwt.SigningMethodRS256, rsaKey(1), "a1", good(), nil), jwtauth.ErrUntrusted},
		{"kid path traversal", sign(t, jwt.SigningMethodRS256, a1, "../../etc/passwd", good(), nil), jwtauth.ErrUntrusted},
		{"kid SQL", sign(t, jwt.SigningMethodRS256, a1, "' OR 1=1 --", good(), nil), jwtauth.ErrUntrusted},
		{"kid NUL", sign(t, jwt.SigningMethodRS256, a1, "a1\x00", good(), nil), jwtauth.ErrUntrusted},
		{"kid a number", rs(good(), map[string]any{"kid": 1}), jwtauth.ErrMalformed},
		{"kid huge", sign(t, jwt.SigningMethodRS256, a1, strings.Repeat("k", 300), good(), nil), jwtauth.ErrUntrusted},
		{"embedded jwk with the attacker's key", sign(t, jwt.SigningMethodRS256, evilKey, "", good(), map[string]any{"jwk": evilJWK}), jwtauth.ErrUntrusted},
		{"embedded jwk claiming our kid", sign(t, jwt.SigningMethodRS256, evilKey, "a1", good(), map[string]any{"jwk": evilJWK}), jwtauth.ErrUntrusted},
		{"jku at the attacker", sign(t, jwt.SigningMethodRS256, evilKey, "evil", good(), map[string]any{"jku": s.evil + "/jwks"}), jwtauth.ErrUntrusted},
		{"jku at the attacker, jwks issuer", sign(t, jwt.SigningMethodRS256, evilKey, "evil", with("iss", issJWKS), map[string]any{"jku": s.evil + "/jwks"}), jwtauth.ErrUntrusted},
		{"x5u at the attacker", sign(t, jwt.SigningMethodRS256, evilKey, "a1", good(), map[string]any{"x5u": s.evil + "/cert.pem"}), jwtauth.ErrUntrusted},
		{"x5c with the attacker's certificate", sign(t, jwt.SigningMethodRS256, evilKey, "", good(), map[string]any{"x5c": []string{b64.EncodeToString(selfSignedDER(t))}}), jwtauth.ErrUntrusted},
		{"RS256 by a key pinned to PS256", sign(t, jwt.SigningMethodRS256, rsaKey(1), "pss", good(), nil), jwtauth.ErrUntrusted},
		{"PS256 by a key pinned to RS256", sign(t, jwt.SigningMethodPS256, a1, "a1", good(), nil), jwtauth.ErrUntrusted},
		{"ES384 by a P-256 key", forge(map[string]any{"alg": "ES384", "kid": "ec"}, good(), ecSign(p256Key(), crypto.SHA384, 48)), jwtauth.ErrUntrusted},
		{"ES384 by a P-256 key, 32-byte halves", forge(map[string]any{"alg": "ES384", "kid": "ec"}, good(), ecSign(p256Key(), crypto.SHA384, 32)), jwtauth.ErrUntrusted},
		{"ES256 by another P-256 key", sign(t, jwt.SigningMethodES256, p256Other(), "ec", good(), nil), jwtauth.ErrUntrusted},
		{"ES512 not allowed", sign(t, jwt.SigningMethodES512, mustECP521(), "ec", good(), nil), jwtauth.ErrUntrusted},
		{"EdDSA not allowed for the issuer", sign(t, jwt.SigningMethodEdDSA, edKey(), "", good(), nil), jwtauth.ErrUntrusted},
		{"RS256 to the HS256 issuer", sign(t, jwt.SigningMethodRS256, a1, "", with("iss", issB), nil), jwtauth.ErrUntrusted},
		{"oversized", rs(with("pad", big), nil), jwtauth.ErrMalformed},
		{"crit header", rs(good(), map[string]any{"crit": []string{"exp"}, "exp": 1}), jwtauth.ErrMalformed},
		{"b64 false", rs(good(), map[string]any{"b64": false, "crit": []string{"b64"}}), jwtauth.ErrMalformed},
		{"four segments", valid + ".x", jwtauth.ErrMalformed},
		{"two segments", head + ".e30", jwtauth.ErrMalformed},
		{"padding", strings.Replace(valid, ".", "=.", 1), jwtauth.ErrMalformed},
		{"standard base64 alphabet", head + "+/." + "e30.", jwtauth.ErrMalformed},
		{"space", " " + valid, jwtauth.ErrMalformed},
		{"Bearer prefix left in", "Bearer " + valid, jwtauth.ErrMalformed},
		{"empty", "", jwtauth.ErrMalformed},
		{"dots only", "..", jwtauth.ErrMalformed},
		{"header not JSON", b64.EncodeToString([]byte("not json")) + ".e30.", jwtauth.ErrMalformed},
		{"claims an array", forge(map[string]any{"alg": "RS256", "kid": "a1"}, []any{1}, func([]byte) []byte { return []byte("x") }), jwtauth.ErrMalformed},
		{"non-canonical base64 tail bits", nonCanonical(valid), jwtauth.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := s.v.Verify([]byte(c.tok), now)
			if err == nil {
				t.Fatalf("accepted as %+v: %s", id, pretty(c.tok))
			}
			if testing.Verbose() {
				t.Logf("%v", err)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want category %v\ntoken: %s", err, c.want, pretty(c.tok))
			}
		})
	}
	if _, err := s.v.Verify([]byte(valid), now); err != nil {
		t.Fatalf("the valid token itself fails: %v", err)
	}
	if n := s.evilHit(); n != 0 {
		t.Fatalf("the attacker's server was contacted %d times", n)
	}
	// The jwks issuer's provider was fetched once (initial load); the hostile kids did
	// not make it refetch within the rate limit.
	if n := s.idp.hits.Load(); n != 1 {
		t.Fatalf("provider fetched %d times, want 1", n)
	}
}

func mustECP521() any { return mustEC(elliptic.P521()) }

func signingInput(tok string) string { return tok[:strings.LastIndexByte(tok, '.')] }
func sigPart(tok string) string      { return tok[strings.LastIndexByte(tok, '.'):] }

// nonCanonical flips the unused low bits of the last signature character: the same
// bytes under lax base64, a different string; strict decoding refuses it.
func nonCanonical(tok string) string {
	i := strings.LastIndexByte(tok, '.')
	sig := tok[i+1:]
	if len(sig)%4 == 0 {
		return tok + "A"
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	return tok[:len(tok)-1] + string(alphabet[last|1])
}

// A token with an unknown kid while the provider is down fails; known keys keep working.
func TestUnknownKidWithProviderDown(t *testing.T) {
	s := newHostile(t)
	now := s.clk.Now()
	known := sign(t, jwt.SigningMethodRS256, rsaKey(2), "c1", claims(issJWKS, audA, now), nil)
	if _, err := s.v.Verify([]byte(known), now); err != nil {
		t.Fatal(err)
	}
	// Let the initial fetch wind up before the clock moves on: one still running would
	// be joined by the unknown kid's refetch instead of a new one starting.
	waitFor(t, "the initial fetch to end", s.cache.Idle)
	s.idp.set(503, []byte("down"))
	s.clk.Advance(11 * time.Second)
	now = s.clk.Now()
	unknown := sign(t, jwt.SigningMethodRS256, rsaKey(3), "c2", claims(issJWKS, audA, now), nil)
	if _, err := s.v.Verify([]byte(unknown), now); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Fatalf("unknown kid with the provider down: %v", err)
	}
	if n := s.idp.hits.Load(); n != 2 {
		t.Fatalf("provider fetched %d times, want 2 (initial, unknown kid)", n)
	}
	known = sign(t, jwt.SigningMethodRS256, rsaKey(2), "c1", claims(issJWKS, audA, now), nil)
	if _, err := s.v.Verify([]byte(known), now); err != nil {
		t.Fatalf("known key after a failed refresh: %v", err)
	}
}
