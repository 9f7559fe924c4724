package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tollgate/tenants"
)

// Config configures a Limiter. Zero fields take the default named in their comment.
type Config struct {
	// Redis is the store edges share. It must honour context deadlines
	// (redis.Options.ContextTimeoutEnabled; NewRedisClient builds such a client).
	// Default: nil, every limit is local to this edge and there is one edge.
	Redis redis.UniversalClient
	// Prefix starts every Redis key ("<prefix>:rl:…", "<prefix>:q:…",
	// "<prefix>:edges"). Default: "tollgate".
	Prefix string
	// EdgeID names this edge in the live-edge set; unique per process.
	// Default: host name, process id and a random suffix.
	EdgeID string
	// Clock tells the time for limits and Redis timestamps. Default: time.Now.
	Clock func() time.Time
	// Logger receives one line per change between cluster and degraded mode.
	// Default: slog.Default().
	Logger *slog.Logger
	// Registerer, when set, receives the limiter's gauges and counters
	// (tollgate_limit_*). Default: none.
	Registerer prometheus.Registerer

	// MaxKeys bounds the in-process GCRA state (local mode and the local fallback):
	// 17 bytes a key, allocated once. Default: 1<<18 keys (4.25 MiB).
	MaxKeys int
	// MaxSyncedKeys bounds the keys counted in Redis in batches (approximate rates and
	// quotas): about 200 bytes a key. Default: 1<<16.
	MaxSyncedKeys int
	// MaxInflightKeys bounds the concurrency counters: 17 bytes a key. Default: 1<<16.
	MaxInflightKeys int

	// Timeout bounds every Redis call, on the request path and off it. Default: 50ms.
	Timeout time.Duration
	// SyncInterval is how often approximate counts and quota counts are pushed to
	// Redis and the shared state read back. A negative value runs no background loop
	// (tests drive Flush themselves). Default: 100ms.
	SyncInterval time.Duration
	// HeartbeatInterval is how often the edge records itself in the live-edge set.
	// Default: 1s.
	HeartbeatInterval time.Duration
	// EdgeTTL: an edge counts as live while its last heartbeat is younger. Default: 5s.
	EdgeTTL time.Duration
	// FailureThreshold consecutive Redis failures open the breaker: the limiter stops
	// calling Redis on the request path and enforces local shares. Default: 3.
	FailureThreshold int
	// ProbeInterval: while the breaker is open, Redis is probed this often; the first
	// answer closes it. Default: 500ms.
	ProbeInterval time.Duration
	// KeepAlive: a synced key is refreshed from Redis until it has had no request for
	// this long. Default: 2s.
	KeepAlive time.Duration
}

// Defaults.
const (
	DefaultTimeout       = 50 * time.Millisecond
	DefaultSyncInterval  = 100 * time.Millisecond
	DefaultMaxKeys       = 1 << 18
	DefaultMaxSynced     = 1 << 16
	DefaultMaxInflight   = 1 << 16
	DefaultPrefix        = "tollgate"
	defaultHeartbeat     = time.Second
	defaultEdgeTTL       = 5 * time.Second
	defaultThreshold     = 3
	defaultProbeInterval = 500 * time.Millisecond
	defaultKeepAlive     = 2 * time.Second
)

// MaxChecks is the number of concurrency caps AcquireAll takes for one request. (Allow
// takes any number of checks; the first 64 exact ones go to Redis in one call, any
// further ones are decided at the local share.)
const MaxChecks = 8

// Check is one limit a request is subject to: the rule and the part of its key that
// varies per request (a consumer id, a client IP; empty for a tenant- or route-wide
// limit). The limiter does not keep Key.
type Check struct {
	Rule *Rule
	Key  []byte
}

