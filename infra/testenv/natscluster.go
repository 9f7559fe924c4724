package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// NATSServerBinary is the nats-server a cluster runs: TOLLGATE_TEST_NATS_SERVER, else
// nats-server on PATH, else Debian's /usr/sbin/nats-server. Tollgate needs nothing newer
// than 2.9, which is what Debian ships, so tests run against the oldest server supported.
func NATSServerBinary() (string, error) {
	if b := os.Getenv("TOLLGATE_TEST_NATS_SERVER"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("nats-server"); err == nil {
		return b, nil
	}
	const debian = "/usr/sbin/nats-server"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return "", fmt.Errorf("no nats-server: install it (apt-get install nats-server) or set TOLLGATE_TEST_NATS_SERVER")
}

// NATSClusterOptions shape a test cluster.
type NATSClusterOptions struct {
	Nodes int // Default: 3
	// Config is appended to every node's configuration file: an authorization block, a tls
	// block, an operator and resolver. Client connections then need what it asks for;
	// the test's own readiness check uses the monitoring port only.
	Config string
	// Scheme of the client URLs. Default: nats.
	Scheme string
}

// NATSCluster is a JetStream cluster of nats-server processes on loopback ports, each
// storing in a directory of the test's. Kill stops a node the hard way (a lost machine),
// Start brings it back on the same ports and store.
type NATSCluster struct {
	tb    testing.TB
	bin   string
	nodes []*natsNode
}

type natsNode struct {
	name    string
	url     string
	port    int
	monitor int
	conf    string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  lockedBuffer // the server's output, shown when it fails to start
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Reset() {
	l.mu.Lock()
	l.b.Reset()
	l.mu.Unlock()
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartNATSCluster starts a cluster of n nodes and waits until each reports JetStream
// healthy. Every process is killed and every file removed when the test ends.
func StartNATSCluster(tb testing.TB, n int) *NATSCluster {
	tb.Helper()
	return StartNATSClusterWith(tb, NATSClusterOptions{Nodes: n})
}

// StartNATSClusterWith is StartNATSCluster with options.
func StartNATSClusterWith(tb testing.TB, o NATSClusterOptions) *NATSCluster {
	tb.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Scheme == "" {
		o.Scheme = "nats"
	}
	bin, err := NATSServerBinary()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	// Ports are picked free and then released, so another test may take one before the
	// server binds it: a node that exits while starting gets the whole cluster started
	// again on new ports.
	var last error
	for range 3 {
		c, err := startCluster(tb, bin, o)
		if err == nil {
			return c
		}
		last = err
	}
	tb.Fatalf("testenv: %v", last)
	return nil
}

func startCluster(tb testing.TB, bin string, o NATSClusterOptions) (*NATSCluster, error) {
	dir := tb.TempDir()
	c := &NATSCluster{tb: tb, bin: bin}
	clusterPorts := make([]int, o.Nodes)
	for i := range o.Nodes {
		clusterPorts[i] = freePort(tb)
	}
	name := Name("tg")
	for i := range o.Nodes {
		nd := &natsNode{name: fmt.Sprintf("n%d", i+1), port: freePort(tb), monitor: freePort(tb)}
		nd.url = fmt.Sprintf("%s://127.0.0.1:%d", o.Scheme, nd.port)
		var routes []string
		for j, p := range clusterPorts {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 1GB
}
`, nd.name, nd.port, nd.monitor, filepath.Join(dir, nd.name))
		if o.Nodes > 1 {
			conf += fmt.Sprintf(`cluster {
  name: %s
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, name, clusterPorts[i], strings.Join(routes, ", "))
		}
		conf += o.Config + "\n"
		nd.conf = filepath.Join(dir, nd.name+".conf")
		if err := os.WriteFile(nd.conf, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
	}
	tb.Cleanup(c.killAll)
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			c.killAll()
			return nil, err
		}
	}
	for i := range c.nodes {
		if err := c.waitHealthy(i, 30*time.Second); err != nil {
			c.killAll()
			return nil, err
		}
	}
	if o.Nodes > 1 {
		if err := c.waitMeta(30 * time.Second); err != nil {
			c.killAll()
			return nil, err
		}
	}
	return c, nil
}

// waitMeta polls the nodes' /jsz until one of them leads JetStream's meta group and
// sees every other node as a current peer: a healthy node may answer before that, and a
// stream of as many replicas as nodes created then fails with "no suitable peers for
// placement".
func (c *NATSCluster) waitMeta(d time.Duration) error {
	deadline := time.Now().Add(d)
	last := "no answer"
	for time.Now().Before(deadline) {
		for _, nd := range c.nodes {
			var jsz struct {
				Meta *struct {
					Leader   string `json:"leader"`
					Replicas []struct {
						Current bool `json:"current"`
						Offline bool `json:"offline"`
					} `json:"replicas"`
				} `json:"meta_cluster"`
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", nd.monitor))
			if err != nil {
				last = err.Error()
				continue
			}
			err = json.NewDecoder(resp.Body).Decode(&jsz)
			resp.Body.Close()
			if err != nil || jsz.Meta == nil || jsz.Meta.Leader != nd.name {
				continue
			}
			current := 0
			for _, r := range jsz.Meta.Replicas {
				if r.Current && !r.Offline {
					current++
				}
			}
			if current == len(c.nodes)-1 {
				return nil
			}
			last = fmt.Sprintf("leader %s sees %d of %d peers current", nd.name, current, len(c.nodes)-1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nats cluster: JetStream's meta group not formed after %s: %s", d, last)
}

func (c *NATSCluster) killAll() {
	for i := range c.nodes {
		c.Kill(i)
	}
}

// URL returns node i's client URL.
func (c *NATSCluster) URL(i int) string { return c.nodes[i].url }

// Name returns node i's server name, as a stream's cluster info reports its leader.
func (c *NATSCluster) Name(i int) string { return c.nodes[i].name }

// URLs returns every node's client URL, comma-separated: a TOLLGATE_NATS_URL.
func (c *NATSCluster) URLs() string {
	var us []string
	for i := range c.nodes {
		us = append(us, c.URL(i))
	}
	return strings.Join(us, ",")
}

// Index returns the node whose server name or client URL is s, or -1.
func (c *NATSCluster) Index(s string) int {
	for i := range c.nodes {
		if c.Name(i) == s || c.URL(i) == s {
			return i
		}
	}
	return -1
}

func (c *NATSCluster) start(i int) error {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	cmd := exec.Command(c.bin, "-c", nd.conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	nd.log.Reset()
	cmd.Stderr = &nd.log
	if testing.Verbose() {
		cmd.Stderr = io.MultiWriter(&nd.log, os.Stderr)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server %s: %w", nd.conf, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	nd.cmd, nd.done = cmd, done
	return nil
}

// Start starts node i again after Kill, on the same ports and store, and waits until it is
// healthy.
func (c *NATSCluster) Start(i int) {
	c.tb.Helper()
	if err := c.start(i); err != nil {
		c.tb.Fatalf("testenv: %v", err)
	}
	if err := c.waitHealthy(i, 30*time.Second); err != nil {
		c.tb.Fatalf("testenv: %v", err)
	}
}

// StartAll starts every node that is not running, at once, and waits until each is
// healthy and JetStream's meta group has formed: after a whole cluster was killed no node
// is healthy on its own, as none has a quorum.
func (c *NATSCluster) StartAll() {
	c.tb.Helper()
	var down []int
	for i, nd := range c.nodes {
		nd.mu.Lock()
		stopped := nd.cmd == nil
		nd.mu.Unlock()
		if stopped {
			if err := c.start(i); err != nil {
				c.tb.Fatalf("testenv: %v", err)
			}
			down = append(down, i)
		}
	}
	for _, i := range down {
		if err := c.waitHealthy(i, 60*time.Second); err != nil {
			c.tb.Fatalf("testenv: %v", err)
		}
	}
	if err := c.waitMeta(60 * time.Second); err != nil {
		c.tb.Fatalf("testenv: %v", err)
	}
}

// Kill stops node i at once (SIGKILL): its clients see the connection drop, its streams'
// leaders elsewhere elect anew. It returns when the process is gone.
func (c *NATSCluster) Kill(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Kill()
	select {
	case <-nd.done:
	case <-time.After(10 * time.Second):
		c.tb.Errorf("testenv: nats-server %d did not exit after SIGKILL", i)
	}
	nd.cmd = nil
}

// waitHealthy polls node i's /healthz until it reports ok, which on a clustered server
// means JetStream is up and caught up with the meta leader.
func (c *NATSCluster) waitHealthy(i int, d time.Duration) error {
	nd := c.nodes[i]
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", nd.monitor)
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nats-server %d not healthy after %s: %s", i, d, last)
		case <-nd.done:
			return fmt.Errorf("nats-server %d exited:\n%s", i, nd.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePort returns a loopback port nothing listens on right now.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StreamReplicas returns a stream's configured replicas, how many peers hold it now and
// its leader ("" outside a cluster).
func StreamReplicas(tb testing.TB, js jetstream.JetStream, stream string) (configured, peers int, leader string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return info.Config.Replicas, 1, ""
	}
	return info.Config.Replicas, 1 + len(info.Cluster.Replicas), info.Cluster.Leader
}
