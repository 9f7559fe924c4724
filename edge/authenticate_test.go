package edge_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"tollgate/edge"
	"tollgate/edge/jwtauth"
	"tollgate/tenants"
)

// Keys are generated once per test binary: RSA generation is slow.
var (
	rsaOnce sync.Once
	rsaKeys [5]*rsa.PrivateKey
)

func rsaKey(i int) *rsa.PrivateKey {
	rsaOnce.Do(func() {
		var wg sync.WaitGroup
		for i := range rsaKeys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := rsa.GenerateKey(rand.Reader, 2048)
				if err != nil {
					panic(err)
				}
				rsaKeys[i] = k
			}()
		}
		wg.Wait()
	})
	return rsaKeys[i]
}

var b64 = base64.RawURLEncoding

func rsaJWK(k *rsa.PrivateKey, kid string) tenants.JWK {
	return tenants.JWK{Kty: "RSA", Kid: kid, Alg: "RS256", Use: "sig",
		N: b64.EncodeToString(k.N.Bytes()), E: b64.EncodeToString(big.NewInt(int64(k.E)).Bytes())}
}

const (
	issA  = "https://idp-a.example"
	issJ  = "https://idp-jwks.example"
	audA  = "orders-api"
	bSlug = "beta"
)

// claims are a token's claims, valid for an hour from now unless edited.
func claims(iss, sub string, edit ...func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"iss": iss, "sub": sub, "aud": audA, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for _, f := range edit {
		f(c)
	}
	return c
}