// Decision is the outcome of Allow. When Allowed, Limit, Remaining and Reset describe the
// tightest limit (the fewest requests left); when not, the limit that refused, with
// RetryAfter the time until it would admit. Limit 0 means no rate or quota applied.
type Decision struct {
	Allowed bool
	// Code is "" when allowed, else tenants.ERateLimited, tenants.EQuotaExceeded or
	// (AcquireAll) tenants.EOverloaded.
	Code string
	// Limit is the bucket size (burst) of a rate, the monthly requests of a quota.
	Limit     int64
	Remaining int64
	// Reset is the time until the bucket is full again, or until the quota's month ends.
	Reset      time.Duration
	RetryAfter time.Duration
	Rule       *Rule // the limit reported
	// Degraded: some limit was decided from this edge's local share because Redis was
	// unavailable.
	Degraded bool
}

// Limiter decides whether requests are within their limits. It is safe for concurrent
// use; its request path takes no lock shared between keys.
type Limiter struct {
	rdb    redis.UniversalClient
	prefix string
	edgeID string
	clock  func() time.Time
	log    *slog.Logger
	seed   maphash.Seed
	reg    prometheus.Registerer
	colls  []prometheus.Collector

	timeout, syncEvery, beatEvery, edgeTTL, probeEvery, keepAlive time.Duration
	threshold                                                     int32

	rates    *table
	inflight *table
	entries  *etable

	edges       atomic.Int64 // live edges, at least 1
	open        atomic.Bool  // breaker open: degraded
	fails       atomic.Int32
	openedAt    atomic.Int64 // wall ns the breaker opened (probe pacing)
	changed     atomic.Int64 // clock ns of the last mode change
	lastErr     atomic.Pointer[string]
	transitions atomic.Uint64
	commands    atomic.Uint64
	redisErrors atomic.Uint64
	untracked   atomic.Uint64
	synced      atomic.Int64

	month atomic.Pointer[month]

	dirty  [dirtyShards]dirtyShard
	syncMu sync.Mutex
	live   []*entry // guarded by syncMu

	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool
}

const dirtyShards = 64

type dirtyShard struct {
	mu sync.Mutex
	q  []*entry
	_  [32]byte
}

// New makes a Limiter. With Redis it connects once (within Timeout) and starts the
// background loop; Redis being unreachable is not an error: the limiter starts
// degraded and recovers by itself.
func New(cfg Config) (*Limiter, error) {
	if cfg.Redis != nil {
		if err := checkClient(cfg.Redis); err != nil {
			return nil, err
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.Timeout, DefaultTimeout)
	def(&cfg.SyncInterval, DefaultSyncInterval)
	def(&cfg.HeartbeatInterval, defaultHeartbeat)
	def(&cfg.EdgeTTL, defaultEdgeTTL)
	def(&cfg.ProbeInterval, defaultProbeInterval)
	def(&cfg.KeepAlive, defaultKeepAlive)
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.EdgeID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		cfg.EdgeID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxSyncedKeys <= 0 {
		cfg.MaxSyncedKeys = DefaultMaxSynced
	}
	if cfg.MaxInflightKeys <= 0 {
		cfg.MaxInflightKeys = DefaultMaxInflight
	}
	if cfg.FailureThreshold <= 0 {
		cfg.FailureThreshold = defaultThreshold
	}
	l := &Limiter{
		rdb: cfg.Redis, prefix: cfg.Prefix, edgeID: cfg.EdgeID, clock: cfg.Clock, log: cfg.Logger,
		seed: maphash.MakeSeed(), reg: cfg.Registerer,
		timeout: cfg.Timeout, syncEvery: cfg.SyncInterval, beatEvery: cfg.HeartbeatInterval,
		edgeTTL: cfg.EdgeTTL, probeEvery: cfg.ProbeInterval, keepAlive: cfg.KeepAlive,
		threshold: int32(cfg.FailureThreshold),
		rates:     newTable(cfg.MaxKeys),
		inflight:  newTable(cfg.MaxInflightKeys),
		entries:   newETable(cfg.MaxSyncedKeys),
	}
	l.edges.Store(1)
	l.changed.Store(l.nowNs())
	if err := l.register(); err != nil {
		return nil, err
	}
	if l.rdb == nil {
		return l, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	err := l.connect(ctx)
	cancel()
	if err != nil {
		l.redisErrors.Add(1)
		l.trip(err)
	}
	if l.syncEvery > 0 {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.run()
	}
	return l, nil
}

// Close stops the background loop, pushes the counts not yet pushed (quotas survive
// a restart of the edge), leaves the live-edge set and unregisters the metrics. The
// Redis client stays open: it is the caller's.
func (l *Limiter) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	var err error
	if l.rdb != nil && !l.open.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*l.timeout)
		err = l.Flush(ctx)
		if e := l.rdb.ZRem(ctx, l.prefix+":edges", l.edgeID).Err(); e != nil && err == nil {
			err = e
		}
		cancel()
	}
	if l.reg != nil {
		for _, c := range l.colls {
			l.reg.Unregister(c)
		}
	}
	return err
}

