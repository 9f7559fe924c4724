// Package figures formats and summarizes the bench's measurements the same way in every
// section of the report: durations in µs, ms or s, memory in MiB, ratios with a ×.
package figures

import (
	"fmt"
	"slices"
	"time"
)

// FmtUS is a duration given in µs, in the unit that suits it; "-" when not positive.
func FmtUS(us float64) string {
	switch {
	case us <= 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1000)
	default:
		return fmt.Sprintf("%.2fs", us/1e6)
	}
}

// FmtDur is d as FmtUS gives it.
func FmtDur(d time.Duration) string { return FmtUS(float64(d) / float64(time.Microsecond)) }

// FmtKB is a size in KB as MiB; "-" when not positive.
func FmtKB(kb int64) string {
	if kb <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
}

// Ratio is a ÷ b with a ×; "-" unless both are positive.
func Ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// LatStats summarizes latencies. Neg counts samples where the entry was in the bucket
// before the 201 reached the client (the relay beat the HTTP response); they count as 0.
type LatStats struct {
	N             int
	P50, P99, Max time.Duration
	Neg           int
}

// Summarize is ds's count, median, p99 and maximum, a negative duration counted as 0.
func Summarize(ds []time.Duration) LatStats {
	s := LatStats{N: len(ds)}
	if len(ds) == 0 {
		return s
	}
	c := make([]time.Duration, len(ds))
	for i, d := range ds {
		if d < 0 {
			s.Neg++
			d = 0
		}
		c[i] = d
	}
	slices.Sort(c)
	pct := func(p float64) time.Duration { return c[min(len(c)-1, int(p*float64(len(c))))] }
	s.P50, s.P99, s.Max = pct(0.50), pct(0.99), c[len(c)-1]
	return s
}
