package upstreamerr

import (
	"sync/atomic"
	"time"
)

// LinesPerSecond is how many failures of one route a Gate lets into the log each second.
const LinesPerSecond = 10

// Gate bounds the log lines of one route's upstream failures: a target that is down
// fails every request, and a line per request would cost the edge its throughput in
// log I/O. The lines held back are counted on the next one let through. The zero Gate
// is ready; it takes no lock, and its count is approximate when a second turns over.
type Gate struct {
	second atomic.Int64 // the current second of the monotonic clock
	n      atomic.Int64 // lines let through in it
	held   atomic.Int64 // lines held back since the last one let through
}

// Allow reports whether a failure at now (nanoseconds of a monotonic clock) is logged,
// and if so how many were held back before it.
func (g *Gate) Allow(now int64) (ok bool, held int64) {
	s := now / int64(time.Second)
	if g.second.Load() != s {
		g.second.Store(s)
		g.n.Store(0)
	}
	if g.n.Add(1) > LinesPerSecond {
		g.held.Add(1)
		return false, 0
	}
	return true, g.held.Swap(0)
}