// sign makes a compact JWS; header entries are added to (or, nil, removed from) the
// default header.
func sign(t testing.TB, m jwt.SigningMethod, key any, c jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	for k, v := range header {
		if v == nil {
			delete(tok.Header, k)
		} else {
			tok.Header[k] = v
		}
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rs256(t testing.TB, key *rsa.PrivateKey, kid string, c jwt.MapClaims) string {
	return sign(t, jwt.SigningMethodRS256, key, c, map[string]any{"kid": kid})
}

// idp serves a JWK set over loopback http; it can rotate its keys and go down.
type idp struct {
	*httptest.Server
	mu    sync.Mutex
	keys  []tenants.JWK
	down  bool
	fetch atomic.Int64
}

func newIDP(t testing.TB, keys ...tenants.JWK) *idp {
	p := &idp{keys: keys}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetch.Add(1)
		p.mu.Lock()
		down, keys := p.down, p.keys
		p.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *idp) set(down bool, keys ...tenants.JWK) {
	p.mu.Lock()
	p.down = down
	if keys != nil {
		p.keys = keys
	}
	p.mu.Unlock()
}

// jwtHarness is an edge whose JWKS cache takes loopback http key sets and refetches
// after 20ms.
func jwtHarness(t *testing.T) *harness {
	return newHarness(t, func(c *edge.Config) {
		c.JWKS = jwtauth.JWKSConfig{AllowHTTPLoopback: true, MinInterval: 20 * time.Millisecond, Timeout: time.Second}
	})
}

func bearerH(tok string) string { return "Authorization: Bearer " + tok }

// wantAuthFail checks a 401 envelope with code, the fixed message for invalid tokens, a
// Bearer challenge, and no trace of the token in the body.
func wantAuthFail(t *testing.T, name string, r result, code, tok string) {
	t.Helper()
	if r.status != 401 || r.errCode() != code || r.echo != nil {
		t.Errorf("%s: got %s, want 401 %s", name, r, code)
		return
	}
	if code == tenants.EInvalidCredential && !strings.Contains(r.body, jwtauth.Message) {
		t.Errorf("%s: message of %s is not the fixed one", name, r.body)
	}
	if r.header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("%s: WWW-Authenticate %q", name, r.header.Get("WWW-Authenticate"))
	}
	for _, part := range strings.Split(tok, ".") {
		if len(part) >= 8 && strings.Contains(r.body, part) {
			t.Errorf("%s: the body echoes the token: %s", name, r.body)
		}
	}
}

// TestJWTHostileTokens: every malicious or wrong token fails closed through the real
// edge, with a 401 that says nothing about why and echoes nothing.
func TestJWTHostileTokens(t *testing.T) {
	t.Parallel()
	h := jwtHarness(t)
	up := newUpstream(t, "orders")
	acme := h.tenant("acme")
	beta := h.tenant(bSlug)
	keyA, keyJ, keyB, evil := rsaKey(0), rsaKey(1), rsaKey(2), rsaKey(3)
	p := newIDP(t, rsaJWK(keyJ, "j1"))
	h.put(&tenants.Issuer{ID: "ia", TenantID: acme, Issuer: issA, Audiences: []string{audA}, Keys: []tenants.JWK{rsaJWK(keyA, "a1")}, RolesClaim: "roles"})
	h.put(&tenants.Issuer{ID: "ij", TenantID: acme, Issuer: issJ, Audiences: []string{audA}, JWKSURL: p.URL + "/jwks.json"})
	// beta trusts an issuer with the same name and audience, with its own key.
	h.put(&tenants.Issuer{ID: "ib", TenantID: beta, Issuer: issA, Audiences: []string{audA}, Keys: []tenants.JWK{rsaJWK(keyB, "a1")}})
	h.route(acme, "orders", []string{"/orders"}, nil, tenants.AuthJWT, up.URL)
	h.route(beta, "orders-b", []string{"/orders"}, nil, tenants.AuthJWT, up.URL)
	h.e.Loaded()

	valid := rs256(t, keyA, "a1", claims(issA, "alice"))
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/orders/1", bearerH(valid)); r.status != 200 {
			return r.String()
		}
		return ""
	})
	r := h.get("acme."+domain, "/orders/1", bearerH(valid), "X-Consumer-Id: spoofed", "X-Consumer-Name: spoofed")
	if r.status != 200 || r.echo.get("X-Consumer-Id") != issA+"|alice" || r.echo.get("X-Consumer-Name") != "alice" {
		t.Fatalf("valid token: %s, upstream saw %v", r, r.echo)
	}
	if r.echo.get("Authorization") != "Bearer "+valid {
		t.Errorf("the upstream did not get the Authorization header")
	}
	// The scheme is case-insensitive; spaces around the token do not matter.
	if r := h.get("acme."+domain, "/orders/1", "Authorization: bEaReR   "+valid+" "); r.status != 200 {
		t.Errorf("bEaReR: %s", r)
	}
	// The jwks_url issuer works too.
	if r := h.get("acme."+domain, "/orders/1", bearerH(rs256(t, keyJ, "j1", claims(issJ, "jay")))); r.status != 200 || r.echo.get("X-Consumer-Id") != issJ+"|jay" {
		t.Fatalf("jwks issuer: %s", r)
	}

	pubDER, _ := x509.MarshalPKIXPublicKey(&keyA.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	evilJWK := rsaJWK(evil, "")
	ecEvil, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the edge fetched %s from a URL in a token header", r.URL)
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []tenants.JWK{evilJWK}})
	}))
	defer attacker.Close()
	parts := strings.Split(valid, ".")
	noneTok := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(issA, "alice"), map[string]any{"kid": "a1"})

	cases := []struct {
		name, tok string
	}{
		{"alg none", noneTok},
		{"alg none, no kid", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(issA, "alice"), nil)},
		{"alg None", b64.EncodeToString([]byte(`{"alg":"None","kid":"a1"}`)) + "." + parts[1] + "."},
		{"alg nOnE with the signature", b64.EncodeToString([]byte(`{"alg":"nOnE","kid":"a1"}`)) + "." + parts[1] + "." + parts[2]},
		{"header of another alg, RS256 signature", b64.EncodeToString([]byte(`{"alg":"PS256","kid":"a1"}`)) + "." + parts[1] + "." + parts[2]},
		{"HS256 with the RSA public key (PEM)", sign(t, jwt.SigningMethodHS256, pubPEM, claims(issA, "alice"), map[string]any{"kid": "a1"})},
		{"HS256 with the RSA public key (DER)", sign(t, jwt.SigningMethodHS256, pubDER, claims(issA, "alice"), map[string]any{"kid": "a1"})},
		{"HS256 with the modulus", sign(t, jwt.SigningMethodHS256, keyA.N.Bytes(), claims(issA, "alice"), nil)},
		{"empty signature", parts[0] + "." + parts[1] + "."},
		{"signature of another token", parts[0] + "." + strings.Split(rs256(t, keyA, "a1", claims(issA, "mallory")), ".")[1] + "." + parts[2]},
		{"payload tampered", parts[0] + "." + b64.EncodeToString([]byte(`{"iss":"`+issA+`","sub":"admin","aud":"`+audA+`","exp":9999999999}`)) + "." + parts[2]},
		{"expired", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }))},
		{"expired beyond the leeway", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-31 * time.Second).Unix() }))},
		{"no exp", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { delete(c, "exp") }))},
		{"nbf in the future", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() }))},
		{"iat in the future", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { c["iat"] = time.Now().Add(time.Hour).Unix() }))},
		{"wrong issuer", rs256(t, keyA, "a1", claims("https://other.example", "alice"))},
		{"issuer case", rs256(t, keyA, "a1", claims(strings.ToUpper(issA), "alice"))},
		{"no issuer", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { delete(c, "iss") }))},
		{"wrong audience", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { c["aud"] = "billing-api" }))},
		{"no audience", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { delete(c, "aud") }))},
		{"no consumer claim", rs256(t, keyA, "a1", claims(issA, "", func(c jwt.MapClaims) { delete(c, "sub") }))},
		{"roles of the wrong shape", rs256(t, keyA, "a1", claims(issA, "alice", func(c jwt.MapClaims) { c["roles"] = map[string]any{"admin": true} }))},
		{"another tenant's valid token", rs256(t, keyB, "a1", claims(issA, "alice"))},
		{"kid path traversal", sign(t, jwt.SigningMethodHS256, []byte(""), claims(issA, "alice"), map[string]any{"kid": "../../../../../../dev/null"})},
		{"kid SQL", sign(t, jwt.SigningMethodHS256, []byte("key"), claims(issA, "alice"), map[string]any{"kid": "x' UNION SELECT 'key' --"})},
		{"kid of the key, signed by another", rs256(t, evil, "a1", claims(issA, "alice"))},
		{"kid not a string", sign(t, jwt.SigningMethodRS256, keyA, claims(issA, "alice"), map[string]any{"kid": 1})},
		{"kid huge", rs256(t, keyA, strings.Repeat("k", 300), claims(issA, "alice"))},
		{"embedded jwk", sign(t, jwt.SigningMethodRS256, evil, claims(issA, "alice"), map[string]any{"jwk": evilJWK})},
		{"embedded jwk with the kid", sign(t, jwt.SigningMethodRS256, evil, claims(issA, "alice"), map[string]any{"kid": "a1", "jwk": evilJWK})},
		{"jku", sign(t, jwt.SigningMethodRS256, evil, claims(issA, "alice"), map[string]any{"kid": "x", "jku": attacker.URL})},
		{"x5u", sign(t, jwt.SigningMethodRS256, evil, claims(issA, "alice"), map[string]any{"x5u": attacker.URL})},
		{"ES256 with an unknown key", sign(t, jwt.SigningMethodES256, ecEvil, claims(issA, "alice"), nil)},
		{"crit header", sign(t, jwt.SigningMethodRS256, keyA, claims(issA, "alice"), map[string]any{"kid": "a1", "crit": []string{"exp"}})},
		{"jwks issuer, key of issuer A", rs256(t, keyA, "a1", claims(issJ, "jay"))},
		{"not a JWT", "not-a-token"},
		{"two segments", parts[0] + "." + parts[1]},
		{"huge", strings.Repeat("a", 9000) + ".b.c"},
	}
	for _, c := range cases {
		wantAuthFail(t, c.name, h.get("acme."+domain, "/orders/1", bearerH(c.tok)), tenants.EInvalidCredential, c.tok)
	}
	// A valid token of acme is not one of beta's, though the issuer names match.
	wantAuthFail(t, "acme's token at beta", h.get(bSlug+"."+domain, "/orders/1", bearerH(valid)), tenants.EInvalidCredential, valid)
	if r := h.get(bSlug+"."+domain, "/orders/1", bearerH(rs256(t, keyB, "a1", claims(issA, "bob")))); r.status != 200 {
		t.Fatalf("beta's own token: %s", r)
	}

	// No credential.
	for _, hdr := range []string{"", "Authorization: Basic YWxpY2U6c2VjcmV0", "Authorization: Bearer", "Authorization: Bearer    ", "Authorization: Bearer" + valid} {
		var hs []string
		if hdr != "" {
			hs = []string{hdr}
		}
		wantAuthFail(t, "no token: "+hdr, h.get("acme."+domain, "/orders/1", hs...), tenants.EUnauthenticated, valid)
	}

	// Unknown kid with the IdP down: refused, and the known key keeps working.
	p.set(true)
	time.Sleep(30 * time.Millisecond) // past MinInterval: the unknown kid may refetch
	before := p.fetch.Load()
	unknown := rs256(t, keyJ, "j2", claims(issJ, "jay"))
	wantAuthFail(t, "unknown kid, IdP down", h.get("acme."+domain, "/orders/1", bearerH(unknown)), tenants.EInvalidCredential, unknown)
	if p.fetch.Load() == before {
		t.Errorf("an unknown kid did not try a refetch")
	}
	if r := h.get("acme."+domain, "/orders/1", bearerH(rs256(t, keyJ, "j1", claims(issJ, "jay2")))); r.status != 200 {
		t.Errorf("the last good key set was dropped while the IdP is down: %s", r)
	}
	if n := h.metric("tollgate_edge_auth_rejected_total", map[string]string{"reason": "untrusted"}); n == 0 {
		t.Errorf("no untrusted rejections counted")
	}
	if up.hits.Load() == 0 {
		t.Fatal("upstream never reached")
	}
}

