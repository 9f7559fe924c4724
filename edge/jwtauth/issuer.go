package jwtauth

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"tollgate/tenants"
)

// Issuer is one identity provider a tenant trusts, as the api takes it
// (POST /v1/tenants/{slug}/jwt-issuers) and as its config entry carries it to the edge.
// Exactly one of JWKSURL, Keys and HS256Secret says where the verification keys come from.
//
// It belongs with the other domain types in package tenants; it lives here until the api
// and the store take it up, and moves with Validate unchanged.
type Issuer struct {
	ID       string `json:"id,omitempty"`
	TenantID string `json:"tenant_id,omitempty"`
	// Issuer is the exact "iss" value of the provider's tokens. Unique per tenant.
	Issuer string `json:"issuer"`
	// Audiences: a token must name at least one of them in "aud". Required (1–16): an
	// issuer shared by several APIs or tenants (a public IdP) signs tokens for all of them.
	Audiences []string `json:"audiences"`
	// Algorithms the issuer's tokens may use. Default: ["HS256"] with HS256Secret,
	// ["RS256"] otherwise.
	Algorithms []string `json:"algorithms"`
	// JWKSURL is an https URL serving the provider's JWK set; the edge fetches and caches it.
	JWKSURL string `json:"jwks_url,omitempty"`
	// Keys are the public keys, inline (1–20).
	Keys []JWK `json:"keys,omitempty"`
	// HS256Secret is a shared secret (32–512 bytes, used as its UTF-8 bytes). It is
	// write-only at the api: never returned, only carried to the edges.
	HS256Secret string `json:"hs256_secret,omitempty"`
	// ConsumerClaim names the claim that identifies the consumer. Default: "sub".
	ConsumerClaim string `json:"consumer_claim"`
	// RolesClaim names the claim that carries roles (a string of space-separated roles or
	// an array of strings). Default: "roles".
	RolesClaim string `json:"roles_claim"`
	// LeewaySeconds is the clock skew allowed on exp and nbf. Default: 30; 0–300.
	LeewaySeconds *int `json:"leeway_seconds,omitempty"`
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

// Bounds of issuer settings.
const (
	MaxAudiences        = 16
	MaxInlineKeys       = 20
	MaxStringLen        = 512 // issuer, audience, jwks_url path
	MaxClaimNameLen     = 128
	MinHS256SecretLen   = 32 // RFC 7518 3.2: at least the hash output size
	MaxHS256SecretLen   = 512
	DefaultLeewaySecond = 30
	MaxLeewaySeconds    = 300
	DefaultConsumer     = "sub"
	DefaultRoles        = "roles"
	MaxIssuersPerTenant = 32
)

// Algorithms the edge verifies. HS256 only with a tenant secret; "none" never.
var supportedAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA", "HS256"}

func isRSAAlg(a string) bool { return len(a) == 5 && (a[0] == 'R' || a[0] == 'P') && a[1] == 'S' }

// Validate checks is and fills its defaults (algorithms, claims, leeway). Errors are
// *tenants.Error with code EValidation and Field a JSON path ("keys[1].n"); the messages
// say which rule failed and are fit for the api's 400 body. Validate never does I/O: a
// jwks_url is checked for shape here and for where it points when the edge dials it.
func (is *Issuer) Validate() error { return is.validate(false) }

// validate is Validate; allowHTTP admits http:// jwks_urls on loopback hosts (the
// edge's test setting, JWKSConfig.AllowHTTPLoopback).
func (is *Issuer) validate(allowHTTP bool) error {
	if err := checkText(is.Issuer, MaxStringLen); err != nil {
		return tenants.Invalid("issuer", "%v", err)
	}
	if len(is.Audiences) == 0 {
		return tenants.Invalid("audiences", "needs at least one audience: without one, a token the provider issued for any other API (or another tenant) would be accepted")
	}
	if len(is.Audiences) > MaxAudiences {
		return tenants.Invalid("audiences", "may have at most %d audiences, got %d", MaxAudiences, len(is.Audiences))
	}
	for i, a := range is.Audiences {
		if err := checkText(a, MaxStringLen); err != nil {
			return tenants.Invalid(fmt.Sprintf("audiences[%d]", i), "%v", err)
		}
		if slices.Index(is.Audiences, a) != i {
			return tenants.Invalid(fmt.Sprintf("audiences[%d]", i), "%q is listed twice", a)
		}
	}

	sources := 0
	for _, set := range []bool{is.JWKSURL != "", is.Keys != nil, is.HS256Secret != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return tenants.Invalid("jwks_url", "give exactly one of jwks_url, keys and hs256_secret (got %d)", sources)
	}

	if len(is.Algorithms) == 0 {
		if is.HS256Secret != "" {
			is.Algorithms = []string{"HS256"}
		} else {
			is.Algorithms = []string{"RS256"}
		}
	}
	if len(is.Algorithms) > len(supportedAlgs) {
		return tenants.Invalid("algorithms", "lists too many algorithms")
	}
	for i, a := range is.Algorithms {
		f := fmt.Sprintf("algorithms[%d]", i)
		switch {
		case a == "HS256" && is.HS256Secret == "":
			return tenants.Invalid(f, "HS256 needs hs256_secret: a shared secret is the only key it may use")
		case a != "HS256" && is.HS256Secret != "" && slices.Contains(supportedAlgs, a):
			return tenants.Invalid(f, "%s needs public keys (jwks_url or keys); an issuer with hs256_secret allows only HS256", a)
		case strings.EqualFold(a, "none"):
			return tenants.Invalid(f, "unsigned tokens (alg none) are never accepted")
		case !slices.Contains(supportedAlgs, a):
			return tenants.Invalid(f, "%q is not supported; use one of %s", a, strings.Join(supportedAlgs, ", "))
		case slices.Index(is.Algorithms, a) != i:
			return tenants.Invalid(f, "%s is listed twice", a)
		}
	}

	switch {
	case is.JWKSURL != "":
		if err := checkJWKSURL(is.JWKSURL, allowHTTP); err != nil {
			return tenants.Invalid("jwks_url", "%v", err)
		}
	case is.Keys != nil:
		if len(is.Keys) == 0 {
			return tenants.Invalid("keys", "needs at least one key")
		}
		if len(is.Keys) > MaxInlineKeys {
			return tenants.Invalid("keys", "may have at most %d keys, got %d (serve more from a jwks_url)", MaxInlineKeys, len(is.Keys))
		}
		rsaAlg := is.soleRSAAlg()
		type kidAlg struct{ kid, alg string }
		seen := make(map[kidAlg]int, len(is.Keys))
		for i := range is.Keys {
			f := fmt.Sprintf("keys[%d]", i)
			k, field, err := parseJWK(&is.Keys[i])
			if err != nil {
				if field != "" {
					f += "." + field
				}
				return tenants.Invalid(f, "%v", err)
			}
			alg := k.pinned(rsaAlg)
			if alg == "" {
				return tenants.Invalid(f+".alg", "the key has no alg and algorithms allow several RSA algorithms (%s): set alg so the key verifies exactly one", strings.Join(is.rsaAlgs(), ", "))
			}
			if !slices.Contains(is.Algorithms, alg) {
				return tenants.Invalid(f+".alg", "the key verifies %s, which algorithms (%s) does not allow", alg, strings.Join(is.Algorithms, ", "))
			}
			ka := kidAlg{k.kid, alg}
			if j, dup := seen[ka]; dup {
				return tenants.Invalid(f+".kid", "keys[%d] already has kid %q for %s", j, k.kid, alg)
			}
			seen[ka] = i
		}
	default:
		n := len(is.HS256Secret)
		switch {
		case n < MinHS256SecretLen:
			return tenants.Invalid("hs256_secret", "must be at least %d bytes (RFC 7518: no shorter than the hash), got %d", MinHS256SecretLen, n)
		case n > MaxHS256SecretLen:
			return tenants.Invalid("hs256_secret", "must be at most %d bytes", MaxHS256SecretLen)
		}
	}

	if is.ConsumerClaim == "" {
		is.ConsumerClaim = DefaultConsumer
	}
	if err := checkClaimName(is.ConsumerClaim); err != nil {
		return tenants.Invalid("consumer_claim", "%v", err)
	}
	if is.RolesClaim == "" {
		is.RolesClaim = DefaultRoles
	}
	if err := checkClaimName(is.RolesClaim); err != nil {
		return tenants.Invalid("roles_claim", "%v", err)
	}
	if is.LeewaySeconds == nil {
		d := DefaultLeewaySecond
		is.LeewaySeconds = &d
	}
	if l := *is.LeewaySeconds; l < 0 || l > MaxLeewaySeconds {
		return tenants.Invalid("leeway_seconds", "must be between 0 and %d, got %d", MaxLeewaySeconds, l)
	}
	return nil
}

// soleRSAAlg is the RSA algorithm an RSA key without "alg" verifies: the only RSA
// algorithm the issuer allows, or "" when it allows none or several (then such a key is
// refused, since nothing says which one it is for).
func (is *Issuer) soleRSAAlg() string {
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

// checkText accepts 1–max bytes of printable UTF-8 without leading or trailing spaces.
func checkText(s string, max int) error {
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

// checkJWKSURL checks the shape of a key set URL: https (or, when allowHTTP — a test
// setting of the edge — http to a loopback host), a host, no credentials, no fragment.
func checkJWKSURL(raw string, allowHTTP bool) error {
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
