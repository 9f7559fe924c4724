package postgres_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"tollgate/billing/billingtest"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// keyOf creates a consumer with one key in the tenant and returns the key.
func keyOf(t *testing.T, db *billingtest.DB, tenantID, name string) *tenants.Key {
	t.Helper()
	c := &tenants.Consumer{TenantID: tenantID, Name: name}
	if err := db.Tenants.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	_, hash, prefix := tenants.NewSecret(tenants.KeyPrefix)
	k := &tenants.Key{TenantID: tenantID, ConsumerID: c.ID, Prefix: prefix, Hash: hash}
	if err := db.Tenants.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	return k
}

// lastUsed is the key's last_used_at as the api lists it; zero when unset.
func lastUsed(t *testing.T, db *billingtest.DB, k *tenants.Key) time.Time {
	t.Helper()
	keys, _, err := db.Tenants.ListKeys(ctx, k.TenantID, k.ConsumerID, tenants.Page{Limit: 10})
	if err != nil || len(keys) != 1 {
		t.Fatalf("list keys: %v %v", keys, err)
	}
	if keys[0].LastUsedAt == nil {
		return time.Time{}
	}
	return *keys[0].LastUsedAt
}

func keyUseBatch(seq uint64, uses ...usage.KeyUse) *usage.Batch {
	b := billingtest.Batch(seq)
	b.KeyUses = uses
	return b
}

// TestFoldKeyUses: a batch's key uses move last_used_at forward, never back, in the
// batch's own fold (a redelivered batch changes nothing); the latest use of a key in a
// batch wins; uses that name no key of the tenant change nothing and do not fail the
// batch's counts; a batch with records folds its key uses too.
func TestFoldKeyUses(t *testing.T) {
	db := billingtest.Open(t)
	acme := db.Tenant(t, "acme", "pro")
	other := db.Tenant(t, "other", "pro")
	k1, k2 := keyOf(t, db, acme.ID, "c1"), keyOf(t, db, acme.ID, "c2")
	k3 := keyOf(t, db, other.ID, "c3")
	t0 := time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)
	at := func(d time.Duration) int64 { return t0.Add(d).Unix() }

	if !lastUsed(t, db, k1).IsZero() {
		t.Fatal("a new key has a last use")
	}
	db.Fold(t, keyUseBatch(1,
		usage.KeyUse{KeyID: k1.ID, TenantID: acme.ID, At: at(time.Minute)},
		usage.KeyUse{KeyID: k1.ID, TenantID: acme.ID, At: at(0)}, // an earlier use of the same key
		usage.KeyUse{KeyID: k3.ID, TenantID: acme.ID, At: at(0)}, // another tenant's key
		usage.KeyUse{KeyID: "k-not-a-uuid", TenantID: acme.ID, At: at(0)},
	))
	if got := lastUsed(t, db, k1); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("k1 last used %v, want %v", got, t0.Add(time.Minute))
	}
	if !lastUsed(t, db, k2).IsZero() || !lastUsed(t, db, k3).IsZero() {
		t.Fatal("a key no use named has a last use")
	}

	// An older use (a late batch of another edge) does not move it back; a newer one in a
	// batch with counts moves it, and its counts fold too.
	b := billingtest.Batch(2, billingtest.Record(acme.ID, t0, "r", "", 200, true, 3))
	b.KeyUses = []usage.KeyUse{
		{KeyID: k1.ID, TenantID: acme.ID, At: at(-time.Hour)},
		{KeyID: k2.ID, TenantID: acme.ID, At: at(2 * time.Minute)},
		{KeyID: k3.ID, TenantID: other.ID, At: at(3 * time.Minute)},
	}
	db.Fold(t, b)
	if got := lastUsed(t, db, k1); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("k1 moved back to %v", got)
	}
	if got := lastUsed(t, db, k2); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("k2 last used %v", got)
	}
	if got := lastUsed(t, db, k3); !got.Equal(t0.Add(3 * time.Minute)) {
		t.Fatalf("k3 last used %v", got)
	}
	if req, _ := db.Sum(t); req != 3 {
		t.Fatalf("rollups hold %d requests, want 3", req)
	}

	// A batch folded before is not folded again, its uses included.
	again := keyUseBatch(1, usage.KeyUse{KeyID: k2.ID, TenantID: acme.ID, At: at(time.Hour)})
	if folded, err := db.Store.Fold(ctx, again); err != nil || folded {
		t.Fatalf("refold: %v %v", folded, err)
	}
	if got := lastUsed(t, db, k2); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("a refolded batch moved k2 to %v", got)
	}
}

// TestFoldKeyUsesConcurrent: folds that name the same keys in opposite orders, at once,
// all succeed (no deadlock aborts one) and leave each key at its latest use.
func TestFoldKeyUsesConcurrent(t *testing.T) {
	db := billingtest.Open(t)
	acme := db.Tenant(t, "acme", "pro")
	const nkeys, workers, batches = 20, 4, 15
	keys := make([]*tenants.Key, nkeys)
	for i := range keys {
		keys[i] = keyOf(t, db, acme.ID, fmt.Sprint("c", i))
	}
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, workers*batches)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < batches; i++ {
				var uses []usage.KeyUse
				for j := range keys {
					k := keys[j]
					if w%2 == 1 {
						k = keys[nkeys-1-j]
					}
					uses = append(uses, usage.KeyUse{KeyID: k.ID, TenantID: acme.ID, At: t0.Add(time.Duration(w*batches+i) * time.Second).Unix()})
				}
				b := keyUseBatch(uint64(w*batches+i+1), uses...)
				if _, err := db.Store.Fold(ctx, b); err != nil {
					errs <- err
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := t0.Add(time.Duration(workers*batches-1) * time.Second)
	for _, k := range keys {
		if got := lastUsed(t, db, k); !got.Equal(want) {
			t.Errorf("key %s last used %v, want %v", k.ID, got, want)
		}
	}
}
