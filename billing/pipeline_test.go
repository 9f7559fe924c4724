package billing_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
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
)

var quiet = slog.New(slog.DiscardHandler)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type stack struct {
	prefix string
	db     *billingtest.DB
	nc     *nats.Conn // the "edge" connection: reconnects after an outage
	js     jetstream.JetStream
}

func newStack(t *testing.T, url string) *stack {
	t.Helper()
	nc, err := natsconn.Connect(url, "test-edge", nats.ReconnectWait(100*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &stack{prefix: testenv.Name("tg"), db: billingtest.Open(t), nc: nc, js: js}
}

// consume runs a billing consumer on its own connection until the test ends.
func (s *stack) consume(t *testing.T, url string, cfg billingnats.UsageReaderConfig) *billingnats.UsageReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, done := s.consumeCtx(t, ctx, url, cfg)
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// consumeCtx runs a billing consumer until ctx ends; done closes when it has returned.
func (s *stack) consumeCtx(t *testing.T, ctx context.Context, url string, cfg billingnats.UsageReaderConfig) (c *billingnats.UsageReader, done <-chan struct{}) {
	t.Helper()
	nc, err := natsconn.Connect(url, "test-billing", nats.ReconnectWait(100*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	cfg.Prefix = s.prefix
	cfg.Logger = quiet
	if cfg.AckWait == 0 {
		cfg.AckWait = time.Second
	}
	c = billingnats.NewUsageReader(js, s.db.Store, cfg)
	d := make(chan struct{})
	go func() {
		defer close(d)
		c.Run(ctx)
	}()
	return c, d
}

func (s *stack) folded(t *testing.T) int64 {
	r, _ := s.db.Sum(t)
	return r
}

// NATS goes away mid-run: the edge spools, replays when it is back, and billing folds
// every request exactly once.
func TestOutageSpoolsReplaysAndFoldsExactlyN(t *testing.T) {
	ns := testenv.NATS(t)
	url := ns.ClientURL()
	s := newStack(t, url)
	tn := s.db.Tenant(t, "acme", "pro")
	pub, err := usage.NewPublisher(s.nc, s.prefix, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := meter.New(meter.Config{EdgeID: "edge-1", Sink: pub, SpoolDir: t.TempDir(), FlushInterval: 50 * time.Millisecond,
		PublishTimeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r := m.Route(tn.ID, "r1")
	c := m.Consumer(tn.ID, "c1")
	record := func(n int) {
		for i := 0; i < n; i++ {
			r.Record(c, 200, true, 1, 1, time.Time{})
			if i%100 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	s.consume(t, url, billingnats.UsageReaderConfig{})

	record(1000)
	waitFor(t, 10*time.Second, "the first 1000 folded", func() bool { return s.folded(t) == 1000 })

	ns.Shutdown()
	record(700)
	waitFor(t, 10*time.Second, "batches spooled", func() bool { return m.Spooled() > 0 })
	record(300)
	if got := s.folded(t); got != 1000 {
		t.Fatalf("folded %d during the outage", got)
	}

	testenv.RestartNATS(t, ns)
	record(500)
	waitFor(t, 20*time.Second, "the spool replayed", func() bool { return m.Spooled() == 0 })
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "2500 folded", func() bool { return s.folded(t) >= 2500 })
	time.Sleep(1500 * time.Millisecond) // past AckWait: any redelivery would show
	if got := s.folded(t); got != 2500 {
		t.Fatalf("folded %d requests, want exactly 2500", got)
	}
	var counted int64
	for _, et := range m.Totals() {
		counted += et.Requests - et.Dropped
	}
	if counted != 2500 {
		t.Fatalf("edge totals: %d", counted)
	}
}

// lossyAck publishes but, once, reports failure as if the ack was lost: the meter spools
// the batch it had in fact delivered and publishes it again later.
type lossyAck struct {
	*usage.Publisher
	lose atomic.Bool
}

func (l *lossyAck) Publish(ctx context.Context, id string, data []byte) error {
	err := l.Publisher.Publish(ctx, id, data)
	if err == nil && l.lose.CompareAndSwap(true, false) {
		return errors.New("ack lost")
	}
	return err
}

// A batch published twice is stored once (same Nats-Msg-Id within the window) and folded
// once even when a copy slips past the window (same batch id).
func TestDuplicateBatchesFoldOnce(t *testing.T) {
	ns := testenv.NATS(t)
	s := newStack(t, ns.ClientURL())
	tn := s.db.Tenant(t, "acme", "pro")
	pub, err := usage.NewPublisher(s.nc, s.prefix, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	sink := &lossyAck{Publisher: pub}
	m, err := meter.New(meter.Config{EdgeID: "edge-1", Sink: sink, SpoolDir: t.TempDir(), FlushInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	r := m.Route(tn.ID, "r1")
	for i := 0; i < 7; i++ {
		r.Record(nil, 200, true, 0, 0, time.Time{})
	}
	sink.lose.Store(true)
	m.Flush(context.Background()) // stored, but the meter thinks not: spooled
	if m.Spooled() != 1 {
		t.Fatalf("spooled %d", m.Spooled())
	}
	m.Flush(context.Background()) // replayed: a duplicate to JetStream
	if m.Spooled() != 0 {
		t.Fatalf("spooled %d after replay", m.Spooled())
	}
	stream, err := s.js.Stream(context.Background(), usage.Stream(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := stream.Info(context.Background())
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1 (deduplicated by Nats-Msg-Id)", info.State.Msgs)
	}
	if info.Config.Duplicates < 2*time.Minute {
		t.Fatalf("duplicate window %v", info.Config.Duplicates)
	}
	// The same batch again, as if after the window: a new message id, the same batch id.
	raw, err := stream.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.PublishMsg(context.Background(), &nats.Msg{Subject: raw.Subject, Data: raw.Data},
		jetstream.WithMsgID(raw.Header.Get(jetstream.MsgIDHeader)+"-after-window")); err != nil {
		t.Fatal(err)
	}
	c := s.consume(t, ns.ClientURL(), billingnats.UsageReaderConfig{})
	waitFor(t, 10*time.Second, "both copies handled", func() bool { st := c.Stats(); return st.Folded+st.Duplicates == 2 })
	if st := c.Stats(); st.Folded != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
	if got := s.folded(t); got != 7 {
		t.Fatalf("folded %d, want 7", got)
	}
}

// Billing dies after a fold's commit and before its ack: the batch comes back, to a new
// consumer, and changes nothing.
func TestConsumerKilledBetweenCommitAndAck(t *testing.T) {
	ns := testenv.NATS(t)
	url := ns.ClientURL()
	s := newStack(t, url)
	tn := s.db.Tenant(t, "acme", "pro")
	pub, err := usage.NewPublisher(s.nc, s.prefix, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	const batches, per = 20, 50
	at := time.Now()
	for i := 1; i <= batches; i++ {
		b := billingtest.Batch(uint64(i), billingtest.Record(tn.ID, at, "r1", "", 200, true, per))
		data, _ := usage.EncodeBatch(b)
		if err := pub.Publish(context.Background(), b.ID, data); err != nil {
			t.Fatal(err)
		}
	}
	var killedAt string
	var n atomic.Int32
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	_, done1 := s.consumeCtx(t, ctx, url, billingnats.UsageReaderConfig{AfterFold: func(id string, folded bool) {
		if n.Add(1) == 5 {
			killedAt = id
			kill() // after the commit, before the ack
		}
	}})
	<-done1
	if killedAt == "" {
		t.Fatal("the hook never ran")
	}
	before := s.folded(t)
	if before != 5*per {
		t.Fatalf("folded %d before the crash, want %d", before, 5*per)
	}
	c2 := s.consume(t, url, billingnats.UsageReaderConfig{})
	waitFor(t, 15*time.Second, "everything folded", func() bool { return s.folded(t) >= batches*per })
	waitFor(t, 5*time.Second, "the unacked batch redelivered", func() bool { return c2.Stats().Duplicates >= 1 })
	if got := s.folded(t); got != batches*per {
		t.Fatalf("folded %d, want exactly %d", got, batches*per)
	}
	if nb, _ := s.db.Store.Batches(context.Background()); nb != batches {
		t.Fatalf("%d batches recorded", nb)
	}
}

// A batch that cannot be decoded is terminated, not retried forever.
func TestPoisonBatchIsTerminated(t *testing.T) {
	ns := testenv.NATS(t)
	s := newStack(t, ns.ClientURL())
	if _, err := usage.EnsureStream(context.Background(), s.js, s.prefix, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.Publish(context.Background(), usage.Subject(s.prefix, "x"), []byte(`{"id":"x","edge_id":"x","records":[{"tenant_id":"not-a-uuid"}]}`)); err != nil {
		t.Fatal(err)
	}
	c := s.consume(t, ns.ClientURL(), billingnats.UsageReaderConfig{})
	waitFor(t, 10*time.Second, "the poison batch", func() bool { return c.Stats().Poison == 1 })
}
