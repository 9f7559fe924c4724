package jwtauth

import "time"

// Cached reports whether Verify would answer token at now from the verified-token cache.
func (v *Verifier) Cached(token []byte, now time.Time) bool {
	if v.cache == nil {
		return false
	}
	_, ok := v.cache.get(token, now)
	return ok
}
