package usage_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"tollgate/infra/usage"
)

// Sketches made from an edge's bins merge into one whose percentiles are those of all
// the times, within the accuracy, and survive a round trip through a batch.
func TestSketchRecordMergeEncode(t *testing.T) {
	a := make([]uint64, usage.SketchBins)
	b := make([]uint64, usage.SketchBins)
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Millisecond
		if i%2 == 0 {
			a[usage.SketchBin(d)]++
		} else {
			b[usage.SketchBin(d)]++
		}
	}
	a[usage.SketchBin(0)]++           // under 1 µs: the first bin
	b[usage.SketchBin(3*time.Hour)]++ // over an hour: the last bin
	sa, sb := usage.SketchFromBins(a), usage.SketchFromBins(b)
	da, err := usage.DecodeSketch(usage.EncodeSketch(sa))
	if err != nil {
		t.Fatal(err)
	}
	if err := da.MergeWith(sb); err != nil {
		t.Fatal(err)
	}
	if da.GetCount() != 1002 {
		t.Fatalf("merged count %v, want 1002", da.GetCount())
	}
	p := usage.SketchPercentiles(da)
	for _, c := range []struct{ got, want float64 }{{p.P50, 500}, {p.P95, 950}, {p.P99, 990}} {
		if c.got < c.want*0.98 || c.got > c.want*1.02 {
			t.Fatalf("percentiles %+v, want about 500/950/990 ms", p)
		}
	}
	tenant := "0190a000-0000-7000-8000-00000000000a"
	batch := &usage.Batch{ID: "e.b.1", EdgeID: "e", Latencies: []usage.Latency{{TenantID: tenant, RouteID: "r",
		Hour: time.Date(2024, 1, 1, 5, 0, 0, 0, time.UTC), Gateway: usage.EncodeSketch(sa), Upstream: usage.EncodeSketch(sb)}}}
	data, err := usage.EncodeBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	back, err := usage.DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	up, err := usage.DecodeSketch(back.Latencies[0].Upstream)
	if err != nil || up.GetCount() != 501 {
		t.Fatalf("round trip: %v, count %v", err, up.GetCount())
	}
	if usage.SketchPercentiles(nil) != (usage.Percentiles{}) || usage.SketchPercentiles(usage.NewSketch()) != (usage.Percentiles{}) {
		t.Fatal("an empty sketch has percentiles")
	}
}

// Sketches billing would be unable to trust are refused with the batch.
func TestLatencyValidation(t *testing.T) {
	good := usage.EncodeSketch(usage.SketchFromBins(append(make([]uint64, usage.SketchBins-1), 1)))
	neg := usage.NewSketch()
	neg.Add(-5)
	far := usage.NewSketch()
	far.GetPositiveValueStore().AddWithCount(usage.SketchMinIndex+usage.SketchBins+50, 1)
	half := usage.NewSketch()
	half.GetPositiveValueStore().AddWithCount(usage.SketchMinIndex+3, 0.5)
	for name, c := range map[string]struct {
		hour      string
		gw        []byte
		wantError string
	}{
		"good":             {"2024-01-01T05:00:00Z", good, ""},
		"no sketch":        {"2024-01-01T05:00:00Z", nil, "neither"},
		"half hour":        {"2024-01-01T05:30:00Z", good, "whole UTC hour"},
		"garbage":          {"2024-01-01T05:00:00Z", []byte{0xff, 0x01, 0x02}, "sketch"},
		"negative":         {"2024-01-01T05:00:00Z", usage.EncodeSketch(neg), "negative"},
		"bin out of range": {"2024-01-01T05:00:00Z", usage.EncodeSketch(far), "outside"},
		"fractional":       {"2024-01-01T05:00:00Z", usage.EncodeSketch(half), "whole positive"},
		"too big":          {"2024-01-01T05:00:00Z", make([]byte, 20<<10), "over the limit"},
	} {
		js := `{"id":"e.b.1","edge_id":"e","latencies":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"` + c.hour + `","route_id":"r"`
		if c.gw != nil {
			js += `,"gateway":"` + base64.StdEncoding.EncodeToString(c.gw) + `"`
		}
		js += `}]}`
		_, err := usage.DecodeBatch([]byte(js))
		if c.wantError == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, usage.ErrInvalid) || !strings.Contains(err.Error(), c.wantError) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, c.wantError)
		}
	}
	// A batch of an edge that predates latency decodes with none.
	b, err := usage.DecodeBatch([]byte(`{"id":"e.b.1","edge_id":"e","records":[]}`))
	if err != nil || b.Latencies != nil {
		t.Fatalf("old batch: %v, %+v", err, b)
	}
}

// latencySeeds are batches with latencies for FuzzDecodeBatch: a good one (a gateway
// sketch of 1 ms and 2 ms, an upstream one of 40 ms) and ones a mangled sketch spoils.
var latencySeeds = []string{
	`{"id":"e.b.4","edge_id":"e","latencies":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:00:00Z","route_id":"r","gateway":"` + seedSketch(1000, 2000) + `","upstream":"` + seedSketch(40000) + `"}]}`,
	`{"id":"e.b.5","edge_id":"e","latencies":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:00:00Z","gateway":"AgUM/////w8="}]}`,
	`{"id":"e.b.6","edge_id":"e","latencies":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:00:00Z"}]}`,
}

func seedSketch(us ...int) string {
	bins := make([]uint64, usage.SketchBins)
	for _, u := range us {
		bins[usage.SketchBin(time.Duration(u)*time.Microsecond)]++
	}
	return base64.StdEncoding.EncodeToString(usage.EncodeSketch(usage.SketchFromBins(bins)))
}
