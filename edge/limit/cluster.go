package limit

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/tenants"
)

// Times in Redis are microseconds since epochNs, so a TAT plus a fractional emission
// interval stays exact in a Lua double (2^53 µs is 285 years).
const epochNs = int64(1735689600) * int64(time.Second) // 2025-01-01T00:00:00Z

func usOf(ns int64) int64   { return (ns - epochNs) / 1000 }
func nsOfUs(us int64) int64 { return us*1000 + epochNs }

// exactScript checks every exact limit of one request and commits all of them or
// none: a refused request consumes nothing.
//
// KEYS: the rate keys, then the quota keys. ARGV[1]: now (µs); ARGV[2]: number of rate
// keys; then per rate key its emission interval T and tolerance T·burst (µs, may be
// fractional); then per quota key its limit and the unix second its key expires.
// Returns: allowed (1/0); per rate key: ok, remaining, µs until full, µs until
// admitted; per quota key: ok, count (after the request when allowed).
var exactScript = redis.NewScript(exactLua)

const exactLua = `
local now = tonumber(ARGV[1])
local nr = tonumber(ARGV[2])
local out = {1}
local tats = {}
local allowed = true
local a = 3
for i = 1, nr do
  local t = tonumber(ARGV[a])
  local tol = tonumber(ARGV[a + 1])
  a = a + 2
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local new = tat + t
  local diff = now - (new - tol)
  if diff < 0 then
    allowed = false
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = math.ceil(tat - now)
    out[#out + 1] = math.ceil(-diff)
  else
    tats[i] = new
    out[#out + 1] = 1
    out[#out + 1] = math.floor(diff / t)
    out[#out + 1] = math.ceil(new - now)
    out[#out + 1] = 0
  end
end
local qa = a
for j = nr + 1, #KEYS do
  local limit = tonumber(ARGV[a])
  a = a + 2
  local used = tonumber(redis.call('GET', KEYS[j])) or 0
  if used + 1 > limit then
    allowed = false
    out[#out + 1] = 0
  else
    out[#out + 1] = 1
  end
  out[#out + 1] = used
end
if not allowed then
  out[1] = 0
  return out
end
for i = 1, nr do
  redis.call('SET', KEYS[i], tats[i], 'PX', math.ceil((tats[i] - now) / 1000) + 1)
end
local o = 2 + 4 * nr
for j = nr + 1, #KEYS do
  local used = redis.call('INCR', KEYS[j])
  if used == 1 then
    redis.call('EXPIREAT', KEYS[j], ARGV[qa + 1])
  end
  qa = qa + 2
  out[o + 1] = used
  o = o + 2
end
return out
`

// approxScript adds one edge's batch of k admissions to a shared TAT and returns the
// TAT (µs). The batch is placed at now: admissions made while the bucket refilled are
// counted as if made at the push, which over-counts (never under-counts) by at most
// one sync interval of refill. k may be 0 (read only) or negative (refunds).
//
// KEYS[1]: the rate key. ARGV: now (µs), T (µs), k.
var approxScript = redis.NewScript(approxLua)

const approxLua = `
local now = tonumber(ARGV[1])
local t = tonumber(ARGV[2])
local k = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if k ~= 0 then
  if tat < now then tat = now end
  tat = tat + k * t
  if tat > now then
    redis.call('SET', KEYS[1], tat, 'PX', math.ceil((tat - now) / 1000) + 1)
  else
    redis.call('DEL', KEYS[1])
  end
end
return math.floor(tat)
`

func checkClient(c redis.UniversalClient) error {
	switch c := c.(type) {
	case *redis.Client:
		if !c.Options().ContextTimeoutEnabled {
			return errNoDeadline
		}
	case *redis.ClusterClient:
		if !c.Options().ContextTimeoutEnabled {
			return errNoDeadline
		}
	case *redis.Ring:
		if !c.Options().ContextTimeoutEnabled {
			return errNoDeadline
		}
	}
	return nil
}

