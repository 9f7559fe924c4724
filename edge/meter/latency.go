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
// logarithm, one atomic load and one atomic add per time, on a bin of the route's own
// counters: no lock, no allocation once the bins a route's times fall in exist, and two
// cores recording the same route meet only when their times fall in the same bin. Each
// flush drains the counters of the routes recorded since the previous one into
// DDSketches (usage.Latency), shipped in a batch of their own after the counts.
//
// The bins come in chunks of latencyChunkBins, each made on the first time that falls in
// it: a route's times cluster within a few chunks, so a route that served a request
// holds about a kilobyte instead of the 17 KiB of every bin (Config.DenseLatency makes
// them all at the route's first record, as before). The chunks are kept while the route
// is used and let go with the route's counters when it has been idle for
// latencyIdleFlushes or its tenant is dropped (Route.Release).
//
// A route has two hour slots, by the hour's parity, so requests on either side of an
// hour's turn are kept apart. A time whose hour is older than its slot's (a stream
// open across two hour turns) is not recorded (tollgate_meter_latency_late_total).
//
// Latency is not in the state file: a crash loses the times recorded since the last
// flush (about a second), while their requests' counts survive. Times are statistics,
// not billed, and a second's gap does not move an hour's percentiles.

// latencyIdleFlushes is how many flushes without a record a route's counters are kept:
// an hour at the default interval.
const latencyIdleFlushes = 3600

// maxBatchLatencies bounds the entries of one batch: two sketches of a few hundred bytes
// each keep a batch under maxBatchBytes.
const maxBatchLatencies = 200

// latencyChunkBins is the bins of one chunk: 256 bytes, spanning times a factor of 1.9
// apart.
const latencyChunkBins = 64

type latencyChunk [latencyChunkBins]atomic.Uint32

// latencyChunks is the chunks of one series.
var latencyChunks = (usage.SketchBins + latencyChunkBins - 1) / latencyChunkBins

// latencySeries is one series' bins, by chunk; a nil chunk has no time yet.
type latencySeries []atomic.Pointer[latencyChunk]

// add counts one time in bin i, making its chunk first if need be (racing records agree
// on one).
func (s latencySeries) add(i int) {
	p := &s[i/latencyChunkBins]
	c := p.Load()
	if c == nil {
		p.CompareAndSwap(nil, new(latencyChunk))
		c = p.Load()
	}
	c[i%latencyChunkBins].Add(1)
}

// drain moves the series' counts into bins (all SketchBins of them, zeroed where no
// chunk is) and returns their sum.
func (s latencySeries) drain(bins []uint64) uint64 {
	var n uint64
	for ci := range s {
		lo := ci * latencyChunkBins
		hi := min(lo+latencyChunkBins, len(bins))
		c := s[ci].Load()
		if c == nil {
			clear(bins[lo:hi])
			continue
		}
		for j := lo; j < hi; j++ {
			bins[j] = uint64(c[j-lo].Swap(0))
			n += bins[j]
		}
	}
	return n
}

// latencySlot is one hour of a route's times.
type latencySlot struct {
	hour  atomic.Int64
	dirty atomic.Uint32 // set by a record, cleared by the drain that follows
	gw    latencySeries
	up    latencySeries
}

type latencyHist struct {
	route   *Route
	slots   [2]latencySlot
	release atomic.Bool // the route's tenant was dropped: drain and let go at the next flush
	idle    int         // flushes without a record; the flusher's
}

func newLatencyHist(r *Route, dense bool) *latencyHist {
	h := &latencyHist{route: r}
	// One allocation for the chunk pointers of the four series.
	ptrs := make([]atomic.Pointer[latencyChunk], 4*latencyChunks)
	var chunks []latencyChunk
	if dense {
		chunks = make([]latencyChunk, len(ptrs))
		for i := range ptrs {
			ptrs[i].Store(&chunks[i])
		}
	}
	for i := range h.slots {
		s := &h.slots[i]
		s.gw = ptrs[(2*i)*latencyChunks : (2*i+1)*latencyChunks : (2*i+1)*latencyChunks]
		s.up = ptrs[(2*i+1)*latencyChunks : (2*i+2)*latencyChunks : (2*i+2)*latencyChunks]
		s.hour.Store(-1 << 62)
	}
	return h
}

// latencies are the routes with counters, for the flusher.
type latencies struct {
	mu    sync.Mutex
	hists []*latencyHist
	late  atomic.Int64
}

// held is how many routes have counters.
func (l *latencies) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.hists)
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
	s.gw.add(usage.SketchBin(gateway))
	if hasUpstream {
		s.up.add(usage.SketchBin(upstream))
	}
	if s.dirty.Load() == 0 {
		s.dirty.Store(1)
	}
}

// Release tells the meter the edge has dropped the route (its tenant was evicted or
// deleted): the next flush ships the times it holds and lets go of its counters, and
// Meter.Route forgets the handle, so an edge holds handles for the routes it has
// compiled, not for every route it ever served. The handle stays usable: a later record
// makes its counters again, and its counts and those of a new handle of the same route
// add up in the flush, which sums cells by their ids.
func (r *Route) Release() {
	if h := r.lat.Load(); h != nil {
		h.release.Store(true)
	}
	m := r.m
	k := routeKey{r.tenantID, r.routeID}
	m.routesMu.Lock()
	if m.routes[k] == r {
		delete(m.routes, k)
	}
	m.routesMu.Unlock()
}

// latencyHist makes the route's counters on its first record (racing records agree on one).
func (m *Meter) latencyHist(r *Route) *latencyHist {
	h := newLatencyHist(r, m.cfg.DenseLatency)
	if !r.lat.CompareAndSwap(nil, h) {
		return r.lat.Load()
	}
	m.lat.mu.Lock()
	m.lat.hists = append(m.lat.hists, h)
	m.lat.mu.Unlock()
	return h
}

// collectLatencies drains every route's counters into sketches, one entry per route and
// hour, and lets go of the counters of routes idle for latencyIdleFlushes or released.
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
		released := h.release.Load()
		if released {
			// Before the drain: a record from now on makes new counters, and one that
			// took these before adds before the drain reads its bin, but for a race of
			// a few instructions on a route its edge no longer serves.
			h.route.lat.CompareAndSwap(h, nil)
		}
		used := false
		for i := range h.slots {
			s := &h.slots[i]
			if s.dirty.Load() == 0 {
				continue
			}
			s.dirty.Store(0)
			ng, nu := s.gw.drain(gw), s.up.drain(up)
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
		if released {
			if gone == nil {
				gone = map[*latencyHist]bool{}
			}
			gone[h] = true
		} else if used {
			h.idle = 0
		} else if h.idle++; h.idle > latencyIdleFlushes {
			// A record racing this lands in counters no one drains: one time lost, on a
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
