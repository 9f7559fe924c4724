package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// connectList connects to a server list as every Tollgate process does, reconnecting
// quickly so the tests measure the cluster rather than the backoff.
func connectList(t testing.TB, servers string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsconn.ConnectAuth(servers, t.Name(), natsconn.Auth{},
		append([]nats.Option{nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectJitter(0, 0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// ensureBucket is EnsureBucket as the api calls it (see bucketOn in program.go): each
// attempt bounded, retried until ctx ends. A cluster on a loaded machine can leave a
// JetStream API request unanswered, and one attempt holding the whole deadline would fail
// the test on a lost reply rather than on the behaviour it checks.
func ensureBucket(ctx context.Context, t testing.TB, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	t.Helper()
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kv, err := tgnats.EnsureBucket(actx, js, name, replicas)
		cancel()
		if err == nil || ctx.Err() != nil {
			return kv, err
		}
		t.Logf("ensure bucket %s at %d replicas: %v; retrying", name, replicas, err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// TestClusterBucketReplicas: the config bucket is created at the configured replicas, an
// existing one is raised from 1 to 3, and a lower setting never takes copies away.
func TestClusterBucketReplicas(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	_, js := connectList(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	fresh, old := testenv.Name("tgcfg_"), testenv.Name("tgcfg_")
	if _, err := ensureBucket(ctx, t, js, fresh, 3); err != nil {
		t.Fatal(err)
	}
	if r, peers, _ := testenv.StreamReplicas(t, js, tgnats.KVStream(fresh)); r != 3 || peers != 3 {
		t.Errorf("new bucket: %d replicas on %d peers, want 3 on 3", r, peers)
	}

	kv, err := ensureBucket(ctx, t, js, old, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1.tenant", value(1, "kept")); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := testenv.StreamReplicas(t, js, tgnats.KVStream(old)); r != 1 {
		t.Fatalf("bucket at replicas 1 has %d", r)
	}
	if _, err := ensureBucket(ctx, t, js, old, 3); err != nil {
		t.Fatalf("raise to 3: %v", err)
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if r, peers, _ := testenv.StreamReplicas(t, js, tgnats.KVStream(old)); r != 3 || peers != 3 {
			return fmt.Errorf("raised bucket: %d replicas on %d peers, want 3 on 3", r, peers)
		}
		return nil
	})
	if _, err := ensureBucket(ctx, t, js, old, 1); err != nil {
		t.Fatalf("ensure at a lower setting: %v", err)
	}
	if r, _, _ := testenv.StreamReplicas(t, js, tgnats.KVStream(old)); r != 3 {
		t.Errorf("a setting of 1 lowered the bucket to %d replicas; it must keep 3", r)
	}
	// The new replicas catch up after they are counted, and a KV get may be served by
	// any of them (direct get), so a read can miss the entry for a moment; what must hold
	// is that the entry is not lost.
	testenv.WaitFor(t, 30*time.Second, func() error {
		if e, err := kv.Get(ctx, "t1.tenant"); err != nil || string(e.Value()) != string(value(1, "kept")) {
			return fmt.Errorf("entry after raising replicas: %v %v", e, err)
		}
		return nil
	})
}

// TestClusterFailover: a connection given the server list moves to another node when the
// one it is on is killed, and the bucket keeps taking writes once its leader is elsewhere.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	_, setup := connectList(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bucket := testenv.Name("tgcfg_")
	if _, err := ensureBucket(ctx, t, setup, bucket, 3); err != nil {
		t.Fatal(err)
	}
	// The hardest single loss is the node holding both the client and the bucket's
	// leader: put the client there by listing the leader first, unshuffled.
	_, _, leader := testenv.StreamReplicas(t, setup, tgnats.KVStream(bucket))
	li := c.Index(leader)
	if li < 0 {
		t.Fatalf("leader %q is no node of the cluster", leader)
	}
	list := []string{c.URL(li)}
	for i := range 3 {
		if i != li {
			list = append(list, c.URL(i))
		}
	}
	nc, js := connectList(t, strings.Join(list, ","), nats.DontRandomize())
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1.tenant", value(1, "before")); err != nil {
		t.Fatal(err)
	}
	if got := nc.ConnectedServerName(); got != leader {
		t.Fatalf("connected to %s, want the leader %s", got, leader)
	}

	start := time.Now()
	c.Kill(li)
	var reconnected, written time.Duration
	// Generous: an election takes seconds, more while the machine is busy.
	testenv.WaitFor(t, 60*time.Second, func() error {
		if !nc.IsConnected() || nc.ConnectedServerName() == leader {
			return fmt.Errorf("still not reconnected (status %v)", nc.Status())
		}
		if reconnected == 0 {
			reconnected = time.Since(start)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := kv.Put(pctx, "t1.tenant", value(2, "after")); err != nil {
			return err
		}
		written = time.Since(start)
		return nil
	})
	_, _, newLeader := testenv.StreamReplicas(t, js, tgnats.KVStream(bucket))
	t.Logf("killed %s (client's node and bucket leader): client on %s after %s, write acked after %s, new leader %s",
		leader, nc.ConnectedServerName(), reconnected.Round(time.Millisecond), written.Round(time.Millisecond), newLeader)
	if newLeader == leader || newLeader == "" {
		t.Errorf("leader after the kill: %q", newLeader)
	}
	if e, err := kv.Get(ctx, "t1.tenant"); err != nil || string(e.Value()) != string(value(2, "after")) {
		t.Errorf("entry after failover: %v %v", e, err)
	}
}

// TestClusterConfigExactlyOnce: changes published the way the api's relay does (a batch
// retried whole until acknowledged) while the bucket's leader is killed are stored once
// each and reach a watching edge once each, in rev order per key, ending on every key's
// latest value; the killed node then comes back and catches up.
func TestClusterConfigExactlyOnce(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	relayNC, relayJS := connectList(t, c.URLs())
	_, edgeJS := connectList(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bucket := testenv.Name("tgcfg_")
	if _, err := ensureBucket(ctx, t, relayJS, bucket, 3); err != nil {
		t.Fatal(err)
	}
	pub, err := tgnats.NewPublisher(relayNC, bucket, time.Second)
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		delivered = map[int64]int{}    // rev → times the watcher delivered it
		keyRev    = map[string]int64{} // key → last rev delivered
		problems  []string
	)
	w := watch(t, edgeJS, bucket, tgnats.WatchConfig{OnUpdate: func(u tgnats.Update) {
		var v struct {
			Rev int64 `json:"rev"`
		}
		if err := json.Unmarshal(u.Value, &v); err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		delivered[v.Rev]++
		if v.Rev <= keyRev[u.Key] {
			problems = append(problems, fmt.Sprintf("%s: rev %d after %d", u.Key, v.Rev, keyRev[u.Key]))
		}
		keyRev[u.Key] = v.Rev
	}})
	waitReady(t, w)

	const batches, perBatch, keys = 30, 10, 25
	latest := map[string]int64{}
	rev, retries := int64(0), 0
	killLeader := func() int {
		_, _, leader := testenv.StreamReplicas(t, relayJS, tgnats.KVStream(bucket))
		i := c.Index(leader)
		if i < 0 {
			t.Fatalf("leader %q is no node", leader)
		}
		c.Kill(i)
		return i
	}
	var (
		killed int
		sent   [][]tenants.Change
	)
	for b := range batches {
		switch b {
		case 10:
			killed = killLeader()
		case 20:
			c.Start(killed)
		}
		batch := make([]tenants.Change, 0, perBatch)
		for range perBatch {
			rev++
			k := key("t1", int(rev)%keys)
			batch = append(batch, put(rev, k, "v"))
			latest[k] = rev
		}
		for {
			err := pub.Publish(ctx, batch)
			if err == nil {
				break
			}
			retries++
			if ctx.Err() != nil {
				t.Fatalf("batch %d never acknowledged: %v", b, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		sent = append(sent, batch)
	}
	// A relay whose acks were lost (stored, then the connection or the leader went)
	// publishes those batches again: it must change nothing.
	for _, batch := range sent[len(sent)-3:] {
		if err := pub.Publish(ctx, batch); err != nil {
			t.Fatalf("republish: %v", err)
		}
	}
	testenv.WaitFor(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for k, r := range latest {
			if keyRev[k] != r {
				return fmt.Errorf("%s at rev %d, want %d", k, keyRev[k], r)
			}
		}
		return nil
	})
	// Every change was stored once: a retried batch's changes already stored were
	// dropped as duplicates, so the stream's sequence counts the changes exactly.
	s, err := relayJS.Stream(ctx, tgnats.KVStream(bucket))
	if err != nil {
		t.Fatal(err)
	}
	if seq := s.CachedInfo().State.LastSeq; seq != uint64(rev) {
		t.Errorf("the bucket stored %d messages for %d changes", seq, rev)
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for r, n := range delivered {
		if n > 1 {
			twice++
			t.Errorf("rev %d delivered %d times", r, n)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d changes in %d batches, %d batch retries across a leader kill: %d delivered to the edge, %d twice",
		rev, batches, retries, len(delivered), twice)
}

// TestClusterWatcherFollowsLeaderLoss: an edge keeps following the bucket when the node
// holding its consumer (often the bucket's leader too) is killed: the next change reaches
// it as soon as the bucket takes writes again.
func TestClusterWatcherFollowsLeaderLoss(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	relayNC, relayJS := connectList(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bucket := testenv.Name("tgcfg_")
	if _, err := ensureBucket(ctx, t, relayJS, bucket, 3); err != nil {
		t.Fatal(err)
	}
	_, _, leader := testenv.StreamReplicas(t, relayJS, tgnats.KVStream(bucket))
	li := c.Index(leader)
	var list []string
	for i := range 3 {
		if i != li {
			list = append(list, c.URL(i))
		}
	}
	list = append(list, c.URL(li))
	_, edgeJS := connectList(t, strings.Join(list, ","), nats.DontRandomize())
	r := newRecorder()
	wc := r.config("")
	start := time.Now()
	wc.OnError = func(err error) { t.Logf("%s watch: %v", time.Since(start).Round(time.Millisecond), err) }
	w := watch(t, edgeJS, bucket, wc)
	waitReady(t, w)
	pub, err := tgnats.NewPublisher(relayNC, bucket, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(rev int64) {
		for {
			if err := pub.Publish(ctx, []tenants.Change{put(rev, key("t1", int(rev)), "v")}); err == nil {
				return
			} else if ctx.Err() != nil {
				t.Fatalf("rev %d never acknowledged: %v", rev, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	publish(1)
	testenv.WaitFor(t, 30*time.Second, func() error {
		if _, ok := r.get(key("t1", 1)); !ok {
			return fmt.Errorf("rev 1 not seen")
		}
		return nil
	})
	// The edge's consumer lives on one node; lose that one (the hard case for a watcher:
	// its consumer is gone, and its connection stays up elsewhere).
	st, err := relayJS.Stream(ctx, tgnats.KVStream(bucket))
	if err != nil {
		t.Fatal(err)
	}
	var host string
	for ci := range st.ListConsumers(ctx).Info() {
		if ci.Cluster != nil {
			host = ci.Cluster.Leader
		}
	}
	ki := c.Index(host)
	if ki < 0 {
		t.Fatalf("the edge's consumer is on %q, no node", host)
	}
	t.Logf("stream leader %s, edge's consumer on %s", leader, host)
	start = time.Now()
	c.Kill(ki)
	publish(2)
	acked := time.Since(start)
	testenv.WaitFor(t, 60*time.Second, func() error {
		if _, ok := r.get(key("t1", 2)); !ok {
			return fmt.Errorf("rev 2 not seen %s after the leader's loss", time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
	t.Logf("%s (the edge's consumer; bucket leader %s) killed: the next change acked after %s, seen by the edge after %s",
		host, leader, acked.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	r.check(t)
}
