package jwtauth_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/edge/jwtauth"
	"tollgate/tenants"
)

// Valid tokens of every algorithm family verify, with consumer and roles extracted.
func TestVerifyEachAlgorithm(t *testing.T) {
	now := time.Now()
	r0, r1 := rsaKey(0), rsaKey(1)
	type tc struct {
		alg  string
		m    jwt.SigningMethod
		priv any
		jwk  jwtauth.JWK
	}
	cases := []tc{
		{"RS256", jwt.SigningMethodRS256, r0, rsaJWK(r0, "rs256", "RS256")},
		{"RS384", jwt.SigningMethodRS384, r0, rsaJWK(r0, "rs384", "RS384")},
		{"RS512", jwt.SigningMethodRS512, r0, rsaJWK(r0, "rs512", "RS512")},
		{"PS256", jwt.SigningMethodPS256, r1, rsaJWK(r1, "ps256", "PS256")},
		{"PS384", jwt.SigningMethodPS384, r1, rsaJWK(r1, "ps384", "PS384")},
		{"PS512", jwt.SigningMethodPS512, r1, rsaJWK(r1, "ps512", "PS512")},
		{"ES256", jwt.SigningMethodES256, p256Key(), ecJWK(p256Key(), "es256")},
		{"ES384", jwt.SigningMethodES384, p384Key(), ecJWK(p384Key(), "es384")},
		{"EdDSA", jwt.SigningMethodEdDSA, edKey(), edJWK(edKey(), "ed")},
	}
	var keys []jwtauth.JWK
	var algs []string
	for _, c := range cases {
		keys = append(keys, c.jwk)
		algs = append(algs, c.alg)
	}
	v := mustVerifier(t, "a", jwtauth.Options{TokenCache: -1},
		jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Algorithms: algs, Keys: keys},
		jwtauth.Issuer{Issuer: issB, Audiences: []string{audB}, HS256Secret: hsSecret},
	)
	cases = append(cases, tc{alg: "HS256", m: jwt.SigningMethodHS256, priv: []byte(hsSecret)})
	for _, c := range cases {
		t.Run(c.alg, func(t *testing.T) {
			iss, aud := issA, audA
			if c.alg == "HS256" {
				iss, aud = issB, audB
			}
			tok := sign(t, c.m, c.priv, c.jwk.Kid, claims(iss, aud, now), nil)
			id, err := v.Verify([]byte(tok), now)
			if err != nil {
				t.Fatalf("Verify %s: %v", pretty(tok), err)
			}
			if id.Consumer != "alice" || !slices.Equal(id.Roles, []string{"reader", "writer"}) || id.Issuer != iss {
				t.Fatalf("identity = %+v", id)
			}
			// Without a kid the key is found by its algorithm.
			tok = sign(t, c.m, c.priv, "", claims(iss, aud, now), nil)
			if _, err := v.Verify([]byte(tok), now); err != nil {
				t.Fatalf("Verify without kid: %v", err)
			}
		})
	}
}

