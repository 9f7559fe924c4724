// Package h2load drives nghttp2's h2load for the bench's HTTP/2 scenarios: the command
// line of a run and the reading of its report. It starts no process and knows no gateway:
// the bench runs the command, pinned as it pins its other load generators, and puts the
// Summary in the shape of wrk's.
package h2load

import (
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Run is one h2load run.
type Run struct {
	Addr     string // host:port h2load connects to (--connect-to)
	Host     string // the URL's host: SNI and :authority carry it
	Path     string
	TLS      bool // https with ALPN h2; else h2c with prior knowledge
	GRPC     bool // a gRPC call: a POST of Body with gRPC's headers
	Body     string
	Conns    int // connections (-c)
	Streams  int // concurrent streams per connection (-m)
	Duration time.Duration
}

// Args is the run's command line. The URL names r.Host, so SNI and :authority carry it as
// a browser's would, and --connect-to sends it to r.Addr. One thread: h2load shares the
// load CPU with the upstream, and one event loop does not contend with itself.
func (r Run) Args() []string {
	scheme := "http"
	if r.TLS {
		scheme = "https"
	}
	_, port, _ := net.SplitHostPort(r.Addr)
	argv := []string{"h2load", "-t", "1", "-c", strconv.Itoa(r.Conns), "-m", strconv.Itoa(r.Streams),
		"-D", fmt.Sprintf("%dms", r.Duration.Milliseconds()), "--connect-to", r.Addr}
	if r.GRPC {
		argv = append(argv, "-H", "content-type: application/grpc", "-H", "te: trailers", "-d", r.Body)
	}
	return append(argv, fmt.Sprintf("%s://%s:%s%s", scheme, r.Host, port, r.Path))
}

// Summary is what the bench reads of h2load's report.
//
// h2load counts as done the streams it finished, as succeeded those answered 2xx or 3xx,
// as failed the rest, and as errored the failed ones without an answer (reset, connection
// lost, timed out): so every answered stream is a request, the failed ones with an answer
// are status errors, and the errored ones read errors or timeouts. Its "status codes"
// line is not used for the counts: it includes answers whose streams the end of the
// window cut off.
type Summary struct {
	Protocol                       string  // "Application protocol:", h2 or h2c
	Seconds                        float64 // "finished in": the measured time
	ReqPerSec                      float64
	Total, Done, Succeeded, Failed int64 // Failed: every stream not succeeded, HTTP errors included
	Errored, Timeout               int64 // the failed ones without an HTTP status: reset, connection lost, timed out
	Status2xx, Status3xx           int64
	Status4xx, Status5xx           int64
	MeanUS                         float64 // "time for request" mean
}

// Requests is the streams answered, whatever their status.
func (s Summary) Requests() int64 { return s.Done - s.Errored }

// StatusErrors is the streams answered with a status other than 2xx or 3xx.
func (s Summary) StatusErrors() int64 { return s.Failed - s.Errored }

// ReadErrors is the streams that got no answer and did not time out.
func (s Summary) ReadErrors() int64 { return max(0, s.Errored-s.Timeout) }

var (
	finishedRE = regexp.MustCompile(`(?m)^finished in ([0-9.]+)(us|ms|s|m|h), ([0-9.]+) req/s`)
	requestsRE = regexp.MustCompile(`(?m)^requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	statusRE   = regexp.MustCompile(`(?m)^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	protoRE    = regexp.MustCompile(`(?m)^Application protocol: (\S+)`)
	timeRE     = regexp.MustCompile(`(?m)^time for request:\s+(\S+)\s+(\S+)\s+(\S+)`)
)

// Parse reads h2load's human report (it has no machine-readable one). Lines it does not
// know are skipped, so that a version adding lines still parses; one of the lines it
// needs missing is an error, not a zero.
func Parse(out string) (Summary, error) {
	var s Summary
	m := finishedRE.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no \"finished in …, … req/s\" line")
	}
	d, err := time.ParseDuration(m[1] + m[2])
	if err != nil {
		return s, fmt.Errorf("finished in %s%s: %v", m[1], m[2], err)
	}
	s.Seconds = d.Seconds()
	s.ReqPerSec, _ = strconv.ParseFloat(m[3], 64)
	m = requestsRE.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no \"requests: … succeeded, … failed\" line")
	}
	ints := func(m []string, dst ...*int64) {
		for i, p := range dst {
			*p, _ = strconv.ParseInt(m[i+1], 10, 64)
		}
	}
	ints(m, &s.Total, &s.Done, &s.Succeeded, &s.Failed, &s.Errored, &s.Timeout)
	m = statusRE.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no \"status codes:\" line")
	}
	ints(m, &s.Status2xx, &s.Status3xx, &s.Status4xx, &s.Status5xx)
	if m := protoRE.FindStringSubmatch(out); m != nil {
		s.Protocol = m[1]
	}
	if m := timeRE.FindStringSubmatch(out); m != nil {
		if d, err := time.ParseDuration(m[3]); err == nil { // "123us", "1.23ms", "2.50s"
			s.MeanUS = float64(d) / float64(time.Microsecond)
		}
	}
	return s, nil
}

// Version is h2load's version line, or why there is none, for the report's tools.
func Version() string {
	out, err := exec.Command("h2load", "--version").CombinedOutput()
	if err != nil {
		return "h2load: " + err.Error()
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
