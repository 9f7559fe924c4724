package jwtauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"tollgate/tenants"
)

// JWKSConfig configures a JWKSCache. Zero fields take the default in their comment.
type JWKSConfig struct {
	// CheckAddr vets every address a fetch would connect to; the edge passes its
	// UpstreamAddressRule.CheckAddr so a jwks_url can no more reach the metadata service or
	// the private network than an upstream can. Default: the zero UpstreamAddressRule, which
	// refuses every address that is not globally reachable.
	CheckAddr func(a netip.Addr, port int) error
	// AllowHTTPLoopback admits http:// key set URLs on a loopback host, and loopback
	// addresses, for tests against httptest servers. Default: false (https only).
	AllowHTTPLoopback bool
	// Timeout bounds one fetch: connect, TLS, headers and body. Default: 5s.
	Timeout time.Duration
	// MaxBytes caps a key set document; a larger one is a failed fetch. Default: 256 KiB.
	MaxBytes int64
	// MinInterval is the least time between two fetches of one key set, whatever asks
	// (an unknown kid, a stale set, a failure): tokens with made-up kids cannot make the
	// edge hammer the provider. Default: 10s.
	MinInterval time.Duration
	// Refresh is how long a fetched set is used before it is refetched (in the
	// background, the old set serving meanwhile) when the response carries no
	// Cache-Control max-age. Default: 5m.
	Refresh time.Duration
	// MinRefresh and MaxRefresh bound a max-age (and no-cache/no-store, which count as
	// 0). Defaults: 1m and 1h.
	MinRefresh, MaxRefresh time.Duration
	// Now is the clock of fetch scheduling. Default: time.Now.
	Now func() time.Time
	// Logger receives one line per failed fetch and per changed set. Default: slog.Default().
	Logger *slog.Logger
}

// Key set fetch defaults.
const (
	DefaultJWKSTimeout     = 5 * time.Second
	DefaultJWKSMaxBytes    = 256 << 10
	DefaultJWKSMinInterval = 10 * time.Second
	DefaultJWKSRefresh     = 5 * time.Minute
	DefaultJWKSMinRefresh  = time.Minute
	DefaultJWKSMaxRefresh  = time.Hour
	maxJWKSKeys            = 100
)

// JWKSCache fetches and keeps the JWK sets of jwks_url issuers for the whole edge. One
// cache serves every tenant, but a set is keyed by tenant and URL, so no tenant's
// fetches, failures or rate limits touch another's. Verifiers built for successive
// snapshots of a tenant share the tenant's sets, so a config change neither refetches
// nor forgets keys; a set no verifier refers to any more is dropped by the garbage
// collector (the cache holds it weakly).
type JWKSCache struct {
	cfg    JWKSConfig
	client *http.Client

	mu      sync.Mutex
	sources map[string]weak.Pointer[keySource]
}

// NewJWKSCache returns an empty cache.
func NewJWKSCache(cfg JWKSConfig) *JWKSCache {
	if cfg.CheckAddr == nil {
		cfg.CheckAddr = (&tenants.UpstreamAddressRule{}).CheckAddr
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultJWKSTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultJWKSMaxBytes
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultJWKSMinInterval
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultJWKSRefresh
	}
	if cfg.MinRefresh <= 0 {
		cfg.MinRefresh = DefaultJWKSMinRefresh
	}
	if cfg.MaxRefresh <= 0 {
		cfg.MaxRefresh = DefaultJWKSMaxRefresh
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &JWKSCache{cfg: cfg, sources: make(map[string]weak.Pointer[keySource])}
	c.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // the address check must see where we really connect
			DialContext:            c.dial,
			TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    cfg.Timeout,
			ResponseHeaderTimeout:  cfg.Timeout,
			MaxResponseHeaderBytes: 32 << 10,
			MaxIdleConnsPerHost:    1,
			IdleConnTimeout:        30 * time.Second,
			ForceAttemptHTTP2:      true,
		},
		Timeout: cfg.Timeout,
		// A redirect could lead anywhere, including to plain http; providers publish
		// the final URL, so it is a failed fetch.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// dial resolves the host itself, checks every address and connects to a checked one,
// so a name that resolves (or is rebound) somewhere refused never reaches it.
func (c *JWKSCache) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if c.cfg.AllowHTTPLoopback && a.Unmap().IsLoopback() {
			continue
		}
		if err := c.cfg.CheckAddr(a, port); err != nil {
			return nil, fmt.Errorf("key set host %s: %w", host, err)
		}
	}
	var d net.Dialer
	var last error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		last = err
	}
	if last == nil {
		last = errors.New("the host has no address")
	}
	return nil, last
}

