package web

import (
	"strings"
	"testing"
	"time"

	"tollgate/billing"
)

// Every day of a range gets its label under the requests chart, up to a month (then as
// day numbers); longer ranges label as many as fit without overlapping.
func TestColumnsLabelEveryDay(t *testing.T) {
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct{ days, want int }{{5, 5}, {14, 14}, {31, 31}} {
		bars := buckets(&billing.UsageReport{}, from, from.Add(time.Duration(c.days)*24*time.Hour), billing.GranularityDay)
		svg := string(columns("t", bars))
		if n := strings.Count(svg, `text-anchor="middle"`); n != c.want {
			t.Errorf("%d days: %d labels, want %d", c.days, n, c.want)
		}
	}
	bars := buckets(&billing.UsageReport{}, from, from.Add(366*24*time.Hour), billing.GranularityDay)
	if n := strings.Count(string(columns("t", bars)), `text-anchor="middle"`); n < 20 || n > 366 {
		t.Errorf("a year: %d labels", n)
	}
}

// The latency chart draws a line per percentile with gaps for hours without traffic.
func TestLatencyLines(t *testing.T) {
	s := latencySeries(6)
	for _, i := range []int{0, 1, 3, 4, 5} {
		s.set(i, billing.LatencyStats{Count: 3, P50: 1, P95: 2, P99: 40})
	}
	svg := string(latencyLines("t", hourLabels(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 6), s))
	if n := strings.Count(svg, "<polyline"); n != 6 {
		t.Fatalf("%d polylines, want 2 stretches of 3 percentiles: %s", n, svg)
	}
	if !strings.Contains(svg, ">50<") {
		t.Errorf("y axis does not reach 50 ms: %s", svg)
	}
}
