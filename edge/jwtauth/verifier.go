// Package jwtauth verifies the JWTs clients present at the edge, for one tenant at a time.
//
// A Verifier is compiled from a tenant's issuer configs when the tenant's snapshot is
// built and then only read; Verify is safe for concurrent use. The rules it enforces:
//
//   - A token is verified only against keys the tenant configured: inline JWKs, the
//     tenant's HS256 secret, or the JWK set fetched from the issuer's jwks_url. Nothing in
//     a token chooses a key or a key source: the "jwk", "jku", "x5u" and "x5c" headers are
//     ignored, and "kid" is only a name looked up among the configured keys.
//   - Every key verifies exactly one algorithm, pinned by the key itself (its JWK "alg",
//     or its curve; an RSA key without "alg" takes the issuer's only RSA algorithm). The
//     token's "alg" must be that algorithm and in the issuer's list, so a public key can
//     never be used as an HMAC secret, nor a PS256 key for RS256, nor a P-256 key for ES384.
//   - The issuer is the token's "iss", looked up exactly among the tenant's issuers;
//     another tenant's issuers are not in the Verifier at all.
//   - "exp" is required; "exp", "nbf" and "iat" are checked with the issuer's leeway; "aud"
//     must name one of the issuer's audiences.
//   - A token longer than MaxTokenBytes is refused before any decoding.
//
// The package must not leak why a token failed to the client: every error maps to one
// HTTP answer (401 invalid_credential, Message). The sentinel categories are for logs
// and metrics.
package jwtauth

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/tenants"
)

// Error categories of Verify. Verify's errors wrap exactly one of them (errors.Is) with
// detail for logs; the client is told only Code and Message, whichever it is.
var (
	// ErrMalformed: not a compact JWS, over MaxTokenBytes, bad base64 or JSON, or a
	// "crit" header (no extension is understood).
	ErrMalformed = errors.New("jwtauth: malformed token")
	// ErrUntrusted: no configured key verifies it — unknown issuer, algorithm not
	// allowed or not the key's, unknown kid, bad signature.
	ErrUntrusted = errors.New("jwtauth: token not signed by a configured key")
	// ErrExpired: past exp or before nbf/iat, beyond the leeway.
	ErrExpired = errors.New("jwtauth: token expired or not yet valid")
	// ErrClaims: signed by a configured key, but a claim is missing or wrong — no exp,
	// wrong aud, no consumer claim, roles of the wrong shape.
	ErrClaims = errors.New("jwtauth: token claims not acceptable")
	// ErrNoKeys: the issuer's key set has never been fetched successfully.
	ErrNoKeys = errors.New("jwtauth: issuer keys unavailable")
)

// What the edge answers for any Verify error.
const (
	Code    = tenants.EInvalidCredential
	Message = "the token is not valid for this API"
)

// Token and claim bounds.
const (
	// MaxTokenBytes: larger tokens are refused before parsing.
	MaxTokenBytes = 8 << 10
	// MaxRoles and MaxRoleLen bound the roles claim; a token over them is refused rather
	// than truncated, since a dropped role could be the one a deny rule names.
	MaxRoles   = 64
	MaxRoleLen = 256
	// MaxConsumerLen bounds the consumer claim's value.
	MaxConsumerLen = 256
	// maxCandidates bounds the keys one token without a (known) kid is tried against.
	maxCandidates = 4
	// tokenCacheTTL bounds how long a verified token is remembered.
	tokenCacheTTL = 60 * time.Second
	// DefaultTokenCache is the default number of verified-token cache slots.
	DefaultTokenCache = 1024
)

// Identity is who a verified token speaks for. Roles is shared with the verifier's
// cache and must not be modified.
type Identity struct {
	Consumer string   // the consumer claim's value
	Roles    []string // the roles claim's values, in token order; nil when absent
	Issuer   string   // the issuer (the token's "iss")
	// ID is Issuer + "|" + Consumer: who the caller is across the tenant's issuers, what
	// flow control and metering count by. Made once per verification (cached tokens
	// return it as is).
	ID string
}

// Options configure NewVerifier.
type Options struct {
	// JWKS holds the key sets of jwks_url issuers. Required when an issuer has a jwks_url.
	JWKS *JWKSCache
	// TokenCache is the number of slots of the verified-token cache (rounded up to a
	// power of two). A cached token skips signature verification until the earlier of
	// its exp and 60 seconds after it was verified. Default: DefaultTokenCache;
	// negative disables the cache.
	TokenCache int
}