// TestJWKSRotation: a provider's new key is picked up without a restart (an unknown kid
// refetches the set), a withdrawn key stops working, and while the provider is down the
// last good set keeps serving.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	h := jwtHarness(t)
	up := newUpstream(t, "api")
	acme := h.tenant("acme")
	k1, k2, k3 := rsaKey(1), rsaKey(2), rsaKey(4)
	p := newIDP(t, rsaJWK(k1, "k1"))
	h.put(&tenants.Issuer{ID: "ij", TenantID: acme, Issuer: issJ, Audiences: []string{audA}, JWKSURL: p.URL})
	h.route(acme, "api", []string{"/"}, nil, tenants.AuthJWT, up.URL)
	h.e.Loaded()

	call := func(k *rsa.PrivateKey, kid string) result {
		return h.get("acme."+domain, "/x", bearerH(rs256(t, k, kid, claims(issJ, "jay"))))
	}
	waitFor(t, 5*time.Second, func() string {
		if r := call(k1, "k1"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	old := rs256(t, k1, "k1", claims(issJ, "cached"))
	if r := h.get("acme."+domain, "/x", bearerH(old)); r.status != 200 {
		t.Fatalf("k1: %s", r)
	}

	// Rotation: the provider now publishes k2 only.
	p.set(false, rsaJWK(k2, "k2"))
	waitFor(t, 5*time.Second, func() string {
		if r := call(k2, "k2"); r.status != 200 {
			return "k2 not accepted yet: " + r.String()
		}
		return ""
	})
	// k1 was withdrawn with the new set: a token verified (and cached) under the old set
	// is checked again, and refused.
	wantAuthFail(t, "withdrawn key", h.get("acme."+domain, "/x", bearerH(old)), tenants.EInvalidCredential, old)

	// The provider goes down: k2 keeps working, an unknown key does not.
	p.set(true)
	time.Sleep(30 * time.Millisecond)
	if r := call(k2, "k2"); r.status != 200 {
		t.Fatalf("k2 with the IdP down: %s", r)
	}
	wantAuthFail(t, "k3 with the IdP down", call(k3, "k3"), tenants.EInvalidCredential, "")
	// Back up with k3: picked up on the next unknown kid.
	p.set(false, rsaJWK(k2, "k2"), rsaJWK(k3, "k3"))
	waitFor(t, 5*time.Second, func() string {
		if r := call(k3, "k3"); r.status != 200 {
			return "k3 not accepted yet: " + r.String()
		}
		return ""
	})
}

// TestJWTConfigChanges: issuers come and go with their entries; a route change keeps the
// verifier (and its cache); a jwt route of a tenant without issuers refuses every token.
func TestJWTConfigChanges(t *testing.T) {
	t.Parallel()
	h := jwtHarness(t)
	up := newUpstream(t, "api")
	acme := h.tenant("acme")
	h.route(acme, "api", []string{"/"}, nil, tenants.AuthJWT, up.URL)
	h.e.Loaded()
	tok := rs256(t, rsaKey(0), "a1", claims(issA, "alice"))
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/x", bearerH(tok)); r.status != 401 || r.errCode() != tenants.EInvalidCredential {
			return "without issuers: " + r.String()
		}
		return ""
	})
	h.put(&tenants.Issuer{ID: "ia", TenantID: acme, Issuer: issA, Audiences: []string{audA}, Keys: []tenants.JWK{rsaJWK(rsaKey(0), "a1")}})
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/x", bearerH(tok)); r.status != 200 {
			return "issuer added: " + r.String()
		}
		return ""
	})
	// An unrelated route change: the token stays cached in the kept verifier.
	h.route(acme, "other", []string{"/other"}, nil, tenants.AuthNone, up.URL)
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/other"); r.status != 200 {
			return "route added: " + r.String()
		}
		return ""
	})
	if r := h.get("acme."+domain, "/x", bearerH(tok)); r.status != 200 {
		t.Fatalf("after a route change: %s", r)
	}
	// An issuer that the api would never write (http jwks_url off loopback, the audience
	// missing) is rejected, and the good issuer keeps working.
	h.put(&tenants.Issuer{ID: "iz", TenantID: acme, Issuer: "bad", JWKSURL: "http://idp.example/jwks"})
	if r := h.get("acme."+domain, "/x", bearerH(tok)); r.status != 200 {
		t.Fatalf("after a bad issuer entry: %s", r)
	}
	h.del(tenants.ObjectKey(acme, tenants.KindJWTIssuer, "ia"))
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/x", bearerH(tok)); r.status != 401 {
			return "issuer deleted: " + r.String()
		}
		return ""
	})
}

