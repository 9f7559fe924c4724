package edge

import (
	"crypto/sha256"

	"tollgate/edge/meter"
)

// apiKey is one entry of a snapshot's key table.
type apiKey struct {
	consumer *Consumer
	// expires is the key's expiry in Unix seconds (0: never). It is compared with the
	// request's arrival, so a key lapses when the clock passes it, with no config change.
	expires int64
	// use reports the key's last use (nil: metering off). The handle outlives the
	// snapshot: it is made when the key's entry first arrives and kept by every
	// recompile, so a config change does not report the key again.
	use *meter.Key
}

// keyAuthStep authenticates a request by its X-API-Key: the key's SHA-256 is looked up
// in the tenant's key table, a map keyed by the fixed-size hash, so the lookup's timing
// says nothing about how much of a key matched. A key with neither an expiry nor a last
// use to note (metering off, or TOLLGATE_EDGE_KEY_LAST_USE=off) reads no clock; one with
// either reads the request's arrival second once, from the time fasthttp stamped on the
// request, and noting the use is then, but once an interval, an inlined atomic load.
func keyAuthStep(rt *route, next handler) handler {
	keys := rt.snapshot
	return func(x *exchange) {
		k := x.hs.apiKey
		if len(k) == 0 {
			x.fail(replyNoKey)
			return
		}
		sum := sha256.Sum256(k)
		ak, ok := keys.keys[sum]
		if !ok {
			x.fail(replyBadKey)
			return
		}
		if ak.expires != 0 || ak.use != nil {
			at := x.ctx.Time().Unix()
			if ak.expires != 0 && at >= ak.expires {
				x.fail(replyExpiredKey)
				return
			}
			ak.use.Use(at)
		}
		x.consumer = ak.consumer
		x.hideKey = true
		next(x)
	}
}
