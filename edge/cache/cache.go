// Package cache is the edge's response cache: a route's answers kept in memory (Cache),
// keyed by the request and the headers its upstream's Vary names, shared with another
// caller only as RFC 9111 allows, and bounded by each tenant's share of the edge's whole
// cache budget (Budget).
package cache

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// Cache is a route's in-memory answer cache (tenants.Cache). It is split into
// shards, each with its own lock, so concurrent requests of a hot route rarely wait on
// each other. Each shard evicts first-in first-out past its share of the route's entry
// and byte bounds; expired entries go when looked up or evicted. Every entry also counts
// against its tenant's share of the edge's cache budget (Budget), which may evict
// it to make room. A key holds one answer per combination of the values of the request
// headers the upstream's Vary names (vary.go).
type Cache struct {
	ttl     time.Duration
	maxBody int
	vary    [][]byte
	// varyCreds: the credentials the route's vary names, whose values are in the key.
	varyCreds uint8
	perUser   bool // the consumer is part of the key
	// shared: an answer may go to callers with other credentials when it is public.
	shared bool
	// bearerAuth: the edge itself reads Authorization on this route (jwt, key_or_jwt).
	bearerAuth bool
	seed       maphash.Seed
	now        func() time.Time
	tenant     *Tenant
	// dead: the route changed or went; its entries are gone and no more are kept. Set
	// before the shards are emptied, read under a shard's lock.
	dead     atomic.Bool
	shards   [cacheShards]cacheShard
	nshards  int // the shards in use: fewer for a small cache
	maxCount int // per shard
	maxBytes int // per shard
}

// cacheShards is the most shards a route's cache has; cacheShardEntries the fewest
// entries a shard is given. Keys fall into shards by hash, unevenly: a shard sized for a
// handful of entries would evict while the route's cache is nearly empty (with 16
// entries in 16 shards, two keys in one shard already evict each other).
const (
	cacheShards       = 16
	cacheShardEntries = 64
)

type cacheShard struct {
	mu         sync.Mutex
	m          map[string]*cacheKey
	head, tail *Entry // insertion order, for the route's own bounds
	bytes      int
	count      int // answers held, every key's variants together
}

// cacheKey is what one key holds: its answers, one per combination of the values of the
// request headers its upstream's Vary names (none: one answer). It is in its shard's map
// while it holds an answer; both fields change under the shard's lock only.
type cacheKey struct {
	vary     [][]byte  // the names, lower case, from the latest answer kept
	variants []*Entry  // oldest first, at most MaxVariants
	one      [1]*Entry // variants' first array: a key without Vary costs no second allocation
}

// Entry is one kept answer. Its answer fields never change once stored; the links
// are its shard's (under the shard's lock) and its tenant's (under the tenant's lock).
type Entry struct {
	status  int
	header  [][2][]byte
	body    []byte
	stored  time.Time
	expires time.Time
	size    int // what it counts against the route, the tenant and the edge

	varyNames [][]byte // the upstream's Vary, lower case
	varyVals  []byte   // the storing request's values of them (appendVaryValues)

	key          string
	ck           *cacheKey // nil once removed (under the shard's lock)
	shard        *cacheShard
	tenant       *Tenant
	sprev, snext *Entry
	tprev, tnext *Entry
}

// cacheEntryOverhead is what an entry costs beyond its bytes: the entry itself, its map
// slot and the allocations' rounding. Each header adds cacheHeaderOverhead (its slice
// element and two allocations).
const (
	cacheEntryOverhead  = 256
	cacheHeaderOverhead = 64
)

// cacheClock is the cache's clock; tests replace it (SetClock).
var cacheClock = time.Now

// SetClock replaces the cache's clock until the returned restore is called; for tests.
func SetClock(now func() time.Time) (restore func()) {
	old := cacheClock
	cacheClock = now
	return func() { cacheClock = old }
}

