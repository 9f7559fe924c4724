package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
	"tollgate/infra/natsserver"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
	"tollgate/tenants/postgres"
)

// bucketEntries reads every live key of the bucket.
func bucketEntries(t *testing.T, kv jetstream.KeyValue) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	out := map[string][]byte{}
	for e := range w.Updates() {
		if e == nil {
			return out
		}
		out[e.Key()] = e.Value()
	}
	t.Fatal("watch closed")
	return nil
}

// sameAsPostgres checks that the bucket holds exactly the entries of the database's
// objects (revs aside) and no other key.
func sameAsPostgres(t *testing.T, db *postgres.DB, kv jetstream.KeyValue) error {
	t.Helper()
	want := map[string]string{}
	if _, err := db.Entries(context.Background(), func(c tenants.Change) error {
		want[c.Key] = withoutRev(c.Value)
		return nil
	}); err != nil {
		return err
	}
	have := bucketEntries(t, kv)
	for k, v := range have {
		w, ok := want[k]
		if !ok {
			return fmt.Errorf("bucket holds %s, which names no object", k)
		}
		if got := withoutRev(v); got != w {
			return fmt.Errorf("bucket's %s:\n%s\npostgres:\n%s", k, got, w)
		}
	}
	if len(have) != len(want) {
		return fmt.Errorf("bucket holds %d keys, postgres %d objects", len(have), len(want))
	}
	return nil
}

func withoutRev(v []byte) string {
	var e tenants.Entry
	if err := json.Unmarshal(v, &e); err != nil {
		return "invalid: " + string(v)
	}
	e.Rev = 0
	b, _ := json.Marshal(e)
	return string(b)
}

// The relay with the real NATS publisher: the bucket follows Postgres, through an outage
// of NATS, and a resync repairs a bucket that lost and gained keys.
func TestRelayToNATS(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	conn := rawConn(t, url)
	ctx := context.Background()

	s := testenv.NATS(t)
	port, storeDir := s.Addr().(*net.TCPAddr).Port, filepath.Dir(s.StoreDir())
	nc, err := natsconn.Connect(s.ClientURL(), t.Name(), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket := testenv.Name("tgcfg_")
	kv, err := tgnats.EnsureBucket(ctx, js, bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := tgnats.NewPublisher(nc, bucket, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := postgres.NewRelay(db, pub, testLogger(t))
	postgres.SetRelayTimings(r, 50*time.Millisecond, 200*time.Millisecond, 10)
	start(t, r)

	populate(t, db)
	waitSent(t, conn)
	if err := sameAsPostgres(t, db, kv); err != nil {
		t.Fatal(err)
	}

	// NATS goes away; changes wait in the outbox and go out when it is back.
	s.Shutdown()
	s.WaitForShutdown()
	a, err := db.FindTenant(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	churn(t, db, a.ID, 10)
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r.Status().Failing == "" {
			return errors.New("relay reports no failure")
		}
		return nil
	})
	var ns *server.Server
	for range 50 {
		if ns, err = natsserver.Start(natsserver.Options{Port: port, StoreDir: storeDir}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restart nats: %v", err)
	}
	t.Cleanup(ns.Shutdown)
	waitSent(t, conn)
	if err := sameAsPostgres(t, db, kv); err != nil {
		t.Fatal(err)
	}

	// The bucket loses a key and gains a stray one; a resync puts it right.
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range bucketEntries(t, kv) {
			if !yield(k) {
				return
			}
		}
	})
	if err := kv.Delete(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	stray := tenants.ObjectKey(a.ID, tenants.KindRoute, "0190a8f2-0000-7000-8000-000000000000")
	if _, err := kv.Put(ctx, stray, []byte(`{"rev":1,"route":{}}`)); err != nil {
		t.Fatal(err)
	}
	if sameAsPostgres(t, db, kv) == nil {
		t.Fatal("the damage did not show")
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := r.Resync(rctx, func(ctx context.Context, live []tenants.Change) error {
		return tgnats.Resync(ctx, kv, live)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameAsPostgres(t, db, kv); err != nil {
		t.Fatalf("after resync %+v: %v", res, err)
	}
	for k, v := range bucketEntries(t, kv) {
		var e tenants.Entry
		json.Unmarshal(v, &e)
		if e.Rev < res.FirstRev {
			t.Fatalf("%s has rev %d, older than the resync's %d", k, e.Rev, res.FirstRev)
		}
	}
}
