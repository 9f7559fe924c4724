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

// Idle reports whether no fetch of any key set the cache holds is running: a test that
// saw the provider hit waits for this before it looks at the set the fetch produced or
// moves the clock on (a fetch still running would absorb the next refetch).
func (c *JWKSCache) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, wp := range c.sources {
		s := wp.Value()
		if s == nil {
			continue
		}
		s.mu.Lock()
		running := s.fetching != nil
		s.mu.Unlock()
		if running {
			return false
		}
	}
	return true
}
