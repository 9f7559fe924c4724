package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestJWTAndPolicyFlow: an issuer with inline keys and a policy made through the api
// authenticate and authorize bearer tokens at the edge; the upstream sees the caller; every
// refusal is the envelope, and no 401 body echoes the token.
func TestJWTAndPolicyFlow(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "jwt-upstream")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const iss, aud = "https://login.shop.example", "shop-api"
	b64 := base64.RawURLEncoding.EncodeToString
	jwk := map[string]any{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}

	api.createTenant("shop")
	api.createTenant("rival")
	issuer := api.must(201, "POST", "/v1/tenants/shop/jwt-issuers", map[string]any{
		"issuer": iss, "audiences": []string{aud}, "keys": []any{jwk}, "roles_claim": "roles",
	})
	issuerID := str(t, issuer, "id")
	// rival trusts the same issuer name with another key.
	api.must(201, "POST", "/v1/tenants/rival/jwt-issuers", map[string]any{
		"issuer": iss, "audiences": []string{aud}, "keys": []any{map[string]any{"kty": "RSA", "kid": "k1", "alg": "RS256",
			"n": b64(other.N.Bytes()), "e": b64(big.NewInt(int64(other.E)).Bytes())}},
	})
	api.createRoute("shop", routeSpec("catalog", "/catalog", up.URL, "jwt"))
	api.createRoute("shop", routeSpec("orders", "/orders", up.URL, "jwt", "policy", true))
	api.createRoute("rival", routeSpec("catalog", "/catalog", up.URL, "jwt"))
	api.must(200, "PUT", "/v1/tenants/shop/policy", map[string]any{
		"rules": [][]string{{"buyer", "/orders/:id", "GET"}, {"*", "/orders/secret/*", "*", "deny"}, {"ops", "/orders/*", "*"}},
		"roles": [][]string{{"ops", "buyer"}},
	})

	token := func(k *rsa.PrivateKey, sub string, edit ...func(jwt.MapClaims)) string {
		now := time.Now()
		c := jwt.MapClaims{"iss": iss, "aud": aud, "sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		for _, f := range edit {
			f(c)
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	roles := func(r ...string) func(jwt.MapClaims) { return func(c jwt.MapClaims) { c["roles"] = r } }
	alice := token(key, "alice", roles("buyer"))
	bob := token(key, "bob")
	carol := token(key, "carol", roles("ops"))
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

	took := eventually(t, applyDeadline, "a token of the new issuer works at the edge",
		served(edge, "shop", "/catalog", "jwt-upstream", bearer(alice)...))
	t.Logf("issuer served %s after it was created", took.Round(time.Millisecond))
	got := decodeEcho(t, edge.get(t, "shop", "/catalog/items?q=1", append(bearer(alice), "X-Consumer-Id", "spoofed")...))
	if ids := got.Headers["X-Consumer-Id"]; len(ids) != 1 || ids[0] != iss+"|alice" {
		t.Errorf("upstream saw X-Consumer-Id %q, want [%s|alice]", ids, iss)
	}
	if names := got.Headers["X-Consumer-Name"]; len(names) != 1 || names[0] != "alice" {
		t.Errorf("upstream saw X-Consumer-Name %q", names)
	}
	if got.RawPath != "/catalog/items" || got.Query != "q=1" {
		t.Errorf("upstream saw %s?%s", got.RawPath, got.Query)
	}

	// Policy: allowed → 200 with the normalized path; denied → 403 envelope.
	eventually(t, applyDeadline, "the policy applies", served(edge, "shop", "/orders/1", "jwt-upstream", bearer(alice)...))
	if got := decodeEcho(t, edge.get(t, "shop", "/orders/x/../2", bearer(alice)...)); got.RawPath != "/orders/2" {
		t.Errorf("upstream saw %s, want /orders/2", got.RawPath)
	}
	if got := decodeEcho(t, edge.get(t, "shop", "/orders/a/b", bearer(carol)...)); got.RawPath != "/orders/a/b" {
		t.Errorf("ops: upstream saw %s", got.RawPath)
	}
	for _, c := range []struct {
		name, tok, path string
	}{
		{"no role", bob, "/orders/1"},
		{"no rule for the path", alice, "/orders/1/items"},
		{"deny rule", carol, "/orders/secret/x"},
		{"deny rule, case", carol, "/orders/SECRET/x"},
		{"deny rule, dot segments", carol, "/orders/a/%2e%2e/secret/x"},
		{"deny rule, no trailing part", carol, "/orders/secret"},
		{"semicolon", alice, "/orders/1;a=b"},
	} {
		r := edge.get(t, "shop", c.path, bearer(c.tok)...)
		if err := checkEnvelope(r, 403, "policy_denied"); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	// 401s: the envelope, a fixed message, never the token.
	for _, c := range []struct {
		name, slug, tok, code string
	}{
		{"expired", "shop", token(key, "alice", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }), "invalid_credential"},
		{"wrong audience", "shop", token(key, "alice", func(c jwt.MapClaims) { c["aud"] = "other-api" }), "invalid_credential"},
		{"signed by another key", "shop", token(other, "alice"), "invalid_credential"},
		{"another tenant's token", "rival", alice, "invalid_credential"},
		{"alg none", "shop", strings.Join(append([]string{b64([]byte(`{"alg":"none","kid":"k1"}`))}, strings.Split(alice, ".")[1], ""), "."), "invalid_credential"},
		{"garbage", "shop", "secret-looking-garbage-token-value", "invalid_credential"},
		{"none", "shop", "", "unauthenticated"},
	} {
		var h []string
		if c.tok != "" {
			h = bearer(c.tok)
		}
		r := edge.get(t, c.slug, "/catalog", h...)
		if err := checkEnvelope(r, 401, c.code); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		for _, part := range strings.Split(c.tok, ".") {
			if len(part) >= 8 && strings.Contains(string(r.Body), part) {
				t.Errorf("%s: the 401 body echoes the token: %s", c.name, r.Body)
			}
		}
		if c.code == "invalid_credential" && !strings.Contains(string(r.Body), "the token is not valid for this API") {
			t.Errorf("%s: message is not the fixed one: %s", c.name, r.Body)
		}
	}
	// rival's own tokens work at rival only.
	eventually(t, applyDeadline, "rival's issuer", served(edge, "rival", "/catalog", "", bearer(token(other, "eve"))...))

	// Removing the issuer stops its tokens.
	api.must(204, "DELETE", "/v1/tenants/shop/jwt-issuers/"+issuerID, nil)
	eventually(t, applyDeadline, "the deleted issuer's tokens are refused",
		answers(edge, "shop", "/catalog", 401, "invalid_credential", bearer(alice)...))
	// The API never shows a secret, and lists what is left.
	if r := api.call("GET", "/v1/tenants/shop/jwt-issuers", nil); r.Status != 200 || strings.Contains(string(r.Raw), iss) {
		t.Errorf("issuers after delete: %s", r)
	}
}
