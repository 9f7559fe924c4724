package soak

import (
	"testing"
	"time"

	"tollgate/e2e/bench/harness"
)

func TestMetricLine(t *testing.T) {
	for _, c := range []struct {
		line string
		name string
		v    float64
		ok   bool
	}{
		{"go_goroutines 42", "go_goroutines", 42, true},
		{"process_resident_memory_bytes 3.4734336e+07", "process_resident_memory_bytes", 3.4734336e+07, true},
		{`tollgate_meter_requests_total{edge="a b}"} 17`, "tollgate_meter_requests_total", 17, true},
		{`http_requests_total{gateway="tollgate"} 5 1700000000000`, "http_requests_total", 5, true},
		{"# TYPE go_goroutines gauge", "", 0, false},
		{"", "", 0, false},
		{"go_goroutines", "", 0, false},
		{"go_goroutines NaNx", "go_goroutines", 0, false},
	} {
		name, v, ok := harness.MetricLine(c.line)
		if ok != c.ok || (ok && (name != c.name || v != c.v)) {
			t.Errorf("harness.MetricLine(%q) = %q, %v, %v; want %q, %v, %v", c.line, name, v, ok, c.name, c.v, c.ok)
		}
	}
}

// The tally counts as the meter does: the upstream's answers are billable whatever their
// status, the edge's own are requests only, and no tenant or not ready is not metered.
func TestSoakTally(t *testing.T) {
	tl := &soakTally{tenants: map[string]*soakCounts{}, statuses: map[int]int64{}}
	tl.add("a", 200, true, nil)
	tl.add("a", 404, true, []byte(`{"error":"no such item"}`))
	tl.add("a", 401, false, []byte(`{"error":{"code":"unauthorized","message":"x"}}`))
	tl.add("a", 404, false, []byte(`{"error":{"code":"route_not_found","message":"x"}}`))
	tl.add("a", 404, false, []byte(`{"error":{"code":"tenant_not_found","message":"x"}}`))
	tl.add("a", 503, false, []byte(`{"error":{"code":"not_ready","message":"x"}}`))
	tl.add("b", 502, false, []byte(`{"error":{"code":"bad_gateway","message":"x"}}`))
	tl.socketError()
	if got, want := tl.counts("a"), (soakCounts{requests: 4, billable: 2}); got != want {
		t.Errorf("a: %+v, want %+v", got, want)
	}
	if got, want := tl.counts("b"), (soakCounts{requests: 1}); got != want {
		t.Errorf("b: %+v, want %+v", got, want)
	}
	if tl.fiveXX != 2 || tl.sockErrs != 1 || tl.statuses[404] != 3 {
		t.Errorf("5xx %d, socket errors %d, 404s %d; want 2, 1, 3", tl.fiveXX, tl.sockErrs, tl.statuses[404])
	}
}

func TestSoakMinutes(t *testing.T) {
	var lat []soakLat
	for i := range 150 {
		lat = append(lat, soakLat{due: time.Duration(i) * time.Second, us: float64(i%60 + 1), fail: i == 70})
	}
	samples := []soakSample{{at: 10 * time.Second, rss: 1}, {at: 50 * time.Second, rss: 2}, {at: 70 * time.Second, rss: 3}, {at: 150 * time.Second, rss: 4}}
	ms := soakMinutes(lat, samples)
	if len(ms) != 3 {
		t.Fatalf("%d minutes, want 3", len(ms))
	}
	if ms[0].n != 60 || ms[1].n != 60 || ms[2].n != 30 || ms[1].errors != 1 {
		t.Errorf("requests %d, %d, %d, errors of minute 2 %d; want 60, 60, 30, 1", ms[0].n, ms[1].n, ms[2].n, ms[1].errors)
	}
	if ms[0].p99 != 60 || ms[0].max != 60 || ms[0].p50 != 31 {
		t.Errorf("minute 1: p50 %v p99 %v max %v; want 31, 60, 60", ms[0].p50, ms[0].p99, ms[0].max)
	}
	// The last sample of each minute; the final one, taken as the load stops, belongs to the last.
	for i, want := range []float64{2, 3, 4} {
		if ms[i].sample == nil || ms[i].sample.rss != want {
			t.Errorf("minute %d: sample %+v, want rss %v", i+1, ms[i].sample, want)
		}
	}
}

func TestParseGoroutines(t *testing.T) {
	raw := "goroutine profile: total 12\n" +
		"3 @ 0x4902ce 0x41ea8e\n" +
		"#\t0x48f4a4\tinternal/poll.runtime_pollWait+0x84\t\t\t\t/usr/local/go/src/runtime/netpoll.go:351\n" +
		"#\t0x5c7dd5\tnet.(*rawConn).Read+0x35\t\t\t\t\t/usr/local/go/src/net/rawconn.go:44\n" +
		"\n" +
		"9 @ 0x4902ce 0x41ea8e 0x41e5b2 0xe36dcf 0x497e21\n" +
		"#\t0xe36dce\tgithub.com/nats-io/nats.go/jetstream.(*orderedSubscription).Closed.func1+0x2e\t/x/ordered.go:395\n" +
		"\n"
	gs := parseGoroutines(raw)
	if len(gs) != 2 || gs[0].n != 9 || gs[1].n != 3 {
		t.Fatalf("groups %+v, want 9 then 3", gs)
	}
	if got := gs[0].frames; len(got) != 1 || got[0] != "github.com/nats-io/nats.go/jetstream.(*orderedSubscription).Closed.func1" {
		t.Errorf("frames of the first group: %q", got)
	}
	if got := gs[1].frames; len(got) != 2 || got[1] != "net.(*rawConn).Read" {
		t.Errorf("frames of the second group: %q", got)
	}
}
