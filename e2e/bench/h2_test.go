package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"tollgate/e2e/bench/harness"
)

// h2load's report as nghttp2 1.52 (Debian 12) prints it, read into wrk's shape. The two
// files are captured from the bench's own runs against nginx: TLS with ALPN h2 (S1h2) and
// gRPC over h2c (S1grpc), whose "status codes" line counts answers the window cut off.
func TestH2loadParse(t *testing.T) {
	cases := []struct {
		name      string
		out       string
		protocol  string
		seconds   float64
		reqPerSec float64
		want      loadResult
		meanUS    float64
	}{
		{name: "tls h2", out: readTestdata(t, "h2load-tls-h2.txt"), protocol: "h2", seconds: 3.01, reqPerSec: 16238.33,
			want: loadResult{Requests: 48715, DurationUS: 3010000}, meanUS: 7630},
		{name: "grpc h2c", out: readTestdata(t, "h2load-grpc-h2c.txt"), protocol: "h2c", seconds: 3, reqPerSec: 12732.33,
			want: loadResult{Requests: 38197, DurationUS: 3000000}, meanUS: 9910},
		{name: "errors and sub-second", protocol: "h2c", seconds: 0.50012, reqPerSec: 1999.5, meanUS: 845,
			// 1000 done: 900 succeeded, 100 failed of which 30 without an answer, 10 of
			// those timed out; 70 answered 5xx.
			out: "Application protocol: h2c\n\nfinished in 500.12ms, 1999.50 req/s, 12.00KB/s\n" +
				"requests: 1000 total, 1010 started, 1000 done, 900 succeeded, 100 failed, 30 errored, 10 timeout\n" +
				"status codes: 900 2xx, 0 3xx, 0 4xx, 72 5xx\n" +
				"traffic: 1.00KB (1024) total, 0.50KB (512) headers (space savings 0.00%), 10B (10) data\n" +
				"                     min         max         mean         sd        +/- sd\n" +
				"time for request:      120us      2.50ms       845us       100us    70.00%\n",
			want: loadResult{Requests: 970, DurationUS: 500120, Status: 70, Read: 20, Timeout: 10}},
		{name: "lines of a later version around them", protocol: "h2", seconds: 2, reqPerSec: 10,
			out: "some new banner\nApplication protocol: h2\nfinished in 2.00s, 10.00 req/s, 1.00KB/s\n" +
				"requests: 20 total, 20 started, 20 done, 20 succeeded, 0 failed, 0 errored, 0 timeout\n" +
				"status codes: 20 2xx, 0 3xx, 0 4xx, 0 5xx\nsomething: else\n",
			want: loadResult{Requests: 20, DurationUS: 2000000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := parseH2load(c.out)
			if err != nil {
				t.Fatalf("parseH2load: %v\n%s", err, c.out)
			}
			if s.protocol != c.protocol || s.seconds != c.seconds || s.reqPerSec != c.reqPerSec || s.meanUS != c.meanUS {
				t.Errorf("protocol %q, %gs, %g req/s, mean %gµs; want %q, %gs, %g req/s, mean %gµs",
					s.protocol, s.seconds, s.reqPerSec, s.meanUS, c.protocol, c.seconds, c.reqPerSec, c.meanUS)
			}
			if got := s.loadResult(); got != c.want {
				t.Errorf("loadResult %+v, want %+v", got, c.want)
			}
		})
	}
}

// A report missing a line the bench needs is an error, never a run of 0 requests.
func TestH2loadParseIncomplete(t *testing.T) {
	full := readTestdata(t, "h2load-tls-h2.txt")
	for _, drop := range []string{"finished in", "requests:", "status codes:"} {
		var kept []string
		for _, l := range strings.Split(full, "\n") {
			if !strings.HasPrefix(l, drop) {
				kept = append(kept, l)
			}
		}
		if _, err := parseH2load(strings.Join(kept, "\n")); err == nil {
			t.Errorf("without its %q line: no error", drop)
		}
	}
	// What h2load prints when it cannot connect at all.
	if _, err := parseH2load("starting benchmark...\nclient could not connect to host\nabort\n"); err == nil {
		t.Error("a failed run: no error")
	}
}

// The URL names the scenario's host (SNI and :authority), --connect-to the gateway; gRPC
// adds its headers and the framed request.
func TestH2loadArgs(t *testing.T) {
	set := h2Settings{conns: 16, streams: 8}
	got := h2loadArgs(h2PerfScenario("S1h2"), "127.0.0.1:8443", set, 3*time.Second, "")
	want := []string{"h2load", "-t", "1", "-c", "16", "-m", "8", "-D", "3000ms", "--connect-to", "127.0.0.1:8443", "https://bench.localhost:8443/h2"}
	if !slices.Equal(got, want) {
		t.Errorf("S1h2:\n got %q\nwant %q", got, want)
	}
	got = h2loadArgs(h2PerfScenario("S1grpc"), "127.0.0.1:8000", set, 500*time.Millisecond, "/tmp/req.bin")
	want = []string{"h2load", "-t", "1", "-c", "16", "-m", "8", "-D", "500ms", "--connect-to", "127.0.0.1:8000",
		"-H", "content-type: application/grpc", "-H", "te: trailers", "-d", "/tmp/req.bin", "http://grpc.localhost:8000/grpc.health.v1.Health/Check"}
	if !slices.Equal(got, want) {
		t.Errorf("S1grpc:\n got %q\nwant %q", got, want)
	}
}

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

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
