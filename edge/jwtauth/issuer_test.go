package jwtauth_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"tollgate/edge/jwtauth"
	"tollgate/tenants"
)

// Validate's messages name the field and the rule; the api returns them as they are.
func TestIssuerValidate(t *testing.T) {
	rk := rsaJWK(rsaKey(0), "k1", "")
	base := func() jwtauth.Issuer {
		return jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{rk}}
	}
	n := func(i int) *int { return &i }
	cases := []struct {
		name  string
		edit  func(*jwtauth.Issuer)
		field string // "" = valid
		msg   string
	}{
		{"valid inline", func(*jwtauth.Issuer) {}, "", ""},
		{"valid jwks_url", func(is *jwtauth.Issuer) { is.Keys = nil; is.JWKSURL = "https://idp.example/.well-known/jwks.json?x=1" }, "", ""},
		{"valid secret", func(is *jwtauth.Issuer) { is.Keys = nil; is.HS256Secret = hsSecret }, "", ""},
		{"issuer missing", func(is *jwtauth.Issuer) { is.Issuer = "" }, "issuer", "is required"},
		{"issuer control", func(is *jwtauth.Issuer) { is.Issuer = "a\nb" }, "issuer", "control"},
		{"issuer padded", func(is *jwtauth.Issuer) { is.Issuer = " a" }, "issuer", "spaces"},
		{"no audiences", func(is *jwtauth.Issuer) { is.Audiences = nil }, "audiences", "at least one audience"},
		{"empty audience", func(is *jwtauth.Issuer) { is.Audiences = []string{""} }, "audiences[0]", "is required"},
		{"duplicate audience", func(is *jwtauth.Issuer) { is.Audiences = []string{"a", "a"} }, "audiences[1]", "twice"},
		{"too many audiences", func(is *jwtauth.Issuer) { is.Audiences = strings.Split(strings.Repeat("a,", 17)+"z", ",") }, "audiences", "at most 16"},
		{"no source", func(is *jwtauth.Issuer) { is.Keys = nil }, "jwks_url", "exactly one of jwks_url, keys and hs256_secret (got 0)"},
		{"two sources", func(is *jwtauth.Issuer) { is.JWKSURL = "https://idp.example/jwks" }, "jwks_url", "(got 2)"},
		{"empty keys", func(is *jwtauth.Issuer) { is.Keys = []jwtauth.JWK{} }, "keys", "at least one key"},
		{"alg none", func(is *jwtauth.Issuer) { is.Algorithms = []string{"none"} }, "algorithms[0]", "never accepted"},
		{"alg unknown", func(is *jwtauth.Issuer) { is.Algorithms = []string{"RS1"} }, "algorithms[0]", "not supported"},
		{"alg lower case", func(is *jwtauth.Issuer) { is.Algorithms = []string{"rs256"} }, "algorithms[0]", "not supported"},
		{"alg twice", func(is *jwtauth.Issuer) { is.Algorithms = []string{"RS256", "RS256"} }, "algorithms[1]", "twice"},
		{"HS256 without secret", func(is *jwtauth.Issuer) { is.Algorithms = []string{"RS256", "HS256"} }, "algorithms[1]", "needs hs256_secret"},
		{"RS256 with secret", func(is *jwtauth.Issuer) {
			is.Keys = nil
			is.HS256Secret = hsSecret
			is.Algorithms = []string{"HS256", "RS256"}
		}, "algorithms[1]", "allows only HS256"},
		{"short secret", func(is *jwtauth.Issuer) { is.Keys = nil; is.HS256Secret = "short" }, "hs256_secret", "at least 32 bytes"},
		{"http jwks", func(is *jwtauth.Issuer) { is.Keys = nil; is.JWKSURL = "http://idp.example/jwks" }, "jwks_url", "https://"},
		{"ftp jwks", func(is *jwtauth.Issuer) { is.Keys = nil; is.JWKSURL = "ftp://idp.example/jwks" }, "jwks_url", "https://"},
		{"jwks credentials", func(is *jwtauth.Issuer) { is.Keys = nil; is.JWKSURL = "https://u:p@idp.example/jwks" }, "jwks_url", "credentials"},
		{"jwks no host", func(is *jwtauth.Issuer) { is.Keys = nil; is.JWKSURL = "https:///jwks" }, "jwks_url", "host"},
		{"alg-less RSA key, two RSA algs", func(is *jwtauth.Issuer) { is.Algorithms = []string{"RS256", "PS256"} }, "keys[0].alg", "several RSA algorithms (RS256, PS256)"},
		{"key alg not allowed", func(is *jwtauth.Issuer) { is.Keys[0].Alg = "PS256" }, "keys[0].alg", "verifies PS256, which algorithms (RS256) does not allow"},
		{"key alg bogus", func(is *jwtauth.Issuer) { is.Keys[0].Alg = "HS256" }, "keys[0].alg", "not an RSA signature algorithm"},
		{"EC key under RS256", func(is *jwtauth.Issuer) { is.Keys = []jwtauth.JWK{ecJWK(p256Key(), "e")} }, "keys[0].alg", "verifies ES256"},
		{"EC alg mismatch", func(is *jwtauth.Issuer) {
			is.Algorithms = []string{"ES256", "ES384"}
			k := ecJWK(p256Key(), "e")
			k.Alg = "ES384"
			is.Keys = []jwtauth.JWK{k}
		}, "keys[0].alg", "P-256 key verifies ES256 only"},
		{"EC P-521", func(is *jwtauth.Issuer) { k := ecJWK(p256Key(), "e"); k.Crv = "P-521"; is.Keys = []jwtauth.JWK{k} }, "keys[0].crv", "not supported"},
		{"EC point off curve", func(is *jwtauth.Issuer) {
			is.Algorithms = []string{"ES256"}
			k := ecJWK(p256Key(), "e")
			k.Y = ecJWK(p256Other(), "").Y
			is.Keys = []jwtauth.JWK{k}
		}, "keys[0].x", "not a point"},
		{"EC short x", func(is *jwtauth.Issuer) {
			is.Algorithms = []string{"ES256"}
			k := ecJWK(p256Key(), "e")
			k.X = "AAAA"
			is.Keys = []jwtauth.JWK{k}
		}, "keys[0].x", "32-byte"},
		{"OKP wrong curve", func(is *jwtauth.Issuer) { k := edJWK(edKey(), "e"); k.Crv = "X25519"; is.Keys = []jwtauth.JWK{k} }, "keys[0].crv", "Ed25519"},
		{"private RSA key", func(is *jwtauth.Issuer) { is.Keys[0].D = "AQAB" }, "keys[0].d", "private key material"},
		{"oct key", func(is *jwtauth.Issuer) { is.Keys = []jwtauth.JWK{{Kty: "oct", K: "c2VjcmV0"}} }, "keys[0].k", "hs256_secret"},
		{"no kty", func(is *jwtauth.Issuer) { is.Keys[0].Kty = "" }, "keys[0].kty", "is required"},
		{"enc key", func(is *jwtauth.Issuer) { is.Keys[0].Use = "enc" }, "keys[0].use", "signature keys"},
		{"key_ops without verify", func(is *jwtauth.Issuer) { is.Keys[0].KeyOps = []string{"encrypt"} }, "keys[0].key_ops", "verify"},
		{"small modulus", func(is *jwtauth.Issuer) { is.Keys[0].N = b64.EncodeToString(make1024()) }, "keys[0].n", "1024-bit modulus"},
		{"padded base64 n", func(is *jwtauth.Issuer) { is.Keys[0].N += "==" }, "keys[0].n", "base64url"},
		{"even exponent", func(is *jwtauth.Issuer) { is.Keys[0].E = b64.EncodeToString([]byte{1, 0, 0}) }, "keys[0].e", "odd exponent"},
		{"duplicate kid", func(is *jwtauth.Issuer) { is.Keys = []jwtauth.JWK{rk, rk} }, "keys[1].kid", "already has kid"},
		{"too many keys", func(is *jwtauth.Issuer) { is.Keys = make([]jwtauth.JWK, 21) }, "keys", "at most 20"},
		{"consumer claim space", func(is *jwtauth.Issuer) { is.ConsumerClaim = "a b" }, "consumer_claim", "without spaces"},
		{"roles claim empty part", func(is *jwtauth.Issuer) { is.RolesClaim = "a..b" }, "roles_claim", "empty parts"},
		{"leeway negative", func(is *jwtauth.Issuer) { is.LeewaySeconds = n(-1) }, "leeway_seconds", "between 0 and 300"},
		{"leeway too big", func(is *jwtauth.Issuer) { is.LeewaySeconds = n(301) }, "leeway_seconds", "between 0 and 300"},
		{"leeway zero", func(is *jwtauth.Issuer) { is.LeewaySeconds = n(0) }, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			is := base()
			is.Keys = append([]jwtauth.JWK(nil), is.Keys...)
			c.edit(&is)
			err := is.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var te *tenants.Error
			if !errors.As(err, &te) || te.Code != tenants.EValidation {
				t.Fatalf("err = %v, want a validation error", err)
			}
			if te.Field != c.field || !strings.Contains(te.Message, c.msg) {
				t.Fatalf("field %q message %q, want field %q message containing %q", te.Field, te.Message, c.field, c.msg)
			}
		})
	}
}

