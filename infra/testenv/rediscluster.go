package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServerBin is the redis-server the cluster and sentinel helpers start (Debian's
// redis-server package). TOLLGATE_TEST_REDIS_SERVER overrides it.
func RedisServerBin() string {
	if b := os.Getenv("TOLLGATE_TEST_REDIS_SERVER"); b != "" {
		return b
	}
	return "/usr/bin/redis-server"
}

// RedisNodes is a set of redis-server processes a test started on loopback ports: one
// node, a Redis Cluster, or a master, its replica and a sentinel. Every process is killed and
// every file removed when the test ends.
type RedisNodes struct {
	tb    testing.TB
	dir   string
	mu    sync.Mutex
	procs map[string]*exec.Cmd // by address
	ports []int
	// Addrs are the data nodes' addresses (masters first, in a cluster as created).
	Addrs []string
	// Sentinel is the sentinel's address (RedisSentinel only).
	Sentinel string
}

// RedisCluster starts a Redis Cluster of masters masters, each with replicas replicas
// (cluster-node-timeout 1 s, so a master's loss is failed over within seconds), and waits
// until every slot is served and every replica is in sync.
func RedisCluster(tb testing.TB, masters, replicas int) *RedisNodes {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("testenv: a Redis Cluster needs 3 masters or more")
	}
	n := newRedisNodes(tb)
	total := masters * (1 + replicas)
	for range total {
		port, bus := n.port(), n.port()
		addr := "127.0.0.1:" + strconv.Itoa(port)
		n.start(addr, "--port", strconv.Itoa(port), "--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "1000",
			"--cluster-config-file", filepath.Join(n.dir, "nodes-"+strconv.Itoa(port)+".conf"))
		n.Addrs = append(n.Addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, n.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, redisCLI(), args...).CombinedOutput(); err != nil {
		tb.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	n.WaitCluster(ctx)
	return n
}

// RedisSentinel starts a master, one replica of it and one sentinel watching it under
// the name "mymaster" (down after 1 s, failover within seconds), and waits until the
// replica is in sync and the sentinel knows it.
func RedisSentinel(tb testing.TB) *RedisNodes {
	tb.Helper()
	n := newRedisNodes(tb)
	mport, rport, sport := n.port(), n.port(), n.port()
	master, replica := "127.0.0.1:"+strconv.Itoa(mport), "127.0.0.1:"+strconv.Itoa(rport)
	n.start(master, "--port", strconv.Itoa(mport))
	n.start(replica, "--port", strconv.Itoa(rport), "--replicaof", "127.0.0.1", strconv.Itoa(mport))
	n.Addrs = []string{master, replica}
	conf := filepath.Join(n.dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds mymaster 1000\n"+
		"sentinel failover-timeout mymaster 5000\n", mport)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	n.Sentinel = "127.0.0.1:" + strconv.Itoa(sport)
	n.start(n.Sentinel, conf, "--sentinel", "--port", strconv.Itoa(sport))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := redis.NewSentinelClient(&redis.Options{Addr: n.Sentinel})
	defer s.Close()
	r := redis.NewClient(&redis.Options{Addr: replica})
	defer r.Close()
	for {
		reps, err := s.Replicas(ctx, "mymaster").Result()
		var info string
		if err == nil {
			info, err = r.Info(ctx, "replication").Result()
		}
		if err == nil && len(reps) == 1 && strings.Contains(fmt.Sprint(reps[0]), "flags:slave") &&
			!strings.Contains(fmt.Sprint(reps[0]), "s_down") && strings.Contains(info, "master_link_status:up") {
			break
		}
		if ctx.Err() != nil {
			tb.Fatalf("testenv: the sentinel did not see the replica: %v %v", reps, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// RedisServer starts one redis-server of the test's own, for tests that do to Redis what
// must not reach other tests (SCRIPT FLUSH, a kill).
func RedisServer(tb testing.TB) *RedisNodes {
	tb.Helper()
	n := newRedisNodes(tb)
	port := n.port()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	n.start(addr, "--port", strconv.Itoa(port))
	n.Addrs = []string{addr}
	return n
}

func newRedisNodes(tb testing.TB) *RedisNodes {
	n := &RedisNodes{tb: tb, dir: tb.TempDir(), procs: map[string]*exec.Cmd{}}
	tb.Cleanup(n.stopAll)
	return n
}

func redisCLI() string { return filepath.Join(filepath.Dir(RedisServerBin()), "redis-cli") }

// start runs one redis-server (no persistence, its files in the test's directory) and
// waits until it answers.
func (n *RedisNodes) start(addr string, args ...string) {
	n.tb.Helper()
	_, port, _ := net.SplitHostPort(addr)
	// A replica's first sync would wait 5 s for more replicas to share the transfer.
	args = append(args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
		"--dir", n.dir, "--logfile", filepath.Join(n.dir, port+".log"))
	cmd := exec.Command(RedisServerBin(), args...)
	if err := cmd.Start(); err != nil {
		n.tb.Fatalf("testenv: start %s: %v", RedisServerBin(), err)
	}
	n.mu.Lock()
	n.procs[addr] = cmd
	n.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(n.dir, port+".log"))
			n.tb.Fatalf("testenv: redis-server on %s did not answer within 10s:\n%s", addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends the node at addr at once (SIGKILL), as a crash would.
func (n *RedisNodes) Kill(addr string) {
	n.mu.Lock()
	cmd := n.procs[addr]
	delete(n.procs, addr)
	n.mu.Unlock()
	if cmd == nil {
		n.tb.Fatalf("testenv: no redis node at %s", addr)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

func (n *RedisNodes) stopAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for addr, cmd := range n.procs {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		delete(n.procs, addr)
	}
}

// ClusterURL is the cluster in TOLLGATE_REDIS_URL's cluster form: every node a seed.
func (n *RedisNodes) ClusterURL() string {
	u := "redis://" + n.Addrs[0]
	for i, a := range n.Addrs[1:] {
		if i == 0 {
			u += "?"
		} else {
			u += "&"
		}
		u += "addr=" + a
	}
	return u
}

// SentinelURL is the master in TOLLGATE_REDIS_URL's Sentinel form.
func (n *RedisNodes) SentinelURL() string { return "redis+sentinel://" + n.Sentinel + "/mymaster" }

// WaitCluster waits until every live node reports cluster_state:ok, all 16384 slots
// are served by live masters and every live replica's link to its master is up.
func (n *RedisNodes) WaitCluster(ctx context.Context) {
	n.tb.Helper()
	for {
		err := n.clusterReady(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			n.tb.Fatalf("testenv: redis cluster not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *RedisNodes) clusterReady(ctx context.Context) error {
	n.mu.Lock()
	live := make([]string, 0, len(n.procs))
	for a := range n.procs {
		live = append(live, a)
	}
	n.mu.Unlock()
	served := 0
	for _, a := range live {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		info, err := c.ClusterInfo(ctx).Result()
		var repl string
		if err == nil {
			repl, err = c.Info(ctx, "replication").Result()
		}
		var shards []redis.ClusterShard
		if err == nil {
			shards, err = c.ClusterShards(ctx).Result()
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state not ok", a)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replica not in sync", a)
		}
		if !strings.Contains(repl, "role:master") {
			continue
		}
		served = 0
		for _, sh := range shards {
			for _, r := range sh.Slots {
				up := false
				for _, node := range sh.Nodes {
					addr := net.JoinHostPort(node.IP, strconv.FormatInt(node.Port, 10))
					if node.Role == "master" && node.Health == "online" && slices.Contains(live, addr) {
						up = true
					}
				}
				if !up {
					return fmt.Errorf("slots %d-%d have no live master", r.Start, r.End)
				}
				served += int(r.End - r.Start + 1)
			}
		}
		if served != 16384 {
			return fmt.Errorf("%s sees %d slots served", a, served)
		}
	}
	return nil
}

// port is a loopback TCP port nothing listens on now and not yet given to a node of n.
func (n *RedisNodes) port() int {
	n.tb.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			n.tb.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !slices.Contains(n.ports, p) {
			n.ports = append(n.ports, p)
			return p
		}
	}
}
