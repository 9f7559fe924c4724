package postgres_test

import (
	"sync"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	"tollgate/infra/usage"
)

func sketchOf(ms ...int) []byte {
	bins := make([]uint64, usage.SketchBins)
	for _, m := range ms {
		bins[usage.SketchBin(time.Duration(m)*time.Millisecond)]++
	}
	return usage.EncodeSketch(usage.SketchFromBins(bins))
}

// A batch's sketches merge into their route-hour rows once, however often the batch is
// delivered, also by concurrent folds; the report reads percentiles per route and hour
// and merged over the range, for one route or every route.
func TestFoldLatencyOnce(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	h := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 1; i <= 10; i++ {
		var gw, up []int
		for j := 0; j < 10; j++ {
			gw = append(gw, i)      // gateway: i ms
			up = append(up, 10*i+j) // upstream: 10i … 10i+9 ms
		}
		b := billingtest.Batch(uint64(i))
		b.Latencies = []usage.Latency{{TenantID: tn.ID, RouteID: "r1", Hour: h.Add(time.Duration(i%2) * time.Hour), Gateway: sketchOf(gw...), Upstream: sketchOf(up...)}}
		if i == 1 {
			b.Latencies = append(b.Latencies, usage.Latency{TenantID: tn.ID, RouteID: "r2", Hour: h, Gateway: sketchOf(3)})
		}
		for k := 0; k < 2; k++ { // every batch twice, at once
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := db.Store.Fold(ctx, b); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rep, err := db.Store.Latency(ctx, billing.LatencyQuery{TenantID: tn.ID, Every: true, From: h, To: h.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Items) != 3 || len(rep.Routes) != 2 {
		t.Fatalf("report %+v, want 3 items and 2 routes", rep)
	}
	r1 := rep.Routes[0]
	if r1.RouteID != "r1" || r1.Gateway.Count != 100 || r1.Upstream.Count != 100 {
		t.Fatalf("r1 over the range: %+v", r1)
	}
	// Upstream times are 10…109 ms, each once: p50 ≈ 59, p99 ≈ 108.
	near := func(got, want float64) bool { return got > want*0.97 && got < want*1.03 }
	if !near(r1.Upstream.P50, 59) || !near(r1.Upstream.P99, 108) {
		t.Fatalf("r1 upstream %+v, want p50 ≈ 59 ms, p99 ≈ 108 ms", r1.Upstream)
	}
	if it := rep.Items[0]; it.RouteID != "r1" || !it.Hour.Equal(h) || it.Gateway.Count != 50 {
		t.Fatalf("first item %+v", it)
	}
	if r2 := rep.Routes[1]; r2.RouteID != "r2" || r2.Gateway.Count != 1 || r2.Upstream.Count != 0 || !near(r2.Gateway.P50, 3) {
		t.Fatalf("r2: %+v", r2)
	}
	one, err := db.Store.Latency(ctx, billing.LatencyQuery{TenantID: tn.ID, RouteID: "r2", From: h, To: h.Add(time.Hour)})
	if err != nil || len(one.Items) != 1 || one.Items[0].RouteID != "r2" {
		t.Fatalf("route r2 alone: %+v %v", one, err)
	}
	if _, err := db.Store.Latency(ctx, billing.LatencyQuery{TenantID: tn.ID, Every: true, From: h.Add(time.Minute), To: h.Add(time.Hour)}); err == nil {
		t.Fatal("a range off the hour was accepted")
	}
}