// The consumer and roles claims: configurable names, roles as a string or an array, a
// nested path, a namespaced claim whose name has dots, and wrong shapes refused.
func TestIdentityClaims(t *testing.T) {
	now := time.Now()
	k := rsaKey(0)
	mk := func(consumer, roles string) *jwtauth.Verifier {
		return mustVerifier(t, "a", jwtauth.Options{TokenCache: -1}, jwtauth.Issuer{
			Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{rsaJWK(k, "k", "")},
			ConsumerClaim: consumer, RolesClaim: roles,
		})
	}
	cases := []struct {
		name            string
		consumer, roles string
		set             map[string]any
		del             []string
		wantConsumer    string
		wantRoles       []string
		wantErr         error
	}{
		{name: "defaults", wantConsumer: "alice", wantRoles: []string{"reader", "writer"}},
		{name: "roles as a string", set: map[string]any{"roles": "admin"}, wantConsumer: "alice", wantRoles: []string{"admin"}},
		{name: "roles as a scope string", roles: "scope", set: map[string]any{"scope": "orders:read  orders:write"}, wantConsumer: "alice", wantRoles: []string{"orders:read", "orders:write"}},
		{name: "no roles claim", del: []string{"roles"}, wantConsumer: "alice"},
		{name: "roles null", set: map[string]any{"roles": nil}, wantConsumer: "alice"},
		{name: "non-string roles ignored", set: map[string]any{"roles": []any{"a", 1, nil, "", "b"}}, wantConsumer: "alice", wantRoles: []string{"a", "b"}},
		{name: "roles an object", set: map[string]any{"roles": map[string]any{"a": true}}, wantErr: jwtauth.ErrClaims},
		{name: "roles a number", set: map[string]any{"roles": 7}, wantErr: jwtauth.ErrClaims},
		{name: "too many roles", set: map[string]any{"roles": make65()}, wantErr: jwtauth.ErrClaims},
		{name: "nested roles", roles: "realm_access.roles", set: map[string]any{"realm_access": map[string]any{"roles": []string{"ops"}}}, wantConsumer: "alice", wantRoles: []string{"ops"}},
		{name: "namespaced claim wins over path", roles: "https://example.com/roles", set: map[string]any{"https://example.com/roles": []string{"ns"}}, wantConsumer: "alice", wantRoles: []string{"ns"}},
		{name: "consumer claim", consumer: "client_id", set: map[string]any{"client_id": "mobile-app"}, wantConsumer: "mobile-app", wantRoles: []string{"reader", "writer"}},
		{name: "nested consumer", consumer: "ext.user", set: map[string]any{"ext": map[string]any{"user": "bob"}}, wantConsumer: "bob", wantRoles: []string{"reader", "writer"}},
		{name: "consumer missing", del: []string{"sub"}, wantErr: jwtauth.ErrClaims},
		{name: "consumer empty", set: map[string]any{"sub": ""}, wantErr: jwtauth.ErrClaims},
		{name: "consumer a number", set: map[string]any{"sub": 42}, wantErr: jwtauth.ErrClaims},
		{name: "consumer with control bytes", set: map[string]any{"sub": "a\r\nX-Admin: 1"}, wantErr: jwtauth.ErrClaims},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := mk(c.consumer, c.roles)
			cl := claims(issA, audA, now)
			for k, x := range c.set {
				cl[k] = x
			}
			for _, k := range c.del {
				delete(cl, k)
			}
			id, err := v.Verify([]byte(sign(t, jwt.SigningMethodRS256, k, "k", cl, nil)), now)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.Consumer != c.wantConsumer || !slices.Equal(id.Roles, c.wantRoles) {
				t.Fatalf("identity = %+v, want consumer %q roles %q", id, c.wantConsumer, c.wantRoles)
			}
		})
	}
}

func make65() []string {
	out := make([]string, 65)
	for i := range out {
		out[i] = "r" + itoa(i)
	}
	return out
}

// Leeway: exp and nbf are checked with the issuer's leeway, and no further.
func TestLeeway(t *testing.T) {
	now := time.Now()
	k := rsaKey(0)
	ten := 10
	v := mustVerifier(t, "a", jwtauth.Options{TokenCache: -1}, jwtauth.Issuer{
		Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{rsaJWK(k, "k", "RS256")}, LeewaySeconds: &ten,
	})
	at := func(exp, nbf time.Duration) error {
		c := claims(issA, audA, now)
		c["exp"] = now.Add(exp).Unix()
		c["nbf"] = now.Add(nbf).Unix()
		delete(c, "iat")
		_, err := v.Verify([]byte(sign(t, jwt.SigningMethodRS256, k, "k", c, nil)), now)
		return err
	}
	if err := at(-5*time.Second, 0); err != nil {
		t.Errorf("expired 5s ago with 10s leeway: %v", err)
	}
	if err := at(-11*time.Second, 0); !errors.Is(err, jwtauth.ErrExpired) {
		t.Errorf("expired 11s ago with 10s leeway: %v", err)
	}
	if err := at(time.Hour, 5*time.Second); err != nil {
		t.Errorf("nbf 5s ahead with 10s leeway: %v", err)
	}
	if err := at(time.Hour, 11*time.Second); !errors.Is(err, jwtauth.ErrExpired) {
		t.Errorf("nbf 11s ahead with 10s leeway: %v", err)
	}
}