// source returns the tenant's key set for url, shared with earlier verifiers of the
// tenant while any of them is alive.
func (c *JWKSCache) source(tenantID, url string) *keySource {
	key := tenantID + "\x00" + url
	c.mu.Lock()
	defer c.mu.Unlock()
	if wp, ok := c.sources[key]; ok {
		if s := wp.Value(); s != nil {
			return s
		}
	}
	s := &keySource{c: c, tenantID: tenantID, url: url}
	wp := weak.Make(s)
	c.sources[key] = wp
	runtime.AddCleanup(s, c.forget, sourceKey{key, wp})
	return s
}

type sourceKey struct {
	key string
	wp  weak.Pointer[keySource]
}

func (c *JWKSCache) forget(k sourceKey) {
	c.mu.Lock()
	if c.sources[k.key] == k.wp {
		delete(c.sources, k.key)
	}
	c.mu.Unlock()
}

// Len is the number of key sets held (for metrics and tests).
func (c *JWKSCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, wp := range c.sources {
		if wp.Value() != nil {
			n++
		}
	}
	return n
}

// keySet is one fetched (or inline) set of verification keys. It is never modified.
type keySet struct {
	byKid   map[string][]*verificationKey
	kidless []*verificationKey
	all     []*verificationKey
	sum     [32]byte // of the document it came from; an identical refetch keeps the set
}

func newKeySet(keys []*verificationKey) *keySet {
	s := &keySet{byKid: make(map[string][]*verificationKey, len(keys)), all: keys}
	for _, k := range keys {
		if k.kid == "" {
			s.kidless = append(s.kidless, k)
		} else {
			s.byKid[k.kid] = append(s.byKid[k.kid], k)
		}
	}
	return s
}

// keySource is a jwks_url's key set with its fetch state.
type keySource struct {
	c        *JWKSCache
	tenantID string
	url      string

	set     atomic.Pointer[keySet] // nil until the first good fetch
	staleAt atomic.Int64           // unix nanos after which the set is refetched

	mu          sync.Mutex
	fetching    chan struct{} // closed when the running fetch ends; nil when none runs
	lastAttempt time.Time
	fetches     atomic.Int64 // fetch attempts, for tests and metrics
	lastErr     error
}

// touch starts a background refetch when the set has grown stale (or was never
// fetched); the request goes on with the set it has. It is the hot path: one atomic load
// and a clock read when nothing is due.
func (s *keySource) touch(now time.Time) {
	if now.UnixNano() < s.staleAt.Load() {
		return
	}
	s.start(now)
}

// refresh fetches the set now, unless a fetch of it began less than MinInterval ago,
// and waits for the fetch (or the one already running) to end. It reports whether the
// set may have changed.
func (s *keySource) refresh(now time.Time) bool {
	ch := s.start(now)
	if ch == nil {
		return false
	}
	<-ch
	return true
}

// start begins a fetch if none runs and the rate limit allows; it returns the channel
// of the running fetch, or nil when none runs.
func (s *keySource) start(now time.Time) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fetching != nil {
		return s.fetching
	}
	if !s.lastAttempt.IsZero() && now.Sub(s.lastAttempt) < s.c.cfg.MinInterval {
		return nil
	}
	s.lastAttempt = now
	ch := make(chan struct{})
	s.fetching = ch
	go s.fetch(ch)
	return ch
}