func New(c *tenants.Cache, auth string, t *Tenant) *Cache {
	rc := &Cache{
		ttl:        time.Duration(c.TTLMS) * time.Millisecond,
		maxBody:    c.MaxBodyBytes,
		perUser:    auth != tenants.AuthNone && auth != "" && !c.Shared,
		shared:     c.Shared,
		bearerAuth: auth == tenants.AuthJWT || auth == tenants.AuthKeyOrJWT,
		seed:       maphash.MakeSeed(),
		now:        func() time.Time { return cacheClock() },
		tenant:     t,
	}
	for _, v := range c.Vary {
		rc.vary = append(rc.vary, []byte(v))
		rc.varyCreds |= credentialOf([]byte(v))
	}
	rc.nshards = min(max(c.MaxEntries/cacheShardEntries, 1), cacheShards)
	rc.maxCount = (c.MaxEntries + rc.nshards - 1) / rc.nshards
	total := min(c.MaxEntries*c.MaxBodyBytes, tenants.MaxCacheRouteBytes)
	rc.maxBytes = max(total/rc.nshards, c.MaxBodyBytes)
	for i := range rc.shards[:rc.nshards] {
		rc.shards[i].m = make(map[string]*cacheKey)
	}
	return rc
}

// AppendKey appends to dst the cache key of a request for path and query with header
// h, made by the consumer consumerID ("" when none).
func (rc *Cache) AppendKey(dst, path, query []byte, h *fasthttp.RequestHeader, consumerID string) []byte {
	dst = append(dst, path...)
	dst = append(dst, 0)
	dst = append(dst, query...)
	for _, v := range rc.vary {
		dst = append(dst, 0)
		dst = append(dst, h.PeekBytes(v)...)
	}
	if rc.perUser {
		dst = append(dst, 0)
		dst = append(dst, consumerID...)
	}
	return dst
}

// Now is the time by the cache's clock.
func (rc *Cache) Now() time.Time { return rc.now() }

// BearerAuth reports whether the edge itself reads Authorization on the cache's route.
func (rc *Cache) BearerAuth() bool { return rc.bearerAuth }

// Len is how many answers the cache keeps.
func (rc *Cache) Len() int {
	n := 0
	for i := range rc.shards {
		s := &rc.shards[i]
		s.mu.Lock()
		n += s.count
		s.mu.Unlock()
	}
	return n
}

// Write answers resp with e at now; scratch is a buffer it may use, returned for reuse.
func (e *Entry) Write(resp *fasthttp.Response, now time.Time, scratch []byte) []byte {
	resp.SetStatusCode(e.status)
	for _, kv := range e.header {
		resp.Header.SetBytesKV(kv[0], kv[1])
	}
	// SetBytesKV copies: scratch may be reused once Age is set.
	scratch = strconv.AppendInt(scratch[:0], int64(now.Sub(e.stored)/time.Second), 10)
	resp.Header.SetBytesKV(hdrAge, scratch)
	resp.Header.SetBytesKV(hdrXCache, strHit)
	resp.SetBodyRaw(e.body)
	return scratch
}

// SetMiss marks an answer that did not come from the cache.
func SetMiss(h *fasthttp.ResponseHeader) { h.SetBytesKV(hdrXCache, strMiss) }

func (rc *Cache) shard(k []byte) *cacheShard {
	return &rc.shards[maphash.Bytes(rc.seed, k)%uint64(rc.nshards)]
}

// get returns the live answer kept under the key buf[:n] for a request whose raw header
// block is raw and whose consumer is consumer, or nil. When the key's answers vary, the
// request's values are appended to buf[n:] to be compared; get returns buf for reuse.
func (rc *Cache) Get(buf []byte, n int, now time.Time, raw, consumer []byte) (*Entry, []byte) {
	k := buf[:n]
	s := rc.shard(k)
	s.mu.Lock()
	var e *Entry
	if ck := s.m[string(k)]; ck != nil {
		if len(ck.vary) == 0 {
			e = ck.variants[0]
		} else {
			buf = appendVaryValues(buf[:n], ck.vary, raw, consumer)
			for _, v := range ck.variants {
				if bytes.Equal(v.varyVals, buf[n:]) {
					e = v
					break
				}
			}
		}
	}
	if e != nil && !now.Before(e.expires) {
		s.removeLocked(e)
		e = nil
	}
	s.mu.Unlock()
	return e, buf
}