func (l *Limiter) nowNs() int64 { return l.clock().UnixNano() }

// Allow checks a request against every limit in checks at the limiter's clock.
func (l *Limiter) Allow(ctx context.Context, checks []Check) Decision {
	return l.AllowAt(ctx, checks, l.clock())
}

// AllowAt checks a request against every limit in checks at time at: it is admitted
// only if every limit admits it, and a refused request consumes none of them. Local
// limits are taken first, and given back when a later limit refuses; the exact limits
// are then checked and committed all-or-nothing in one Redis call (one EVALSHA), which
// is skipped when a local limit already refused. Redis failing or slow costs at most
// Timeout and turns into the local-share decision, never an error. ctx should be a
// plain context (a *fasthttp.RequestCtx as parent costs a goroutine per Redis call).
//
// Local and approximate limits allocate nothing, except on a synced key's first
// request.
func (l *Limiter) AllowAt(ctx context.Context, checks []Check, at time.Time) Decision {
	now := at.UnixNano()
	var v verdict
	var remote uint64 // the exact checks, by index
	cluster := l.rdb != nil && !l.open.Load()
	for i := range checks {
		c := &checks[i]
		if c.Rule == nil || c.Rule.kind == kindConcurrency {
			continue
		}
		if cluster && c.Rule.mode == ModeExact && i < 64 {
			remote |= 1 << i
			continue
		}
		if !l.local(c, now, cluster, &v) {
			l.refund(checks[:i], now, cluster, remote, false)
			return v.d
		}
	}
	if remote != 0 {
		res, err := l.callExact(ctx, checks, remote, now)
		if err != nil {
			l.failed(ctx, err)
			v.d.Degraded = true
			for i := range checks {
				if !inMask(remote, i) {
					continue
				}
				if !l.local(&checks[i], now, false, &v) {
					l.refund(checks, now, cluster, remote, false)
					l.refund(checks[:i], now, false, remote, true)
					return v.d
				}
			}
		} else if !l.applyExact(checks, remote, res, now, &v) {
			l.refund(checks, now, cluster, remote, false)
			return v.d
		}
	}
	v.d.Allowed = true
	return v.d
}

func inMask(m uint64, i int) bool { return i < 64 && m&(1<<i) != 0 }