// callExact runs the exact checks (remote: a mask of indexes into checks) in one
// EVALSHA.
func (l *Limiter) callExact(ctx context.Context, checks []Check, remote uint64, now int64) ([]int64, error) {
	n := bits.OnesCount64(remote)
	keys := make([]string, 0, n)
	args := make([]any, 2, 2+2*n)
	nr := 0
	for i := range checks {
		if !inMask(remote, i) {
			continue
		}
		if p := checks[i].Rule; p.kind == kindRate {
			keys = append(keys, l.redisKey(p, checks[i].Key, nil))
			args = append(args, float64(p.interval)/1e3, float64(p.tol)/1e3)
			nr++
		}
	}
	args[0], args[1] = usOf(now), nr
	if nr < n {
		m := l.monthOf(now)
		for i := range checks {
			if !inMask(remote, i) {
				continue
			}
			if p := checks[i].Rule; p.kind == kindQuota {
				keys = append(keys, l.redisKey(p, checks[i].Key, m))
				args = append(args, p.limit, m.end/int64(time.Second)+quotaKeySlack)
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	l.commands.Add(1)
	res, err := exactScript.Run(cctx, l.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 1+4*nr+2*(n-nr) {
		return nil, fmt.Errorf("limit: exact script answered %d values for %d keys", len(res), n)
	}
	l.succeeded()
	return res, nil
}

// applyExact folds the script's answer into v; false when refused.
func (l *Limiter) applyExact(checks []Check, remote uint64, res []int64, now int64, v *verdict) bool {
	allowed := res[0] == 1
	j := 1
	for i := range checks {
		p := checks[i].Rule
		if !inMask(remote, i) || p.kind != kindRate {
			continue
		}
		ok, rem, reset, retry := res[j], res[j+1], res[j+2]*1000, res[j+3]*1000
		j += 4
		switch {
		case allowed:
			v.admit(p, p.rate.Burst, rem, reset)
		case ok == 0:
			v.refuse(p, tenants.ERateLimited, p.rate.Burst, reset, retry)
		}
	}
	var m *month
	for i := range checks {
		p := checks[i].Rule
		if !inMask(remote, i) || p.kind != kindQuota {
			continue
		}
		if m == nil {
			m = l.monthOf(now)
		}
		ok, used := res[j], res[j+1]
		j += 2
		// Remember the count: it is what the local share starts from if Redis goes.
		e := l.entry(p, checks[i].Key, l.hash(p, checks[i].Key, m.idx), m, now)
		e.view.Store(used)
		switch {
		case allowed:
			v.admit(p, p.limit, p.limit-used, m.end-now)
		case ok == 0:
			v.refuse(p, tenants.EQuotaExceeded, p.limit, m.end-now, m.end-now)
		}
	}
	return allowed
}

// failed counts a Redis failure; enough in a row open the breaker. A call abandoned
// because the caller's context ended is not Redis's failure.
func (l *Limiter) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	l.redisErrors.Add(1)
	s := err.Error()
	l.lastErr.Store(&s)
	if l.fails.Add(1) >= l.threshold {
		l.trip(err)
	}
}

func (l *Limiter) succeeded() {
	if l.fails.Load() != 0 {
		l.fails.Store(0)
	}
}

// trip opens the breaker: requests stop calling Redis and limit at local shares.
func (l *Limiter) trip(err error) {
	if !l.open.CompareAndSwap(false, true) {
		return
	}
	s := err.Error()
	l.lastErr.Store(&s)
	l.openedAt.Store(time.Now().UnixNano())
	l.changed.Store(l.nowNs())
	l.transitions.Add(1)
	l.log.Warn("limit: redis unavailable; limiting at this edge's local share",
		"edge", l.edgeID, "live_edges", l.edges.Load(), "err", err)
}

// recover closes the breaker after Redis answered a probe.
func (l *Limiter) recover() {
	l.fails.Store(0)
	if !l.open.CompareAndSwap(true, false) {
		return
	}
	l.changed.Store(l.nowNs())
	l.transitions.Add(1)
	l.log.Info("limit: redis answers again; limiting cluster-wide",
		"edge", l.edgeID, "live_edges", l.edges.Load())
}

// connect loads the scripts and records a heartbeat, in one round trip.
//
// On Redis Cluster it loads the scripts on every master instead, one round trip each:
// a master's answer is what tells a probe that every slot is served again (the live-edge
// key's slot answering proves nothing about a tenant's), and a replica promoted by a
// failover starts without scripts. ForEachMaster reads the slot map afresh first (one
// CLUSTER SLOTS), so a master a failover replaced is no longer asked.
func (l *Limiter) connect(ctx context.Context) error {
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		var n atomic.Int64
		n.Add(1)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			pipe := m.Pipeline()
			pipe.ScriptLoad(ctx, exactLua)
			pipe.ScriptLoad(ctx, approxLua)
			n.Add(2)
			_, err := pipe.Exec(ctx)
			return err
		})
		l.commands.Add(uint64(n.Load()))
		if err != nil {
			return err
		}
		return l.heartbeat(ctx)
	}
	pipe := l.rdb.Pipeline()
	pipe.ScriptLoad(ctx, exactLua)
	pipe.ScriptLoad(ctx, approxLua)
	count := l.beat(ctx, pipe)
	l.commands.Add(uint64(pipe.Len()))
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	l.edges.Store(max(1, count.Val()))
	return nil
}

