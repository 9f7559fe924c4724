package h2load_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"tollgate/e2e/bench/h2load"
)

// h2load's report as nghttp2 1.52 (Debian 12) prints it, and its counts in wrk's terms.
// The two files are captured from the bench's own runs against nginx: TLS with ALPN h2
// (S1h2) and gRPC over h2c (S1grpc), whose "status codes" line counts answers the window
// cut off.
func TestParse(t *testing.T) {
	type counts struct{ requests, status, read, timeout int64 }
	cases := []struct {
		name      string
		out       string
		protocol  string
		seconds   float64
		reqPerSec float64
		want      counts
		meanUS    float64
	}{
		{name: "tls h2", out: readTestdata(t, "h2load-tls-h2.txt"), protocol: "h2", seconds: 3.01, reqPerSec: 16238.33,
			want: counts{requests: 48715}, meanUS: 7630},
		{name: "grpc h2c", out: readTestdata(t, "h2load-grpc-h2c.txt"), protocol: "h2c", seconds: 3, reqPerSec: 12732.33,
			want: counts{requests: 38197}, meanUS: 9910},
		{name: "errors and sub-second", protocol: "h2c", seconds: 0.50012, reqPerSec: 1999.5, meanUS: 845,
			// 1000 done: 900 succeeded, 100 failed of which 30 without an answer, 10 of
			// those timed out; 70 answered 5xx.
			out: "Application protocol: h2c\n\nfinished in 500.12ms, 1999.50 req/s, 12.00KB/s\n" +
				"requests: 1000 total, 1010 started, 1000 done, 900 succeeded, 100 failed, 30 errored, 10 timeout\n" +
				"status codes: 900 2xx, 0 3xx, 0 4xx, 72 5xx\n" +
				"traffic: 1.00KB (1024) total, 0.50KB (512) headers (space savings 0.00%), 10B (10) data\n" +
				"                     min         max         mean         sd        +/- sd\n" +
				"time for request:      120us      2.50ms       845us       100us    70.00%\n",
			want: counts{requests: 970, status: 70, read: 20, timeout: 10}},
		{name: "lines of a later version around them", protocol: "h2", seconds: 2, reqPerSec: 10,
			out: "some new banner\nApplication protocol: h2\nfinished in 2.00s, 10.00 req/s, 1.00KB/s\n" +
				"requests: 20 total, 20 started, 20 done, 20 succeeded, 0 failed, 0 errored, 0 timeout\n" +
				"status codes: 20 2xx, 0 3xx, 0 4xx, 0 5xx\nsomething: else\n",
			want: counts{requests: 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := h2load.Parse(c.out)
			if err != nil {
				t.Fatalf("Parse: %v\n%s", err, c.out)
			}
			if s.Protocol != c.protocol || s.Seconds != c.seconds || s.ReqPerSec != c.reqPerSec || s.MeanUS != c.meanUS {
				t.Errorf("protocol %q, %gs, %g req/s, mean %gµs; want %q, %gs, %g req/s, mean %gµs",
					s.Protocol, s.Seconds, s.ReqPerSec, s.MeanUS, c.protocol, c.seconds, c.reqPerSec, c.meanUS)
			}
			if got := (counts{s.Requests(), s.StatusErrors(), s.ReadErrors(), s.Timeout}); got != c.want {
				t.Errorf("requests, status errors, read errors, timeouts %+v, want %+v", got, c.want)
			}
		})
	}
}

// A report missing a line the bench needs is an error, never a run of 0 requests.
func TestParseIncomplete(t *testing.T) {
	full := readTestdata(t, "h2load-tls-h2.txt")
	for _, drop := range []string{"finished in", "requests:", "status codes:"} {
		var kept []string
		for _, l := range strings.Split(full, "\n") {
			if !strings.HasPrefix(l, drop) {
				kept = append(kept, l)
			}
		}
		if _, err := h2load.Parse(strings.Join(kept, "\n")); err == nil {
			t.Errorf("without its %q line: no error", drop)
		}
	}
	// What h2load prints when it cannot connect at all.
	if _, err := h2load.Parse("starting benchmark...\nclient could not connect to host\nabort\n"); err == nil {
		t.Error("a failed run: no error")
	}
}

// The URL names the host (SNI and :authority), --connect-to the gateway; gRPC adds its
// headers and the framed request.
func TestArgs(t *testing.T) {
	got := h2load.Run{Addr: "127.0.0.1:8443", Host: "bench.localhost", Path: "/h2", TLS: true,
		Conns: 16, Streams: 8, Duration: 3 * time.Second}.Args()
	want := []string{"h2load", "-t", "1", "-c", "16", "-m", "8", "-D", "3000ms", "--connect-to", "127.0.0.1:8443", "https://bench.localhost:8443/h2"}
	if !slices.Equal(got, want) {
		t.Errorf("TLS:\n got %q\nwant %q", got, want)
	}
	got = h2load.Run{Addr: "127.0.0.1:8000", Host: "grpc.localhost", Path: "/grpc.health.v1.Health/Check", GRPC: true, Body: "/tmp/req.bin",
		Conns: 16, Streams: 8, Duration: 500 * time.Millisecond}.Args()
	want = []string{"h2load", "-t", "1", "-c", "16", "-m", "8", "-D", "500ms", "--connect-to", "127.0.0.1:8000",
		"-H", "content-type: application/grpc", "-H", "te: trailers", "-d", "/tmp/req.bin", "http://grpc.localhost:8000/grpc.health.v1.Health/Check"}
	if !slices.Equal(got, want) {
		t.Errorf("gRPC:\n got %q\nwant %q", got, want)
	}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
