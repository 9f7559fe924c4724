package tenants

import "fmt"

// Cache makes the edge keep a route's answers in memory and serve repeats without the
// upstream. Only GET requests are cached, and only 200, 203, 301 and 404 answers with a
// buffered body that say nothing against it (Cache-Control no-store, no-cache or
// private, a Set-Cookie, or Vary: *). The key is the path, query and the Vary headers'
// values, plus the consumer on routes that authenticate (unless Shared); a key holds one
// answer per value of the request headers the upstream's own Vary names, a few at most.
// An answer to a request carrying a credential (Authorization, Cookie, X-API-Key) goes
// to another caller only when the route is Shared and the answer public or s-maxage.
type Cache struct {
	// TTLMS is how long an answer is served, in ms; the upstream's s-maxage (else
	// max-age) shortens it.
	TTLMS int `json:"ttl_ms"`
	// MaxEntries bounds the answers kept. Default: DefaultCacheEntries.
	MaxEntries int `json:"max_entries,omitempty"`
	// MaxBodyBytes is the largest body kept. Default: DefaultCacheBodyBytes.
	MaxBodyBytes int `json:"max_body_bytes,omitempty"`
	// Vary names request headers whose values are part of the key.
	Vary []string `json:"vary,omitempty"`
	// Shared lets an answer made for one caller's credentials (the consumer on a route
	// that authenticates, an Authorization, Cookie or X-API-Key the edge passes on) serve
	// other callers, when the upstream made it public or gave it an s-maxage. Default:
	// false, each caller's answers are its own.
	Shared bool `json:"shared,omitempty"`
}

// Cache limits and defaults. A route's cache holds at most MaxCacheRouteBytes of
// bodies whatever its settings.
const (
	MaxCacheTTLMS         = 86_400_000
	DefaultCacheEntries   = 1000
	MaxCacheEntries       = 100_000
	DefaultCacheBodyBytes = 64 << 10
	MaxCacheBodyBytes     = 8 << 20
	MaxCacheRouteBytes    = 64 << 20
	MaxCacheVary          = 8
)

// Validate checks c and fills its defaults; field paths start with "cache.".
func (c *Cache) Validate() error {
	if c == nil {
		return nil
	}
	if c.TTLMS < 1 || c.TTLMS > MaxCacheTTLMS {
		return Invalid("cache.ttl_ms", "must be between 1 and %d, got %d", MaxCacheTTLMS, c.TTLMS)
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultCacheEntries
	}
	if c.MaxEntries < 1 || c.MaxEntries > MaxCacheEntries {
		return Invalid("cache.max_entries", "must be between 1 and %d, got %d", MaxCacheEntries, c.MaxEntries)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultCacheBodyBytes
	}
	if c.MaxBodyBytes < 1 || c.MaxBodyBytes > MaxCacheBodyBytes {
		return Invalid("cache.max_body_bytes", "must be between 1 and %d, got %d", MaxCacheBodyBytes, c.MaxBodyBytes)
	}
	if len(c.Vary) > MaxCacheVary {
		return Invalid("cache.vary", "may have at most %d headers, got %d", MaxCacheVary, len(c.Vary))
	}
	for i, n := range c.Vary {
		if n == "" || len(n) > MaxHeaderNameLen {
			return Invalid(fmt.Sprintf("cache.vary[%d]", i), "header name must be 1–%d bytes", MaxHeaderNameLen)
		}
		for j := 0; j < len(n); j++ {
			if !isTokenChar(n[j]) {
				return Invalid(fmt.Sprintf("cache.vary[%d]", i), "%q is not a valid header name (byte %d is not a token character)", n, j)
			}
		}
		if err := requestHeaderName(n); err != nil {
			return Invalid(fmt.Sprintf("cache.vary[%d]", i), "%v", err)
		}
	}
	return nil
}
