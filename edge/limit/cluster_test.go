package limit_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/edge/limit"
	"tollgate/infra/testenv"
)

// clusterClient opens the cluster the way the edge does, from its URL.
func clusterClient(t *testing.T, url string, timeout time.Duration) *redis.ClusterClient {
	t.Helper()
	c, err := limit.NewRedisClient(url, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("%s opened a %T, want a cluster client", url, c)
	}
	return cc
}

// slotMaster maps a slot to the address of the master serving it.
func slotMaster(t *testing.T, c *redis.ClusterClient) func(slot int64) string {
	t.Helper()
	shards, err := c.ClusterShards(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	return func(slot int64) string {
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range sh.Nodes {
						if n.Role == "master" {
							return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
						}
					}
				}
			}
		}
		t.Fatalf("slot %d served by no master", slot)
		return ""
	}
}

// spreadTenants picks one tenant name per master: their keys land in different slots on
// different nodes, so a test over them crosses the cluster.
func spreadTenants(t *testing.T, c *redis.ClusterClient, masters int) (tenants []string, slots []int64) {
	t.Helper()
	master := slotMaster(t, c)
	seen := map[string]bool{}
	for i := 0; len(tenants) < masters; i++ {
		if i > 1000 {
			t.Fatalf("1000 tenant names did not cover %d masters", masters)
		}
		name := fmt.Sprintf("acme%d", i)
		slot, err := c.ClusterKeySlot(bg, "{"+name+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if m := master(slot); !seen[m] {
			seen[m] = true
			tenants, slots = append(tenants, name), append(slots, slot)
		}
	}
	return tenants, slots
}

// clusterKeys lists the keys under prefix on every master, by master.
func clusterKeys(t *testing.T, c *redis.ClusterClient, prefix string) map[string][]string {
	t.Helper()
	var mu sync.Mutex
	out := map[string][]string{}
	err := c.ForEachMaster(bg, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, prefix+":*").Result()
		mu.Lock()
		out[m.Options().Addr] = append(out[m.Options().Addr], keys...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Redis Cluster: 3 masters with a replica each, started once for these subtests (the
// last one kills a master). Tenants whose keys hash to slots on different masters get
// exact and approximate limits and quotas exactly as on one node; every script's keys
// share one slot; a SCRIPT FLUSH and a master's failover cost no refusal and no error.
func TestRedisCluster(t *testing.T) {
	start := time.Now()
	cl := testenv.RedisCluster(t, 3, 1)
	t.Logf("cluster of 6 nodes up in %s", time.Since(start).Round(time.Millisecond))
	url := cl.ClusterURL()
	admin := clusterClient(t, url, relaxed)
	tenants, slots := spreadTenants(t, admin, 3)
	master := slotMaster(t, admin)
	t.Logf("tenants %v in slots %v on masters %s, %s, %s", tenants, slots, master(slots[0]), master(slots[1]), master(slots[2]))

	// edges are n limiters with their own cluster clients, one Redis prefix and one clock.
	edges := func(t *testing.T, n int, c *clock) ([]*limit.Limiter, string) {
		prefix := testenv.RedisPrefix(t)
		ls := make([]*limit.Limiter, n)
		for i := range ls {
			ls[i] = newLimiter(t, limit.Config{Redis: clusterClient(t, url, relaxed), Prefix: prefix, Clock: c.Now,
				SyncInterval: -1, EdgeID: fmt.Sprintf("edge%d", i), Timeout: relaxed})
			if s := ls[i].State(); s.Mode != "cluster" {
				t.Fatalf("edge %d: %+v", i, s)
			}
		}
		return ls, prefix
	}

	t.Run("exact limits and quotas, one slot per tenant", func(t *testing.T) {
		c := newClock(t0)
		ls, prefix := edges(t, 2, c)
		type tenantChecks struct{ rate, quota []limit.Check }
		tc := make([]tenantChecks, len(tenants))
		for i, tn := range tenants {
			// A request of a consumer on a route: the platform plan's rate, the consumer
			// plan's rate and quota, the route's rate: four keys in one EVALSHA.
			tc[i].rate = []limit.Check{
				// 10/s with a burst of 50: a full bucket is 5 s ahead, so its key
				// outlives a stall of the machine of up to 5 s in Redis's own clock.
				{Rule: rate(t, tn, "tenant", limit.ModeExact, 10, time.Second, 50)},
				{Rule: rate(t, tn, "plan:gold", limit.ModeExact, 1000, time.Second, 1000), Key: []byte("c1")},
				{Rule: quota(t, tn, "plan:gold", limit.ModeExact, 100000), Key: []byte("c1")},
				{Rule: rate(t, tn, "route:r1", limit.ModeExact, 1000, time.Second, 1000)},
			}
			tc[i].quota = one(quota(t, tn, "plan:small", limit.ModeExact, 200), "c2")
		}
		const rps, secs = 30, 50
		admitted := make([]int, len(tenants))
		t1 := c.Now()
		for i := 0; i < rps*secs; i++ {
			for j := range tenants {
				d := ls[(i+j)%2].Allow(bg, tc[j].rate)
				if d.Degraded {
					t.Fatalf("tenant %s decided locally: %s", tenants[j], ls[(i+j)%2].State().LastError)
				}
				if d.Allowed {
					admitted[j]++
				}
			}
			c.Advance(time.Second / rps)
		}
		want := 10*c.Since(t1) + 50
		for j, n := range admitted {
			if float64(n) < want-1 || float64(n) > want+1 {
				t.Errorf("tenant %s: admitted %d, want %.0f", tenants[j], n, want)
			}
		}
		for j := range tenants {
			n := 0
			for i := range 300 {
				if d := ls[i%2].Allow(bg, tc[j].quota); d.Allowed {
					n++
				}
			}
			if n != 200 {
				t.Errorf("tenant %s: quota of 200 admitted %d", tenants[j], n)
			}
		}
		t.Logf("admitted %v at %d/s for %ds (want %.0f each), quotas exact", admitted, rps, secs, want)

		// Where the keys are: each tenant's on the master of its slot, all in that slot.
		byMaster := clusterKeys(t, admin, prefix)
		for j, tn := range tenants {
			var mine []string
			for m, keys := range byMaster {
				for _, k := range keys {
					if !strings.Contains(k, "{"+tn+"}") {
						continue
					}
					mine = append(mine, k)
					if m != master(slots[j]) {
						t.Errorf("key %s on %s, want %s", k, m, master(slots[j]))
					}
					if s, _ := admin.ClusterKeySlot(bg, k).Result(); s != slots[j] {
						t.Errorf("key %s in slot %d, want %d", k, s, slots[j])
					}
				}
			}
			// The two quotas stay; a rate's key expires when its bucket is full again by
			// Redis's clock, which the test's clock does not drive.
			slices.Sort(mine)
			if len(mine) < 2 || !strings.Contains(mine[0], ":q:{"+tn+"}:plan:gold:c1:") || !strings.Contains(mine[1], ":q:{"+tn+"}:plan:small:c2:") {
				t.Errorf("tenant %s: keys %v, want its 2 quotas", tn, mine)
			}
			// Every key of the request's one EVALSHA, by the names the limiter gives them.
			for _, k := range []string{":rl:{" + tn + "}:tenant:", ":rl:{" + tn + "}:plan:gold:c1", ":rl:{" + tn + "}:route:r1:", ":q:{" + tn + "}:plan:gold:c1:203003"} {
				if s, _ := admin.ClusterKeySlot(bg, prefix+k).Result(); s != slots[j] {
					t.Errorf("key %s in slot %d, want %d", prefix+k, s, slots[j])
				}
			}
		}
	})

	t.Run("approximate limits and quotas", func(t *testing.T) {
		c := newClock(t0)
		ls, _ := edges(t, 2, c)
		const r, b, rps = 100, 50, 300
		interval := 100 * time.Millisecond
		rates := make([]*limit.Rule, len(tenants))
		quotas := make([]*limit.Rule, len(tenants))
		for j, tn := range tenants {
			rates[j] = rate(t, tn, "tenant", limit.ModeApproximate, r, time.Second, b)
			quotas[j] = quota(t, tn, "plan:small", limit.ModeApproximate, 300)
		}
		admitted := make([]int, len(tenants))
		quotaAdmitted := make([]int, len(tenants))
		t1 := c.Now()
		for i := 0; i < rps*10; i++ {
			for j := range tenants {
				l := ls[(i+j)%2]
				if d := l.Allow(bg, one(rates[j], "")); d.Allowed {
					admitted[j]++
				} else if d.Degraded {
					t.Fatalf("degraded: %s", l.State().LastError)
				}
				if i < rps*2 {
					if d := l.Allow(bg, one(quotas[j], "c1")); d.Allowed {
						quotaAdmitted[j]++
					}
				}
			}
			c.Advance(time.Second / rps)
			if c.Now().Sub(t1)%interval < time.Second/rps {
				for _, l := range ls {
					if err := l.Flush(bg); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		w := c.Since(t1)
		exact := r*w + b
		bound := exact + (2-1)*(b+2*r*interval.Seconds())
		// Over 2 s each edge admits 150/s of quota: the other edge's admissions of two
		// intervals may be unseen.
		quotaBound := 300 + 150*2*interval.Seconds()
		for j := range tenants {
			// Within the worst-case bound, and within 1% of exact for this steady flood.
			if float64(admitted[j]) > min(bound, exact*1.01) || float64(admitted[j]) < exact*0.99 {
				t.Errorf("tenant %s: admitted %d, want %.0f ± 1%%", tenants[j], admitted[j], exact)
			}
			if quotaAdmitted[j] < 300 || float64(quotaAdmitted[j]) > quotaBound {
				t.Errorf("tenant %s: approximate quota of 300 admitted %d, want 300 to %.0f", tenants[j], quotaAdmitted[j], quotaBound)
			}
		}
		t.Logf("approximate: admitted %v (exact %.0f, bound %.0f); quota of 300 admitted %v (bound %.0f)",
			admitted, exact, bound, quotaAdmitted, quotaBound)
	})

	t.Run("scripts flushed", func(t *testing.T) {
		c := newClock(t0)
		ls, prefix := edges(t, 1, c)
		scriptsFlushed(t, ls[0], admin, c, prefix, tenants[1])
	})

	t.Run("a planned failover", func(t *testing.T) {
		// CLUSTER FAILOVER on a replica, as an operator does before maintenance: the
		// old master answers MOVED once the replica took over, the client follows,
		// and not one request is decided locally.
		prefix := testenv.RedisPrefix(t)
		l := newLimiter(t, limit.Config{Redis: clusterClient(t, url, relaxed), Prefix: prefix, EdgeID: "edge-planned", Timeout: relaxed})
		tn, slot := tenants[1], slots[1]
		old := master(slot)
		var replica string
		shards, err := admin.ClusterShards(bg).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range shards {
			for _, n := range sh.Nodes {
				if a := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)); n.Role == "replica" && slices.ContainsFunc(sh.Nodes, func(m redis.Node) bool {
					return m.Role == "master" && net.JoinHostPort(m.IP, strconv.FormatInt(m.Port, 10)) == old
				}) {
					replica = a
				}
			}
		}
		if replica == "" {
			t.Fatalf("no replica of %s in %+v", old, shards)
		}
		checks := []limit.Check{
			{Rule: rate(t, tn, "tenant", limit.ModeExact, 1_000_000, time.Second, 1_000_000)},
			{Rule: quota(t, tn, "plan:gold", limit.ModeExact, 1_000_000_000), Key: []byte("c1")},
		}
		rc := redis.NewClient(&redis.Options{Addr: replica})
		defer rc.Close()
		if err := rc.Do(bg, "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Fatal(err)
		}
		n, bad := 0, 0
		deadline := time.Now().Add(10 * time.Second)
		for {
			d := l.Allow(bg, checks)
			n++
			if !d.Allowed || d.Degraded {
				bad++
			}
			if info, _ := rc.Info(bg, "replication").Result(); strings.Contains(info, "role:master") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not take over within 10s", replica)
			}
			time.Sleep(time.Millisecond)
		}
		for range 50 { // after the switch: MOVED followed to the new master
			d := l.Allow(bg, checks)
			n++
			if !d.Allowed || d.Degraded {
				bad++
			}
		}
		t.Logf("CLUSTER FAILOVER %s → %s: %d requests, %d refused or decided locally", old, replica, n, bad)
		if bad != 0 || l.State().Transitions != 0 {
			t.Fatalf("%d of %d requests refused or decided locally; %+v", bad, n, l.State())
		}
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		cl.WaitCluster(ctx)
		cancel()
		master = slotMaster(t, admin)
	})

	t.Run("a master's failover", func(t *testing.T) {
		prefix := testenv.RedisPrefix(t)
		const timeout = 200 * time.Millisecond // the production default is 50 ms; this is about failover, not a busy machine
		l := newLimiter(t, limit.Config{Redis: clusterClient(t, url, timeout), Prefix: prefix, EdgeID: "edge-failover",
			Timeout: timeout, ProbeInterval: 200 * time.Millisecond})
		tn, victim := tenants[0], master(slots[0])
		checks := []limit.Check{
			{Rule: rate(t, tn, "tenant", limit.ModeExact, 1_000_000, time.Second, 1_000_000)},
			{Rule: quota(t, tn, "plan:gold", limit.ModeExact, 1_000_000_000), Key: []byte("c1")},
			{Rule: rate(t, tn, "approx", limit.ModeApproximate, 1_000_000, time.Second, 1_000_000)},
		}
		var (
			total, refused, degraded atomic.Int64
			slowest                  atomic.Int64
			firstDegraded            atomic.Int64
			lastDegraded             atomic.Int64
			stop                     = make(chan struct{})
			done                     = make(chan struct{})
		)
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				d := l.Allow(bg, checks)
				took := time.Since(t0)
				total.Add(1)
				if took > time.Duration(slowest.Load()) {
					slowest.Store(int64(took))
				}
				if !d.Allowed {
					refused.Add(1)
				}
				if d.Degraded {
					degraded.Add(1)
					firstDegraded.CompareAndSwap(0, t0.UnixNano())
					lastDegraded.Store(t0.UnixNano())
				}
				time.Sleep(time.Millisecond)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		if s := l.State(); s.Mode != "cluster" || degraded.Load() != 0 {
			t.Fatalf("before the failover: %+v", s)
		}
		killed := time.Now()
		cl.Kill(victim)
		waitFor(t, 10*time.Second, "the limiter to go degraded", func() bool { return l.State().Degraded })
		wentDegraded := time.Since(killed)
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		cl.WaitCluster(ctx)
		cancel()
		promoted := time.Since(killed)
		waitFor(t, 20*time.Second, "the limiter to be back in cluster mode", func() bool { return !l.State().Degraded })
		back := time.Since(killed)
		// Requests are decided cluster-wide again, by the new master.
		before := degraded.Load()
		time.Sleep(300 * time.Millisecond)
		close(stop)
		<-done
		s := l.State()
		t.Logf("master %s killed: degraded after %s, replica promoted after %s, cluster mode after %s; "+
			"%d requests, %d decided locally (%.1fs), %d refused, slowest %s; transitions %d, Redis errors %d",
			victim, wentDegraded.Round(time.Millisecond), promoted.Round(time.Millisecond), back.Round(time.Millisecond),
			total.Load(), degraded.Load(), time.Duration(lastDegraded.Load()-firstDegraded.Load()).Seconds(),
			refused.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), s.Transitions, s.RedisErrors)
		if refused.Load() != 0 {
			t.Errorf("%d requests refused during the failover", refused.Load())
		}
		if degraded.Load() != before {
			t.Errorf("%d requests decided locally after the limiter was back", degraded.Load()-before)
		}
		if s.Mode != "cluster" || s.Transitions != 2 {
			t.Errorf("after the failover: %+v, want cluster mode after exactly one degraded spell", s)
		}
		// A request never waited on the dead master longer than the timeout (plus a
		// scheduling margin for the race detector on a busy machine).
		if sl := time.Duration(slowest.Load()); sl > timeout+400*time.Millisecond {
			t.Errorf("slowest request %s, timeout %s", sl, timeout)
		}
		if d := l.Allow(bg, checks); !d.Allowed || d.Degraded {
			t.Errorf("after the failover: %+v", d)
		}
	})
}

// Sentinel: a master, its replica and one sentinel. The limiter finds the master through
// the sentinel, limits exactly, and rides through the master's death: degraded while
// the sentinel fails over, cluster-wide again on the promoted replica, nothing refused.
func TestRedisSentinel(t *testing.T) {
	start := time.Now()
	rs := testenv.RedisSentinel(t)
	t.Logf("master, replica and sentinel up in %s", time.Since(start).Round(time.Millisecond))
	const timeout = 200 * time.Millisecond // the production default is 50 ms; this is about failover, not a busy machine
	rdb, err := limit.NewRedisClient(rs.SentinelURL(), timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if _, ok := rdb.(*redis.Client); !ok {
		t.Fatalf("%s opened a %T", rs.SentinelURL(), rdb)
	}
	prefix := testenv.RedisPrefix(t)
	l := newLimiter(t, limit.Config{Redis: rdb, Prefix: prefix, EdgeID: "edge-sentinel", Timeout: timeout,
		ProbeInterval: 200 * time.Millisecond})
	if s := l.State(); s.Mode != "cluster" {
		t.Fatalf("%+v", s)
	}
	q := quota(t, "acme", "plan:small", limit.ModeExact, 20)
	n := 0
	for range 30 {
		if d := l.Allow(bg, one(q, "c1")); d.Allowed {
			n++
		} else if d.Degraded {
			t.Fatalf("degraded: %s", l.State().LastError)
		}
	}
	if n != 20 {
		t.Fatalf("quota of 20 admitted %d", n)
	}
	checks := []limit.Check{
		{Rule: rate(t, "acme", "tenant", limit.ModeExact, 1_000_000, time.Second, 1_000_000)},
		{Rule: rate(t, "acme", "approx", limit.ModeApproximate, 1_000_000, time.Second, 1_000_000)},
	}
	var total, refused, degraded int
	// Replication is asynchronous: what the master acknowledged in its last moment
	// may die with it. Wait for the replica to have the counts, as it has in a steady
	// state, so that the test checks the limiter, not Redis's replication lag.
	mc := redis.NewClient(&redis.Options{Addr: rs.Addrs[0]})
	if n, err := mc.Wait(bg, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	mc.Close()
	killed := time.Now()
	rs.Kill(rs.Addrs[0])
	var wentDegraded, back time.Duration
	deadline := killed.Add(30 * time.Second)
	for back == 0 || time.Since(killed) < back+300*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("not back in cluster mode 30s after the master died: %+v", l.State())
		}
		d := l.Allow(bg, checks)
		total++
		if !d.Allowed {
			refused++
		}
		if d.Degraded {
			degraded++
		}
		s := l.State()
		if wentDegraded == 0 && s.Degraded {
			wentDegraded = time.Since(killed)
		}
		if wentDegraded != 0 && back == 0 && !s.Degraded {
			back = time.Since(killed)
		}
		time.Sleep(time.Millisecond)
	}
	s := l.State()
	t.Logf("master killed: degraded after %s, cluster mode after %s; %d requests, %d decided locally, %d refused; transitions %d",
		wentDegraded.Round(time.Millisecond), back.Round(time.Millisecond), total, degraded, refused, s.Transitions)
	if refused != 0 || wentDegraded == 0 || s.Mode != "cluster" || s.Transitions != 2 {
		t.Fatalf("failover: %d refused, %+v, want nothing refused and one degraded spell", refused, s)
	}
	// The count lives on in the promoted replica: the quota stays spent.
	if d := l.Allow(bg, one(q, "c1")); d.Allowed || d.Degraded {
		t.Fatalf("after the failover: %+v, want the spent quota refused by the new master", d)
	}
}

// scriptsFlushed: Redis forgets every script (a restart, SCRIPT FLUSH, a failover to a
// replica that never loaded them); l, on that Redis and driven by c, refuses nothing,
// errs nowhere, and loses or doubles no approximate count.
func scriptsFlushed(t *testing.T, l *limit.Limiter, admin redis.UniversalClient, c *clock, prefix, tn string) {
	t.Helper()
	ex := rate(t, tn, "tenant", limit.ModeExact, 1000, time.Second, 1000)
	ap := rate(t, tn, "approx", limit.ModeApproximate, 10, time.Second, 200)
	for range 60 {
		if d := l.Allow(bg, []limit.Check{{Rule: ex}, {Rule: ap}}); !d.Allowed || d.Degraded {
			t.Fatalf("%+v", d)
		}
	}
	if err := l.Flush(bg); err != nil {
		t.Fatal(err)
	}
	// On a cluster client, SCRIPT FLUSH goes to every node.
	if err := admin.ScriptFlush(bg).Err(); err != nil {
		t.Fatal(err)
	}
	errs := l.State().RedisErrors
	for range 30 {
		if d := l.Allow(bg, []limit.Check{{Rule: ex}, {Rule: ap}}); !d.Allowed || d.Degraded {
			t.Fatalf("after SCRIPT FLUSH: %+v (%s)", d, l.State().LastError)
		}
	}
	// The first push meets NOSCRIPT, keeps its counts and reloads; the next pushes.
	for range 2 {
		if err := l.Flush(bg); err != nil {
			t.Fatal(err)
		}
	}
	s := l.State()
	if s.Mode != "cluster" || s.RedisErrors != errs {
		t.Fatalf("after SCRIPT FLUSH: %+v", s)
	}
	tat, err := admin.Get(bg, prefix+":rl:{"+tn+"}:approx:").Int64()
	if err != nil {
		t.Fatal(err)
	}
	nowUs := (c.Now().UnixNano() - time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()) / 1000
	if want := nowUs + 90*100_000; tat != want {
		t.Fatalf("shared TAT %d, want now + 90 intervals = %d: admissions lost or doubled", tat, want)
	}
}

// One Redis node of the test's own (flushing the machine's shared Redis's scripts would
// reach into other tests) loses its scripts: the same as on a cluster.
func TestRedisScriptsFlushed(t *testing.T) {
	node := testenv.RedisServer(t)
	rdb, err := limit.NewRedisClient("redis://"+node.Addrs[0], relaxed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	c := newClock(t0)
	prefix := testenv.RedisPrefix(t)
	l := newLimiter(t, limit.Config{Redis: rdb, Prefix: prefix, Clock: c.Now, SyncInterval: -1, EdgeID: "edge0", Timeout: relaxed})
	scriptsFlushed(t, l, rdb, c, prefix, "acme")
}
