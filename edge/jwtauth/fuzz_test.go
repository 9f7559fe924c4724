package jwtauth_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/edge/jwtauth"
)

// The fuzz verifier's keys are fixed (testdata/fuzz-rsa.pem and constants below) so the
// committed corpus holds tokens that really verify, and mutations start from them.
var fuzzNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type fuzzKeys struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	ed  ed25519.PrivateKey
	hs  []byte
}

var loadFuzzKeys = sync.OnceValues(func() (fuzzKeys, error) {
	var k fuzzKeys
	b, err := os.ReadFile("testdata/fuzz-rsa.pem")
	if err != nil {
		return k, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return k, errors.New("no PEM block")
	}
	priv, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return k, err
	}
	k.rsa = priv.(*rsa.PrivateKey)
	k.ec, err = ecdsa.ParseRawPrivateKey(elliptic.P256(), sha256Of("tollgate fuzz p-256"))
	if err != nil {
		return k, err
	}
	k.ed = ed25519.NewKeyFromSeed(sha256Of("tollgate fuzz ed25519"))
	k.hs = []byte("tollgate-fuzz-hs256-secret-0123456789")
	return k, nil
})

func sha256Of(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

const (
	fuzzIssA = "https://fuzz-a.example/"
	fuzzIssB = "https://fuzz-b.example/"
	fuzzAud  = "api://fuzz"
)

func fuzzVerifier(tb testing.TB) (*jwtauth.Verifier, fuzzKeys) {
	k, err := loadFuzzKeys()
	if err != nil {
		tb.Fatal(err)
	}
	v := mustVerifier(tb, "fuzz", jwtauth.Options{},
		jwtauth.Issuer{Issuer: fuzzIssA, Audiences: []string{fuzzAud}, Algorithms: []string{"RS256", "PS256", "ES256", "EdDSA"},
			Keys: []jwtauth.JWK{rsaJWK(k.rsa, "rs", "RS256"), rsaJWK(k.rsa, "ps", "PS256"), ecJWK(k.ec, "ec"), edJWK(k.ed, "ed")}},
		jwtauth.Issuer{Issuer: fuzzIssB, Audiences: []string{fuzzAud}, HS256Secret: string(k.hs)},
	)
	return v, k
}

// fuzzSeeds are valid tokens of each algorithm and hostile variants.
func fuzzSeeds(tb testing.TB, k fuzzKeys) []string {
	cl := func(iss string) jwt.MapClaims {
		return jwt.MapClaims{"iss": iss, "aud": fuzzAud, "sub": "alice", "roles": []string{"r"},
			"iat": fuzzNow.Add(-time.Hour).Unix(), "exp": time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()}
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	rs := sign(tb, jwt.SigningMethodRS256, k.rsa, "rs", cl(fuzzIssA), nil)
	return []string{
		rs,
		sign(tb, jwt.SigningMethodPS256, k.rsa, "ps", cl(fuzzIssA), nil),
		sign(tb, jwt.SigningMethodES256, k.ec, "ec", cl(fuzzIssA), nil),
		sign(tb, jwt.SigningMethodEdDSA, k.ed, "ed", cl(fuzzIssA), nil),
		sign(tb, jwt.SigningMethodEdDSA, k.ed, "", cl(fuzzIssA), nil),
		sign(tb, jwt.SigningMethodHS256, k.hs, "", cl(fuzzIssB), nil),
		sign(tb, jwt.SigningMethodHS256, pubPEM, "rs", cl(fuzzIssA), nil),
		sign(tb, jwt.SigningMethodRS256, k.rsa, "ps", cl(fuzzIssA), nil),
		forge(map[string]any{"alg": "none"}, cl(fuzzIssA), nil),
		rs[:strings.LastIndexByte(rs, '.')+1],
		forge(map[string]any{"alg": "RS256", "kid": "rs", "jku": "http://127.0.0.1:1/"}, cl(fuzzIssA), func([]byte) []byte { return make([]byte, 256) }),
		"eyJhbGciOiJSUzI1NiJ9.e30.",
		"..",
	}
}

// FuzzVerify: Verify never panics, fails only with its categories, and accepts only
// tokens an independent check (stdlib crypto, the key chosen by kid and pinned alg)
// finds signed by a configured key.
func FuzzVerify(f *testing.F) {
	v, k := fuzzVerifier(f)
	for _, s := range fuzzSeeds(f, k) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		id, err := v.Verify([]byte(tok), fuzzNow)
		if err != nil {
			for _, c := range []error{jwtauth.ErrMalformed, jwtauth.ErrUntrusted, jwtauth.ErrExpired, jwtauth.ErrClaims, jwtauth.ErrNoKeys} {
				if errors.Is(err, c) {
					return
				}
			}
			t.Fatalf("error outside the categories: %v", err)
		}
		if why := independentlySigned(tok, k); why != "" {
			t.Fatalf("accepted a token not signed by a configured key (%s): %q -> %+v", why, tok, id)
		}
		if id.Consumer == "" || (id.Issuer != fuzzIssA && id.Issuer != fuzzIssB) {
			t.Fatalf("accepted with identity %+v", id)
		}
	})
}