// local decides one check in process: a local-mode rate (or an exact or approximate one
// while Redis is unavailable) on this edge's share, an approximate rate on its view of
// the shared state, a quota on its last known count.
func (l *Limiter) local(c *Check, now int64, cluster bool, v *verdict) bool {
	p := c.Rule
	if l.rdb != nil && !cluster && p.mode != ModeLocal {
		v.d.Degraded = true
	}
	switch p.kind {
	case kindRate:
		h := l.hash(p, c.Key, 0)
		if cluster && p.mode == ModeApproximate {
			e := l.entry(p, c.Key, h, nil, now)
			if e.interval.Load() != p.interval {
				e.interval.Store(p.interval)
			}
			ok, tat := e.takeRate(p.interval, p.tol, now)
			l.touch(e, now)
			if !ok {
				v.refuse(p, tenants.ERateLimited, p.rate.Burst, tat-now, tat+p.interval-p.tol-now)
				return false
			}
			v.admit(p, p.rate.Burst, (p.tol-(tat-now))/p.interval, tat-now)
			return true
		}
		ti, tol, burst := p.share(l.edges.Load())
		ok, tat, _ := l.rates.take(h, ti, tol, now)
		if !ok {
			v.refuse(p, tenants.ERateLimited, burst, tat-now, tat+ti-tol-now)
			return false
		}
		v.admit(p, burst, (tol-(tat-now))/ti, tat-now)
		return true
	case kindQuota:
		m := l.monthOf(now)
		h := l.hash(p, c.Key, m.idx)
		e := l.entry(p, c.Key, h, m, now)
		if e.view.Load() < 0 && cluster {
			l.readQuota(e) // first request of this key here: start from the cluster's count
		}
		degraded := l.rdb != nil && !cluster
		edges := int64(1)
		if degraded {
			edges = l.edges.Load()
		}
		ok, used := e.takeQuota(p.limit, edges, degraded)
		l.touch(e, now)
		if !ok {
			v.refuse(p, tenants.EQuotaExceeded, p.limit, m.end-now, m.end-now)
			return false
		}
		v.admit(p, p.limit, p.limit-used, m.end-now)
		return true
	}
	return true
}

// refund gives back what local took for the checks whose membership in mask is in:
// when a later check refuses, the earlier ones are refunded, so a refused request
// consumes nothing. The state is found again by key rather than remembered, which
// keeps the admitting path free of bookkeeping.
func (l *Limiter) refund(checks []Check, now int64, cluster bool, mask uint64, in bool) {
	for i := range checks {
		c := &checks[i]
		p := c.Rule
		if p == nil || p.kind == kindConcurrency || inMask(mask, i) != in {
			continue
		}
		switch p.kind {
		case kindRate:
			h := l.hash(p, c.Key, 0)
			if cluster && p.mode == ModeApproximate {
				if e := l.entries.get(h); e != nil {
					e.refundRate(p.interval)
				}
				continue
			}
			ti, _, _ := p.share(l.edges.Load())
			l.rates.bucketOf(h).lookup(h).refund(h, ti)
		case kindQuota:
			m := l.monthOf(now)
			if e := l.entries.get(l.hash(p, c.Key, m.idx)); e != nil {
				e.refundQuota()
			}
		}
	}
}

// verdict combines the checks of one request.
type verdict struct {
	d       Decision
	set     bool
	refused bool
}

func (v *verdict) admit(p *Rule, limit, remaining, reset int64) {
	if remaining < 0 {
		remaining = 0
	}
	if v.set && (remaining > v.d.Remaining || remaining == v.d.Remaining && limit >= v.d.Limit) {
		return
	}
	v.set = true
	v.d.Rule, v.d.Limit, v.d.Remaining, v.d.Reset = p, limit, remaining, time.Duration(max(reset, 0))
}

// refuse records a refusal; of several, the one that lasts longest is reported.
func (v *verdict) refuse(p *Rule, code string, limit, reset, retry int64) {
	if v.refused && time.Duration(retry) <= v.d.RetryAfter {
		return
	}
	v.refused = true
	v.d = Decision{Code: code, Rule: p, Limit: limit, Reset: time.Duration(max(reset, 0)),
		RetryAfter: time.Duration(max(retry, 1)), Degraded: v.d.Degraded}
}

// hash is the in-process key of (rule, key, salt): seeded per process, so clients
// cannot aim keys at one bucket.
func (l *Limiter) hash(p *Rule, key []byte, salt uint64) uint64 {
	h := maphash.Bytes(l.seed, key) ^ p.id ^ salt*0x9e3779b97f4a7c15
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	if h == 0 {
		h = 1
	}
	return h
}

