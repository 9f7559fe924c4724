package memory

import (
	"context"
	"runtime"
	"testing"
	"time"
)

func TestMemoryWatch(t *testing.T) {
	const mib = 1 << 20
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var w memoryWatch
	w.basis = 30 * mib
	steps := []struct {
		held, allocated uint64
		s               int
		want            bool
	}{
		{31 * mib, 50 * mib, 5, false},   // steady load, no growth
		{80 * mib, 400 * mib, 10, false}, // the storm: held grows, allocation peaks
		{85 * mib, 300 * mib, 15, false}, // still busy
		{85 * mib, 2 * mib, 20, true},    // the storm is over
	}
	for i, s := range steps {
		if got := w.observe(s.held, s.allocated, at(s.s), 32*mib, 30*time.Second); got != s.want {
			t.Fatalf("step %d: %v, want %v", i, got, s.want)
		}
	}
	w.returned(33*mib, at(20))
	// A second storm right after: held grows and calms again, but not before MinGap.
	if w.observe(90*mib, 500*mib, at(25), 32*mib, 30*time.Second) || w.observe(90*mib, mib, at(30), 32*mib, 30*time.Second) {
		t.Fatal("returned twice within MinGap")
	}
	if !w.observe(90*mib, mib, at(50), 32*mib, 30*time.Second) {
		t.Fatal("not returned after MinGap")
	}
	// Growth under load that does not fall (a cache filling) is left alone.
	w.returned(60*mib, at(50))
	for s := 55; s < 200; s += 5 {
		if w.observe(120*mib, 100*mib, at(s), 32*mib, 30*time.Second) {
			t.Fatalf("returned under steady load at %ds", s)
		}
	}
}

// TestMemoryReturnerRun: a burst of allocation that leaves garbage behind is followed,
// once the allocation stops, by a return that shrinks what the process holds; the
// processor the return borrowed is given back.
func TestMemoryReturnerRun(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan [2]uint64, 1)
	go Returner{Every: 100 * time.Millisecond, Grown: 16 << 20, MinGap: time.Millisecond, Returned: func(before, after uint64) {
		select {
		case returned <- [2]uint64{before, after}:
		default:
		}
	}}.Run(ctx)
	time.Sleep(150 * time.Millisecond)
	// The burst: 64 MiB, garbage at once. The runtime holds the pages until they are
	// returned; were they still live when the returner fires, it would free nothing.
	func() {
		var keep [][]byte
		for range 64 {
			keep = append(keep, make([]byte, 1<<20))
		}
		runtime.KeepAlive(keep)
	}()
	select {
	case r := <-returned:
		if r[1] >= r[0] {
			t.Errorf("held %d MiB before the return, %d after", r[0]>>20, r[1]>>20)
		}
		if n := runtime.GOMAXPROCS(0); n != procs {
			t.Errorf("GOMAXPROCS is %d after the return, was %d", n, procs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no return after the burst")
	}
}