// put keeps e (its key, size and tenant set) when the tenant's share of the edge's
// budget has room for it or can be made to: otherwise the answer is simply not kept.
func (rc *Cache) Put(e *Entry) {
	t := e.tenant
	if !t.reserve(int64(e.size)) {
		return
	}
	s := rc.shard([]byte(e.key))
	s.mu.Lock()
	if rc.dead.Load() {
		s.mu.Unlock()
		t.unreserve(int64(e.size))
		return
	}
	if ck := s.m[e.key]; ck != nil {
		if !sameNames(ck.vary, e.varyNames) {
			// The upstream varies on other headers now: the older answers were chosen
			// by the old ones.
			for len(ck.variants) > 0 {
				s.removeLocked(ck.variants[0])
			}
		} else {
			for _, v := range ck.variants {
				if bytes.Equal(v.varyVals, e.varyVals) {
					s.removeLocked(v)
					break
				}
			}
			for len(ck.variants) >= MaxVariants {
				s.removeLocked(ck.variants[0])
			}
		}
	}
	for s.head != nil && (s.count >= rc.maxCount || s.bytes+e.size > rc.maxBytes) {
		s.removeLocked(s.head)
	}
	ck := s.m[e.key]
	if ck == nil {
		ck = &cacheKey{vary: e.varyNames}
		ck.variants = ck.one[:0]
		s.m[e.key] = ck
	}
	ck.variants = append(ck.variants, e)
	e.ck, e.shard = ck, s
	e.sprev = s.tail
	if s.tail != nil {
		s.tail.snext = e
	} else {
		s.head = e
	}
	s.tail = e
	s.bytes += e.size
	s.count++
	t.link(e)
	s.mu.Unlock()
}

// removeLocked takes e out of its shard, its tenant's list and the budget (the caller
// holds s.mu). Whoever removes an entry from its shard's map does all three, once.
func (s *cacheShard) removeLocked(e *Entry) {
	ck := e.ck
	for i, v := range ck.variants {
		if v == e {
			ck.variants = slices.Delete(ck.variants, i, i+1)
			break
		}
	}
	if len(ck.variants) == 0 {
		delete(s.m, e.key)
	}
	e.ck = nil
	if e.sprev != nil {
		e.sprev.snext = e.snext
	} else {
		s.head = e.snext
	}
	if e.snext != nil {
		e.snext.sprev = e.sprev
	} else {
		s.tail = e.sprev
	}
	e.sprev, e.snext = nil, nil
	s.bytes -= e.size
	s.count--
	e.tenant.unlink(e)
}

// drop empties the cache of a route that changed or went, and keeps it empty for the
// requests still running on the old route.
func (rc *Cache) Drop() {
	rc.dead.Store(true)
	for i := range rc.shards {
		s := &rc.shards[i]
		s.mu.Lock()
		for s.head != nil {
			s.removeLocked(s.head)
		}
		s.mu.Unlock()
	}
}

var (
	hdrXCache     = []byte("X-Cache")
	hdrAge        = []byte("Age")
	strHit        = []byte("HIT")
	strMiss       = []byte("MISS")
	strNoStore    = []byte("no-store")
	strNoCache    = []byte("no-cache")
	strPrivate    = []byte("private")
	strPublic     = []byte("public")
	strMaxAge     = []byte("max-age=")
	strSMaxAge    = []byte("s-maxage=")
	hdrCacheCtl   = []byte("Cache-Control")
	notCachedHdrs = map[string]bool{"content-length": true, "set-cookie": true, "age": true, "x-cache": true,
		"x-request-id": true, "connection": true, "transfer-encoding": true, "date": true}
)

