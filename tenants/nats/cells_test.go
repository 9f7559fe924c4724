package nats_test

import (
	"context"
	"testing"
	"time"

	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// A batch with a move in it: the moved tenant's puts reach the new cell's bucket before
// its deletes reach the old one's, although the old cell comes first in the batch; every
// other change lands in its own cell's bucket.
func TestCellPublisherKeepsMovesInOrder(t *testing.T) {
	e := newEnv(t) // the default cell's bucket
	ctx := context.Background()
	other := testenv.Name("tgcfg_")
	kvB, err := tgnats.EnsureBucket(ctx, e.js, other, 1)
	if err != nil {
		t.Fatal(err)
	}
	pubB, err := tgnats.NewPublisher(e.nc, other, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := tgnats.NewCellPublisher(map[string]*tgnats.Publisher{"default": e.publisher(t), "b": pubB})
	// Before: the moving tenant m and a neighbour a in the default cell.
	if err := p.Publish(ctx, []tenants.Change{put(1, key("m", 1), "m1"), put(2, key("a", 1), "a1")}); err != nil {
		t.Fatal(err)
	}
	inB := func(c tenants.Change) tenants.Change { c.Cell = "b"; return c }
	batch := []tenants.Change{
		put(3, key("a", 2), "a2"),        // the default cell first in the batch
		inB(put(4, key("m", 1), "m1")),   // the move: puts to b…
		{Rev: 5, Key: key("m", 1)},       // …then the delete from default
		inB(put(6, key("c", 1), "c1")),   // another tenant of b
		{Rev: 7, Key: key("m", 1) + "x"}, // a default-cell key of m that never existed
	}
	if err := p.Publish(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got := bucketState(t, e.kv); len(got) != 2 || got[key("a", 1)] == "" || got[key("a", 2)] == "" {
		t.Fatalf("default cell's bucket: %v", got)
	}
	if got := bucketState(t, kvB); len(got) != 2 || got[key("m", 1)] == "" || got[key("c", 1)] == "" {
		t.Fatalf("cell b's bucket: %v", got)
	}
	stored := func(bucket, k string) time.Time {
		s, err := e.js.Stream(ctx, tgnats.KVStream(bucket))
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+k)
		if err != nil {
			t.Fatal(err)
		}
		return m.Time
	}
	if put, del := stored(other, key("m", 1)), stored(e.bucket, key("m", 1)); !put.Before(del) {
		t.Fatalf("the move's put in b was stored at %v, its delete from default at %v", put, del)
	}
}
