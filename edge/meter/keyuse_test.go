package meter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"tollgate/edge/meter"
	"tollgate/infra/usage"
)

const (
	key1 = "0190a000-0000-7000-8000-0000000000a1"
	key2 = "0190a000-0000-7000-8000-0000000000b2"
)

// Key uses travel in batches of their own after the flush's counts, in the same
// sequence, decode as billing decodes them, and each key is reported once per interval.
func TestKeyUsesInBatches(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink, KeyUseInterval: time.Minute})
	k1, k2 := m.Key(tenantA, key1), m.Key(tenantB, key2)
	t0 := time.Unix(1_800_000_000, 0)
	k1.Use(t0.Unix())
	k1.Use(t0.Unix() + 1) // same interval: not reported
	k2.Use(t0.Unix() + 2)
	m.Route(tenantA, "r1").Record(nil, 200, true, 0, 0, time.Now())
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.batches) != 2 {
		t.Fatalf("%d batches, want the counts' and the key uses'", len(sink.batches))
	}
	counts, uses := sink.batches[0], sink.batches[1]
	if len(counts.Records) != 1 || len(counts.KeyUses) != 0 || len(uses.Records) != 0 || uses.Seq != counts.Seq+1 {
		t.Fatalf("batches %+v and %+v, want the records then the uses in the next sequence", counts, uses)
	}
	want := []usage.KeyUse{{KeyID: key1, TenantID: tenantA, At: t0.Unix()}, {KeyID: key2, TenantID: tenantB, At: t0.Unix() + 2}}
	if len(uses.KeyUses) != 2 || uses.KeyUses[0] != want[0] || uses.KeyUses[1] != want[1] {
		t.Fatalf("key uses %+v, want %+v", uses.KeyUses, want)
	}

	// Only key uses: one batch with none but them; a key's next interval reports it again.
	k1.Use(t0.Unix() + 59)
	k1.Use(t0.Unix() + 60)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.batches) != 3 || len(sink.batches[2].KeyUses) != 1 || sink.batches[2].KeyUses[0].At != t0.Unix()+60 ||
		sink.batches[2].Seq != uses.Seq+1 {
		t.Fatalf("third batch %+v, want k1's use at %d alone, next in sequence", sink.batches[2], t0.Unix()+60)
	}
	// Nothing to say: no batch.
	if err := m.Flush(context.Background()); err != nil || len(sink.batches) != 3 {
		t.Fatalf("an empty flush made a batch (%d) or failed: %v", len(sink.batches), err)
	}
}

// Key uses spool like counts while the sink is down and are replayed with their ids.
func TestKeyUsesSpool(t *testing.T) {
	sink := &memSink{down: true}
	m := newMeter(t, meter.Config{Sink: sink})
	m.Key(tenantA, key1).Use(time.Now().Unix())
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m.Spooled() != 1 {
		t.Fatalf("spooled %d batches, want 1", m.Spooled())
	}
	sink.setDown(false)
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.batches) != 1 || len(sink.batches[0].KeyUses) != 1 || sink.batches[0].KeyUses[0].KeyID != key1 {
		t.Fatalf("replayed %+v, want the key use", sink.batches)
	}
}

// A batch of an edge that knows no key uses decodes and validates; one with a key use
// that is not a Unix time does not.
func TestKeyUsesWireForm(t *testing.T) {
	old := `{"id":"e.b.1","edge_id":"e","boot_id":"b","seq":1,"created":"2026-05-01T10:00:00Z","records":[]}`
	b, err := usage.DecodeBatch([]byte(old))
	if err != nil || len(b.KeyUses) != 0 {
		t.Fatalf("old batch: %+v %v", b, err)
	}
	b.KeyUses = []usage.KeyUse{{KeyID: key1, TenantID: tenantA, At: 1_800_000_000}}
	data, err := usage.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	back, err := usage.DecodeBatch(data)
	if err != nil || len(back.KeyUses) != 1 || back.KeyUses[0] != b.KeyUses[0] {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	var raw map[string]any
	_ = json.Unmarshal(data, &raw)
	if _, ok := raw["key_uses"]; !ok {
		t.Fatalf("wire form %s has no key_uses", data)
	}
	b.KeyUses[0].At = 0
	data, _ = usage.EncodeBatch(b)
	if _, err := usage.DecodeBatch(data); err == nil {
		t.Fatal("a key use without a time decoded")
	}
}

// Noting a use takes no allocation once the key was reported in its interval.
func TestKeyUseAllocatesNothing(t *testing.T) {
	m := newMeter(t, meter.Config{Sink: &memSink{}})
	k := m.Key(tenantA, key1)
	at := time.Now().Unix()
	k.Use(at)
	if n := testing.AllocsPerRun(1000, func() { k.Use(at) }); n != 0 {
		t.Fatalf("Key.Use allocates %v times per call", n)
	}
	var none *meter.Key
	none.Use(at) // metering off: a no-op
}

// With NoKeyUses the meter hands out no handle, so nothing is noted or sent.
func TestNoKeyUses(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, meter.Config{Sink: sink, NoKeyUses: true})
	k := m.Key(tenantA, key1)
	if k != nil {
		t.Fatal("a key handle with NoKeyUses")
	}
	k.Use(time.Now().Unix())
	if err := m.Flush(context.Background()); err != nil || len(sink.batches) != 0 {
		t.Fatalf("%d batches (%v), want none", len(sink.batches), err)
	}
}
