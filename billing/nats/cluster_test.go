package nats_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing/billingtest"
	billingnats "tollgate/billing/nats"
	"tollgate/edge/meter"
	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
	tgnats "tollgate/tenants/nats"
)

var quiet = slog.New(slog.DiscardHandler)

func TestMain(m *testing.M) {
	// Connect logs every connect and disconnect at info; keep test output to what fails.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 1})))
	os.Exit(m.Run())
}

func connectList(t testing.TB, servers, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsconn.ConnectAuth(servers, name, natsconn.Auth{}, nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
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

// TestClusterStreamReplicas: the usage stream and the totals bucket are created at the
// configured replicas, raised from 1 to 3 (with billing's durable consumer following the
// stream), and kept at 3 by a lower setting.
func TestClusterStreamReplicas(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	_, js := connectList(t, c.URLs(), t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Creating or changing a clustered stream answers once its own Raft group has a
	// leader; on a machine loaded by the whole suite a request once went unanswered for
	// 30 s. The calls are idempotent, so each gets 10 s and is tried again.
	ensure := func(name string, replicas int) {
		t.Helper()
		for _, step := range []struct {
			what string
			do   func(context.Context) error
		}{
			{"usage stream", func(ctx context.Context) error {
				_, err := usage.EnsureStream(ctx, js, name, replicas)
				return err
			}},
			{"totals bucket", func(ctx context.Context) error {
				_, err := usage.EnsureTotalsBucket(ctx, js, name, replicas)
				return err
			}},
		} {
			testenv.WaitFor(t, 60*time.Second, func() error {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := step.do(ctx); err != nil {
					return fmt.Errorf("the %s of %s with %d replicas: %w", step.what, name, replicas, err)
				}
				return nil
			})
		}
	}

	fresh := testenv.Name("tg")
	ensure(fresh, 3)
	for _, s := range []string{usage.Stream(fresh), tgnats.KVStream(usage.TotalsBucket(fresh))} {
		if r, peers, _ := testenv.StreamReplicas(t, js, s); r != 3 || peers != 3 {
			t.Errorf("%s: %d replicas on %d peers, want 3 on 3", s, r, peers)
		}
	}

	old := testenv.Name("tg")
	ensure(old, 1)
	cons, err := js.CreateOrUpdateConsumer(ctx, usage.Stream(old), jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	ensure(old, 3) // raised
	for _, s := range []string{usage.Stream(old), tgnats.KVStream(usage.TotalsBucket(old))} {
		testenv.WaitFor(t, 10*time.Second, func() error {
			if r, peers, _ := testenv.StreamReplicas(t, js, s); r != 3 || peers != 3 {
				return fmt.Errorf("%s raised to %d replicas on %d peers, want 3 on 3", s, r, peers)
			}
			return nil
		})
	}
	testenv.WaitFor(t, 10*time.Second, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			return fmt.Errorf("billing's consumer after the raise: %+v", info.Cluster)
		}
		return nil
	})
	if _, err := usage.EnsureStream(ctx, js, old, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := usage.EnsureTotalsBucket(ctx, js, old, 1); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{usage.Stream(old), tgnats.KVStream(usage.TotalsBucket(old))} {
		if r, _, _ := testenv.StreamReplicas(t, js, s); r != 3 {
			t.Errorf("a setting of 1 lowered %s to %d replicas; it must keep 3", s, r)
		}
	}
}

// TestClusterUsageExactlyOnce: an edge's meter publishes usage while the usage stream's
// leader is killed and later comes back; billing folds every request exactly once, and
// its rollups equal what the edge counted.
func TestClusterUsageExactlyOnce(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	prefix := testenv.Name("tg")
	edgeNC, js := connectList(t, c.URLs(), "edge-1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := usage.EnsureStream(ctx, js, prefix, 3); err != nil {
		t.Fatal(err)
	}

	pub, err := usage.NewPublisher(edgeNC, prefix, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	pub.SetReplicas(3)
	m, err := meter.New(meter.Config{EdgeID: "edge-1", Sink: pub, SpoolDir: t.TempDir(), FlushInterval: 50 * time.Millisecond,
		PublishTimeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_, billJS := connectList(t, c.URLs(), "billing")
	bctx, stop := context.WithCancel(context.Background())
	cons := billingnats.NewUsageReader(billJS, db.Store, billingnats.UsageReaderConfig{Prefix: prefix, Replicas: 3, AckWait: time.Second, Logger: quiet})
	done := make(chan struct{})
	go func() { defer close(done); _ = cons.Run(bctx) }()
	t.Cleanup(func() { stop(); <-done })

	route, consumer := m.Route(tn.ID, "r1"), m.Consumer(tn.ID, "c1")
	folded := func() int64 { r, _ := db.Sum(t); return r }
	var recorded int64
	record := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			for range 20 {
				route.Record(consumer, 200, true, 1, 1, time.Time{})
				recorded++
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	record(500 * time.Millisecond)
	_, _, leader := testenv.StreamReplicas(t, js, usage.Stream(prefix))
	li := c.Index(leader)
	start := time.Now()
	c.Kill(li)
	record(2 * time.Second)
	var newLeader string
	testenv.WaitFor(t, 15*time.Second, func() error {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		s, err := js.Stream(pctx, usage.Stream(prefix))
		if err != nil {
			return err
		}
		if l := s.CachedInfo().Cluster.Leader; l == "" || l == leader {
			return fmt.Errorf("no new leader yet (%q)", l)
		}
		newLeader = s.CachedInfo().Cluster.Leader
		return nil
	})
	elected := time.Since(start)
	record(time.Second)
	c.Start(li)
	record(500 * time.Millisecond)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, func() error {
		if got := folded(); got != recorded {
			return fmt.Errorf("folded %d of %d requests (spooled %d)", got, recorded, m.Spooled())
		}
		return nil
	})
	time.Sleep(1500 * time.Millisecond) // past AckWait: a redelivered batch would show now
	if got := folded(); got != recorded {
		t.Fatalf("folded %d requests, want exactly %d", got, recorded)
	}
	var counted int64
	for _, et := range m.Totals() {
		counted += et.Requests - et.Dropped
	}
	if counted != recorded {
		t.Errorf("the edge counted %d, recorded %d", counted, recorded)
	}
	t.Logf("%d requests recorded, counted by the edge and folded by billing; leader %s killed, %s elected after %s",
		recorded, leader, newLeader, elected.Round(time.Millisecond))
}
