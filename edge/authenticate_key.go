package edge

import "crypto/sha256"

// keyAuthStep authenticates a request by its X-API-Key: the key's SHA-256 is looked up
// in the tenant's key table, a map keyed by the fixed-size hash, so the lookup's timing
// says nothing about how much of a key matched.
func keyAuthStep(rt *route, next handler) handler {
	keys := rt.snapshot
	return func(x *exchange) {
		k := x.hs.apiKey
		if len(k) == 0 {
			x.fail(replyNoKey)
			return
		}
		sum := sha256.Sum256(k)
		c := keys.consumerByKey(&sum)
		if c == nil {
			x.fail(replyBadKey)
			return
		}
		x.consumer = c
		x.hideKey = true
		next(x)
	}
}