// Each tenant's verifier knows only its own issuers, even when two tenants name the
// same issuer string with different keys.
func TestTenantIsolation(t *testing.T) {
	now := time.Now()
	ka, kb := rsaKey(0), rsaKey(1)
	va := mustVerifier(t, "tenant-a", jwtauth.Options{}, jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{rsaJWK(ka, "a1", "")}})
	vb := mustVerifier(t, "tenant-b", jwtauth.Options{}, jwtauth.Issuer{Issuer: issB, Audiences: []string{audB}, Keys: []jwtauth.JWK{rsaJWK(kb, "b1", "")}})
	vb2 := mustVerifier(t, "tenant-b2", jwtauth.Options{}, jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{rsaJWK(kb, "a1", "")}})
	tokA := []byte(sign(t, jwt.SigningMethodRS256, ka, "a1", claims(issA, audA, now), nil))
	tokB := []byte(sign(t, jwt.SigningMethodRS256, kb, "b1", claims(issB, audB, now), nil))
	if _, err := va.Verify(tokA, now); err != nil {
		t.Fatal(err)
	}
	if _, err := vb.Verify(tokB, now); err != nil {
		t.Fatal(err)
	}
	if _, err := va.Verify(tokB, now); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Errorf("tenant B's token at tenant A: %v", err)
	}
	if _, err := vb.Verify(tokA, now); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Errorf("tenant A's token at tenant B: %v", err)
	}
	if _, err := vb2.Verify(tokA, now); !errors.Is(err, jwtauth.ErrUntrusted) {
		t.Errorf("tenant A's token at a tenant with the same issuer string but its own key: %v", err)
	}
}

// An RSA key without alg takes the issuer's only RSA algorithm.
func TestRSAKeyWithoutAlg(t *testing.T) {
	now := time.Now()
	k := rsaKey(0)
	v := mustVerifier(t, "a", jwtauth.Options{}, jwtauth.Issuer{Issuer: issA, Audiences: []string{audA},
		Algorithms: []string{"PS256", "ES256"}, Keys: []jwtauth.JWK{rsaJWK(k, "k", "")}})
	if _, err := v.Verify([]byte(sign(t, jwt.SigningMethodPS256, k, "k", claims(issA, audA, now), nil)), now); err != nil {
		t.Fatalf("PS256 with an alg-less key of a PS256-only issuer: %v", err)
	}
	if _, err := v.Verify([]byte(sign(t, jwt.SigningMethodRS256, k, "k", claims(issA, audA, now), nil)), now); err == nil {
		t.Fatal("RS256 accepted for an issuer that allows PS256 only")
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	k := rsaJWK(rsaKey(0), "k", "")
	good := jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{k}}
	if _, err := jwtauth.NewVerifier("a", []jwtauth.Issuer{good, good}, jwtauth.Options{}); err == nil {
		t.Error("two issuers with one iss accepted")
	}
	bad := good
	bad.Audiences = nil
	if _, err := jwtauth.NewVerifier("a", []jwtauth.Issuer{bad}, jwtauth.Options{}); err == nil {
		t.Error("invalid issuer accepted")
	}
	jw := jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, JWKSURL: "https://idp.example/jwks"}
	if _, err := jwtauth.NewVerifier("a", []jwtauth.Issuer{jw}, jwtauth.Options{}); err == nil {
		t.Error("jwks_url issuer without a JWKS cache accepted")
	}
	// http is refused unless the cache allows loopback http, and then only on loopback.
	strict := jwtauth.NewJWKSCache(jwtauth.JWKSConfig{})
	jw.JWKSURL = "http://127.0.0.1:1/jwks"
	if _, err := jwtauth.NewVerifier("a", []jwtauth.Issuer{jw}, jwtauth.Options{JWKS: strict}); err == nil {
		t.Error("http jwks_url accepted")
	}
	loose := jwtauth.NewJWKSCache(jwtauth.JWKSConfig{AllowHTTPLoopback: true})
	jw.JWKSURL = "http://idp.example/jwks"
	if _, err := jwtauth.NewVerifier("a", []jwtauth.Issuer{jw}, jwtauth.Options{JWKS: loose}); err == nil {
		t.Error("http jwks_url on a non-loopback host accepted with AllowHTTPLoopback")
	}
	// The argument is not modified.
	in := jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{k}}
	if _, err := jwtauth.NewVerifier("a", []jwtauth.Issuer{in}, jwtauth.Options{}); err != nil {
		t.Fatal(err)
	}
	if in.Algorithms != nil || in.ConsumerClaim != "" || in.LeewaySeconds != nil {
		t.Errorf("NewVerifier filled defaults into its argument: %+v", in)
	}
}

// Whatever failed, the client is told one thing: 401 invalid_credential.
func TestPublicError(t *testing.T) {
	if jwtauth.Code != tenants.EInvalidCredential || tenants.Status(jwtauth.Code) != 401 {
		t.Fatalf("code %q status %d", jwtauth.Code, tenants.Status(jwtauth.Code))
	}
	if jwtauth.Message != "the token is not valid for this API" {
		t.Fatalf("message %q", jwtauth.Message)
	}
}
