package edge

import (
	"time"

	"tollgate/edge/cache"
)

// SetCacheClock replaces the response cache's clock until the returned restore is called.
func SetCacheClock(now func() time.Time) (restore func()) { return cache.SetClock(now) }

// CacheEntries is how many answers the cache of the route serving GET path of the
// tenant slug keeps.
func CacheEntries(e *Edge, slug, path string) int {
	rt, _ := e.Snapshot(slug).routes.Lookup([]byte("GET"), []byte(path))
	if rt == nil || rt.cache == nil {
		return -1
	}
	return rt.cache.Len()
}

// CacheMaxVariants is the most answers one key of a route's cache holds.
const CacheMaxVariants = cache.MaxVariants
