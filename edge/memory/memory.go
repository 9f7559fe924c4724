// Package memory gives the heap a burst grew back to the OS once the burst is over
// (Returner), instead of at the runtime's own pace.
package memory

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// Giving memory back after a burst. A storm of TLS handshakes or new connections grows
// the heap by tens of MiB (handshake state, per-connection buffers, goroutine stacks),
// and once it is over the runtime keeps most of that memory: its scavenger returns free
// pages only down to about the heap goal, and the goal shrinks only at the next
// collection, which an edge with little traffic runs at the 2-minute forced GC; the
// pages freed then go back at the scavenger's slow pace. So an edge's RSS after a storm
// stayed tens of MiB above its level before, for minutes.
//
// Returner watches, every Every, how much memory the runtime holds from the OS and
// how fast the edge allocates. When the holding has grown by Grown or more since the
// last return and the allocation rate has since fallen to a quarter of its peak (the
// burst is over), it collects twice, the second time through debug.FreeOSMemory, which
// returns every free page at once: the first collection moves what sync.Pools hold (the
// server's per-connection buffers and contexts among them) to their victim caches, the
// second frees it. That costs two collections' CPU once per burst (a few ms for a heap
// of tens of MiB), never under steady load, whose rate does not fall, and at most once
// per MinGap.
//
// debug.FreeOSMemory returns the pages in one piece that holds its processor (P) until it
// is done: about 100 ms for 50 MiB of a 240 MiB heap (an edge after loading 50,000
// routes), measured with a runtime trace. On a one-P edge nothing else runs meanwhile, so
// every request and config change would wait that long. Unless Inline is set, the
// runtime gets one P more for the return: the OS then shares the core between the
// thread that returns memory and the one that serves, a few ms at a time.

// Returner is the policy above; the zero value takes the defaults.
type Returner struct {
	Every  time.Duration // Default: 5s
	Grown  uint64        // Default: 32 MiB
	MinGap time.Duration // Default: 30s
	// Inline returns the memory on the process's own processors, stopping one of them for
	// as long; see above.
	Inline bool

	// Returned, when set, is called after each return with the bytes held before and after
	// (tests, logs).
	Returned func(before, after uint64)
}

// memorySample is what the returner reads of the runtime each period.
type memorySample struct {
	held   uint64 // mapped and not released to the OS
	allocs uint64 // bytes allocated since start
}

var memoryMetrics = []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes", "/gc/heap/allocs:bytes"}

func readMemory(s []rtmetrics.Sample) memorySample {
	rtmetrics.Read(s)
	return memorySample{held: s[0].Value.Uint64() - s[1].Value.Uint64(), allocs: s[2].Value.Uint64()}
}

// Run watches until ctx ends.
func (m Returner) Run(ctx context.Context) {
	if m.Every <= 0 {
		m.Every = 5 * time.Second
	}
	if m.Grown == 0 {
		m.Grown = 32 << 20
	}
	if m.MinGap <= 0 {
		m.MinGap = 30 * time.Second
	}
	s := make([]rtmetrics.Sample, len(memoryMetrics))
	for i, n := range memoryMetrics {
		s[i].Name = n
	}
	t := time.NewTicker(m.Every)
	defer t.Stop()
	var w memoryWatch
	prev := readMemory(s)
	w.basis = prev.held
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cur := readMemory(s)
			if w.observe(cur.held, cur.allocs-prev.allocs, now, m.Grown, m.MinGap) {
				runtime.GC()
				freeOSMemory(m.Inline)
				after := readMemory(s)
				w.returned(after.held, time.Now())
				if m.Returned != nil {
					m.Returned(cur.held, after.held)
				}
				cur = after
			}
			prev = cur
		}
	}
}

// memoryWatch is the returner's decision, apart from the runtime (memory_test.go).
type memoryWatch struct {
	basis    uint64 // held after the last return, or its lowest since
	peakRate uint64 // the largest allocation per period since held outgrew basis
	last     time.Time
}

// observe takes one period's holding and allocation and reports whether to return
// memory now.
func (w *memoryWatch) observe(held, allocated uint64, now time.Time, grown uint64, minGap time.Duration) bool {
	if held < w.basis {
		w.basis = held
	}
	if held-w.basis < grown {
		w.peakRate = 0
		return false
	}
	if allocated > w.peakRate {
		w.peakRate = allocated
		return false
	}
	return allocated <= w.peakRate/4 && now.Sub(w.last) >= minGap
}

func (w *memoryWatch) returned(held uint64, now time.Time) {
	w.basis, w.peakRate, w.last = held, 0, now
}

// freeOSMemory is debug.FreeOSMemory, with a P of its own unless inline. Raising
// GOMAXPROCS turns off the runtime's own updates of it (to follow a changed CPU quota),
// so it is put back as it was: to the default with its updates, unless the GOMAXPROCS
// environment variable had fixed it.
func freeOSMemory(inline bool) {
	if inline {
		debug.FreeOSMemory()
		return
	}
	n := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(n + 1)
	debug.FreeOSMemory()
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
	} else {
		runtime.GOMAXPROCS(n)
	}
}
