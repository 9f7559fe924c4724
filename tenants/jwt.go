package tenants

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Issuer is one identity provider a tenant trusts, as the api takes it
// (POST /v1/tenants/{slug}/jwt-issuers) and as its config entry carries it to the edge.
// Exactly one of JWKSURL, Keys and HS256Secret says where the verification keys come from.
// The edge compiles a tenant's issuers into a verifier (edge/jwtauth).
//
// It is also the API's body (the tags are Route's) and the stored object; the store
// keeps the secret, and only the API's responses leave it out.
type Issuer struct {
	ID       string `json:"id,omitempty" readonly:"true"`
	TenantID string `json:"tenant_id,omitempty" readonly:"true"`
	// Issuer is the exact "iss" value of the provider's tokens. Unique per tenant.
	Issuer string `json:"issuer" required:"true" doc:"The exact \"iss\" of the provider's tokens; unique within the tenant."`
	// Audiences: a token must name at least one of them in "aud". Required (1–16): an
	// issuer shared by several APIs or tenants (a public IdP) signs tokens for all of them.
	Audiences []string `json:"audiences" required:"true" doc:"1–16 values; a token must name one of them in \"aud\"."`
	// Algorithms the issuer's tokens may use. Default: ["HS256"] with HS256Secret,
	// ["RS256"] otherwise.
	Algorithms []string `json:"algorithms" doc:"Allowed algorithms: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA, or HS256 (only with hs256_secret). Default: [\"HS256\"] with hs256_secret, else [\"RS256\"]."`
	// JWKSURL is an https URL serving the provider's JWK set; the edge fetches and caches it.
	JWKSURL string `json:"jwks_url,omitempty" doc:"https URL of the provider's JWK set, fetched and cached by the edges. Exactly one of jwks_url, keys and hs256_secret."`
	// Keys are the public keys, inline (1–20).
	Keys []JWK `json:"keys,omitempty" doc:"1–20 public JWKs (RSA 2048–4096 bits, EC P-256/P-384, OKP Ed25519); an RSA key needs \"alg\" when algorithms allow several RSA algorithms."`
	// HS256Secret is a shared secret (32–512 bytes, used as its UTF-8 bytes). It is
	// write-only at the api: never returned, only carried to the edges.
	HS256Secret string `json:"hs256_secret,omitempty" doc:"Shared secret, 32–512 bytes. Write-only: never returned. On PUT, omit every key source to keep the stored secret."`
	// ConsumerClaim names the claim that identifies the consumer. Default: "sub".
	ConsumerClaim string `json:"consumer_claim" doc:"Claim naming the consumer (a dotted path reaches into objects). Default: sub."`
	// RolesClaim names the claim that carries roles (a string of space-separated roles or
	// an array of strings). Default: "roles".
	RolesClaim string `json:"roles_claim" doc:"Claim carrying roles: an array of strings or a space-separated string. Default: roles."`
	// LeewaySeconds is the clock skew allowed on exp and nbf. Default: 30; 0–300.
	LeewaySeconds *int      `json:"leeway_seconds,omitempty" doc:"Clock skew allowed on exp, nbf and iat, 0–300. Default: 30."`
	Version       int64     `json:"version" readonly:"true" doc:"Bumped by every change; the ETag. Send it back in If-Match."`
	CreatedAt     time.Time `json:"created_at" readonly:"true"`
	UpdatedAt     time.Time `json:"updated_at" readonly:"true"`
}

// JWK is one JSON Web Key (RFC 7517) of an inline key set. Only public RSA, EC (P-256,
// P-384) and OKP (Ed25519) signature keys are accepted. The X.509 members are accepted so
// a key copied from a provider's set decodes, and are never used: the key is n/e or x/y.
// The private members are declared only so a private key pasted by mistake is refused
// by name rather than silently stored.
type JWK struct {
	Kty    string   `json:"kty"`
	Kid    string   `json:"kid,omitempty"`
	Alg    string   `json:"alg,omitempty"`
	Use    string   `json:"use,omitempty"`
	KeyOps []string `json:"key_ops,omitempty"`
	Crv    string   `json:"crv,omitempty"`
	N      string   `json:"n,omitempty"`
	E      string   `json:"e,omitempty"`
	X      string   `json:"x,omitempty"`
	Y      string   `json:"y,omitempty"`

	X5C     []string `json:"x5c,omitempty"`
	X5T     string   `json:"x5t,omitempty"`
	X5TS256 string   `json:"x5t#S256,omitempty"`
	X5U     string   `json:"x5u,omitempty"`

	D  string `json:"d,omitempty"`
	P  string `json:"p,omitempty"`
	Q  string `json:"q,omitempty"`
	DP string `json:"dp,omitempty"`
	DQ string `json:"dq,omitempty"`
	QI string `json:"qi,omitempty"`
	K  string `json:"k,omitempty"`
}

