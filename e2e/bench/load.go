package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// loadResult is wrk's summary, printed as JSON by the done() hook of the generated script
// rather than scraped from its human output.
type loadResult struct {
	Requests   int64   `json:"requests"`
	DurationUS int64   `json:"duration_us"`
	Connect    int64   `json:"connect"`
	Read       int64   `json:"read"`
	Write      int64   `json:"write"`
	Status     int64   `json:"status"` // responses not 2xx or 3xx
	Timeout    int64   `json:"timeout"`
	P50        float64 `json:"p50"` // µs
	P90        float64 `json:"p90"`
	P99        float64 `json:"p99"`
	Max        float64 `json:"max"`
}

func (r loadResult) qps() float64 {
	if r.DurationUS == 0 {
		return 0
	}
	return float64(r.Requests) / (float64(r.DurationUS) / 1e6)
}

func (r loadResult) socketErrors() int64 { return r.Connect + r.Read + r.Write + r.Timeout }

// loadTarget is what wrk requests: one URL with a virtual host and headers, and for a
// POST (S3) its method and body. All of it is static, so wrk formats the request once.
type loadTarget struct {
	url     string
	host    string
	headers map[string]string
	method  string
	body    string
}

const wrkDone = `
function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format(
		'BENCHJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"max":%d}\n',
		summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
		latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
`

// runWrk runs wrk on the load CPU for d and returns its summary. Only a done() hook is
// scripted, so wrk stays on its C fast path for every request.
func runWrk(ctx context.Context, b *bench, t loadTarget, d time.Duration, tag string) (loadResult, error) {
	var script strings.Builder
	fmt.Fprintf(&script, "wrk.headers[%q] = %q\n", "Host", t.host)
	keys := make([]string, 0, len(t.headers))
	for k := range t.headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&script, "wrk.headers[%q] = %q\n", k, t.headers[k])
	}
	if t.method != "" {
		fmt.Fprintf(&script, "wrk.method = %q\n", t.method)
	}
	if t.body != "" {
		fmt.Fprintf(&script, "wrk.body = %q\n", t.body)
	}
	script.WriteString(wrkDone)
	path := filepath.Join(b.Dir, "wrk-"+tag+".lua")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		return loadResult{}, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	argv := []string{"taskset", "-c", b.LoadCPUs, "wrk",
		"-t", fmt.Sprint(b.threads), "-c", fmt.Sprint(b.conns), "-d", fmt.Sprintf("%ds", secs),
		"--timeout", "5s", "--latency", "-s", path, t.url}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	logPath := filepath.Join(b.Dir, "wrk-"+tag+".log")
	_ = os.WriteFile(logPath, out, 0o644)
	if err != nil {
		if ctx.Err() != nil {
			return loadResult{}, fmt.Errorf("wrk %s: %w", tag, ctx.Err())
		}
		return loadResult{}, fmt.Errorf("wrk %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if js, ok := strings.CutPrefix(sc.Text(), "BENCHJSON "); ok {
			var r loadResult
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				return r, fmt.Errorf("wrk summary %q: %v", js, err)
			}
			return r, nil
		}
	}
	return loadResult{}, fmt.Errorf("wrk printed no summary:\n%s", out)
}

// closedSpec is a closed-loop run of the bench's own client (S9): Conns connections,
// each sending its next request when the previous answer arrived, for Duration.
type closedSpec struct {
	Addr     string        `json:"addr"`
	TLS      bool          `json:"tls"`
	Host     string        `json:"host"` // Host header and, over TLS, SNI
	Path     string        `json:"path"`
	Conns    int           `json:"conns"`
	Duration time.Duration `json:"duration"`
	NewConn  bool          `json:"new_conn"` // Connection: close on every request
}

// runClosed runs spec in a child process pinned to the load CPUs, as wrk would be.
func (b *bench) runClosed(ctx context.Context, spec closedSpec, tag string) (loadResult, error) {
	return runLoadgenChild[loadResult](ctx, b, lgSpec{Closed: &spec}, spec.Duration+30*time.Second, "bench client", "client", tag)
}

// runClosedLoop is the child's side of runClosed. Its summary has wrk's shape, so the
// report treats both alike: errors count as read errors, non-2xx answers as status.
func runClosedLoop(spec *closedSpec) int {
	scheme := "http://"
	hc := &fasthttp.HostClient{Addr: spec.Addr, MaxConns: spec.Conns, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, MaxIdleConnDuration: time.Minute}
	if spec.TLS {
		scheme = "https://"
		hc.IsTLS = true
		hc.TLSConfig = &tls.Config{
			ServerName: spec.Host,
			MinVersion: tls.VersionTLS13,
			// X25519 alone: Go's default would offer its post-quantum hybrid, which a Go
			// server takes and nginx's OpenSSL cannot, so the gateways would not do the
			// same key exchange.
			CurvePreferences: []tls.CurveID{tls.X25519},
			// Verifying costs only the client's CPU; the gateways' work is the same.
			InsecureSkipVerify: true,
		}
	}
	var (
		wg                    sync.WaitGroup
		requests, bad, errors atomic.Int64
		mu                    sync.Mutex
		lat                   []float64
	)
	start := time.Now()
	end := start.Add(spec.Duration)
	for range spec.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(scheme + spec.Addr + spec.Path)
			req.UseHostHeader = true
			req.Header.SetHost(spec.Host)
			if spec.NewConn {
				req.SetConnectionClose()
			}
			mine := make([]float64, 0, 1<<14)
			for time.Now().Before(end) {
				t0 := time.Now()
				err := hc.DoTimeout(req, resp, 10*time.Second)
				if err != nil {
					errors.Add(1)
					time.Sleep(time.Millisecond) // a refused connect must not spin
					continue
				}
				mine = append(mine, float64(time.Since(t0))/float64(time.Microsecond))
				if c := resp.StatusCode(); c < 200 || c >= 400 {
					bad.Add(1)
				}
				requests.Add(1)
				resp.Reset()
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := loadResult{Requests: requests.Load(), DurationUS: time.Since(start).Microseconds(), Status: bad.Load(), Read: errors.Load()}
	if len(lat) > 0 {
		slices.Sort(lat)
		pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		r.P50, r.P90, r.P99, r.Max = pct(0.50), pct(0.90), pct(0.99), lat[len(lat)-1]
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}