// TestKeyOrJWT: the key when X-API-Key is present, else the token; the identity reaches
// the upstream the same way for both.
func TestKeyOrJWT(t *testing.T) {
	t.Parallel()
	h := jwtHarness(t)
	up := newUpstream(t, "api")
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-app", TenantID: acme, Name: "mobile-app"})
	key := h.key(acme, "c-app", "k1")
	h.put(&tenants.Issuer{ID: "ia", TenantID: acme, Issuer: issA, Audiences: []string{audA}, Keys: []tenants.JWK{rsaJWK(rsaKey(0), "a1")}})
	h.route(acme, "api", []string{"/"}, nil, tenants.AuthKeyOrJWT, up.URL)
	h.e.Loaded()
	tok := rs256(t, rsaKey(0), "a1", claims(issA, "alice"))

	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/x", "X-API-Key: "+key); r.status != 200 {
			return r.String()
		}
		return ""
	})
	r := h.get("acme."+domain, "/x", "X-API-Key: "+key)
	if r.echo.get("X-Consumer-Id") != "c-app" || r.echo.get("X-Consumer-Name") != "mobile-app" || r.echo.has("X-Api-Key") {
		t.Fatalf("key: upstream saw %v", r.echo.Header)
	}
	r = h.get("acme."+domain, "/x", bearerH(tok))
	if r.status != 200 || r.echo.get("X-Consumer-Id") != issA+"|alice" || r.echo.get("X-Consumer-Name") != "alice" {
		t.Fatalf("jwt: %s %v", r, r.echo)
	}
	// A present key decides, even when a valid token is sent too.
	if r := h.get("acme."+domain, "/x", "X-API-Key: tgk_wrong", bearerH(tok)); r.status != 401 || r.errCode() != tenants.EInvalidCredential {
		t.Fatalf("bad key with a good token: %s", r)
	}
	r = h.get("acme."+domain, "/x")
	if r.status != 401 || r.errCode() != tenants.EUnauthenticated || !strings.Contains(r.body, "X-API-Key") || !strings.Contains(r.body, "Bearer") {
		t.Fatalf("nothing: %s", r)
	}
	wantAuthFail(t, "bad token", h.get("acme."+domain, "/x", bearerH(tok+"x")), tenants.EInvalidCredential, tok)
}

