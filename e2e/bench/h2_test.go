package main

import (
	"strings"
	"testing"
	"time"

	"tollgate/e2e/bench/harness"
)

// The report's HTTP/2 targets: the median of the per-round ratios against each target.
func TestH2Markdown(t *testing.T) {
	b := &bench{threads: 2, conns: 64, Env: &harness.Env{LoadCPUs: "1"}, cores: []int{1}, duration: 5 * time.Second,
		gateways: []string{"nginx", "tollgate"}, h2: h2Settings{conns: 16, streams: 8}}
	b.rnd.rounds, b.rnd.busyMin = 5, 0.9
	r := newReport(b)
	m := func(sc, gw string, n int, us float64) roundMeasure {
		return roundMeasure{perfResult: perfResult{scenario: sc, gateway: gw, procs: 1, usPerReq: us, busy: 1,
			load: loadResult{Requests: 1000, DurationUS: 1e6}}, n: n, first: "nginx"}
	}
	for n, ratio := range []float64{0.9, 0.95, 1.2, 0.98, 0.97} {
		r.rounds = append(r.rounds, m("S1h2", "nginx", n+1, 30), m("S1h2", "tollgate", n+1, 30*ratio))
	}
	for n, ratio := range []float64{1.2, 1.3, 1.15, 1.25, 1.0} {
		r.rounds = append(r.rounds, m("S1grpc", "nginx", n+1, 50), m("S1grpc", "tollgate", n+1, 50*ratio))
	}
	r.rounds = append(r.rounds, m("S1", "nginx", 1, 20), m("S1", "tollgate", 1, 20)) // not an HTTP/2 scenario
	var s strings.Builder
	r.h2Markdown(&s)
	md := s.String()
	reportHas(t, md, "## HTTP/2 targets",
		"16 connections × 8 concurrent streams",
		"| S1h2 | 1 | ≤ 1.00 | 0.970 | 0.900–1.200 |",
		"| S1grpc | 1 | ≤ 1.10 | 1.200 | 1.000–1.300 |",
		"| 5 of 5 | 29.10 | 30.00 |", "| met |", "| missed |")
	if strings.Contains(md, "| S1 |") || strings.Contains(md, "with the flagged ones") {
		t.Errorf("S1, or a note on flagged rounds, in the HTTP/2 targets:\n%s", md)
	}

	// Every round flagged: no figure, and what all rounds say beside it.
	for i := range r.rounds {
		r.rounds[i].why = "gateway busy 0.40 < 0.90"
	}
	s.Reset()
	r.h2Markdown(&s)
	reportHas(t, s.String(), "| 0 of 5 |", "| no round used |",
		"- S1h2 at 1 proc(s), all 5 rounds with the flagged ones (not a figure to quote): µs/req T÷N median 0.970 (0.900–1.200)")
}
