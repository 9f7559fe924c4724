package edge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tollgate/edge"
	"tollgate/edge/meter"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// expiringKey puts a key of the consumer that expires at exp.
func (h *harness) expiringKey(tenantID, consumerID, keyID string, exp time.Time) string {
	plain, hash, _ := tenants.NewSecret(tenants.KeyPrefix)
	h.put(&tenants.KeyEntry{ID: keyID, TenantID: tenantID, ConsumerID: consumerID, Hash: hash, ExpiresAt: exp.Unix()})
	return plain
}

// TestKeyExpiry: a key past its expiry is 401 expired_key, on key and key_or_jwt routes;
// a key that expires while the edge runs is refused from then on with no config change;
// an unknown key stays invalid_credential.
func TestKeyExpiry(t *testing.T) {
	h := newHarness(t)
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.URL)
	h.route(acme, "either", []string{"/either"}, nil, tenants.AuthKeyOrJWT, up.URL)
	h.put(&tenants.Consumer{ID: "c1", TenantID: acme, Name: "c1"})
	past := h.expiringKey(acme, "c1", "k-past", time.Now().Add(-time.Minute))
	// Whole seconds on the wire: at least two from now, so the first calls are in time.
	exp := time.Now().Add(3 * time.Second).Truncate(time.Second)
	soon := h.expiringKey(acme, "c1", "k-soon", exp)
	forever := h.key(acme, "c1", "k-forever")
	h.e.Loaded()
	host := "acme." + domain

	for _, path := range []string{"/keyed/x", "/either/x"} {
		if r := h.get(host, path, "X-API-Key: "+past); r.status != 401 || r.errCode() != tenants.EExpiredKey {
			t.Errorf("%s with an expired key: %s, want 401 expired_key", path, r)
		}
		if r := h.get(host, path, "X-API-Key: "+soon); r.status != 200 {
			t.Errorf("%s with a key before its expiry: %s", path, r)
		}
	}
	if r := h.get(host, "/keyed/x", "X-API-Key: "+past+"x"); r.status != 401 || r.errCode() != tenants.EInvalidCredential {
		t.Errorf("unknown key: %s, want 401 invalid_credential", r)
	}
	rev := h.e.Snapshot("acme").Rev
	time.Sleep(time.Until(exp))
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/keyed/x", "X-API-Key: "+soon); r.status != 401 || r.errCode() != tenants.EExpiredKey {
			return fmt.Sprintf("past its expiry: %s, want 401 expired_key", r)
		}
		return ""
	})
	if got := h.e.Snapshot("acme").Rev; got != rev {
		t.Errorf("the snapshot changed (rev %d → %d): expiry should need none", rev, got)
	}
	if r := h.get(host, "/keyed/x", "X-API-Key: "+forever); r.status != 200 {
		t.Errorf("a key without expiry: %s", r)
	}
}

// keyUses lists the key uses of the sink's batches in order.
func (s *memSink) keyUses() []usage.KeyUse {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []usage.KeyUse
	for _, b := range s.batches {
		out = append(out, b.KeyUses...)
	}
	return out
}

// TestKeyLastUse: the edge reports a key's use once per key use interval however many
// requests it takes and however often the tenant recompiles meanwhile; a refused key is
// not reported; the next interval reports it again.
func TestKeyLastUse(t *testing.T) {
	sink := &memSink{}
	m, err := meter.New(meter.Config{EdgeID: "test", Sink: sink, SpoolDir: t.TempDir(), FlushInterval: time.Hour, KeyUseInterval: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	h := newHarness(t, func(c *edge.Config) { c.Meter = m })
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.URL)
	h.put(&tenants.Consumer{ID: "c1", TenantID: acme, Name: "c1"})
	k1 := h.key(acme, "c1", "k1")
	k2 := h.key(acme, "c1", "k2")
	expired := h.expiringKey(acme, "c1", "k-expired", time.Now().Add(-time.Minute))
	h.e.Loaded()
	host := "acme." + domain
	flush := func() {
		t.Helper()
		if err := m.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now().Unix()
	for i := 0; i < 5; i++ {
		if r := h.get(host, "/keyed/x", "X-API-Key: "+k1); r.status != 200 {
			t.Fatal(r)
		}
		if i == 2 {
			// A recompile keeps what the key reported.
			rev := h.e.Snapshot("acme").Rev
			h.route(acme, "other", []string{"/other"}, nil, tenants.AuthKey, up.URL)
			waitFor(t, 5*time.Second, func() string {
				if h.e.Snapshot("acme").Rev == rev {
					return "no recompile"
				}
				return ""
			})
		}
	}
	if r := h.get(host, "/keyed/x", "X-API-Key: "+expired); r.status != 401 {
		t.Fatal(r)
	}
	flush()
	uses := sink.keyUses()
	if len(uses) != 1 || uses[0].KeyID != "k1" || uses[0].TenantID != acme || uses[0].At < start || uses[0].At > time.Now().Unix() {
		t.Fatalf("key uses %+v, want one of k1 at about %d", uses, start)
	}
	first := uses[0].At

	// In the same interval: nothing more for k1; k2's first use is reported.
	if r := h.get(host, "/keyed/x", "X-API-Key: "+k2); r.status != 200 {
		t.Fatal(r)
	}
	if time.Now().Unix() <= first+1 { // so the call lands before first+3, in k1's interval
		if r := h.get(host, "/keyed/x", "X-API-Key: "+k1); r.status != 200 {
			t.Fatal(r)
		}
	}
	flush()
	if uses = sink.keyUses(); len(uses) != 2 || uses[1].KeyID != "k2" {
		t.Fatalf("key uses %+v, want k1's then k2's", uses)
	}

	// The next interval reports k1 again.
	time.Sleep(time.Until(time.Unix(first+3, 0)))
	if r := h.get(host, "/keyed/x", "X-API-Key: "+k1); r.status != 200 {
		t.Fatal(r)
	}
	flush()
	if uses = sink.keyUses(); len(uses) != 3 || uses[2].KeyID != "k1" || uses[2].At < first+3 {
		t.Fatalf("key uses %+v, want a third, k1's, at %d or later", uses, first+3)
	}
}
