package harness

import (
	"bufio"
	"strconv"
	"strings"
)

// ScrapeMetrics reads an edge's /metrics at admin into a value per metric name, the
// series of a labelled metric summed; empty when it cannot.
func (b *Env) ScrapeMetrics(admin string) map[string]float64 {
	out := map[string]float64{}
	resp, err := b.HTTP.Get("http://" + admin + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if name, v, ok := MetricLine(sc.Text()); ok {
			out[name] += v
		}
	}
	return out
}

// MetricLine splits a sample line of the Prometheus text format into its name and value.
func MetricLine(line string) (string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", 0, false
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		j := strings.LastIndexByte(rest, '}')
		if j < 0 {
			return "", 0, false
		}
		rest = rest[j+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return name, v, err == nil
}