// Verifier verifies one tenant's tokens. It is immutable; build a new one when the
// tenant's issuers change.
type Verifier struct {
	tenantID string
	issuers  map[string]*issuer
	parser   *jwt.Parser
	keyfunc  jwt.Keyfunc
	cache    *tokenCache
}

// issuer is a compiled Issuer.
type issuer struct {
	cfg      Issuer
	algs     map[string]bool
	rsaAlg   string
	static   *keySet    // inline keys or the HS256 secret
	src      *keySource // jwks_url
	consumer []string   // claim path
	roles    []string
	pool     sync.Pool // of *boundValidator
}

// boundValidator is a golang-jwt Validator whose clock is a field, so one validator per
// issuer and goroutine serves any `now` without allocating.
type boundValidator struct {
	v   *jwt.Validator
	now time.Time
}

// NewVerifier compiles a tenant's issuers. Each is validated (a copy; the argument is
// not modified), and two issuers may not share an "iss". It does no I/O: key sets of
// jwks_url issuers come from opts.JWKS, which starts fetching those it has not yet.
func NewVerifier(tenantID string, issuers []Issuer, opts Options) (*Verifier, error) {
	if len(issuers) > MaxIssuersPerTenant {
		return nil, fmt.Errorf("jwtauth: %d issuers, at most %d per tenant", len(issuers), MaxIssuersPerTenant)
	}
	v := &Verifier{tenantID: tenantID, issuers: make(map[string]*issuer, len(issuers))}
	var methods []string
	for i := range issuers {
		cfg := issuers[i]
		cfg.Audiences = append([]string(nil), cfg.Audiences...)
		cfg.Algorithms = append([]string(nil), cfg.Algorithms...)
		if err := cfg.ValidateWithLoopback(opts.JWKS != nil && opts.JWKS.cfg.AllowHTTPLoopback); err != nil {
			return nil, fmt.Errorf("jwtauth: issuer %d (%s): %w", i, cfg.Issuer, err)
		}
		if _, dup := v.issuers[cfg.Issuer]; dup {
			return nil, fmt.Errorf("jwtauth: issuer %q is configured twice", cfg.Issuer)
		}
		is := &issuer{cfg: cfg, algs: make(map[string]bool), rsaAlg: cfg.SoleRSAAlg()}
		for _, a := range cfg.Algorithms {
			is.algs[a] = true
			if !containsStr(methods, a) {
				methods = append(methods, a)
			}
		}
		switch {
		case cfg.HS256Secret != "":
			is.static = newKeySet([]*verificationKey{{alg: "HS256", key: []byte(cfg.HS256Secret)}})
		case cfg.Keys != nil:
			keys := make([]*verificationKey, len(cfg.Keys))
			for j := range cfg.Keys {
				k, _, err := parseJWK(&cfg.Keys[j])
				if err != nil { // Validate parsed them already
					return nil, fmt.Errorf("jwtauth: issuer %q key %d: %v", cfg.Issuer, j, err)
				}
				keys[j] = k
			}
			is.static = newKeySet(keys)
		default:
			if opts.JWKS == nil {
				return nil, fmt.Errorf("jwtauth: issuer %q has a jwks_url but the verifier has no JWKS cache", cfg.Issuer)
			}
			if err := tenants.CheckJWKSURL(cfg.JWKSURL, opts.JWKS.cfg.AllowHTTPLoopback); err != nil {
				return nil, fmt.Errorf("jwtauth: issuer %q jwks_url %v", cfg.Issuer, err)
			}
			is.src = opts.JWKS.source(tenantID, cfg.JWKSURL)
			is.src.touch(opts.JWKS.cfg.Now())
		}
		is.consumer = claimPath(cfg.ConsumerClaim)
		is.roles = claimPath(cfg.RolesClaim)
		leeway := time.Duration(*cfg.LeewaySeconds) * time.Second
		auds := cfg.Audiences
		iss := cfg.Issuer
		is.pool.New = func() any {
			b := &boundValidator{}
			b.v = jwt.NewValidator(
				jwt.WithLeeway(leeway),
				jwt.WithIssuer(iss),
				jwt.WithAudience(auds...),
				jwt.WithExpirationRequired(),
				jwt.WithIssuedAt(),
				jwt.WithTimeFunc(func() time.Time { return b.now }),
			)
			return b
		}
		v.issuers[cfg.Issuer] = is
	}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods(methods),
		jwt.WithoutClaimsValidation(), // per issuer, after the signature, in Verify
		jwt.WithStrictDecoding(),
	)
	v.keyfunc = v.keyFor
	switch n := opts.TokenCache; {
	case n == 0:
		v.cache = newTokenCache(DefaultTokenCache)
	case n > 0:
		v.cache = newTokenCache(n)
	}
	return v, nil
}