// entry returns the synced state of a key, creating it on first use.
func (l *Limiter) entry(p *Rule, key []byte, h uint64, m *month, now int64) *entry {
	if e := l.entries.get(h); e != nil {
		return e
	}
	e := &entry{h: h, quota: p.kind == kindQuota}
	if l.rdb != nil {
		e.redisKey = l.redisKey(p, key, m)
	}
	if m != nil {
		e.expireAt = m.end/int64(time.Second) + quotaKeySlack
	}
	e.interval.Store(p.interval)
	e.used.Store(now)
	if e.quota && l.rdb != nil {
		e.view.Store(-1) // count not read yet
	}
	return l.entries.insert(e)
}

// readQuota reads a quota key's count, once, when this edge first counts it, so that a
// restarted edge does not start from zero. Concurrent first requests may count from
// zero meanwhile; a failure counts towards the breaker and leaves the count at zero.
func (l *Limiter) readQuota(e *entry) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	l.commands.Add(1)
	n, err := l.rdb.Get(ctx, e.redisKey).Int64()
	if err != nil && err != redis.Nil {
		e.view.CompareAndSwap(-1, 0)
		l.failed(ctx, err)
		return
	}
	e.view.CompareAndSwap(-1, n)
}

// quotaKeySlack keeps a month's quota key this many seconds after the month ends.
const quotaKeySlack = 7 * 24 * 3600

// touch records a request of a synced key and puts the key on the sync list.
func (l *Limiter) touch(e *entry, now int64) {
	if now-e.used.Load() > int64(time.Millisecond) {
		e.used.Store(now)
	}
	if l.rdb != nil && !e.tracked.Load() && e.tracked.CompareAndSwap(false, true) {
		d := &l.dirty[e.h%dirtyShards]
		d.mu.Lock()
		if len(d.q) < 2*l.entries.capacity()/dirtyShards+64 {
			d.q = append(d.q, e)
		} else {
			l.untracked.Add(1) // a flood of new keys: this one is not synced
		}
		d.mu.Unlock()
	}
}

func (l *Limiter) redisKey(p *Rule, key []byte, m *month) string {
	n := len(l.prefix) + 1 + len(p.keyBase) + len(key)
	if m != nil {
		n += 1 + len(m.tag)
	}
	b := make([]byte, 0, n)
	b = append(b, l.prefix...)
	b = append(b, ':')
	b = append(b, p.keyBase...)
	b = append(b, key...)
	if m != nil {
		b = append(b, ':')
		b = append(b, m.tag...)
	}
	return string(b)
}

// month is one calendar month (UTC), the unit of quotas.
type month struct {
	start, end int64  // ns
	idx        uint64 // year·12 + month
	tag        string // "200601"
}

func (l *Limiter) monthOf(now int64) *month {
	if m := l.month.Load(); m != nil && now >= m.start && now < m.end {
		return m
	}
	t := time.Unix(0, now).UTC()
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	m := &month{
		start: start.UnixNano(), end: start.AddDate(0, 1, 0).UnixNano(),
		idx: uint64(t.Year()*12 + int(t.Month())), tag: start.Format("200601"),
	}
	l.month.Store(m)
	return m
}

// Ticket is one request's place under a concurrency cap; Release it exactly once.
type Ticket struct{ s *slot }

// Release gives the place back.
func (t Ticket) Release() {
	if t.s != nil {
		t.s.val.Add(-1)
	}
}

// Acquire takes a place under a concurrency rule's cap for key (this edge's share of
// the cap: ⌈max ÷ live edges⌉). ok is false, immediately, when the cap is reached:
// nothing queues, and each key has its own counter, so one tenant at its cap does not
// slow another.
func (l *Limiter) Acquire(p *Rule, key []byte) (Ticket, bool) {
	if p.kind != kindConcurrency {
		return Ticket{}, true
	}
	n := l.edges.Load()
	capacity := (p.limit + n - 1) / n
	s, ok := l.inflight.acquire(l.hash(p, key, 0), capacity)
	if ok && s == nil {
		l.untracked.Add(1)
	}
	return Ticket{s}, ok
}

// Tickets are the places one request holds.
type Tickets struct {
	n int
	t [MaxChecks]Ticket
}