// TestAccessRulesHostilePaths: encoding tricks cannot make the policy and the upstream
// disagree about the path. Each case asserts the status and, when proxied, the exact
// path the upstream received.
func TestAccessRulesHostilePaths(t *testing.T) {
	t.Parallel()
	h := jwtHarness(t)
	up := newUpstream(t, "api")
	acme := h.tenant("acme")
	h.put(&tenants.Consumer{ID: "c-alice", TenantID: acme, Name: "alice"})
	h.put(&tenants.Consumer{ID: "c-bob", TenantID: acme, Name: "bob"})
	alice := h.key(acme, "c-alice", "ka")
	bob := h.key(acme, "c-bob", "kb")
	h.put(&tenants.Issuer{ID: "ia", TenantID: acme, Issuer: issA, Audiences: []string{audA}, Keys: []tenants.JWK{rsaJWK(rsaKey(0), "a1")}})
	h.put(&tenants.AccessRules{TenantID: acme, Rules: [][]string{
		{"reader", "/orders/:id", "GET"},
		{"reader", "/public/*", "GET"},
		{"admin", "/orders/*", "*"},
		{"admin", "/api/orders/:id", "GET"},
		{"*", "/orders/admin/*", "*", "deny"},
		{"c-bob", "/orders/audit", "GET", "deny"},
		{issA + "|auditor", "/orders/audit", "GET"},
	}, Roles: [][]string{{"alice", "reader"}, {"bob", "admin"}, {"admin", "reader"}}})
	r := &tenants.Route{ID: "r-all", TenantID: acme, Name: "all", Paths: []string{"/"}, Auth: tenants.AuthKeyOrJWT, CheckAccess: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}
	h.put(r)
	h.put(&tenants.Route{ID: "r-strip", TenantID: acme, Name: "strip", Paths: []string{"/api"}, Auth: tenants.AuthKey, CheckAccess: true, StripPrefix: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}})
	h.put(&tenants.Route{ID: "r-open", TenantID: acme, Name: "open", Paths: []string{"/open"}, Auth: tenants.AuthNone, CheckAccess: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}})
	h.e.Loaded()
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/orders/1", "X-API-Key: "+alice); r.status != 200 {
			return r.String()
		}
		return ""
	})
	reader := "Authorization: Bearer " + rs256(t, rsaKey(0), "a1", claims(issA, "jay", func(c jwt.MapClaims) { c["roles"] = []string{"reader"} }))
	noRoles := "Authorization: Bearer " + rs256(t, rsaKey(0), "a1", claims(issA, "nobody"))
	// The bare consumer claim is a subject like a key consumer's name: "alice" from the
	// IdP has alice's roles. "<iss>|<sub>" names one issuer's caller only.
	jwtAlice := "Authorization: Bearer " + rs256(t, rsaKey(0), "a1", claims(issA, "alice"))
	jwtAudit := "Authorization: Bearer " + rs256(t, rsaKey(0), "a1", claims(issA, "auditor"))

	const deny = 403
	cases := []struct {
		who, method, target string
		status              int
		upstream            string // the path the upstream must see; "" when not proxied
	}{
		{alice, "GET", "/orders/1", 200, "/orders/1"},
		{alice, "GET", "/orders/1?x=../admin", 200, "/orders/1?x=../admin"},
		{alice, "POST", "/orders/1", deny, ""},
		{alice, "GET", "/orders/1/", deny, ""}, // trailing slash: allow rules are exact
		{alice, "GET", "/orders/", deny, ""},
		{alice, "GET", "/orders", deny, ""},
		{alice, "GET", "/ORDERS/1", deny, ""}, // case: allow rules are exact
		{alice, "GET", "/Orders/1", deny, ""},
		{alice, "GET", "/orders/1/../2", 200, "/orders/2"},
		{alice, "GET", "/x/../orders/3", 200, "/orders/3"},
		{alice, "GET", "/secret/%2e%2e/orders/4", 200, "/orders/4"},
		{alice, "GET", "/secret/%2E%2e/orders/4", 200, "/orders/4"},
		{alice, "GET", "/orders/1/%2e%2e/%2e%2e/admin/x", deny, ""},
		{alice, "GET", "//orders//5", 200, "/orders/5"},
		{alice, "GET", "/orders/./6", 200, "/orders/6"},
		{alice, "GET", "/orders/1%2f2", 400, ""}, // an encoded slash is refused outright
		{alice, "GET", "/orders/1%2F..%2Fadmin", 400, ""},
		{alice, "GET", "/orders/1;x=y", deny, ""}, // ";" is never allowed
		{alice, "GET", "/orders/1%3b", deny, ""},
		{alice, "GET", "/orders/1%3Bjsessionid=x", deny, ""},
		{alice, "GET", "/public/a/b/", 200, "/public/a/b/"},
		{alice, "GET", "/public/%7euser", 200, "/public/~user"},
		{alice, "GET", "/public/a%20b", 200, "/public/a%20b"},
		{alice, "GET", "/public/../orders/7", 200, "/orders/7"},
		{alice, "GET", "/public/..%2forders", 400, ""},
		{alice, "GET", "/../orders/1", 400, ""}, // above the root
		// bob is admin (and so reader): everything under /orders/ except the denied parts.
		{bob, "DELETE", "/orders/9", 200, "/orders/9"},
		{bob, "GET", "/orders/a/b", 200, "/orders/a/b"},
		{bob, "GET", "/orders/admin/x", deny, ""},
		{bob, "GET", "/orders/admin", deny, ""},  // deny /orders/admin/* covers /orders/admin
		{bob, "GET", "/orders/admin/", deny, ""}, // and with a trailing slash
		{bob, "GET", "/orders/ADMIN/x", deny, ""},
		{bob, "GET", "/orders/Admin", deny, ""},
		{bob, "GET", "/orders/%61dmin/x", deny, ""},
		{bob, "GET", "/orders/%41DMIN/x", deny, ""},
		{bob, "POST", "/orders/admin/x", deny, ""},
		{bob, "GET", "//orders//admin//x", deny, ""},
		{bob, "GET", "/orders/x/../admin/y", deny, ""},
		{bob, "GET", "/orders/x/%2e%2e/admin/y", deny, ""},
		{bob, "GET", "/orders/admin;x/y", deny, ""},
		{bob, "GET", "/orders/audit", deny, ""},
		{bob, "GET", "/orders/AUDIT/", deny, ""},
		{bob, "HEAD", "/orders/audit", deny, ""}, // a denied GET denies HEAD
		{bob, "GET", "/orders/audits", 200, "/orders/audits"},
		// JWT callers: consumer claim and roles.
		{reader, "GET", "/orders/1", 200, "/orders/1"},
		{reader, "GET", "/orders/admin/1", deny, ""},
		{noRoles, "GET", "/orders/1", deny, ""},
		{jwtAlice, "GET", "/orders/1", 200, "/orders/1"},
		{jwtAudit, "GET", "/orders/audit", 200, "/orders/audit"},
		{jwtAudit, "GET", "/orders/1", deny, ""},
		// strip_prefix: the policy sees the full path, the upstream the stripped one.
		{bob, "GET", "/api/orders/1", 200, "/orders/1"},
		{bob, "GET", "/api/orders/1/", deny, ""},
		{alice, "GET", "/api/orders/1", deny, ""},
		{bob, "GET", "/api/x/../orders/2", 200, "/orders/2"},
		// A policy route without authentication has no subject: always denied.
		{"", "GET", "/open", deny, ""},
		{alice, "GET", "/open/x", deny, ""},
	}
	for _, c := range cases {
		var hdrs []string
		switch {
		case strings.HasPrefix(c.who, "Authorization:"):
			hdrs = []string{c.who}
		case c.who != "":
			hdrs = []string{"X-API-Key: " + c.who}
		}
		who := map[string]string{alice: "alice", bob: "bob", reader: "jwt reader", noRoles: "jwt no roles", jwtAlice: "jwt alice", jwtAudit: "jwt auditor", "": "nobody"}[c.who]
		r := send(t, h.public, c.method, "acme."+domain, c.target, hdrs, "")
		name := who + " " + c.method + " " + c.target
		if r.status != c.status {
			t.Errorf("%s: %s, want %d", name, r, c.status)
			continue
		}
		switch {
		case c.status == deny && c.method != "HEAD" && r.errCode() != tenants.EAccessDenied:
			t.Errorf("%s: code %q, want policy_denied", name, r.errCode())
		case c.status == 400 && r.errCode() != tenants.EInvalidRequest:
			t.Errorf("%s: code %q", name, r.errCode())
		case c.upstream == "" && (r.echo != nil || r.header.Get("X-Echo") != ""):
			t.Errorf("%s: reached the upstream", name)
		case c.upstream != "" && c.method != "HEAD" && (r.echo == nil || r.echo.RequestURI != c.upstream):
			t.Errorf("%s: the upstream saw %v, want %s", name, r.echo, c.upstream)
		}
	}

	// Without a policy, policy routes deny everyone; routes without "policy" are open.
	h.del(tenants.AccessRulesKey(acme))
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/orders/1", "X-API-Key: "+alice); r.status != 403 {
			return "policy deleted: " + r.String()
		}
		return ""
	})
	// A policy that does not compile (the api would refuse it) fails closed too.
	h.put(&tenants.AccessRules{TenantID: acme, Rules: [][]string{{"alice", "orders", "GET"}}})
	h.put(&tenants.Route{ID: "r-new", TenantID: acme, Name: "new", Paths: []string{"/new"}, Auth: tenants.AuthKey, CheckAccess: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}})
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/new", "X-API-Key: "+alice); r.status != 403 {
			return "bad policy: " + r.String()
		}
		return ""
	})
	if n := h.metric("tollgate_edge_auth_rejected_total", map[string]string{"reason": "policy_denied"}); n == 0 {
		t.Error("no policy denials counted")
	}
}

