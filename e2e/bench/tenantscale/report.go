package tenantscale

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/e2e/bench/figures"
)

// windowRates is calls per second over the first k and the last k of done, the sorted
// times (since the start) at which the calls were answered: the first window from the
// start, the last from the answer before it. With k calls or fewer both are the whole run.
func windowRates(done []time.Duration, k int) (first, last float64) {
	n := len(done)
	if n == 0 || k < 1 {
		return 0, 0
	}
	k = min(k, n)
	rate := func(calls int, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(calls) / d.Seconds()
	}
	first = rate(k, done[k-1])
	if n == k {
		return first, first
	}
	return first, rate(k, done[n-1]-done[n-1-k])
}

// spread is m indices spread evenly over [from, to); m must not exceed to-from.
func spread(from, to, m int) []int {
	out := make([]int, m)
	for i := range m {
		out[i] = from + i*(to-from)/m
	}
	return out
}

// Parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func Parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range min(max(1, workers), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errOnce.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// readMem is pid's memory from /proc/PID/status; zeros when it cannot be read.
func readMem(pid int) Mem {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Mem{}
	}
	return parseStatus(string(b))
}

// parseStatus reads VmRSS, RssAnon and RssFile (kB) from the text of /proc/PID/status.
func parseStatus(text string) Mem {
	var m Mem
	for _, line := range strings.Split(text, "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &m.RSS
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		if f := strings.Fields(v); len(f) > 0 {
			*dst, _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	return m
}

// num is n with a comma between thousands.
func num(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// rate is a rate per second, rounded, with a comma between thousands.
func rate(x float64) string { return num(int(x + 0.5)) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func fmtMem(m Mem) string {
	if m.RSS <= 0 {
		return "-"
	}
	return fmt.Sprintf("%s (anon %.1f, file %.1f)", figures.FmtKB(m.RSS), float64(m.Anon)/1024, float64(m.File)/1024)
}

func fmtLat(l figures.LatStats) string {
	return fmt.Sprintf("p50 %s, p99 %s, max %s", figures.FmtDur(l.P50), figures.FmtDur(l.P99), figures.FmtDur(l.Max))
}

func fmtLag(w Writes) string {
	if w.LagErr != "" {
		return w.LagErr
	}
	return figures.FmtDur(w.Lag)
}

// Markdown renders the run as a table of figures, each beside its target.
func (r *Result) Markdown(s *strings.Builder) {
	if r == nil {
		return
	}
	c := r.Set
	env := c.EdgeEnv
	if env == "" {
		env = "none: the default, in-memory config"
	}
	fmt.Fprintf(s, "## Scale: %s tenants × %d routes (%s)\n\n", num(c.Tenants), c.Routes, r.Date.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(s, "One stack: %s single route POSTs into one tenant, %s tenants created, then one PUT /v1/tenants/{slug}/config of %d routes each, "+
		"%d concurrent api clients in each phase, no edge running. Relay lag: from the 200 answered last in a phase to what it wrote being in the "+
		"config bucket (polled every 1 ms). Then an edge (GOMAXPROCS=%d, settings of -scale-edge-env: %s) started against the filled bucket, "+
		"stopped once its store held the whole bucket, and started again with its local state directory (TOLLGATE_METER_SPOOL_DIR) kept; the restarted edge serves the rest. "+
		"RSS is read %s after ready and after each share of tenants served (one call each through the public listener, Host <slug>.localhost); "+
		"the first requests are of tenants the edge had not served since it started, one at a time over one kept-alive connection, "+
		"each followed by the same call again.\n\n",
		num(c.Posts), num(c.Tenants), c.Routes, c.Clients, r.Procs, env, c.Settle)
	s.WriteString("| figure | measured | target |\n|---|---|---|\n")
	row := func(figure, measured, target string) { fmt.Fprintf(s, "| %s | %s | %s |\n", figure, measured, target) }
	if w := r.Posts; w.Calls > 0 {
		row(fmt.Sprintf("POST /v1/tenants/{slug}/routes, %s into one tenant", num(w.Calls)),
			fmt.Sprintf("%s routes/s (per call %s)", rate(w.Rate()), fmtLat(w.Lat)), fmt.Sprintf("≥ %s/s: %s", num(TargetPostRate), verdict(w.Rate() >= TargetPostRate)))
		if w.Calls > rateWindow { // else both windows are the whole run
			change := "holds"
			if w.First > 0 && w.Last < 0.9*w.First {
				change = fmt.Sprintf("falls by %.0f%%", 100*(1-w.Last/w.First))
			}
			row(fmt.Sprintf("… the first and the last %s answered", num(rateWindow)), fmt.Sprintf("%s/s, %s/s: %s", rate(w.First), rate(w.Last), change), "")
		}
		row("… relay lag after the last POST", fmtLag(w), "")
	}
	if w := r.Tenants; w.Calls > 0 {
		row(fmt.Sprintf("POST /v1/tenants, %s tenants", num(w.Calls)), fmt.Sprintf("%s tenants/s (per call %s)", rate(w.Rate()), fmtLat(w.Lat)), "")
		row("… relay lag after the last tenant", fmtLag(w), "")
	}
	if w := r.Docs; w.Calls > 0 {
		row(fmt.Sprintf("PUT /v1/tenants/{slug}/config, %s documents of %d routes", num(w.Calls), c.Routes),
			fmt.Sprintf("%s routes/s, %s documents/s (per document %s)", rate(w.Rate()), rate(float64(w.Calls)/w.Elapsed.Seconds()), fmtLat(w.Lat)),
			fmt.Sprintf("≥ %s routes/s: %s", num(TargetDocRate), verdict(w.Rate() >= TargetDocRate)))
		row("… relay lag after the last document", fmtLag(w), "")
	}
	for _, x := range []struct {
		what string
		st   Start
	}{{"fresh edge", r.Fresh}, {"edge restarted, its state directory kept", r.Restart}} {
		if x.st.Ready > 0 {
			row(x.what+": exec → /readyz", figures.FmtDur(x.st.Ready), fmt.Sprintf("< %s: %s", TargetReady, verdict(x.st.Ready < TargetReady)))
			row("… its RSS then", fmtMem(x.st.Mem), "")
		}
		if x.st.Backfilled > 0 {
			row("… its store holding the whole bucket (backfilled behind ready): exec →", figures.FmtDur(x.st.Backfilled), "")
			row("… its RSS then", fmtMem(x.st.BackfilledMem), "")
		}
	}
	if r.Idle.RSS > 0 {
		row(fmt.Sprintf("idle RSS, %s after ready", c.Settle), fmtMem(r.Idle), fmt.Sprintf("< %d MiB: %s", TargetIdleKB/1024, verdict(r.Idle.RSS < TargetIdleKB)))
	}
	for _, sh := range r.Shares {
		note := ""
		if sh.Failed > 0 {
			note = fmt.Sprintf(" (%d calls not answered 200)", sh.Failed)
		}
		row(fmt.Sprintf("RSS after serving %d%% (%s tenants), %s later", sh.Pct, num(sh.Tenants), c.Settle), fmtMem(sh.Mem)+note, "")
	}
	if r.Cold.N > 0 {
		note := ""
		if r.ColdFailed > 0 {
			note = fmt.Sprintf("; %d tenants not answered 200, left out", r.ColdFailed)
		}
		row(fmt.Sprintf("first request of a tenant not served since start (%d sampled)", r.Cold.N), fmtLat(r.Cold)+note,
			fmt.Sprintf("p99 < %d ms: %s", TargetColdFirst/time.Millisecond, verdict(r.Cold.P99 < TargetColdFirst)))
		row("… the same tenants' second request", fmtLat(r.Second), "")
	}
	if r.Change.N > 0 {
		row(fmt.Sprintf("route change, api's 200 → the edge's first answer from the new upstream (%d changes, polled every 250 µs)", r.Change.N),
			fmtLat(r.Change)+fmt.Sprintf("; PUT → 200 p50 %s; %d polls not answered 200", figures.FmtDur(r.ChangeAPI.P50), r.ChangeFailed), "")
	}
	s.WriteString("\n")
}
