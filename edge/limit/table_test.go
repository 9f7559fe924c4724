package limit

import (
	"sync"
	"sync/atomic"
	"testing"
)

// One bucket of 8 slots, every key lands in it.
func oneBucket() *table { return newTable(ways) }

func TestTableEvictsIdleKeysFirst(t *testing.T) {
	tb := oneBucket()
	const now, ti, tol = 1_000_000, 100, 1000
	for h := uint64(1); h <= ways; h++ {
		if ok, _, _ := tb.take(h, ti, tol, now); !ok {
			t.Fatalf("key %d refused", h)
		}
	}
	// Key 8 takes the rest of its burst; at now+200 the others are idle again.
	for i := 0; i < 8; i++ {
		tb.take(ways, ti, tol, now)
	}
	if ok, _, _ := tb.take(100, ti, tol, now+200); !ok {
		t.Fatal("new key refused")
	}
	if tb.evictions.Load() != 0 {
		t.Fatal("an idle key's eviction was counted as a loss")
	}
	if s := tb.bucketOf(ways).lookup(ways); s == nil || s.val.Load() != now+900 {
		t.Fatal("the active key was evicted instead of an idle one")
	}
}

func TestTableEvictsTheKeyClosestToFull(t *testing.T) {
	tb := oneBucket()
	const now, ti, tol = 1_000_000, 100, 10_000
	for h := uint64(1); h <= ways; h++ {
		for i := 0; i < int(h)+1; i++ { // key h is h+1 intervals in debt
			tb.take(h, ti, tol, now)
		}
	}
	tb.take(100, ti, tol, now)
	if tb.evictions.Load() != 1 {
		t.Fatalf("evictions %d, want 1", tb.evictions.Load())
	}
	if s := tb.bucketOf(1).lookup(1); s != nil {
		t.Fatal("key 1 (least debt) survived")
	}
	for h := uint64(2); h <= ways; h++ {
		if tb.bucketOf(h).lookup(h) == nil {
			t.Fatalf("key %d was evicted", h)
		}
	}
}

// Racing first requests of one key give it one slot, and count every request.
func TestTableConcurrentFirstRequests(t *testing.T) {
	for round := 0; round < 200; round++ {
		tb := oneBucket()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 3; i++ {
					if ok, _, _ := tb.take(42, 10, 50, 1000); ok {
						admitted.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		n := 0
		for i := range tb.buckets[0].slots {
			if tb.buckets[0].slots[i].key.Load() == 42 {
				n++
			}
		}
		if n != 1 || admitted.Load() != 5 {
			t.Fatalf("round %d: %d slots for one key, %d admitted (want 1 and the burst of 5)", round, n, admitted.Load())
		}
	}
}

func TestAcquireWithoutRoomFailsOpen(t *testing.T) {
	tb := oneBucket()
	for h := uint64(1); h <= ways; h++ {
		if s, ok := tb.acquire(h, 1); !ok || s == nil {
			t.Fatalf("key %d: %v %v", h, s, ok)
		}
	}
	s, ok := tb.acquire(100, 1)
	if !ok || s != nil {
		t.Fatalf("a key without room: %v %v, want admitted untracked", s, ok)
	}
	// A released counter's slot is free for another key.
	tb.bucketOf(1).lookup(1).val.Add(-1)
	if s, ok := tb.acquire(100, 1); !ok || s == nil {
		t.Fatal("a released slot was not reused")
	}
}

func TestETableEvictsLeastRecentlyUsed(t *testing.T) {
	et := newETable(ways)
	for h := uint64(1); h <= ways; h++ {
		e := &entry{h: h}
		e.used.Store(int64(100 - h)) // key 8 is the least recently used
		et.insert(e)
	}
	n := &entry{h: 100}
	if got := et.insert(n); got != n {
		t.Fatal("new entry not inserted")
	}
	if et.get(ways) != nil || et.get(100) != n || et.get(1) == nil {
		t.Fatal("wrong entry evicted")
	}
	if et.evictions.Load() != 1 {
		t.Fatalf("evictions %d", et.evictions.Load())
	}
}

func TestShare(t *testing.T) {
	p, err := NewRate(Scope{Name: "n"}, Rate{Limit: 100, Per: 1e9, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ n, t, burst int64 }{{1, 1e7, 10}, {3, 3e7, 4}, {20, 2e8, 1}, {5000, 1e7 * maxEdges, 1}} {
		ti, tol, burst := p.share(c.n)
		if ti != c.t || burst != c.burst || tol != ti*burst {
			t.Errorf("share(%d) = %d, %d, %d; want T %d burst %d", c.n, ti, tol, burst, c.t, c.burst)
		}
	}
}