// Verify checks a compact JWS (the bearer token, without "Bearer ") at time now and
// returns the identity it carries. Any error means 401 Code/Message for the client;
// errors.Is tells the category for logs. It may wait for a key set fetch (bounded by
// the JWKS timeout) when the token names a kid the tenant's set does not have yet.
func (v *Verifier) Verify(token []byte, now time.Time) (Identity, error) {
	if len(token) == 0 {
		return Identity{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if len(token) > MaxTokenBytes {
		return Identity{}, fmt.Errorf("%w: %d bytes, over %d", ErrMalformed, len(token), MaxTokenBytes)
	}
	if v.cache != nil {
		// A hit is a byte-for-byte repeat of a token verified earlier.
		if id, ok := v.cache.get(token, now); ok {
			return id, nil
		}
	}
	if !compactShape(token) {
		return Identity{}, fmt.Errorf("%w: not three base64url segments", ErrMalformed)
	}

	raw := string(token)
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(raw, claims, v.keyfunc); err != nil {
		return Identity{}, classify(err)
	}
	iss, _ := claims["iss"].(string)
	is := v.issuers[iss] // keyFor found it, or the signature could not have verified
	if is == nil {
		return Identity{}, fmt.Errorf("%w: issuer vanished", ErrUntrusted)
	}
	b := is.pool.Get().(*boundValidator)
	b.now = now
	err := b.v.Validate(claims)
	is.pool.Put(b)
	if err != nil {
		return Identity{}, classify(err)
	}

	id := Identity{Issuer: is.cfg.Issuer}
	c, ok := lookupClaim(claims, is.cfg.ConsumerClaim, is.consumer).(string)
	if !ok || c == "" || len(c) > MaxConsumerLen || !printable(c) {
		return Identity{}, fmt.Errorf("%w: consumer claim %q missing or not a printable string of at most %d bytes", ErrClaims, is.cfg.ConsumerClaim, MaxConsumerLen)
	}
	id.Consumer = c
	id.ID = is.cfg.Issuer + "|" + c
	if id.Roles, err = rolesOf(lookupClaim(claims, is.cfg.RolesClaim, is.roles)); err != nil {
		return Identity{}, fmt.Errorf("%w: roles claim %q: %v", ErrClaims, is.cfg.RolesClaim, err)
	}

	if v.cache != nil {
		v.cache.put(raw, id, claims, now, is)
	}
	return id, nil
}

// keySetClaim is where keyFor leaves the key set it used, for the token cache.
const keySetClaim = "\x00jwtauth.keyset"

// keyFor is the Keyfunc: it returns the configured key(s) of the token's issuer that
// verify exactly the token's algorithm, or an error. The token is unverified here; only
// its "iss", "alg" and "kid" are read, and only to look keys up.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, fmt.Errorf("%w: crit header", ErrMalformed)
	}
	claims, _ := t.Claims.(jwt.MapClaims)
	iss, ok := claims["iss"].(string)
	if !ok {
		return nil, fmt.Errorf("%w: no iss", ErrUntrusted)
	}
	is := v.issuers[iss]
	if is == nil {
		return nil, fmt.Errorf("%w: unknown issuer", ErrUntrusted)
	}
	alg := t.Method.Alg()
	if hdr, _ := t.Header["alg"].(string); hdr != alg || !is.algs[alg] {
		return nil, fmt.Errorf("%w: alg %q not allowed for the issuer", ErrUntrusted, hdr)
	}
	kid := ""
	if raw, present := t.Header["kid"]; present {
		s, ok := raw.(string)
		if !ok {
			return nil, fmt.Errorf("%w: kid is not a string", ErrMalformed)
		}
		if len(s) > maxKidLen {
			return nil, fmt.Errorf("%w: kid too long", ErrUntrusted)
		}
		kid = s
	}

	set := is.static
	if set == nil {
		now := is.src.c.cfg.Now()
		is.src.touch(now)
		set = is.src.set.Load()
		if set == nil {
			// Never fetched: wait for the first fetch if one may run now.
			is.src.refresh(now)
			if set = is.src.set.Load(); set == nil {
				return nil, fmt.Errorf("%w: key set of %s not loaded", ErrNoKeys, is.cfg.JWKSURL)
			}
		}
		if kid != "" && !set.hasKid(kid, alg, is.rsaAlg) && is.src.refresh(now) {
			// An unknown kid may be a rotation: refetch (rate-limited) and look again.
			set = is.src.set.Load()
		}
		// Tell the token cache which set verified the token. The key cannot be a
		// claim a token carries into use: it is overwritten here, and read only for
		// jwks_url issuers, after this ran.
		claims[keySetClaim] = set
	}
	keys, n := set.candidates(kid, alg, is.rsaAlg)
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: no %s key with kid %q", ErrUntrusted, alg, kid)
	case n == 1:
		return keys[0], nil
	}
	ks := jwt.VerificationKeySet{Keys: make([]jwt.VerificationKey, n)}
	for i := 0; i < n; i++ {
		ks.Keys[i] = keys[i]
	}
	return ks, nil
}

