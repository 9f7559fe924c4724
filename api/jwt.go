package api

import (
	"tollgate/tenants"
)

// JWT issuers: the identity providers whose tokens a tenant's "jwt" and "key_or_jwt"
// routes accept. The HS256 secret is write-only: the store keeps it (the edges verify
// with it) and no response carries it.

type jwtIssuerBody struct {
	Issuer        string        `json:"issuer" required:"true" doc:"The exact \"iss\" of the provider's tokens; unique within the tenant."`
	Audiences     []string      `json:"audiences" required:"true" doc:"1–16 values; a token must name one of them in \"aud\"."`
	Algorithms    []string      `json:"algorithms" doc:"Allowed algorithms: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA, or HS256 (only with hs256_secret). Default: [\"HS256\"] with hs256_secret, else [\"RS256\"]."`
	JWKSURL       string        `json:"jwks_url" doc:"https URL of the provider's JWK set, fetched and cached by the edges. Exactly one of jwks_url, keys and hs256_secret."`
	Keys          []tenants.JWK `json:"keys" doc:"1–20 public JWKs (RSA 2048–4096 bits, EC P-256/P-384, OKP Ed25519); an RSA key needs \"alg\" when algorithms allow several RSA algorithms."`
	HS256Secret   string        `json:"hs256_secret" doc:"Shared secret, 32–512 bytes. Write-only: never returned. On PUT, omit every key source to keep the stored secret."`
	ConsumerClaim string        `json:"consumer_claim" doc:"Claim naming the consumer (a dotted path reaches into objects). Default: sub."`
	RolesClaim    string        `json:"roles_claim" doc:"Claim carrying roles: an array of strings or a space-separated string. Default: roles."`
	LeewaySeconds *int          `json:"leeway_seconds" doc:"Clock skew allowed on exp, nbf and iat, 0–300. Default: 30."`
}

type jwtIssuerUpdate struct {
	jwtIssuerBody
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

func (b *jwtIssuerBody) issuer() *tenants.Issuer {
	return &tenants.Issuer{
		Issuer: b.Issuer, Audiences: b.Audiences, Algorithms: b.Algorithms, JWKSURL: b.JWKSURL,
		Keys: b.Keys, HS256Secret: b.HS256Secret, ConsumerClaim: b.ConsumerClaim,
		RolesClaim: b.RolesClaim, LeewaySeconds: b.LeewaySeconds,
	}
}

func decodeJWTIssuer(ct string, body []byte, limit int) (*tenants.Issuer, error) {
	var b jwtIssuerBody
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, err
	}
	is := b.issuer()
	if err := is.Validate(); err != nil {
		return nil, err
	}
	return is, nil
}

// decodeJWTIssuerUpdate validates the body unless it names no key source: then the
// stored secret may complete it, and the store validates.
func decodeJWTIssuerUpdate(ct string, body []byte, limit int) (*tenants.Issuer, *int64, error) {
	var b jwtIssuerUpdate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	is := b.issuer()
	if is.JWKSURL != "" || is.Keys != nil || is.HS256Secret != "" {
		if err := is.Validate(); err != nil {
			return nil, nil, err
		}
	}
	return is, b.Version, nil
}

// public is the issuer as clients see it: without the secret.
func publicIssuer(is *tenants.Issuer) *tenants.Issuer {
	c := *is
	c.HS256Secret = ""
	return &c
}
