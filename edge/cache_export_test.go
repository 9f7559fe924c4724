package edge

import "time"

// SetCacheClock replaces the response cache's clock until the returned restore is called.
func SetCacheClock(now func() time.Time) (restore func()) {
	old := cacheClock
	cacheClock = now
	return func() { cacheClock = old }
}

// CacheEntries is how many answers the cache of the route serving GET path of the
// tenant slug keeps.
func CacheEntries(e *Edge, slug, path string) int {
	rt, _ := e.Snapshot(slug).routes.Lookup([]byte("GET"), []byte(path))
	if rt == nil || rt.cache == nil {
		return -1
	}
	n := 0
	for i := range rt.cache.shards {
		s := &rt.cache.shards[i]
		s.mu.Lock()
		n += s.count
		s.mu.Unlock()
	}
	return n
}

// CacheMaxVariants is the most answers one key of a route's cache holds.
const CacheMaxVariants = cacheMaxVariants
