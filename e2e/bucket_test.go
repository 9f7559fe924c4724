package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Looking at the config bucket and the outbox directly, as an operator would.

// openBucket connects to the stack's NATS and returns its config bucket, waiting for the
// api to create it.
func (s *stack) openBucket() jetstream.KeyValue {
	t := s.t
	t.Helper()
	nc, err := nats.Connect(s.natsURL(), nats.Name("e2e-"+t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	eventually(t, readyTimeout, "the api creates bucket "+s.bucket(), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		kv, err = js.KeyValue(ctx, s.bucket())
		return err
	})
	return kv
}

// bucketKeys lists the bucket's live keys, sorted.
func bucketKeys(t *testing.T, kv jetstream.KeyValue) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := kv.Keys(ctx)
	if err == jetstream.ErrNoKeysFound {
		return nil
	}
	if err != nil {
		t.Fatalf("list bucket keys: %v", err)
	}
	sort.Strings(keys)
	return keys
}

// entryRev is the rev a config entry carries (0: not an entry).
func entryRev(value []byte) int64 {
	var e struct {
		Rev int64 `json:"rev"`
	}
	if json.Unmarshal(value, &e) != nil {
		return 0
	}
	return e.Rev
}

// update is one bucket change as a watcher received it.
type update struct {
	Key    string
	Delete bool
	Rev    int64  // the entry's rev (the outbox id); 0 for a delete
	Seq    uint64 // the KV revision (stream sequence)
}

// recorder watches the bucket from the moment it starts and keeps every update in arrival
// order.
type recorder struct {
	mu      sync.Mutex
	updates []update
	initial int // updates that were the bucket's content at start
}

func (s *stack) record(kv jetstream.KeyValue) *recorder {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(ctx)
	if err != nil {
		cancel()
		t.Fatalf("watch bucket: %v", err)
	}
	rec := &recorder{initial: -1}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			rec.mu.Lock()
			if e == nil {
				rec.initial = len(rec.updates)
			} else {
				u := update{Key: e.Key(), Seq: e.Revision(), Delete: e.Operation() != jetstream.KeyValuePut}
				if !u.Delete {
					u.Rev = entryRev(e.Value())
				}
				rec.updates = append(rec.updates, u)
			}
			rec.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	eventually(t, 10*time.Second, "the bucket watcher loads", func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.initial < 0 {
			return errNotYet
		}
		return nil
	})
	return rec
}

func (r *recorder) snapshot() []update {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]update(nil), r.updates...)
}

// has reports whether a put of every key was recorded.
func (r *recorder) hasPuts(keys []string) error {
	got := map[string]bool{}
	for _, u := range r.snapshot() {
		if !u.Delete {
			got[u.Key] = true
		}
	}
	var missing []string
	for _, k := range keys {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d keys not in the bucket yet, e.g. %s", len(missing), len(keys), missing[0])
	}
	return nil
}

// outboxRow is one row of the api's outbox.
type outboxRow struct {
	ID   int64
	Key  string
	Put  bool
	Sent bool
}

func (s *stack) outbox() []outboxRow {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, key, value IS NOT NULL, sent_at IS NOT NULL FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		return o, row.Scan(&o.ID, &o.Key, &o.Put, &o.Sent)
	})
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	return out
}

// allSent succeeds once the outbox has no unsent row.
func (s *stack) allSent() error {
	var unsent []int64
	for _, o := range s.outbox() {
		if !o.Sent {
			unsent = append(unsent, o.ID)
		}
	}
	if len(unsent) > 0 {
		return fmt.Errorf("%d outbox rows unsent: %v", len(unsent), unsent)
	}
	return nil
}

// checkPublishOrder checks the recorded puts: entry revs strictly increasing in arrival
// order from ups[from] on (earlier ones were checked before), and each outbox row
// published exactly once (rows is the whole outbox; every row must be a put).
func checkPublishOrder(t *testing.T, ups []update, from int, rows []outboxRow) {
	t.Helper()
	var prev update
	if from > 0 {
		prev = ups[from-1]
	}
	var disorder []string
	for _, u := range ups[from:] {
		if u.Delete {
			t.Errorf("unexpected delete of %s in the bucket", u.Key)
			continue
		}
		if u.Rev <= prev.Rev {
			disorder = append(disorder, fmt.Sprintf("rev %d (%s, kv seq %d) arrived after rev %d (%s, kv seq %d)",
				u.Rev, u.Key, u.Seq, prev.Rev, prev.Key, prev.Seq))
		}
		prev = u
	}
	if len(disorder) > 0 {
		t.Errorf("entry revs are not strictly increasing in publish order (%d inversions of %d puts):\n  %s",
			len(disorder), len(ups)-from, strings.Join(disorder[:min(len(disorder), 10)], "\n  "))
	}
	seen := map[int64]int{}
	for _, u := range ups {
		seen[u.Rev]++
	}
	for _, o := range rows {
		if !o.Put {
			t.Errorf("outbox row %d is a delete; this check covers puts only", o.ID)
		}
		switch n := seen[o.ID]; n {
		case 1:
		case 0:
			t.Errorf("outbox row %d (%s) never reached the bucket", o.ID, o.Key)
		default:
			t.Errorf("outbox row %d (%s) was published %d times", o.ID, o.Key, n)
		}
		delete(seen, o.ID)
	}
	for rev, n := range seen {
		t.Errorf("the bucket got rev %d (%d times), which is no outbox row", rev, n)
	}
}