// hasKid reports whether the set has a key named kid for alg.
func (s *keySet) hasKid(kid, alg, rsaAlg string) bool {
	for _, k := range s.byKid[kid] {
		if k.pinned(rsaAlg) == alg {
			return true
		}
	}
	return false
}

// candidates returns (in buf) the keys a token with kid and alg is tried against: the
// keys named kid, or — when the token names none, or a name no key has — the keys
// without a kid; either way only those pinned to alg, at most maxCandidates (beyond
// that, nothing: a kid-less token must not cost dozens of verifications).
func (s *keySet) candidates(kid, alg, rsaAlg string) ([maxCandidates]any, int) {
	var out [maxCandidates]any
	n := 0
	add := func(keys []*verificationKey) bool {
		for _, k := range keys {
			if k.pinned(rsaAlg) != alg {
				continue
			}
			if n == maxCandidates {
				return false
			}
			out[n] = k.key
			n++
		}
		return true
	}
	if kid != "" {
		if !add(s.byKid[kid]) {
			return out, 0
		}
		if n > 0 {
			return out, n
		}
		if !add(s.kidless) {
			return out, 0
		}
		return out, n
	}
	if !add(s.all) {
		return out, 0
	}
	return out, n
}

// classify maps golang-jwt's and keyFor's errors to one category.
func classify(err error) error {
	for _, s := range []error{ErrMalformed, ErrUntrusted, ErrExpired, ErrClaims, ErrNoKeys} {
		if errors.Is(err, s) {
			return err
		}
	}
	switch {
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return fmt.Errorf("%w: %v", ErrExpired, err)
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	return fmt.Errorf("%w: %v", ErrClaims, err)
}

// compactShape reports whether b is three non-empty-header segments of base64url
// characters separated by two dots: anything else is refused without decoding.
func compactShape(b []byte) bool {
	dots := 0
	for _, c := range b {
		switch b64urlByte[c] {
		case 0:
			return false
		case 2:
			dots++
		}
	}
	return dots == 2 && b[0] != '.'
}

// b64urlByte is 1 for the base64url alphabet, 2 for '.', 0 otherwise.
var b64urlByte = func() (t [256]byte) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") {
		t[c] = 1
	}
	t['.'] = 2
	return t
}()

// claimPath splits a dotted claim name for nested lookup ("realm_access.roles").
func claimPath(name string) []string {
	if !strings.Contains(name, ".") {
		return nil
	}
	return strings.Split(name, ".")
}

// lookupClaim returns the claim called name or, when there is none and name is dotted,
// the value at that path through nested objects. A top-level claim whose name has dots
// (a namespaced claim like "https://example.com/roles") wins over the path.
func lookupClaim(claims jwt.MapClaims, name string, path []string) any {
	if v, ok := claims[name]; ok {
		return v
	}
	if path == nil {
		return nil
	}
	var cur any = map[string]any(claims)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[p]; !ok {
			return nil
		}
	}
	return cur
}

// rolesOf reads a roles claim: absent or null is no roles; a string is a space-separated
// list (the OAuth "scope" syntax); an array holds strings (other elements are ignored:
// they could not name a role). Too many or too long is an error.
func rolesOf(v any) ([]string, error) {
	var roles []string
	switch r := v.(type) {
	case nil:
		return nil, nil
	case string:
		roles = strings.Fields(r)
	case []any:
		for _, e := range r {
			if s, ok := e.(string); ok && s != "" {
				roles = append(roles, s)
			}
		}
	default:
		return nil, fmt.Errorf("is %T, want a string or an array of strings", v)
	}
	if len(roles) > MaxRoles {
		return nil, fmt.Errorf("has %d roles, more than %d", len(roles), MaxRoles)
	}
	for _, s := range roles {
		if len(s) > MaxRoleLen {
			return nil, fmt.Errorf("has a role over %d bytes", MaxRoleLen)
		}
	}
	return roles, nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