func (s *keySource) fetch(done chan struct{}) {
	s.fetches.Add(1)
	set, maxAge, err := s.get()
	now := s.c.cfg.Now()
	log := s.c.cfg.Logger
	if err != nil {
		// Try again when the rate limit allows, not on every request meanwhile.
		s.staleAt.Store(now.Add(s.c.cfg.MinInterval).UnixNano())
		if s.set.Load() != nil {
			// Keep serving the last good set; try again when the rate limit allows.
			log.Warn("jwtauth: key set fetch failed; keeping the last good set", "tenant", s.tenantID, "url", s.url, "err", err)
		} else {
			log.Warn("jwtauth: key set fetch failed; the issuer's tokens are refused until one succeeds", "tenant", s.tenantID, "url", s.url, "err", err)
		}
	} else {
		refresh := s.c.cfg.Refresh
		if maxAge >= 0 {
			refresh = min(max(maxAge, s.c.cfg.MinRefresh), s.c.cfg.MaxRefresh)
		}
		s.staleAt.Store(now.Add(refresh).UnixNano())
		if old := s.set.Load(); old == nil || old.sum != set.sum {
			s.set.Store(set)
			log.Info("jwtauth: key set loaded", "tenant", s.tenantID, "url", s.url, "keys", len(set.all), "refresh", refresh)
		}
	}
	s.mu.Lock()
	s.lastErr = err
	s.fetching = nil
	s.mu.Unlock()
	close(done)
}

// get fetches and parses the set. maxAge is the response's Cache-Control max-age, or -1.
func (s *keySource) get() (*keySet, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	req.Header.Set("User-Agent", "tollgate-edge")
	resp, err := s.c.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.c.cfg.MaxBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(body)) > s.c.cfg.MaxBytes {
		return nil, 0, fmt.Errorf("the key set is over %d bytes", s.c.cfg.MaxBytes)
	}
	set, err := parseKeySet(body)
	if err != nil {
		return nil, 0, err
	}
	return set, maxAge(resp.Header.Values("Cache-Control")), nil
}

// parseKeySet reads a JWK set document. Keys this edge cannot use (encryption keys,
// other curves, malformed members) are skipped, as a provider may publish those for
// other consumers; a document that is not a set, or whose keys are all unusable, is an
// error, and the last good set stays. A well-formed empty set is taken as it is: the
// provider has withdrawn every key.
func parseKeySet(body []byte) (*keySet, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("the key set is not a JWK set: %v", err)
	}
	if doc.Keys == nil {
		return nil, errors.New("the key set has no \"keys\" array")
	}
	if len(doc.Keys) > maxJWKSKeys {
		return nil, fmt.Errorf("the key set has %d keys, more than %d", len(doc.Keys), maxJWKSKeys)
	}
	keys := make([]*verificationKey, 0, len(doc.Keys))
	var firstErr error
	for _, raw := range doc.Keys {
		var j JWK
		if err := json.Unmarshal(raw, &j); err != nil {
			firstErr = firstOf(firstErr, err)
			continue
		}
		if j.D != "" || j.P != "" || j.Q != "" || j.K != "" {
			// A provider publishing private keys is broken; never use its public half either.
			firstErr = firstOf(firstErr, errors.New("a key carries private material"))
			continue
		}
		k, field, err := parseJWK(&j)
		if err != nil {
			firstErr = firstOf(firstErr, fmt.Errorf("key %q: %s %v", j.Kid, field, err))
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 && len(doc.Keys) > 0 {
		return nil, fmt.Errorf("no usable key in the set: %v", firstErr)
	}
	set := newKeySet(keys)
	set.sum = sha256.Sum256(body)
	return set, nil
}

func firstOf(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// maxAge reads max-age from Cache-Control values: -1 when absent, 0 for no-cache and
// no-store.
func maxAge(values []string) time.Duration {
	age := time.Duration(-1)
	for _, v := range values {
		for _, d := range strings.Split(v, ",") {
			d = strings.TrimSpace(strings.ToLower(d))
			switch {
			case d == "no-store" || d == "no-cache":
				return 0
			case strings.HasPrefix(d, "max-age="):
				if n, err := strconv.ParseInt(strings.Trim(d[len("max-age="):], `"`), 10, 64); err == nil && n >= 0 {
					if n > 1<<31 {
						n = 1 << 31
					}
					age = time.Duration(n) * time.Second
				}
			}
		}
	}
	return age
}
