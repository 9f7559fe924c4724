package edge

import (
	"bytes"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// responseCache is a route's in-memory answer cache (tenants.Cache). It is split into
// shards, each with its own lock, so concurrent requests of a hot route rarely wait on
// each other. Each shard evicts first-in first-out past its share of the route's entry
// and byte bounds; expired entries go when looked up or evicted.
type responseCache struct {
	ttl     time.Duration
	maxBody int
	vary    [][]byte
	perUser bool // the consumer is part of the key
	// bearerAuth: the edge itself reads Authorization on this route (jwt, key_or_jwt).
	bearerAuth bool
	seed       maphash.Seed
	now        func() time.Time
	shards     [cacheShards]cacheShard
	maxCount   int // per shard
	maxBytes   int // per shard
}

const cacheShards = 16

type cacheShard struct {
	mu    sync.Mutex
	m     map[string]*cacheEntry
	order []string // insertion order, for eviction
	bytes int
}

// cacheEntry is one kept answer; never modified once stored.
type cacheEntry struct {
	status  int
	header  [][2][]byte
	body    []byte
	stored  time.Time
	expires time.Time
	size    int
}

// cacheClock is the cache's clock; tests replace it (export_test.go).
var cacheClock = time.Now

func newResponseCache(c *tenants.Cache, auth string) *responseCache {
	rc := &responseCache{
		ttl:        time.Duration(c.TTLMS) * time.Millisecond,
		maxBody:    c.MaxBodyBytes,
		perUser:    auth != tenants.AuthNone && auth != "" && !c.Shared,
		bearerAuth: auth == tenants.AuthJWT || auth == tenants.AuthKeyOrJWT,
		seed:       maphash.MakeSeed(),
		now:        func() time.Time { return cacheClock() },
	}
	for _, v := range c.Vary {
		rc.vary = append(rc.vary, []byte(v))
	}
	rc.maxCount = (c.MaxEntries + cacheShards - 1) / cacheShards
	total := min(c.MaxEntries*c.MaxBodyBytes, tenants.MaxCacheRouteBytes)
	rc.maxBytes = max(total/cacheShards, c.MaxBodyBytes)
	for i := range rc.shards {
		rc.shards[i].m = make(map[string]*cacheEntry)
	}
	return rc
}

// key appends the request's cache key to dst.
func (rc *responseCache) key(dst []byte, x *exchange) []byte {
	dst = append(dst, x.path...)
	dst = append(dst, 0)
	dst = append(dst, x.query...)
	for _, v := range rc.vary {
		dst = append(dst, 0)
		dst = append(dst, x.ctx.Request.Header.PeekBytes(v)...)
	}
	if rc.perUser {
		dst = append(dst, 0)
		if x.consumer != nil {
			dst = append(dst, x.consumer.ID...)
		}
	}
	return dst
}

func (rc *responseCache) shard(k []byte) *cacheShard {
	return &rc.shards[maphash.Bytes(rc.seed, k)%cacheShards]
}

func (rc *responseCache) get(k []byte, now time.Time) *cacheEntry {
	s := rc.shard(k)
	s.mu.Lock()
	e := s.m[string(k)]
	if e != nil && !now.Before(e.expires) {
		delete(s.m, string(k))
		s.bytes -= e.size
		e = nil
	}
	s.mu.Unlock()
	return e
}

func (rc *responseCache) put(k []byte, e *cacheEntry) {
	s := rc.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	key := string(k)
	if old := s.m[key]; old != nil {
		s.bytes -= old.size
	}
	for len(s.order) > 0 && (len(s.m) >= rc.maxCount || s.bytes+e.size > rc.maxBytes) {
		victim := s.order[0]
		s.order = s.order[1:]
		if v := s.m[victim]; v != nil && victim != key {
			delete(s.m, victim)
			s.bytes -= v.size
		}
	}
	// Keys of entries that expired or were replaced stay in order until they reach
	// its front; compact when it grows past twice the bound.
	if len(s.order) > 2*rc.maxCount {
		live := s.order[:0]
		for _, o := range s.order {
			if s.m[o] != nil {
				live = append(live, o)
			}
		}
		s.order = live
	}
	s.m[key] = e
	s.order = append(s.order, key)
	s.bytes += e.size
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

// cacheStep answers GET requests from the route's cache, and keeps what the rest of the
// chain answers when it may. It runs after auth, policy and limits, so a cached answer
// is still only given to callers that may have it and still counts.
func cacheStep(rt *route, next func(*exchange)) func(*exchange) {
	rc := rt.cache
	return func(x *exchange) {
		ctx := x.ctx
		if !ctx.IsGet() || rt.websocket && isWebSocketUpgrade(ctx.Request.Header.RawHeaders()) {
			next(x)
			return
		}
		k := x.scratch[:0]
		if rt.canary != nil && rt.pickUpstream(x) != rt.upstream {
			// The two sides may answer differently: each has its own entries (a primary
			// key starts with the path's "/").
			k = append(k, '!')
		}
		x.scratch = rc.key(k, x)
		now := rc.now()
		if e := rc.get(x.scratch, now); e != nil {
			resp := &ctx.Response
			resp.SetStatusCode(e.status)
			for _, kv := range e.header {
				resp.Header.SetBytesKV(kv[0], kv[1])
			}
			resp.Header.SetBytesKV(hdrAge, strconv.AppendInt(nil, int64(now.Sub(e.stored)/time.Second), 10))
			resp.Header.SetBytesKV(hdrXCache, strHit)
			resp.SetBodyRaw(e.body)
			return
		}
		key := append([]byte(nil), x.scratch...) // the chain reuses scratch
		// Credentials the edge did not consume, or cookies, make the answer the caller's
		// own unless the upstream says it is public (RFC 9111 §3.5).
		credentialed := len(ctx.Request.Header.Peek("Cookie")) > 0 ||
			!rc.bearerAuth && len(ctx.Request.Header.Peek("Authorization")) > 0
		next(x)
		resp := &ctx.Response
		if x.reply != nil {
			return
		}
		resp.Header.SetBytesKV(hdrXCache, strMiss)
		if e := rc.entry(resp, now, credentialed); e != nil {
			rc.put(key, e)
		}
	}
}

// entry is the upstream's answer as a cache entry, or nil when it may not be kept.
func (rc *responseCache) entry(resp *fasthttp.Response, now time.Time, credentialed bool) *cacheEntry {
	switch resp.StatusCode() {
	case 200, 203, 301, 404:
	default:
		return nil
	}
	if resp.IsBodyStream() { // a large or unsized body streams through uncached
		return nil
	}
	ttl, public, ok := rc.allowed(resp.Header.PeekBytes(hdrCacheCtl))
	if !ok || credentialed && !public {
		return nil
	}
	body := resp.Body()
	if len(body) > rc.maxBody {
		return nil
	}
	e := &cacheEntry{status: resp.StatusCode(), body: append([]byte(nil), body...), stored: now, expires: now.Add(ttl)}
	e.size = len(e.body) + 128
	for k, v := range resp.Header.All() {
		if bytes.EqualFold(k, strSetCookieName) {
			return nil // a cookie is one client's
		}
		if notCachedHdrs[string(bytes.ToLower(k))] {
			continue
		}
		e.header = append(e.header, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
		e.size += len(k) + len(v)
	}
	return e
}

var strSetCookieName = []byte("Set-Cookie")

// allowed reads the upstream's Cache-Control: whether the answer may be kept, and for
// how long (s-maxage, else max-age, capping the route's TTL), and whether the upstream
// made it public (public or s-maxage).
func (rc *responseCache) allowed(cc []byte) (ttl time.Duration, public, ok bool) {
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
