package natsconn_test

import (
	"context"
	"sync/atomic"
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
	var updates atomic.Int64
	sub, err := nc.Subscribe("$JS.API.STREAM.UPDATE.>", func(*nats.Msg) { updates.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
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
	if n := updates.Load(); n != 0 {
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
	if n := updates.Load(); n != 1 {
		t.Errorf("%d update requests for a changed setting, want 1", n)
	}
}
