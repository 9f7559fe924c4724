// Package cpustat reads what the machine's CPUs spent their time on, from /proc/stat, and
// the CPU lists taskset takes ("1", "0-1", "0,2-3"): the bench's check that a gateway, not
// the load side or another process, was what limited a measurement. It reads counters
// only; pinning processes is the caller's business.
package cpustat

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Times is each CPU's busy, total and task time in clock ticks, from /proc/stat: busy
// is all but idle and iowait, task is user, nice and system, the time it ran processes
// (busy less interrupts, softirqs, where the kernel does a loopback peer's TCP receive
// for whoever sent, and steal).
type Times map[int][3]uint64

// Read is the counters now; nil when /proc/stat cannot be read, which every share then
// reports as -1.
func Read() Times {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	return Parse(string(b))
}

// Parse reads the per-CPU lines of /proc/stat's text s; the aggregate "cpu" line and
// every other line are skipped.
func Parse(s string) Times {
	t := Times{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || len(f[0]) < 4 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var total, idle, task uint64
		// user nice system idle iowait irq softirq steal; guest and guest_nice are
		// already counted in user and nice.
		for i, v := range f[1:min(len(f), 9)] {
			x, _ := strconv.ParseUint(v, 10, 64)
			total += x
			switch i {
			case 0, 1, 2:
				task += x
			case 3, 4:
				idle += x
			}
		}
		t[n] = [3]uint64{total - idle, total, task}
	}
	return t
}

// BusyShare is the share of the time cpus were busy between t0 and t1, averaged over
// them; -1 when a counter is missing.
func BusyShare(t0, t1 Times, cpus []int) float64 { return share(t0, t1, cpus, 0) }

// TaskShare is the share of the time cpus ran processes between t0 and t1 (Times),
// averaged over them; -1 when a counter is missing.
func TaskShare(t0, t1 Times, cpus []int) float64 { return share(t0, t1, cpus, 2) }

// share is the share of counter i (0: busy, 2: task) in the total between t0 and t1.
func share(t0, t1 Times, cpus []int, i int) float64 {
	var busy, total uint64
	for _, c := range cpus {
		a, ok0 := t0[c]
		b, ok1 := t1[c]
		if !ok0 || !ok1 || b[1] < a[1] || b[i] < a[i] {
			return -1
		}
		busy += b[i] - a[i]
		total += b[1] - a[1]
	}
	if total == 0 {
		return -1
	}
	return float64(busy) / float64(total)
}

// ParseList reads taskset's CPU list syntax: "1", "0-1", "0,2-3".
func ParseList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %v", s, err)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= z; c++ {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// FormatList is cpus as a comma-separated list, for messages and reports.
func FormatList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// Mask is sched_setaffinity's mask for a taskset-style list ("1", "0-1", "0,2").
func Mask(cpus string) ([16]uint64, error) {
	var m [16]uint64
	for _, part := range splitList(cpus) {
		lo, hi, ok := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if ok {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || z < a || z >= 64*len(m) {
			return m, fmt.Errorf("CPU list %q", cpus)
		}
		for c := a; c <= z; c++ {
			m[c/64] |= 1 << (c % 64)
		}
	}
	return m, nil
}

// splitList is s's comma-separated fields, trimmed, the empty ones dropped.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