// independentlySigned re-checks an accepted token without golang-jwt: "" when its
// signature verifies under the configured key its kid and alg select, else why not.
func independentlySigned(tok string, k fuzzKeys) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "not three parts"
	}
	dec := base64.RawURLEncoding.Strict()
	hb, err1 := dec.DecodeString(parts[0])
	pb, err2 := dec.DecodeString(parts[1])
	sig, err3 := dec.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return "bad base64"
	}
	// Maps, not structs: encoding/json matches struct fields case-insensitively.
	var hm, pm map[string]any
	if json.Unmarshal(hb, &hm) != nil || json.Unmarshal(pb, &pm) != nil {
		return "bad JSON"
	}
	var h struct{ Alg, Kid string }
	var p struct{ Iss string }
	h.Alg, _ = hm["alg"].(string)
	h.Kid, _ = hm["kid"].(string)
	p.Iss, _ = pm["iss"].(string)
	in := []byte(parts[0] + "." + parts[1])
	d := sha256.Sum256(in)
	switch {
	case p.Iss == fuzzIssB && h.Alg == "HS256":
		m := hmac.New(sha256.New, k.hs)
		m.Write(in)
		if hmac.Equal(m.Sum(nil), sig) {
			return ""
		}
	case p.Iss == fuzzIssA && h.Alg == "RS256" && (h.Kid == "rs" || h.Kid == ""):
		if rsa.VerifyPKCS1v15(&k.rsa.PublicKey, crypto.SHA256, d[:], sig) == nil {
			return ""
		}
	case p.Iss == fuzzIssA && h.Alg == "PS256" && (h.Kid == "ps" || h.Kid == ""):
		if rsa.VerifyPSS(&k.rsa.PublicKey, crypto.SHA256, d[:], sig, nil) == nil {
			return ""
		}
	case p.Iss == fuzzIssA && h.Alg == "ES256" && (h.Kid == "ec" || h.Kid == ""):
		if len(sig) == 64 && ecdsa.Verify(&k.ec.PublicKey, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return ""
		}
	case p.Iss == fuzzIssA && h.Alg == "EdDSA" && (h.Kid == "ed" || h.Kid == ""):
		if ed25519.Verify(k.ed.Public().(ed25519.PublicKey), in, sig) {
			return ""
		}
	default:
		return fmt.Sprintf("no configured key for iss %q alg %q kid %q", p.Iss, h.Alg, h.Kid)
	}
	return "signature does not verify"
}

// FuzzIssuerValidate: Validate never panics, and what it accepts validates again
// unchanged and compiles into a Verifier.
func FuzzIssuerValidate(f *testing.F) {
	f.Add([]byte(`{"issuer":"https://i/","audiences":["a"],"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}],"algorithms":["EdDSA"]}`))
	f.Add([]byte(`{"issuer":"https://i/","audiences":["a"],"jwks_url":"https://idp.example/jwks","roles_claim":"realm_access.roles","leeway_seconds":0}`))
	f.Add([]byte(`{"issuer":"i","audiences":["a","b"],"hs256_secret":"0123456789abcdef0123456789abcdef"}`))
	f.Add([]byte(`{"issuer":"i","audiences":["a"],"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA","d":"AA"}]}`))
	cache := jwtauth.NewJWKSCache(jwtauth.JWKSConfig{MinInterval: time.Hour})
	f.Fuzz(func(t *testing.T, data []byte) {
		var is jwtauth.Issuer
		if json.Unmarshal(data, &is) != nil || is.Validate() != nil {
			return
		}
		before, _ := json.Marshal(is)
		if err := is.Validate(); err != nil {
			t.Fatalf("accepted issuer fails revalidation: %v", err)
		}
		after, _ := json.Marshal(is)
		if string(before) != string(after) {
			t.Fatalf("not idempotent:\n%s\n%s", before, after)
		}
		if is.JWKSURL != "" {
			return // compiling would fetch
		}
		if _, err := jwtauth.NewVerifier("t", []jwtauth.Issuer{is}, jwtauth.Options{JWKS: cache}); err != nil {
			t.Fatalf("valid issuer does not compile: %v", err)
		}
	})
}