// Release gives every place back.
func (ts *Tickets) Release() {
	for i := 0; i < ts.n; i++ {
		ts.t[i].Release()
	}
	ts.n = 0
}

// AcquireAll takes a place under every concurrency rule in checks (other rules
// are skipped), or none: when one cap is reached the places taken are given back and
// the decision is refused with tenants.EOverloaded and a RetryAfter of one second.
// Checks past MaxChecks are ignored.
func (l *Limiter) AcquireAll(checks []Check) (Tickets, Decision) {
	var ts Tickets
	for i := range checks {
		c := &checks[i]
		if c.Rule == nil || c.Rule.kind != kindConcurrency || ts.n == MaxChecks {
			continue
		}
		t, ok := l.Acquire(c.Rule, c.Key)
		if !ok {
			ts.Release()
			return ts, Decision{Code: tenants.EOverloaded, Rule: c.Rule, RetryAfter: time.Second}
		}
		ts.t[ts.n] = t
		ts.n++
	}
	return ts, Decision{Allowed: true}
}

// State is the limiter's health, for /metrics and /readyz.
type State struct {
	// Mode is "local" (no Redis configured), "cluster" or "degraded" (Redis configured
	// but unavailable: cluster limits are enforced as this edge's local share).
	Mode      string
	Degraded  bool
	LiveEdges int64
	Since     time.Time // the last change of Mode
	LastError string    // the last Redis error, if any
	// Counters since start.
	Transitions   uint64
	RedisCommands uint64
	RedisErrors   uint64
	SyncedKeys    int64
	// Evictions of keys that still had state, in the local table and the synced table.
	Evictions uint64
}

// State reports the limiter's mode and counters.
func (l *Limiter) State() State {
	s := State{
		Mode: "cluster", LiveEdges: l.edges.Load(), Since: time.Unix(0, l.changed.Load()),
		Transitions: l.transitions.Load(), RedisCommands: l.commands.Load(),
		RedisErrors: l.redisErrors.Load(), SyncedKeys: l.synced.Load(),
		Evictions: l.rates.evictions.Load() + l.entries.evictions.Load(),
	}
	if e := l.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	switch {
	case l.rdb == nil:
		s.Mode = "local"
	case l.open.Load():
		s.Mode, s.Degraded = "degraded", true
	}
	return s
}

func (l *Limiter) register() error {
	if l.reg == nil {
		return nil
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	l.colls = []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_limit_degraded",
			Help: "1 while Redis is unavailable and cluster-wide limits are enforced as this edge's local share."},
			func() float64 { return b2f(l.rdb != nil && l.open.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_limit_live_edges",
			Help: "Edges seen in the live-edge set (the divisor of local shares)."},
			func() float64 { return float64(l.edges.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_limit_synced_keys",
			Help: "Keys whose counts are synced with Redis in batches."},
			func() float64 { return float64(l.synced.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_limit_redis_commands_total",
			Help: "Redis commands sent by the limiter."},
			func() float64 { return float64(l.commands.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_limit_redis_errors_total",
			Help: "Redis calls of the limiter that failed or timed out."},
			func() float64 { return float64(l.redisErrors.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_limit_mode_changes_total",
			Help: "Changes between cluster and degraded mode."},
			func() float64 { return float64(l.transitions.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_limit_evictions_total",
			Help: "Keys with live state evicted to keep memory bounded."},
			func() float64 { return float64(l.rates.evictions.Load() + l.entries.evictions.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_limit_untracked_total",
			Help: "Requests or keys not tracked because a bounded table was full (admitted, not counted)."},
			func() float64 { return float64(l.untracked.Load()) }),
	}
	for i, c := range l.colls {
		if err := l.reg.Register(c); err != nil {
			for _, r := range l.colls[:i] {
				l.reg.Unregister(r)
			}
			return fmt.Errorf("limit: register metrics: %w", err)
		}
	}
	return nil
}

var errNoDeadline = errors.New("limit: the Redis client must honour context deadlines (set redis.Options.ContextTimeoutEnabled, or use NewRedisClient)")
