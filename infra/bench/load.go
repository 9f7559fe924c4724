package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
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

// loadTarget is what wrk requests: one URL with a virtual host and headers.
type loadTarget struct {
	url     string
	host    string
	headers map[string]string
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
	script.WriteString(wrkDone)
	path := filepath.Join(b.dir, "wrk-"+tag+".lua")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		return loadResult{}, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	argv := []string{"taskset", "-c", b.loadCPUs, "wrk",
		"-t", fmt.Sprint(b.threads), "-c", fmt.Sprint(b.conns), "-d", fmt.Sprintf("%ds", secs),
		"--timeout", "5s", "--latency", "-s", path, t.url}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	logPath := filepath.Join(b.dir, "wrk-"+tag+".log")
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