// TestAccessRulesTenantIsolation: one tenant's policy and roles do not apply to another's
// consumers of the same name.
func TestAccessRulesTenantIsolation(t *testing.T) {
	t.Parallel()
	h := jwtHarness(t)
	up := newUpstream(t, "api")
	for _, slug := range []string{"acme", bSlug} {
		id := h.tenant(slug)
		h.put(&tenants.Consumer{ID: "c-" + slug, TenantID: id, Name: "alice"})
		h.put(&tenants.Route{ID: "r-" + slug, TenantID: id, Name: "all", Paths: []string{"/"}, Auth: tenants.AuthKey, CheckAccess: true,
			Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}})
	}
	h.put(&tenants.AccessRules{TenantID: "t-acme", Rules: [][]string{{"alice", "/*", "*"}}})
	ka := h.key("t-acme", "c-acme", "ka")
	kb := h.key("t-"+bSlug, "c-"+bSlug, "kb")
	h.e.Loaded()
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/x", "X-API-Key: "+ka); r.status != 200 {
			return r.String()
		}
		return ""
	})
	if r := h.get(bSlug+"."+domain, "/x", "X-API-Key: "+kb); r.status != 403 {
		t.Fatalf("beta's alice under acme's policy: %s", r)
	}
	if r := h.get(bSlug+"."+domain, "/x", "X-API-Key: "+ka); r.status != 401 {
		t.Fatalf("acme's key at beta: %s", r)
	}
}

