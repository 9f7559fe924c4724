package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"math/big"
	"slices"
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

// RSA modulus bounds: below 2048 bits is breakable or nearly so; above 4096 a key
// becomes a way to make every verification cost milliseconds.
const (
	minRSABits = 2048
	maxRSABits = 4096
	maxKidLen  = 256
)

var b64 = base64.RawURLEncoding.Strict()

// parseJWK turns a JWK into a verification key with its algorithm pinned. On error,
// field names the offending member ("n", "crv"…) or is empty for the key as a whole.
// The key's own "alg", "kty" and "crv" decide the algorithm; nothing about a token ever
// does.
func parseJWK(j *JWK) (*verificationKey, string, error) {
	for _, p := range []struct{ name, v string }{{"d", j.D}, {"p", j.P}, {"q", j.Q}, {"dp", j.DP}, {"dq", j.DQ}, {"qi", j.QI}, {"k", j.K}} {
		if p.v != "" {
			if p.name == "k" {
				return nil, "k", fmt.Errorf("symmetric (oct) keys are not accepted here: give a shared secret as hs256_secret")
			}
			return nil, p.name, fmt.Errorf("is private key material: give the public key only (and replace this key, it has been disclosed)")
		}
	}
	if len(j.Kid) > maxKidLen {
		return nil, "kid", fmt.Errorf("must be at most %d characters", maxKidLen)
	}
	if j.Use != "" && j.Use != "sig" {
		return nil, "use", fmt.Errorf("is %q; only signature keys (\"sig\") verify tokens", j.Use)
	}
	if j.KeyOps != nil && !slices.Contains(j.KeyOps, "verify") {
		return nil, "key_ops", fmt.Errorf("does not include \"verify\"")
	}
	k := &verificationKey{kid: j.Kid}
	switch j.Kty {
	case "RSA":
		switch j.Alg {
		case "", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
			k.alg = j.Alg
		default:
			return nil, "alg", fmt.Errorf("%q is not an RSA signature algorithm this edge verifies (RS256/384/512, PS256/384/512)", j.Alg)
		}
		nb, err := b64.DecodeString(j.N)
		if err != nil || len(nb) == 0 {
			return nil, "n", fmt.Errorf("must be the modulus in unpadded base64url")
		}
		if nb[0] == 0 {
			return nil, "n", fmt.Errorf("must not have leading zero bytes")
		}
		n := new(big.Int).SetBytes(nb)
		if bits := n.BitLen(); bits < minRSABits || bits > maxRSABits {
			return nil, "n", fmt.Errorf("is a %d-bit modulus; RSA keys must have %d to %d bits", bits, minRSABits, maxRSABits)
		}
		if n.Bit(0) == 0 {
			return nil, "n", fmt.Errorf("is even, which no RSA modulus is")
		}
		eb, err := b64.DecodeString(j.E)
		if err != nil || len(eb) == 0 || len(eb) > 4 || eb[0] == 0 {
			return nil, "e", fmt.Errorf("must be the public exponent in unpadded base64url (at most 4 bytes, no leading zeros)")
		}
		e := 0
		for _, c := range eb {
			e = e<<8 | int(c)
		}
		if e < 3 || e > 1<<31-1 || e%2 == 0 {
			return nil, "e", fmt.Errorf("must be an odd exponent between 3 and 2^31-1, got %d", e)
		}
		k.key = &rsa.PublicKey{N: n, E: e}
	case "EC":
		var curve elliptic.Curve
		var alg string
		switch j.Crv {
		case "P-256":
			curve, alg = elliptic.P256(), "ES256"
		case "P-384":
			curve, alg = elliptic.P384(), "ES384"
		default:
			return nil, "crv", fmt.Errorf("%q is not supported; EC keys must be P-256 (ES256) or P-384 (ES384)", j.Crv)
		}
		if j.Alg != "" && j.Alg != alg {
			return nil, "alg", fmt.Errorf("is %q but a %s key verifies %s only", j.Alg, j.Crv, alg)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, errx := b64.DecodeString(j.X)
		y, erry := b64.DecodeString(j.Y)
		switch {
		case errx != nil || len(x) != size:
			return nil, "x", fmt.Errorf("must be the %d-byte x coordinate in unpadded base64url", size)
		case erry != nil || len(y) != size:
			return nil, "y", fmt.Errorf("must be the %d-byte y coordinate in unpadded base64url", size)
		}
		point := make([]byte, 0, 1+2*size)
		point = append(append(append(point, 4), x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, "x", fmt.Errorf("x and y are not a point on %s", j.Crv)
		}
		k.alg, k.key = alg, pub
	case "OKP":
		if j.Crv != "Ed25519" {
			return nil, "crv", fmt.Errorf("%q is not supported; OKP keys must be Ed25519 (EdDSA)", j.Crv)
		}
		if j.Alg != "" && j.Alg != "EdDSA" && j.Alg != "Ed25519" {
			return nil, "alg", fmt.Errorf("is %q but an Ed25519 key verifies EdDSA only", j.Alg)
		}
		x, err := b64.DecodeString(j.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, "x", fmt.Errorf("must be the %d-byte public key in unpadded base64url", ed25519.PublicKeySize)
		}
		k.alg, k.key = "EdDSA", ed25519.PublicKey(x)
	case "oct":
		return nil, "kty", fmt.Errorf("symmetric (oct) keys are not accepted here: give a shared secret as hs256_secret")
	case "":
		return nil, "kty", fmt.Errorf("is required (RSA, EC or OKP)")
	default:
		return nil, "kty", fmt.Errorf("%q is not supported (RSA, EC or OKP)", j.Kty)
	}
	return k, "", nil
}
