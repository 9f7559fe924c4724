package jwtauth

import "tollgate/tenants"

// Issuer is one identity provider a tenant trusts: the domain type tenants.Issuer, with
// its Validate. Its config entry carries it to the edge.
type Issuer = tenants.Issuer

// JWK is one JSON Web Key (RFC 7517) of an inline key set: tenants.JWK.
type JWK = tenants.JWK

// Bounds of issuer settings, as package tenants defines them.
const (
	MaxAudiences        = tenants.MaxAudiences
	MaxInlineKeys       = tenants.MaxInlineKeys
	MaxIssuersPerTenant = tenants.MaxIssuersPerTenant
)