// Bounds and defaults of issuer settings.
const (
	MaxAudiences         = 16
	MaxInlineKeys        = 20
	MaxIssuerTextLen     = 512 // issuer, audience, jwks_url path
	MaxClaimNameLen      = 128
	MinHS256SecretLen    = 32 // RFC 7518 3.2: at least the hash output size
	MaxHS256SecretLen    = 512
	DefaultLeewaySeconds = 30
	MaxLeewaySeconds     = 300
	DefaultConsumerClaim = "sub"
	DefaultRolesClaim    = "roles"
	MaxIssuersPerTenant  = 32
)

// Algorithms the edge verifies. HS256 only with a tenant secret; "none" never.
var supportedAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA", "HS256"}

func isRSAAlg(a string) bool { return len(a) == 5 && (a[0] == 'R' || a[0] == 'P') && a[1] == 'S' }

// Validate checks is and fills its defaults (algorithms, claims, leeway). Errors are
// *tenants.Error with code EValidation and Field a JSON path ("keys[1].n"); the messages
// say which rule failed and are fit for the api's 400 body. Validate never does I/O: a
// jwks_url is checked for shape here and for where it points when the edge dials it.
func (is *Issuer) Validate() error { return is.validate(false) }

// ValidateWithLoopback is Validate; allowHTTP admits http:// jwks_urls on loopback hosts
// (the edge's test setting, jwtauth.JWKSConfig.AllowHTTPLoopback).
func (is *Issuer) ValidateWithLoopback(allowHTTP bool) error { return is.validate(allowHTTP) }