// heartbeat records this edge in the live-edge set and counts the live edges.
func (l *Limiter) heartbeat(ctx context.Context) error {
	pipe := l.rdb.Pipeline()
	count := l.beat(ctx, pipe)
	l.commands.Add(uint64(pipe.Len()))
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	l.edges.Store(max(1, count.Val()))
	return nil
}

// beat queues the heartbeat: ZADD the edge with the time, drop long-dead edges, count
// the edges seen within EdgeTTL. The set expires when every edge is gone.
func (l *Limiter) beat(ctx context.Context, pipe redis.Pipeliner) *redis.IntCmd {
	key := l.prefix + ":edges"
	nowMs := l.nowNs() / int64(time.Millisecond)
	ttl := l.edgeTTL.Milliseconds()
	pipe.ZAdd(ctx, key, redis.Z{Score: float64(nowMs), Member: l.edgeID})
	pipe.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(nowMs-10*ttl, 10))
	count := pipe.ZCount(ctx, key, strconv.FormatInt(nowMs-ttl, 10), "+inf")
	pipe.PExpire(ctx, key, 10*l.edgeTTL)
	return count
}

// LiveEdges is the number of edges in the live-edge set at the last heartbeat (1 without
// Redis, the last count while Redis is unavailable).
func (l *Limiter) LiveEdges() int64 { return l.edges.Load() }

// run is the background loop: every SyncInterval it pushes and refreshes the synced
// keys, every HeartbeatInterval it records the heartbeat, and while the breaker is open
// it probes Redis every ProbeInterval instead.
func (l *Limiter) run() {
	defer close(l.done)
	tick := time.NewTicker(l.syncEvery)
	defer tick.Stop()
	lastBeat, lastProbe := time.Now(), time.Time{}
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		if l.open.Load() {
			since := max(l.openedAt.Load(), lastProbe.UnixNano())
			if now.UnixNano()-since < int64(l.probeEvery) {
				continue
			}
			lastProbe = now
			ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
			err := l.connect(ctx)
			cancel()
			if err != nil {
				s := err.Error()
				l.lastErr.Store(&s)
				continue
			}
			lastBeat = now
			l.recover()
		}
		l.Flush(context.Background())
		if now.Sub(lastBeat) >= l.beatEvery {
			lastBeat = now
			ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
			err := l.heartbeat(ctx)
			cancel()
			if err != nil {
				l.failed(context.Background(), err)
			} else {
				l.succeeded()
			}
		}
	}
}

