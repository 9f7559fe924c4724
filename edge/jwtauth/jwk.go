package jwtauth

import (
	"errors"

	"tollgate/tenants"
)

// verificationKey is a parsed public key and the one algorithm it verifies.
type verificationKey struct {
	kid string
	// alg is the pinned algorithm: the JWK's "alg", or what its curve implies. It is
	// empty only for an RSA key without "alg", which takes the issuer's sole RSA
	// algorithm (see pinned).
	alg string
	key any // *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey or []byte (HS256)
}

// pinned is the algorithm k verifies for an issuer whose sole RSA algorithm is rsaAlg.
func (k *verificationKey) pinned(rsaAlg string) string {
	if k.alg != "" {
		return k.alg
	}
	return rsaAlg
}

// maxKidLen bounds a kid, in a JWK and in a token header.
const maxKidLen = tenants.MaxKidLen

// parseJWK turns a JWK into a verification key with its algorithm pinned
// (tenants.JWK.PublicKey). On error, field names the offending member ("n", "crv"…) or
// is empty for the key as a whole.
func parseJWK(j *JWK) (*verificationKey, string, error) {
	k, err := j.PublicKey()
	if err != nil {
		var ke *tenants.JWKError
		if errors.As(err, &ke) {
			return nil, ke.Field, ke.Err
		}
		return nil, "", err
	}
	return &verificationKey{kid: k.Kid, alg: k.Alg, key: k.Key}, "", nil
}