func (is *Issuer) validate(allowHTTP bool) error {
	if err := checkIssuerText(is.Issuer, MaxIssuerTextLen); err != nil {
		return Invalid("issuer", "%v", err)
	}
	if len(is.Audiences) == 0 {
		return Invalid("audiences", "needs at least one audience: without one, a token the provider issued for any other API (or another tenant) would be accepted")
	}
	if len(is.Audiences) > MaxAudiences {
		return Invalid("audiences", "may have at most %d audiences, got %d", MaxAudiences, len(is.Audiences))
	}
	for i, a := range is.Audiences {
		if err := checkIssuerText(a, MaxIssuerTextLen); err != nil {
			return Invalid(fmt.Sprintf("audiences[%d]", i), "%v", err)
		}
		if slices.Index(is.Audiences, a) != i {
			return Invalid(fmt.Sprintf("audiences[%d]", i), "%q is listed twice", a)
		}
	}

	sources := 0
	for _, set := range []bool{is.JWKSURL != "", is.Keys != nil, is.HS256Secret != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return Invalid("jwks_url", "give exactly one of jwks_url, keys and hs256_secret (got %d)", sources)
	}

	if len(is.Algorithms) == 0 {
		if is.HS256Secret != "" {
			is.Algorithms = []string{"HS256"}
		} else {
			is.Algorithms = []string{"RS256"}
		}
	}
	if len(is.Algorithms) > len(supportedAlgs) {
		return Invalid("algorithms", "lists too many algorithms")
	}
	for i, a := range is.Algorithms {
		f := fmt.Sprintf("algorithms[%d]", i)
		switch {
		case a == "HS256" && is.HS256Secret == "":
			return Invalid(f, "HS256 needs hs256_secret: a shared secret is the only key it may use")
		case a != "HS256" && is.HS256Secret != "" && slices.Contains(supportedAlgs, a):
			return Invalid(f, "%s needs public keys (jwks_url or keys); an issuer with hs256_secret allows only HS256", a)
		case strings.EqualFold(a, "none"):
			return Invalid(f, "unsigned tokens (alg none) are never accepted")
		case !slices.Contains(supportedAlgs, a):
			return Invalid(f, "%q is not supported; use one of %s", a, strings.Join(supportedAlgs, ", "))
		case slices.Index(is.Algorithms, a) != i:
			return Invalid(f, "%s is listed twice", a)
		}
	}

	switch {
	case is.JWKSURL != "":
		if err := CheckJWKSURL(is.JWKSURL, allowHTTP); err != nil {
			return Invalid("jwks_url", "%v", err)
		}
	case is.Keys != nil:
		if len(is.Keys) == 0 {
			return Invalid("keys", "needs at least one key")
		}
		if len(is.Keys) > MaxInlineKeys {
			return Invalid("keys", "may have at most %d keys, got %d (serve more from a jwks_url)", MaxInlineKeys, len(is.Keys))
		}
		rsaAlg := is.SoleRSAAlg()
		type kidAlg struct{ kid, alg string }
		seen := make(map[kidAlg]int, len(is.Keys))
		for i := range is.Keys {
			f := fmt.Sprintf("keys[%d]", i)
			k, err := is.Keys[i].PublicKey()
			if err != nil {
				var ke *JWKError
				if errors.As(err, &ke) {
					if ke.Field != "" {
						f += "." + ke.Field
					}
					err = ke.Err
				}
				return Invalid(f, "%v", err)
			}
			alg := k.Pinned(rsaAlg)
			if alg == "" {
				return Invalid(f+".alg", "the key has no alg and algorithms allow several RSA algorithms (%s): set alg so the key verifies exactly one", strings.Join(is.rsaAlgs(), ", "))
			}
			if !slices.Contains(is.Algorithms, alg) {
				return Invalid(f+".alg", "the key verifies %s, which algorithms (%s) does not allow", alg, strings.Join(is.Algorithms, ", "))
			}
			ka := kidAlg{k.Kid, alg}
			if j, dup := seen[ka]; dup {
				return Invalid(f+".kid", "keys[%d] already has kid %q for %s", j, k.Kid, alg)
			}
			seen[ka] = i
		}
	default:
		n := len(is.HS256Secret)
		switch {
		case n < MinHS256SecretLen:
			return Invalid("hs256_secret", "must be at least %d bytes (RFC 7518: no shorter than the hash), got %d", MinHS256SecretLen, n)
		case n > MaxHS256SecretLen:
			return Invalid("hs256_secret", "must be at most %d bytes", MaxHS256SecretLen)
		}
	}

	if is.ConsumerClaim == "" {
		is.ConsumerClaim = DefaultConsumerClaim
	}
	if err := checkClaimName(is.ConsumerClaim); err != nil {
		return Invalid("consumer_claim", "%v", err)
	}
	if is.RolesClaim == "" {
		is.RolesClaim = DefaultRolesClaim
	}
	if err := checkClaimName(is.RolesClaim); err != nil {
		return Invalid("roles_claim", "%v", err)
	}
	if is.LeewaySeconds == nil {
		d := DefaultLeewaySeconds
		is.LeewaySeconds = &d
	}
	if l := *is.LeewaySeconds; l < 0 || l > MaxLeewaySeconds {
		return Invalid("leeway_seconds", "must be between 0 and %d, got %d", MaxLeewaySeconds, l)
	}
	return nil
}

// SoleRSAAlg is the RSA algorithm an RSA key without "alg" verifies: the only RSA
// algorithm the issuer allows, or "" when it allows none or several (then such a key is
// refused, since nothing says which one it is for).
func (is *Issuer) SoleRSAAlg() string {
	algs := is.rsaAlgs()
	if len(algs) == 1 {
		return algs[0]
	}
	return ""
}

func (is *Issuer) rsaAlgs() []string {
	var out []string
	for _, a := range is.Algorithms {
		if isRSAAlg(a) {
			out = append(out, a)
		}
	}
	return out
}

// checkIssuerText accepts 1–max bytes of printable UTF-8 without leading or trailing spaces.
func checkIssuerText(s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("is required")
	case len(s) > max:
		return fmt.Errorf("must be at most %d bytes, got %d", max, len(s))
	case !utf8.ValidString(s):
		return fmt.Errorf("must be valid UTF-8")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("must not start or end with spaces")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("must not contain control characters")
		}
	}
	return nil
}