// syncChunk bounds the commands of one pipelined round trip of a sync.
const syncChunk = 256

// Flush pushes the counts of the synced keys not yet pushed (approximate rates,
// quotas) and reads the shared state back, one pipelined round trip per 256 keys,
// each within Timeout. The background loop calls it every SyncInterval; Close calls it
// last. A failure keeps the counts for the next Flush.
func (l *Limiter) Flush(ctx context.Context) error {
	if l.rdb == nil {
		return nil
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	for i := range l.dirty {
		d := &l.dirty[i]
		d.mu.Lock()
		l.live = append(l.live, d.q...)
		clear(d.q)
		d.q = d.q[:0]
		d.mu.Unlock()
	}
	now := l.nowNs()
	var err error
	for off := 0; off < len(l.live) && err == nil; off += syncChunk {
		err = l.push(ctx, l.live[off:min(off+syncChunk, len(l.live))], now)
	}
	keep := l.live[:0]
	for _, e := range l.live {
		if e.pending.Load() == 0 && (e.evicted.Load() || now-e.used.Load() > int64(l.keepAlive)) {
			e.tracked.Store(false)
			// A request may have counted between the check and the store.
			if e.pending.Load() == 0 || !e.tracked.CompareAndSwap(false, true) {
				continue
			}
		}
		keep = append(keep, e)
	}
	clear(l.live[len(keep):])
	l.live = keep
	l.synced.Store(int64(len(keep)))
	return err
}

// push sends one chunk's pending counts and applies the answers.
func (l *Limiter) push(ctx context.Context, chunk []*entry, now int64) error {
	pipe := l.rdb.Pipeline()
	cmds := make([]redis.Cmder, len(chunk))
	ks := make([]int64, len(chunk))
	nowUs := usOf(now)
	for i, e := range chunk {
		k := e.pending.Swap(0)
		ks[i] = k
		switch {
		case !e.quota:
			cmds[i] = approxScript.EvalSha(ctx, pipe, []string{e.redisKey}, nowUs, float64(e.interval.Load())/1e3, k)
		case k != 0:
			e.inflight.Store(k)
			cmds[i] = pipe.IncrBy(ctx, e.redisKey, k)
			pipe.ExpireAt(ctx, e.redisKey, time.Unix(e.expireAt, 0))
		default:
			cmds[i] = pipe.Get(ctx, e.redisKey)
		}
	}
	l.commands.Add(uint64(pipe.Len()))
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	_, err := pipe.Exec(cctx)
	cancel()
	var failure error
	noscript := false
	for i, e := range chunk {
		cerr := cmds[i].Err()
		if cerr != nil && cerr != redis.Nil {
			// Keep the counts for the next push.
			e.pending.Add(ks[i])
			e.inflight.Store(0)
			if redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				noscript = true
			} else if failure == nil {
				failure = cerr
			}
			continue
		}
		if e.quota {
			var n int64
			switch c := cmds[i].(type) {
			case *redis.IntCmd:
				n = c.Val()
			case *redis.StringCmd:
				n, _ = c.Int64()
			}
			e.view.Store(n)
			e.inflight.Store(0)
			continue
		}
		tat, _ := cmds[i].(*redis.Cmd).Int64()
		shared := max(nsOfUs(tat), now)
		ti := e.interval.Load()
		for {
			cur, m := e.view.Load(), e.pending.Load()
			if e.view.CompareAndSwap(cur, shared+m*ti) {
				break
			}
		}
	}
	if noscript {
		l.commands.Add(1)
		lctx, cancel := context.WithTimeout(ctx, l.timeout)
		approxScript.Load(lctx, l.rdb)
		cancel()
	}
	if failure == nil && err != nil && !errors.Is(err, redis.Nil) && !noscript {
		failure = err
	}
	if failure != nil {
		l.failed(ctx, failure)
		return failure
	}
	l.succeeded()
	return nil
}