// BenchmarkJWTPolicy is BenchmarkHandler's whole request over loopback for a JWT route
// with a policy (auth=jwt+policy), beside auth=key: the difference is the cost of
// looking the bearer token up in the verified-token cache and the decision up in the
// policy's cache. allocs/op counts the client and the upstream too.
func BenchmarkJWTPolicy(b *testing.B) {
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"hello":"world"}`)
	}}
	go up.Serve(upLn)
	b.Cleanup(func() { _ = up.Shutdown() })
	upURL := "http://" + upLn.Addr().String()

	h := newHarness(b)
	acme := h.tenant("acme")
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, upURL)
	h.put(&tenants.Consumer{ID: "c", TenantID: acme, Name: "c"})
	key := h.key(acme, "c", "k")
	h.put(&tenants.Issuer{ID: "ia", TenantID: acme, Issuer: issA, Audiences: []string{audA}, Keys: []tenants.JWK{rsaJWK(rsaKey(0), "a1")}})
	h.put(&tenants.AccessRules{TenantID: acme, Rules: [][]string{{"reader", "/orders/:id", "GET"}, {"*", "/orders/admin/*", "*", "deny"}}})
	h.put(&tenants.Route{ID: "r-jwt", TenantID: acme, Name: "orders", Paths: []string{"/orders"}, Auth: tenants.AuthJWT, CheckAccess: true,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upURL, Weight: 1}}}})
	h.e.Loaded()
	tok := rs256(b, rsaKey(0), "a1", claims(issA, "bench", func(c jwt.MapClaims) { c["roles"] = []string{"reader"} }))

	client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
	for _, c := range []struct{ name, target, header, value string }{
		{"auth=key", "/keyed/items/42", "X-API-Key", key},
		{"auth=jwt+policy", "/orders/42", "Authorization", "Bearer " + tok},
	} {
		b.Run(c.name, func(b *testing.B) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI(c.target)
			req.Header.SetHost("acme." + domain)
			req.Header.Set("User-Agent", "wrk/4.2")
			req.Header.Set(c.header, c.value)
			b.ReportAllocs()
			for b.Loop() {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}
