package edgemetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The per-request cost of the request metrics: the seed's class series alone, and with
// the per-node series (exact code, latency split, bytes) that the handler adds. Both must
// stay at 0 allocs.
func BenchmarkRequestMetrics(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	rm := &RouteMetrics{m: m, tenant: "acme", route: "r"}
	b.Run("class", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rm.Observe(200, 3*time.Millisecond)
			}
		})
	})
	b.Run("class+node", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rm.Observe(200, 3*time.Millisecond)
				rm.ObserveNode(200, 3*time.Millisecond, 2*time.Millisecond, 120, 2048)
			}
		})
	})
}

func TestSlotOf(t *testing.T) {
	seen := map[string]bool{}
	for status := -1; status < 700; status++ {
		s := slotOf(status)
		if s < 0 || s >= numCodeSlots {
			t.Fatalf("status %d: slot %d", status, s)
		}
		seen[slotLabel(s)] = true
	}
	if len(seen) != numCodeSlots {
		t.Fatalf("%d label values, want %d", len(seen), numCodeSlots)
	}
	for status, want := range map[int]string{200: "200", 429: "429", 299: "2xx", 418: "4xx", 599: "5xx", 600: "other", 0: "other", -1: "other"} {
		if got := slotLabel(slotOf(status)); got != want {
			t.Errorf("status %d: %q, want %q", status, got, want)
		}
	}
}
