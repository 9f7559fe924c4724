package usage

import (
	"fmt"
	"math"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"github.com/google/uuid"
)

// Latency is the distribution of one route's request times in one UTC hour, as an edge
// measured them since its previous batch: Gateway is the time the edge spent on the
// request itself (arrival to answer, minus Upstream), Upstream the time it waited on the
// tenant's upstream (absent for requests the edge answered without calling it). Both are
// DDSketches of microseconds in their own binary encoding (about 1% relative accuracy),
// so billing merges the sketches of every edge and batch into one per route and hour and
// reads any percentile of it. Batches of edges that predate latency have none.
type Latency struct {
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	RouteID  string    `json:"route_id,omitempty"`
	Gateway  []byte    `json:"gateway,omitempty"`
	Upstream []byte    `json:"upstream,omitempty"`
}

// SketchAccuracy is the sketches' relative accuracy: a percentile read from one is within
// 1% of a value that was recorded.
const SketchAccuracy = 0.01

// Bounds of what a sketch holds: times are in microseconds from 1 µs (anything shorter
// counts as 1 µs) to MaxSketchUS (anything longer counts as that), so an edge can keep a
// sketch in a fixed array of SketchBins counters and a decoder refuses bins outside it.
const (
	MaxSketchUS = float64(time.Hour / time.Microsecond)
	// maxSketchBytes bounds one encoded sketch: every bin present takes at most a few
	// bytes, so a full sketch is well under this.
	maxSketchBytes = 16 << 10
	// maxSketchCount bounds one sketch's count: far more requests than one edge serves
	// in an hour.
	maxSketchCount = 1 << 40
)

var sketchMapping, _ = mapping.NewCubicallyInterpolatedMapping(SketchAccuracy)

// SketchMinIndex and SketchBins place every sketch bin: bin i of an edge's array is the
// sketch's index SketchMinIndex+i.
var (
	SketchMinIndex = sketchMapping.Index(1)
	SketchBins     = sketchMapping.Index(MaxSketchUS) - SketchMinIndex + 1
)

// SketchBin is the array bin of a time: its microseconds, clamped to the sketch's range,
// mapped with the sketch's index mapping.
func SketchBin(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	if us >= MaxSketchUS {
		return SketchBins - 1
	}
	return min(max(sketchMapping.Index(us)-SketchMinIndex, 0), SketchBins-1)
}

// NewSketch is an empty sketch of the one mapping every Tollgate sketch uses.
func NewSketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(sketchMapping, store.NewSparseStore(), store.NewSparseStore())
}

// SketchFromBins makes a sketch of an edge's array of counters (bins as SketchBin
// places them).
func SketchFromBins(bins []uint64) *ddsketch.DDSketch {
	s := NewSketch()
	st := s.GetPositiveValueStore()
	for i, n := range bins {
		if n > 0 {
			st.AddWithCount(SketchMinIndex+i, float64(n))
		}
	}
	return s
}

// EncodeSketch is a sketch's wire form: DDSketch's own encoding, with its mapping.
func EncodeSketch(s *ddsketch.DDSketch) []byte {
	var b []byte
	s.Encode(&b, false)
	return b
}

// DecodeSketch reads a sketch from its wire form and checks it holds what an edge could
// have recorded: the mapping of NewSketch, no negative values, whole positive counts in
// bins of the range, a bounded total. A sketch of an untrusted source is decoded into
// sparse stores, so an index far out of range costs a map entry, not an array.
func DecodeSketch(data []byte) (s *ddsketch.DDSketch, err error) {
	if len(data) > maxSketchBytes {
		return nil, fmt.Errorf("sketch of %d bytes, over the limit of %d", len(data), maxSketchBytes)
	}
	defer func() {
		// The library trusts its input; a panic on a malformed one is a refusal here.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("malformed sketch: %v", r)
		}
	}()
	s, err = ddsketch.DecodeDDSketch(data, store.SparseStoreConstructor, sketchMapping)
	if err != nil {
		return nil, fmt.Errorf("malformed sketch: %v", err)
	}
	if !s.GetNegativeValueStore().IsEmpty() {
		return nil, fmt.Errorf("sketch holds negative times")
	}
	if z := s.GetZeroCount(); z != 0 {
		return nil, fmt.Errorf("sketch holds a zero count")
	}
	var total float64
	var bad error
	s.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
		if index < SketchMinIndex || index >= SketchMinIndex+SketchBins {
			bad = fmt.Errorf("sketch bin %d outside %d–%d", index, SketchMinIndex, SketchMinIndex+SketchBins-1)
			return true
		}
		if !(count > 0) || count != math.Trunc(count) || count > maxSketchCount {
			bad = fmt.Errorf("sketch bin %d has count %v, not a whole positive number", index, count)
			return true
		}
		total += count
		return false
	})
	if bad != nil {
		return nil, bad
	}
	if total > maxSketchCount {
		return nil, fmt.Errorf("sketch counts %v times, over the limit of %d", total, int64(maxSketchCount))
	}
	return s, nil
}

// Percentiles of a sketch, in milliseconds; zero for an empty one.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// SketchPercentiles reads p50, p95 and p99 of a sketch of microseconds, in milliseconds
// rounded to the microsecond.
func SketchPercentiles(s *ddsketch.DDSketch) Percentiles {
	if s == nil || s.IsEmpty() {
		return Percentiles{}
	}
	v, err := s.GetValuesAtQuantiles([]float64{0.5, 0.95, 0.99})
	if err != nil {
		return Percentiles{}
	}
	ms := func(us float64) float64 { return math.Round(us) / 1000 }
	return Percentiles{P50: ms(v[0]), P95: ms(v[1]), P99: ms(v[2])}
}

// validateLatency checks one latency entry of a batch.
func validateLatency(l *Latency) error {
	if _, err := uuid.Parse(l.TenantID); err != nil || len(l.TenantID) != 36 {
		return fmt.Errorf("tenant_id %q is not a UUID", l.TenantID)
	}
	if l.Hour.IsZero() || !l.Hour.Equal(l.Hour.UTC().Truncate(time.Hour)) {
		return fmt.Errorf("hour %s is not a whole UTC hour", l.Hour.Format(time.RFC3339Nano))
	}
	l.Hour = l.Hour.UTC()
	if len(l.RouteID) > maxIDLen {
		return fmt.Errorf("route_id is at most %d characters", maxIDLen)
	}
	if len(l.Gateway) == 0 && len(l.Upstream) == 0 {
		return fmt.Errorf("neither a gateway nor an upstream sketch")
	}
	for _, s := range []struct {
		name string
		data []byte
	}{{"gateway", l.Gateway}, {"upstream", l.Upstream}} {
		if len(s.data) == 0 {
			continue
		}
		if _, err := DecodeSketch(s.data); err != nil {
			return fmt.Errorf("%s: %v", s.name, err)
		}
	}
	return nil
}
