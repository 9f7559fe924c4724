package balancer

import (
	"testing"

	"tollgate/tenants"
)

// The sticky bucket of a key is fixed for good: these values are what every edge, of
// every version, must compute.
func TestStickyBucketFixed(t *testing.T) {
	for k, want := range map[string]uint64{"alice": 5743, "bob": 2071, "10.0.0.1": 944, "": 9451} {
		if got := StickyBucket([]byte(k)); got != want {
			t.Errorf("StickyBucket(%q) = %d, want %d", k, got, want)
		}
	}
}

// Any 100 consecutive requests the schedule decides include exactly weight canary ones.
func TestSplitSchedule(t *testing.T) {
	for _, w := range []int{1, 10, 30, 33, 50, 99} {
		var s Split
		s.Init(&tenants.Canary{Weight: w})
		n := 0
		for range 100 {
			if s.Pick(nil, false) {
				n++
			}
		}
		if n != w {
			t.Errorf("weight %d: %d of 100 to the canary", w, n)
		}
	}
}

func TestSplitPick(t *testing.T) {
	var none, all, half Split
	none.Init(&tenants.Canary{Weight: 0, Sticky: true})
	all.Init(&tenants.Canary{Weight: 100, Sticky: true})
	half.Init(&tenants.Canary{Weight: 50, Sticky: true, StickyOn: tenants.HashOnHeader + "X-User"})
	if none.Sticky != StickyOff || all.Sticky != StickyOff {
		t.Errorf("weight 0 or 100 needs no key: sticky %d, %d", none.Sticky, all.Sticky)
	}
	if half.Sticky != StickyOnHeader || string(half.StickyHeader) != "X-User" {
		t.Errorf("sticky %d on %q", half.Sticky, half.StickyHeader)
	}
	for _, k := range []string{"alice", "bob", "10.0.0.1"} {
		if none.Pick([]byte(k), true) || !all.Pick([]byte(k), true) {
			t.Errorf("%q: weight 0 or 100 not obeyed", k)
		}
		if got, want := half.Pick([]byte(k), true), StickyBucket([]byte(k)) < 5000; got != want {
			t.Errorf("%q: canary %v, want %v", k, got, want)
		}
	}
}

func TestSplitMatchValue(t *testing.T) {
	var anyValue, listed Split
	anyValue.Init(&tenants.Canary{Match: &tenants.CanaryMatch{Header: "X-Canary"}})
	listed.Init(&tenants.Canary{Match: &tenants.CanaryMatch{Header: "X-Canary", Values: []string{"on", "yes"}}})
	for v, want := range map[string][2]bool{"": {false, false}, "on": {true, true}, "yes": {true, true}, "ON": {true, false}, "on ": {true, false}} {
		if got := [2]bool{anyValue.MatchValue([]byte(v)), listed.MatchValue([]byte(v))}; got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
