package tenants

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// Secret prefixes tell a key from a token at a glance (and to secret scanners).
const (
	KeyPrefix   = "tg_"
	TokenPrefix = "tgt_"
)

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewSecret returns a fresh plaintext secret (prefix + 32 base62 characters, ~190 bits),
// the hex SHA-256 to store, and a short display prefix. A fast hash is right here: the
// secret has full entropy, so there is nothing for a slow hash to protect against, and the
// edge hashes every request's key.
func NewSecret(prefix string) (plain, hash, display string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	out := make([]byte, len(prefix), len(prefix)+32)
	copy(out, prefix)
	for _, c := range b {
		out = append(out, alphabet[int(c)%len(alphabet)])
	}
	plain = string(out)
	return plain, HashSecret(plain), plain[:len(prefix)+6]
}

// HashSecret is the stored form of a key or token.
func HashSecret(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return hex.EncodeToString(sum[:])
}
