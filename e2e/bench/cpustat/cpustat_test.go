package cpustat_test

import (
	"math"
	"slices"
	"testing"

	"tollgate/e2e/bench/cpustat"
)

func TestParse(t *testing.T) {
	const stat0 = `cpu  300 0 100 1000 10 0 0 0 0 0
cpu0 200 0 50 400 5 0 0 0 0 0
cpu1 100 0 50 600 5 0 0 0 7 7
intr 12345
`
	const stat1 = `cpu  500 0 200 1100 10 0 0 0 0 0
cpu0 350 0 100 400 5 0 0 0 0 0
cpu1 150 0 100 700 5 0 0 0 9 9
`
	t0, t1 := cpustat.Parse(stat0), cpustat.Parse(stat1)
	if len(t0) != 2 || t0[0] != [3]uint64{250, 655, 250} || t0[1] != [3]uint64{150, 755, 150} {
		t.Fatalf("Parse = %v; the aggregate line and guest times must not count", t0)
	}
	if got := cpustat.BusyShare(t0, t1, []int{0}); math.Abs(got-1) > 1e-9 {
		t.Errorf("CPU 0 busy %v, want 1 (200 of 200 ticks)", got)
	}
	if got := cpustat.BusyShare(t0, t1, []int{1}); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("CPU 1 busy %v, want 0.5", got)
	}
	if got := cpustat.BusyShare(t0, t1, []int{0, 1}); math.Abs(got-0.75) > 1e-9 {
		t.Errorf("CPUs 0,1 busy %v, want 0.75", got)
	}
	if got := cpustat.BusyShare(t0, t1, []int{2}); got != -1 {
		t.Errorf("a CPU /proc/stat does not list: %v, want -1", got)
	}
	if got := cpustat.BusyShare(nil, t1, []int{0}); got != -1 {
		t.Errorf("no start counters: %v, want -1", got)
	}
}

func TestParseList(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "1": {1}, "0-1": {0, 1}, "0,2-3": {0, 2, 3}, "1,1": {1}} {
		if got, err := cpustat.ParseList(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "1-"} {
		if _, err := cpustat.ParseList(in); err == nil {
			t.Errorf("ParseList(%q): no error", in)
		}
	}
}

func TestMask(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		err  bool
	}{
		{in: "1", want: 0b10},
		{in: "0-1", want: 0b11},
		{in: "0,2-3", want: 0b1101},
		{in: "", want: 0},
		{in: "3-1", err: true},
		{in: "x", err: true},
		{in: "-1", err: true},
		{in: "1024", err: true},
	} {
		m, err := cpustat.Mask(c.in)
		if (err != nil) != c.err {
			t.Errorf("Mask(%q): error %v, want error %v", c.in, err, c.err)
			continue
		}
		if !c.err && m[0] != c.want {
			t.Errorf("Mask(%q) = %b, want %b", c.in, m[0], c.want)
		}
	}
}
