package meter

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/infra/usage"
)

// Latency. Each route keeps the distribution of its requests' times per UTC hour of
// arrival: the gateway's own time and the upstream's, each as counters in the fixed
// log-scaled bins of usage.SketchBin (1% apart, 1 µs to an hour). Recording is one
// logarithm and one atomic add per time, on a bin of the route's own array: no lock, no
// allocation (the arrays are made on a route's first record and kept while it is used),
// and two cores recording the same route meet only when their times fall in the same
// bin. Each flush drains the arrays of the routes recorded since the previous one into
// DDSketches (usage.Latency), shipped in a batch of their own after the counts.
//
// A route has two hour slots, by the hour's parity, so requests on either side of an
// hour's turn are kept apart. A time whose hour is older than its slot's (a stream
// open across two hour turns) is not recorded (tollgate_meter_latency_late_total).
//
// Latency is not in the state file: a crash loses the times recorded since the last
// flush (about a second), while their requests' counts survive. Times are statistics,
// not billed, and a second's gap does not move an hour's percentiles.

// latencyIdleFlushes is how many flushes without a record a route's arrays are kept: an
// hour at the default interval.
const latencyIdleFlushes = 3600

// maxBatchLatencies bounds the entries of one batch: two sketches of a few hundred bytes
// each keep a batch under maxBatchBytes.
const maxBatchLatencies = 200

// latencySlot is one hour of a route's times.
type latencySlot struct {
	hour  atomic.Int64
	dirty atomic.Uint32 // set by a record, cleared by the drain that follows
	gw    []atomic.Uint32
	up    []atomic.Uint32
}

type latencyHist struct {
	route *Route
	slots [2]latencySlot
	idle  int // flushes without a record; the flusher's
}

func newLatencyHist(r *Route) *latencyHist {
	h := &latencyHist{route: r}
	for i := range h.slots {
		h.slots[i].gw = make([]atomic.Uint32, usage.SketchBins)
		h.slots[i].up = make([]atomic.Uint32, usage.SketchBins)
		h.slots[i].hour.Store(-1 << 62)
	}
	return h
}

// latencies are the routes with arrays, for the flusher.
type latencies struct {
	mu    sync.Mutex
	hists []*latencyHist
	late  atomic.Int64
}

// RecordLatency records one request of the route that arrived at at: gateway is the
// edge's own time, upstream the time it waited on the upstream (hasUpstream false when
// it answered without calling one).
func (r *Route) RecordLatency(at time.Time, gateway, upstream time.Duration, hasUpstream bool) {
	h := r.lat.Load()
	if h == nil {
		h = r.m.latencyHist(r)
	}
	u := at.Unix()
	hour := u / 3600
	if u < 0 && u%3600 != 0 {
		hour--
	}
	s := &h.slots[hour&1]
	for {
		cur := s.hour.Load()
		if cur == hour {
			break
		}
		if cur > hour {
			r.m.lat.late.Add(1)
			return
		}
		if s.hour.CompareAndSwap(cur, hour) {
			break
		}
	}
	s.gw[usage.SketchBin(gateway)].Add(1)
	if hasUpstream {
		s.up[usage.SketchBin(upstream)].Add(1)
	}
	if s.dirty.Load() == 0 {
		s.dirty.Store(1)
	}
}

// latencyHist makes the route's arrays on its first record (racing records agree on one).
func (m *Meter) latencyHist(r *Route) *latencyHist {
	h := newLatencyHist(r)
	if !r.lat.CompareAndSwap(nil, h) {
		return r.lat.Load()
	}
	m.lat.mu.Lock()
	m.lat.hists = append(m.lat.hists, h)
	m.lat.mu.Unlock()
	return h
}

// collectLatencies drains every route's arrays into sketches, one entry per route and
// hour, and lets go of the arrays of routes idle for latencyIdleFlushes.
func (m *Meter) collectLatencies() []usage.Latency {
	m.lat.mu.Lock()
	hists := append([]*latencyHist(nil), m.lat.hists...)
	m.lat.mu.Unlock()
	if len(hists) == 0 {
		return nil
	}
	gw := make([]uint64, usage.SketchBins)
	up := make([]uint64, usage.SketchBins)
	var out []usage.Latency
	var gone map[*latencyHist]bool
	for _, h := range hists {
		used := false
		for i := range h.slots {
			s := &h.slots[i]
			if s.dirty.Load() == 0 {
				continue
			}
			s.dirty.Store(0)
			var ng, nu uint64
			for j := range s.gw {
				gw[j] = uint64(s.gw[j].Swap(0))
				up[j] = uint64(s.up[j].Swap(0))
				ng += gw[j]
				nu += up[j]
			}
			// Read after the drain: a record that turned the slot to a new hour before
			// adding is then filed under the hour it was made in.
			hour := s.hour.Load()
			if ng == 0 && nu == 0 {
				continue
			}
			used = true
			l := usage.Latency{TenantID: h.route.tenantID, RouteID: h.route.routeID, Hour: time.Unix(hour*3600, 0).UTC()}
			if ng > 0 {
				l.Gateway = usage.EncodeSketch(usage.SketchFromBins(gw))
			}
			if nu > 0 {
				l.Upstream = usage.EncodeSketch(usage.SketchFromBins(up))
			}
			out = append(out, l)
		}
		if used {
			h.idle = 0
		} else if h.idle++; h.idle > latencyIdleFlushes {
			// A record racing this lands in arrays no one drains: one time lost, on a
			// route idle for an hour.
			h.route.lat.CompareAndSwap(h, nil)
			if gone == nil {
				gone = map[*latencyHist]bool{}
			}
			gone[h] = true
		}
	}
	if len(gone) > 0 {
		m.lat.mu.Lock()
		kept := m.lat.hists[:0]
		for _, h := range m.lat.hists {
			if !gone[h] {
				kept = append(kept, h)
			}
		}
		clear(m.lat.hists[len(kept):])
		m.lat.hists = kept
		m.lat.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		switch {
		case a.TenantID != b.TenantID:
			return a.TenantID < b.TenantID
		case !a.Hour.Equal(b.Hour):
			return a.Hour.Before(b.Hour)
		}
		return a.RouteID < b.RouteID
	})
	return out
}

// cutLatencies appends the batches of latencies numbered from seq and returns the next
// free sequence number. A batch over maxBatchBytes is split in two, as counts are.
func cutLatencies(out []encodedBatch, edge, boot string, seq uint64, created time.Time, lats []usage.Latency) ([]encodedBatch, uint64, error) {
	var cut func(lats []usage.Latency) error
	cut = func(lats []usage.Latency) error {
		b := &usage.Batch{
			ID:     usage.BatchID(edge, boot, seq),
			EdgeID: edge, BootID: boot, Seq: seq,
			Created: created, Latencies: lats,
		}
		data, err := usage.EncodeBatch(b)
		if err != nil {
			return err
		}
		if len(data) > maxBatchBytes && len(lats) > 1 {
			if err := cut(lats[: len(lats)/2 : len(lats)/2]); err != nil {
				return err
			}
			return cut(lats[len(lats)/2:])
		}
		out = append(out, encodedBatch{b, data})
		seq++
		return nil
	}
	for len(lats) > 0 {
		n := min(len(lats), maxBatchLatencies)
		if err := cut(lats[:n:n]); err != nil {
			return out, seq, err
		}
		lats = lats[n:]
	}
	return out, seq, nil
}
