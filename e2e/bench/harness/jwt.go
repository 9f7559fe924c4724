package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"math/big"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	s2jIssuer   = "https://idp.bench.example"
	s2jAudience = "bench-api"
	s2jConsumer = "bench-client"
)

// JWT is an identity provider (S2j's, soak's): an RSA key whose public half is the tenant's
// inline JWK, and one RS256 token signed with it (clients reuse their token, so the
// edge verifies its signature once and then answers from its verified-token cache).
type JWT struct {
	key    *rsa.PrivateKey
	Token  string // the token clients send as a bearer
	issuer string
}

// NewJWT makes the key and signs the token.
func NewJWT() (*JWT, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": s2jIssuer, "aud": s2jAudience, "sub": s2jConsumer, "roles": []string{"reader"},
		"iat": now.Unix(), "exp": now.Add(24 * time.Hour).Unix(),
	})
	tok.Header["kid"] = "bench-1"
	signed, err := tok.SignedString(k)
	if err != nil {
		return nil, err
	}
	return &JWT{key: k, Token: signed, issuer: s2jIssuer}, nil
}

// IssuerBody is the tenant's issuer: the key inline, RS256.
func (j *JWT) IssuerBody() map[string]any {
	enc := base64.RawURLEncoding.EncodeToString
	return map[string]any{
		"issuer": j.issuer, "audiences": []string{s2jAudience}, "algorithms": []string{"RS256"},
		"keys": []any{map[string]any{"kty": "RSA", "kid": "bench-1", "alg": "RS256", "use": "sig",
			"n": enc(j.key.N.Bytes()), "e": enc(big.NewInt(int64(j.key.E)).Bytes())}},
	}
}