func make1024() []byte {
	b := make([]byte, 128)
	b[0], b[127] = 0x80, 1
	return b
}

// Validate fills defaults, and what it accepts validates again unchanged.
func TestIssuerDefaults(t *testing.T) {
	is := jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, Keys: []jwtauth.JWK{rsaJWK(rsaKey(0), "k", "")}}
	if err := is.Validate(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(is.Algorithms, ",") != "RS256" || is.ConsumerClaim != "sub" || is.RolesClaim != "roles" || *is.LeewaySeconds != 30 {
		t.Fatalf("defaults: %+v", is)
	}
	hs := jwtauth.Issuer{Issuer: issA, Audiences: []string{audA}, HS256Secret: hsSecret}
	if err := hs.Validate(); err != nil || strings.Join(hs.Algorithms, ",") != "HS256" {
		t.Fatalf("HS256 default: %v %v", hs.Algorithms, err)
	}
	before, _ := json.Marshal(is)
	if err := is.Validate(); err != nil {
		t.Fatal(err)
	}
	after, _ := json.Marshal(is)
	if string(before) != string(after) {
		t.Fatalf("not idempotent:\n%s\n%s", before, after)
	}
	// The contract's JSON decodes into it.
	var fromJSON jwtauth.Issuer
	body := `{"issuer":"https://idp.example/","audiences":["api"],"algorithms":["RS256"],"jwks_url":"https://idp.example/jwks","consumer_claim":"sub","roles_claim":"roles"}`
	if err := json.Unmarshal([]byte(body), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := fromJSON.Validate(); err != nil {
		t.Fatal(err)
	}
}
