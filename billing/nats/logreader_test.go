package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing/billingtest"
	billingnats "tollgate/billing/nats"
	"tollgate/infra/reqlog"
	"tollgate/infra/testenv"
)

// TestLogReader: batches on the request log stream are stored once however often they
// are published (the same id past JetStream's dedupe window inserts nothing), and a
// message that is not a batch is terminated rather than retried.
func TestLogReader(t *testing.T) {
	t.Parallel()
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	ns := testenv.NATS(t)
	nc, js := connectList(t, ns.ClientURL(), t.Name())
	prefix := testenv.Name("logs_")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := billingnats.NewLogReader(js, db.Store, billingnats.LogReaderConfig{Prefix: prefix, Logger: quiet})
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	b := &reqlog.Batch{ID: "e1.boot.1", EdgeID: "e1", Created: time.Now().UTC(), Entries: []reqlog.Entry{{
		Time: time.Now().UTC(), TenantID: tn.ID, RequestID: "r1", Method: "GET", Path: "/down", Status: 502,
		Reason: "the upstream http://127.0.0.1:9 refused the connection"}}}
	data, err := reqlog.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reqlog.EnsureStream(ctx, js, prefix, 1); err != nil {
		t.Fatal(err)
	}
	subject := reqlog.Subject(prefix, "e1")
	for i, id := range []string{b.ID, "another-msg-id"} { // the second copy passes JetStream's dedupe
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}, jetstream.WithMsgID(id)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if err := nc.Publish(subject, []byte(`{"id":"junk"}`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s := r.Stats(); s.Stored+s.Duplicates+s.Poison < 3; s = r.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v after 30 s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := r.Stats(); s.Stored != 1 || s.Duplicates != 1 || s.Poison != 1 {
		t.Errorf("stats %+v, want 1 stored, 1 duplicate, 1 poison", s)
	}
	p, err := db.Store.Logs(ctx, reqlog.Query{TenantID: tn.ID})
	if err != nil || len(p.Items) != 1 || p.Items[0].RequestID != "r1" {
		t.Fatalf("stored %+v, %v; want the one entry", p, err)
	}
}
