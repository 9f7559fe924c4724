package e2e

import (
	"fmt"
	"testing"
	"time"

	"tollgate/tenants"
)

// TestKeyExpiryAndLastUse: a key created with a label and an expiry a few seconds out
// is served until then and answered 401 expired_key after, with no change to the
// config; another key's last use, reported by the edge's meter and folded by billing,
// shows in the api's key list within a minute of the call.
func TestKeyExpiryAndLastUse(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "keys")
	b.startBilling()
	_, e := b.startMeteredEdge("edge-keys", t.TempDir())
	b.warm(e)

	// Expiry: the key must reach the edge in time for a 200 first.
	c := b.api.createConsumer(b.slug, "temp")
	exp := time.Now().Add(5 * time.Second).UTC().Truncate(time.Second)
	k := b.api.must(201, "POST", "/v1/tenants/"+b.slug+"/consumers/"+c+"/keys",
		map[string]any{"label": "short-lived", "expires_at": exp.Format(time.RFC3339)})
	if k["label"] != "short-lived" || k["expires_at"] != exp.Format(time.RFC3339) {
		t.Fatalf("created key: %v", k)
	}
	temp := str(t, k, "key")
	eventually(t, time.Until(exp), "the new key served before its expiry", served(e, b.slug, "/r/x", "", "X-API-Key", temp))
	time.Sleep(time.Until(exp))
	eventually(t, 10*time.Second, "the key refused after its expiry", answers(e, b.slug, "/r/x", 401, tenants.EExpiredKey, "X-API-Key", temp))

	// Last use: a key never used lists none; one call, and it shows within a minute.
	other := b.api.createConsumer(b.slug, "other")
	id, key := b.api.createKey(b.slug, other)
	list := "/v1/tenants/" + b.slug + "/consumers/" + other + "/keys"
	lastUsed := func() (string, error) {
		body := b.api.must(200, "GET", list, nil)
		items, _ := body["items"].([]any)
		for _, it := range items {
			if m, _ := it.(map[string]any); m["id"] == id {
				s, _ := m["last_used_at"].(string)
				return s, nil
			}
		}
		return "", fmt.Errorf("key %s not listed: %v", id, body)
	}
	if s, err := lastUsed(); err != nil || s != "" {
		t.Fatalf("an unused key: last_used_at %q, %v", s, err)
	}
	before := time.Now().Add(-time.Second).Truncate(time.Second)
	eventually(t, 10*time.Second, "the other key served", served(e, b.slug, "/r/x", "", "X-API-Key", key))
	took := eventually(t, time.Minute, "last_used_at listed", func() error {
		s, err := lastUsed()
		if err != nil || s == "" {
			return fmt.Errorf("no last_used_at yet (%v)", err)
		}
		at, err := time.Parse(time.RFC3339, s)
		if err != nil || at.Before(before) || at.After(time.Now()) {
			return fmt.Errorf("last_used_at %q, want between %s and now", s, before.Format(time.RFC3339))
		}
		return nil
	})
	t.Logf("last_used_at listed %s after the call", took.Round(100*time.Millisecond))
}
