package api

import (
	"tollgate/tenants"
)

// JWT issuers: the identity providers whose tokens a tenant's "jwt" and "key_or_jwt"
// routes accept. The HS256 secret is write-only: the store keeps it (the edges verify
// with it) and no response carries it.

type jwtIssuerUpdate struct {
	tenants.Issuer
	Version *int64 `json:"version" doc:"The version the change is based on; or send If-Match."`
}

func decodeJWTIssuer(ct string, body []byte, limit int) (*tenants.Issuer, error) {
	var is tenants.Issuer
	if err := decodeBody(ct, body, limit, &is, false); err != nil {
		return nil, err
	}
	if err := is.Validate(); err != nil {
		return nil, err
	}
	return &is, nil
}

// decodeJWTIssuerUpdate validates the body unless it names no key source: then the
// stored secret may complete it, and the store validates.
func decodeJWTIssuerUpdate(ct string, body []byte, limit int) (*tenants.Issuer, *int64, error) {
	var b jwtIssuerUpdate
	if err := decodeBody(ct, body, limit, &b, false); err != nil {
		return nil, nil, err
	}
	is := &b.Issuer
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