// checkClaimName accepts a claim name, or a dotted path into nested objects
// ("realm_access.roles"): printable ASCII without spaces.
func checkClaimName(s string) error {
	if len(s) > MaxClaimNameLen {
		return fmt.Errorf("must be at most %d characters", MaxClaimNameLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("must be printable ASCII without spaces")
		}
	}
	if strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
		return fmt.Errorf("must not have empty parts between dots")
	}
	return nil
}

// CheckJWKSURL checks the shape of a key set URL: https (or, when allowHTTP — a test
// setting of the edge — http to a loopback host), a host, no credentials, no fragment.
func CheckJWKSURL(raw string, allowHTTP bool) error {
	if len(raw) > 2048 {
		return fmt.Errorf("must be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("is not a URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowHTTP && isLoopbackHost(u.Hostname()):
	case u.Scheme == "http":
		return fmt.Errorf("must be an https:// URL: keys fetched over plain http could be replaced in transit")
	default:
		return fmt.Errorf("must be an https:// URL")
	}
	switch {
	case u.Opaque != "" || u.Host == "":
		return fmt.Errorf("must name a host")
	case u.User != nil:
		return fmt.Errorf("must not carry credentials")
	case u.Fragment != "":
		return fmt.Errorf("must not have a fragment")
	}
	return nil
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || h == "::1" || strings.HasPrefix(h, "127.")
}

// PublicKey is a JWK parsed into a verification key, with the one algorithm it verifies.
type PublicKey struct {
	Kid string
	// Alg is the pinned algorithm: the JWK's "alg", or what its curve implies. It is
	// empty only for an RSA key without "alg", which takes the issuer's sole RSA
	// algorithm (see Pinned).
	Alg string
	Key any // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// Pinned is the algorithm k verifies for an issuer whose sole RSA algorithm is rsaAlg.
func (k *PublicKey) Pinned(rsaAlg string) string {
	if k.Alg != "" {
		return k.Alg
	}
	return rsaAlg
}

// JWKError says why a JWK was refused: Field names the offending member ("n", "crv"…)
// or is empty for the key as a whole.
type JWKError struct {
	Field string
	Err   error
}

func (e *JWKError) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return e.Field + " " + e.Err.Error()
}

func (e *JWKError) Unwrap() error { return e.Err }

// RSA modulus bounds: below 2048 bits is breakable or nearly so; above 4096 a key
// becomes a way to make every verification cost milliseconds.
const (
	minRSABits = 2048
	maxRSABits = 4096
	// MaxKidLen bounds a key id, in a JWK and in a token header.
	MaxKidLen = 256
)

var b64url = base64.RawURLEncoding.Strict()

// PublicKey parses j into a verification key with its algorithm pinned; errors are
// *JWKError. The key's own "alg", "kty" and "crv" decide the algorithm; nothing about a
// token ever does.
func (j *JWK) PublicKey() (*PublicKey, error) {
	bad := func(field, format string, args ...any) (*PublicKey, error) {
		return nil, &JWKError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	for _, p := range []struct{ name, v string }{{"d", j.D}, {"p", j.P}, {"q", j.Q}, {"dp", j.DP}, {"dq", j.DQ}, {"qi", j.QI}, {"k", j.K}} {
		if p.v != "" {
			if p.name == "k" {
				return bad("k", "symmetric (oct) keys are not accepted here: give a shared secret as hs256_secret")
			}
			return bad(p.name, "is private key material: give the public key only (and replace this key, it has been disclosed)")
		}
	}
	if len(j.Kid) > MaxKidLen {
		return bad("kid", "must be at most %d characters", MaxKidLen)
	}
	if j.Use != "" && j.Use != "sig" {
		return bad("use", "is %q; only signature keys (\"sig\") verify tokens", j.Use)
	}
	if j.KeyOps != nil && !slices.Contains(j.KeyOps, "verify") {
		return bad("key_ops", "does not include \"verify\"")
	}
	k := &PublicKey{Kid: j.Kid}
	switch j.Kty {
	case "RSA":
		switch j.Alg {
		case "", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
			k.Alg = j.Alg
		default:
			return bad("alg", "%q is not an RSA signature algorithm this edge verifies (RS256/384/512, PS256/384/512)", j.Alg)
		}
		nb, err := b64url.DecodeString(j.N)
		if err != nil || len(nb) == 0 {
			return bad("n", "must be the modulus in unpadded base64url")
		}
		if nb[0] == 0 {
			return bad("n", "must not have leading zero bytes")
		}
		n := new(big.Int).SetBytes(nb)
		if bits := n.BitLen(); bits < minRSABits || bits > maxRSABits {
			return bad("n", "is a %d-bit modulus; RSA keys must have %d to %d bits", bits, minRSABits, maxRSABits)
		}
		if n.Bit(0) == 0 {
			return bad("n", "is even, which no RSA modulus is")
		}
		eb, err := b64url.DecodeString(j.E)
		if err != nil || len(eb) == 0 || len(eb) > 4 || eb[0] == 0 {
			return bad("e", "must be the public exponent in unpadded base64url (at most 4 bytes, no leading zeros)")
		}
		e := 0
		for _, c := range eb {
			e = e<<8 | int(c)
		}
		if e < 3 || e > 1<<31-1 || e%2 == 0 {
			return bad("e", "must be an odd exponent between 3 and 2^31-1, got %d", e)
		}
		k.Key = &rsa.PublicKey{N: n, E: e}
	case "EC":
		var curve elliptic.Curve
		var alg string
		switch j.Crv {
		case "P-256":
			curve, alg = elliptic.P256(), "ES256"
		case "P-384":
			curve, alg = elliptic.P384(), "ES384"
		default:
			return bad("crv", "%q is not supported; EC keys must be P-256 (ES256) or P-384 (ES384)", j.Crv)
		}
		if j.Alg != "" && j.Alg != alg {
			return bad("alg", "is %q but a %s key verifies %s only", j.Alg, j.Crv, alg)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, errx := b64url.DecodeString(j.X)
		y, erry := b64url.DecodeString(j.Y)
		switch {
		case errx != nil || len(x) != size:
			return bad("x", "must be the %d-byte x coordinate in unpadded base64url", size)
		case erry != nil || len(y) != size:
			return bad("y", "must be the %d-byte y coordinate in unpadded base64url", size)
		}
		point := make([]byte, 0, 1+2*size)
		point = append(append(append(point, 4), x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return bad("x", "x and y are not a point on %s", j.Crv)
		}
		k.Alg, k.Key = alg, pub
	case "OKP":
		if j.Crv != "Ed25519" {
			return bad("crv", "%q is not supported; OKP keys must be Ed25519 (EdDSA)", j.Crv)
		}
		if j.Alg != "" && j.Alg != "EdDSA" && j.Alg != "Ed25519" {
			return bad("alg", "is %q but an Ed25519 key verifies EdDSA only", j.Alg)
		}
		x, err := b64url.DecodeString(j.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return bad("x", "must be the %d-byte public key in unpadded base64url", ed25519.PublicKeySize)
		}
		k.Alg, k.Key = "EdDSA", ed25519.PublicKey(x)
	case "oct":
		return bad("kty", "symmetric (oct) keys are not accepted here: give a shared secret as hs256_secret")
	case "":
		return bad("kty", "is required (RSA, EC or OKP)")
	default:
		return bad("kty", "%q is not supported (RSA, EC or OKP)", j.Kty)
	}
	return k, nil
}

// CheckJWKSHost judges the host of a jwks_url against the operator's upstream policy at
// save time, as an upstream target's: an address (or localhost name) in a refused range,
// or the gateway's own edge, is EValidation on "jwks_url". The edge checks every address
// it connects to again when it fetches, so a name that resolves somewhere refused fails
// then.
func (is *Issuer) CheckJWKSHost(p *UpstreamAddressRule) error {
	if is.JWKSURL == "" {
		return nil
	}
	u, err := url.Parse(is.JWKSURL)
	if err != nil {
		return Invalid("jwks_url", "is not a URL")
	}
	if _, err := p.ValidateTarget(u.Scheme + "://" + u.Host); err != nil {
		return Invalid("jwks_url", "%v", err)
	}
	return nil
}
