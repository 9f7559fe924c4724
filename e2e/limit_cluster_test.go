package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/infra/testenv"
)

// TestLimitRedisURLRefused: an edge given a Redis address list it cannot use stops at
// start, naming the variable and the accepted forms, instead of failing at its first
// dial (the password stays out of the message).
func TestLimitRedisURLRefused(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for _, u := range []string{"redis://:secret@127.0.0.1:6379,127.0.0.1:6380", "redis://127.0.0.1:7000?addr=127.0.0.1:0"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, bin, "edge")
		cmd.Env = s.env("TOLLGATE_REDIS_URL="+u, "TOLLGATE_EDGE_ADDR="+freeAddr(t), "TOLLGATE_EDGE_ADMIN_ADDR="+freeAddr(t))
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut {
			t.Fatalf("%s: the edge ran (%v), want it to stop at start:\n%s", u, err, out)
		}
		msg := string(out)
		if !strings.Contains(msg, "TOLLGATE_REDIS_URL") || !strings.Contains(msg, "accepted forms") || strings.Contains(msg, "secret") {
			t.Fatalf("%s: exit %v, want the variable and the accepted forms named (and no password):\n%s", u, err, msg)
		}
	}
}

// TestLimitRedisCluster: two edge processes on a Redis Cluster of 3 masters with a
// replica each, given TOLLGATE_REDIS_URL in the cluster form, hold an exact limit of
// 100/s (burst 10) driven at 300/s for 10 s to r·w + b = 1,010 at most and 98% of r·w at
// least, like on one Redis node (measureClusterRate); then the master
// of the tenant's slot is killed under load: the edges go degraded and come back, and
// no request fails.
func TestLimitRedisCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.RedisCluster(t, 3, 1)
	_, api, es := limitStack(t, cl.ClusterURL(), "TOLLGATE_REDIS_TIMEOUT=1s")
	up := echoUpstream(t, "up")
	api.createTenant("rl")
	for attempt := 1; ; attempt++ {
		ok, tl, msg := measureClusterRate(t, api, es, up.URL, fmt.Sprintf("/limited%d", attempt), "exact", 10)
		if ok {
			break
		}
		if attempt == 1 && tl.maxLatency >= 100*time.Millisecond {
			t.Logf("attempt 1 disturbed (answers held up to %s): %s; measuring again", tl.maxLatency.Round(time.Millisecond), msg)
			continue
		}
		t.Fatal(msg)
	}
	for _, e := range es {
		if st, err := e.limiter(); err != nil || st.Mode != "cluster" {
			t.Fatalf("%s: limiter %+v (%v), want cluster mode", e.name, st, err)
		}
	}

	// The failover: a limit the load stays under (exact, so every request asks the
	// slot's master), 200/s for 8 s, the master killed after 1 s.
	api.createRoute("rl", routeSpec("wide", "/wide", up.URL, "none",
		"rate_limit", map[string]any{"rps": 10000, "burst": 10000, "mode": "exact"}))
	settle(t, es, "rl", "/wide", 0)
	victim := tenantMaster(t, cl.ClusterURL(), "rl")
	var sawDegraded atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() { // what the edges report while it happens
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, e := range es {
				if st, err := e.limiter(); err == nil && st.Degraded {
					sawDegraded.Store(true)
				}
			}
		}
	}()
	kill := time.AfterFunc(time.Second, func() { cl.Kill(victim) })
	defer kill.Stop()
	shots := pacedLoad(t, es, 200, 8*time.Second, "rl", "/wide")
	close(stop)
	<-watched
	tl := count(shots, len(es), 0, 8*time.Second)
	t.Logf("master %s of the tenant's slot killed under load: %s", victim, tl)
	if tl.ok != len(shots) {
		t.Fatalf("%d of %d requests not answered 200: %v", len(shots)-tl.ok, len(shots), tl.examples)
	}
	if !sawDegraded.Load() {
		t.Fatalf("no edge reported degraded while the master was down")
	}
	waitCluster(t, es...)
}

// tenantMaster is the address of the master serving the slot of tenant's keys.
func tenantMaster(t *testing.T, url, tenant string) string {
	t.Helper()
	opt, err := redis.ParseClusterURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClusterClient(opt)
	defer c.Close()
	ctx := context.Background()
	slot, err := c.ClusterKeySlot(ctx, "{"+tenant+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				}
			}
		}
	}
	t.Fatalf("slot %d of %s has no master", slot, tenant)
	return ""
}