// EntryFor is the upstream's answer to c as a cache entry, or nil when it may not be kept.
func (rc *Cache) EntryFor(resp *fasthttp.Response, now time.Time, c *Caller, key string) *Entry {
	switch resp.StatusCode() {
	case 200, 203, 301, 404:
	default:
		return nil
	}
	if resp.IsBodyStream() { // a large or unsized body streams through uncached
		return nil
	}
	ttl, public, ok := rc.allowed(resp.Header.PeekBytes(hdrCacheCtl))
	if !ok {
		return nil
	}
	names, ok := upstreamVary(&resp.Header)
	if !ok || !rc.mayKeep(c, names, public) {
		return nil
	}
	body := resp.Body()
	if len(body) > rc.maxBody {
		return nil
	}
	if len(body)+len(key)+cacheEntryOverhead > rc.tenant.limitNow() {
		return nil // could never be kept: do not copy it
	}
	e := &Entry{status: resp.StatusCode(), body: append([]byte(nil), body...), stored: now, expires: now.Add(ttl),
		key: key, tenant: rc.tenant, varyNames: names}
	// The body's capacity is its allocation's size class, what it really holds.
	e.size = cap(e.body) + len(key) + cacheEntryOverhead
	if len(names) > 0 {
		e.varyVals = appendVaryValues(nil, names, c.Raw, c.Consumer)
		e.size += cap(e.varyVals)
		for _, n := range names {
			e.size += len(n) + cacheHeaderOverhead
		}
	}
	for k, v := range resp.Header.All() {
		if bytes.EqualFold(k, strSetCookieName) {
			return nil // a cookie is one client's
		}
		if notCachedHdrs[string(bytes.ToLower(k))] {
			continue
		}
		e.header = append(e.header, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
		e.size += len(k) + len(v) + cacheHeaderOverhead
	}
	return e
}

var strSetCookieName = []byte("Set-Cookie")

// allowed reads the upstream's Cache-Control: whether the answer may be kept, and for
// how long (s-maxage, else max-age, capping the route's TTL), and whether the upstream
// made it public (public or s-maxage).
func (rc *Cache) allowed(cc []byte) (ttl time.Duration, public, ok bool) {
	ttl = rc.ttl
	if len(cc) == 0 {
		return ttl, false, true
	}
	var maxAge, sMaxAge = -1, -1
	for len(cc) > 0 {
		var d []byte
		if i := bytes.IndexByte(cc, ','); i >= 0 {
			d, cc = cc[:i], cc[i+1:]
		} else {
			d, cc = cc, nil
		}
		d = bytes.TrimSpace(d)
		switch {
		case bytes.EqualFold(d, strNoStore), bytes.EqualFold(d, strNoCache), bytes.EqualFold(d, strPrivate),
			hasPrefixFold(d, strPrivate) && len(d) > len(strPrivate) && d[len(strPrivate)] == '=',
			hasPrefixFold(d, strNoCache) && len(d) > len(strNoCache) && d[len(strNoCache)] == '=':
			return 0, false, false
		case bytes.EqualFold(d, strPublic):
			public = true
		case hasPrefixFold(d, strSMaxAge):
			sMaxAge = atoiDelta(d[len(strSMaxAge):])
			public = true
		case hasPrefixFold(d, strMaxAge):
			maxAge = atoiDelta(d[len(strMaxAge):])
		}
	}
	limit := maxAge
	if sMaxAge >= 0 {
		limit = sMaxAge
	}
	if limit >= 0 {
		if limit == 0 {
			return 0, false, false
		}
		ttl = min(ttl, time.Duration(limit)*time.Second)
	}
	return ttl, public, true
}

func hasPrefixFold(s, prefix []byte) bool {
	return len(s) >= len(prefix) && bytes.EqualFold(s[:len(prefix)], prefix)
}

// atoiDelta reads a delta-seconds value; 0 (do not keep) when it is not a number.
func atoiDelta(b []byte) int {
	b = bytes.Trim(b, `"`)
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
