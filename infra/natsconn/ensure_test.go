package natsconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
)

// A stream that already has the settings asked for gets no update request; one whose
// settings differ gets one.
func TestEnsureStreamUpdatesOnlyWhatDiffers(t *testing.T) {
	s := testenv.NATS(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Counted as the messages queued in the client: a Flush's PONG comes after every
	// message the server routed before it, and the client queues each as it reads it, so
	// the count is whole once Flush returns (an asynchronous handler might not have run).
	sub, err := nc.SubscribeSync("$JS.API.STREAM.UPDATE.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	updates := func() int {
		n, _, err := sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "ensure_test", Subjects: []string{"ensure.>"}, Storage: jetstream.FileStorage,
		MaxAge: time.Hour, Duplicates: time.Minute, Discard: jetstream.DiscardOld, Replicas: 1}
	for range 3 {
		if _, err := natsconn.EnsureStream(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := updates(); n != 0 {
		t.Fatalf("%d update requests for a stream that already had its settings", n)
	}
	cfg.MaxAge = 2 * time.Hour
	st, err := natsconn.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Errorf("max age %v after the update, want 2h", got)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := updates(); n != 1 {
		t.Errorf("%d update requests for a changed setting, want 1", n)
	}
}
