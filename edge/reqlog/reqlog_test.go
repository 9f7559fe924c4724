package reqlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge/reqlog"
	"tollgate/infra/natsconn"
	wire "tollgate/infra/reqlog"
	"tollgate/infra/testenv"
	"tollgate/tenants"
)

const tenantA = "0190a000-0000-7000-8000-00000000000a"

func TestKeep(t *testing.T) {
	r := reqlog.New(reqlog.Config{EdgeID: "e", Sink: publisher(t), Interval: time.Hour})
	defer r.Close(context.Background())
	h := r.Tenant(tenantA)
	if r.Tenant(tenantA) != h {
		t.Fatal("a second handle for the same tenant")
	}
	h.SetSamplePercent(0)
	for _, s := range []int{400, 404, 429, 500, 502, 504} {
		if !h.Keep(s) {
			t.Errorf("status %d not kept at 0%%", s)
		}
	}
	for i := 0; i < 100; i++ {
		if h.Keep(200) {
			t.Fatal("a 200 kept at 0%")
		}
	}
	h.SetSamplePercent(100)
	for i := 0; i < 100; i++ {
		if !h.Keep(204) {
			t.Fatal("a 204 left out at 100%")
		}
	}
	h.SetSamplePercent(50)
	kept := 0
	for i := 0; i < 10000; i++ {
		if h.Keep(200) {
			kept++
		}
	}
	if kept < 4000 || kept > 6000 {
		t.Errorf("%d of 10000 kept at 50%%", kept)
	}
	p := 5.0
	h2 := r.TenantOf(&tenants.Tenant{ID: "t2", Limits: &tenants.PlatformPlan{Logs: &tenants.LogPolicy{SamplePercent: &p}}})
	if h2 == nil || (*reqlog.Recorder)(nil).TenantOf(&tenants.Tenant{ID: "x"}) != nil {
		t.Error("TenantOf")
	}
}

// Keep on the path of a request that is not logged allocates nothing.
func TestKeepAllocatesNothing(t *testing.T) {
	r := reqlog.New(reqlog.Config{EdgeID: "e", Sink: publisher(t), Interval: time.Hour})
	defer r.Close(context.Background())
	h := r.Tenant(tenantA)
	h.SetSamplePercent(1)
	if n := testing.AllocsPerRun(1000, func() { h.Keep(200) }); n != 0 {
		t.Errorf("Keep allocates %.1f times per call", n)
	}
}

// publisher is a sink on a NATS server of the test's.
func publisher(t *testing.T) *wire.Publisher {
	ns := testenv.NATS(t)
	nc, err := natsconn.Connect(ns.ClientURL(), "reqlog-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := wire.NewPublisher(nc, testenv.Name("reqlog_"), "e", 1)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

type streamReader struct {
	t    *testing.T
	cons jetstream.Consumer
}

func newStreamReader(t *testing.T, js jetstream.JetStream, prefix string) *streamReader {
	ctx := context.Background()
	if _, err := wire.EnsureStream(ctx, js, prefix, 1); err != nil {
		t.Fatal(err)
	}
	c, err := js.OrderedConsumer(ctx, wire.Stream(prefix), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &streamReader{t: t, cons: c}
}

// next waits for the next batch on the stream.
func (s *streamReader) next(timeout time.Duration) *wire.Batch {
	s.t.Helper()
	m, err := s.cons.Next(jetstream.FetchMaxWait(timeout))
	if err != nil {
		s.t.Fatalf("no batch within %s: %v", timeout, err)
	}
	b, err := wire.DecodeBatch(m.Data())
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

// Entries and the counts of what was not logged reach the stream as batches a second
// apart, each with a Nats-Msg-Id of its id.
func TestRecorderPublishesBatches(t *testing.T) {
	ns := testenv.NATS(t)
	nc, err := natsconn.Connect(ns.ClientURL(), "reqlog-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := testenv.Name("reqlog_")
	pub, err := wire.NewPublisher(nc, prefix, "edge-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := reqlog.New(reqlog.Config{EdgeID: "edge-1", Sink: pub, Interval: 100 * time.Millisecond})
	h := r.Tenant(tenantA)
	h.SetSamplePercent(0)
	js, _ := jetstream.New(nc)
	sr := newStreamReader(t, js, prefix)
	for i := 0; i < 3; i++ {
		h.Keep(200)
	}
	if h.Keep(502) {
		r.Record(h, &wire.Entry{Time: time.Now(), RequestID: "r1", Method: "GET", Path: "/down", Status: 502, Reason: "refused"})
	}
	var entries []wire.Entry
	var sampled int64
	for deadline := time.Now().Add(10 * time.Second); (len(entries) < 1 || sampled < 3) && time.Now().Before(deadline); {
		b := sr.next(10 * time.Second)
		if b.EdgeID != "edge-1" {
			t.Errorf("batch of edge %q", b.EdgeID)
		}
		entries = append(entries, b.Entries...)
		for _, n := range b.NotLogged {
			sampled += n.Sampled
		}
	}
	if len(entries) != 1 || entries[0].TenantID != tenantA || entries[0].Reason != "refused" || sampled != 3 {
		t.Errorf("entries %+v, sampled %d; want the 502 and 3 sampled out", entries, sampled)
	}
	r.Close(context.Background())
}

// While NATS is away the recorder holds at most MaxPending batches; the entries past
// them are counted as dropped in a batch NATS takes once it is back.
func TestRecorderHoldsBatchesWhileNATSIsAway(t *testing.T) {
	ns := testenv.NATS(t)
	nc, err := natsconn.Connect(ns.ClientURL(), "reqlog-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := testenv.Name("reqlog_")
	pub, err := wire.NewPublisher(nc, prefix, "edge-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := wire.EnsureStream(context.Background(), js, prefix, 1); err != nil {
		t.Fatal(err)
	}
	r := reqlog.New(reqlog.Config{EdgeID: "edge-1", Sink: pub, Interval: 50 * time.Millisecond, MaxPending: 2})
	defer r.Close(context.Background())
	h := r.Tenant(tenantA)
	ns.Shutdown()
	for i := 0; i < 4; i++ {
		r.Record(h, &wire.Entry{Time: time.Now(), RequestID: string(rune('a' + i)), Method: "GET", Path: "/", Status: 500})
		want := min(i+1, 2)
		deadline := time.Now().Add(5 * time.Second)
		for r.Pending() != want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := r.Pending(); got != want {
			t.Fatalf("after %d entries %d batches held, want %d", i+1, got, want)
		}
		time.Sleep(60 * time.Millisecond) // the next batch is cut with this one's counts settled
	}
	testenv.RestartNATS(t, ns)
	sr := newStreamReader(t, js, prefix)
	got := map[string]bool{}
	var dropped int64
	for deadline := time.Now().Add(20 * time.Second); (dropped < 2 || len(got) < 2) && time.Now().Before(deadline); {
		b := sr.next(20 * time.Second)
		for _, e := range b.Entries {
			got[e.RequestID] = true
		}
		for _, n := range b.NotLogged {
			dropped += n.Dropped
		}
	}
	if !got["a"] || !got["b"] || got["c"] || got["d"] || dropped != 2 {
		t.Errorf("entries %v, dropped %d; want a and b, and c and d counted as dropped", got, dropped)
	}
}
