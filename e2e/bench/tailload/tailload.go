// Package tailload is the child-process side of the bench's tail scenario: an open-loop
// HTTP/1.1 load generator that measures latency at a fixed rate free of coordinated
// omission, and the log-linear histogram it records into.
//
// A closed-loop client (wrk) sends a connection's next request only once the previous
// answer is in, so a stall of the gateway also stalls the requests that should have been
// sent meanwhile: their latency is never measured, and the tail looks shorter than a
// user would see it. Run is open loop: request j of the window is due at
// start + j/rate on connection j mod conns, whatever the answers do, and its latency is
// counted from that due time, not from when it was actually written. A request that waits
// because its connection's previous answer is late is counted as late by that wait (it
// is the gateway's delay); one the generator itself sent late, its connection free, is
// the generator's own lag, reported apart so a run whose load side could not keep up is
// flagged rather than blamed on the gateway. Latencies go to log-linear histograms
// (Hist, under 0.4% relative error) per connection, merged at the end, so the loop
// allocates nothing.
//
// It knows nothing of gateways or scenarios: the bench picks the rate and target and
// starts Run in a process of its own, pinned to the load CPUs.
package tailload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// histBits is the histogram's precision: values below 2^histBits are counted
// exactly, larger ones in buckets 1/2^(histBits-1) of their value wide, reported at
// the bucket's middle: at most 1/2^histBits (0.39%) from the true value.
const histBits = 8

const (
	histSub     = 1 << histBits         // exact buckets, and the start of the first shifted range
	histHalf    = histSub / 2           // buckets per doubling above that
	histBuckets = histSub + 55*histHalf // shifts 1..55: up to 2^63-1
)

// Hist is a log-linear histogram of non-negative int64 values (nanoseconds here).
// The zero value is empty and ready; it is not safe for concurrent use.
type Hist struct {
	counts [histBuckets]int64
	n      int64
	min    int64
	max    int64
}

func histIndex(v int64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - histBits // ≥ 1
	mant := v >> shift                        // in [histHalf, histSub)
	return histSub + (shift-1)*histHalf + int(mant-histHalf)
}

// histValue is the middle of bucket i (its value when i is exact).
func histValue(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	shift := (i-histSub)/histHalf + 1
	mant := int64((i-histSub)%histHalf + histHalf)
	lo := mant << shift
	return lo + (int64(1)<<shift)/2
}

// Record counts v; a negative v counts as 0.
func (h *Hist) Record(v int64) {
	v = max(v, 0)
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
}

// Merge adds o's counts to h.
func (h *Hist) Merge(o *Hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
}

// Count is the number of values recorded.
func (h *Hist) Count() int64 { return h.n }

// Max is the largest value recorded, exactly.
func (h *Hist) Max() int64 { return h.max }

// Quantile is the value at quantile q (0..1): the smallest recorded value's bucket at or
// above which a fraction q of the values lie, clamped to the exact min and max (q = 1:
// the max).
func (h *Hist) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return h.max
	}
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(max(histValue(i), h.min), h.max)
		}
	}
	return h.max
}

// Spec is one open-loop run: Rate requests per second over Conns connections to Addr,
// for Warmup (not recorded) and then Duration.
type Spec struct {
	Addr     string            `json:"addr"`
	Host     string            `json:"host"`
	Path     string            `json:"path"`
	Headers  map[string]string `json:"headers,omitempty"`
	Rate     int               `json:"rate"`
	Conns    int               `json:"conns"`
	Warmup   time.Duration     `json:"warmup"`
	Duration time.Duration     `json:"duration"`
}

// lateAfter is how far behind its due time the generator may send, its connection
// free, before the send counts as late: the generator, not the gateway, was behind.
const lateAfter = time.Millisecond

// Result is a run's outcome over the recorded window. Latencies in µs, from each
// request's due time to the end of its answer.
type Result struct {
	Rate    int     `json:"rate"`
	Conns   int     `json:"conns"`
	Seconds float64 `json:"seconds"`
	Sent    int64   `json:"sent"`
	OK      int64   `json:"ok"`     // 2xx
	Bad     int64   `json:"bad"`    // another status
	Errors  int64   `json:"errors"` // no answer (connection errors, timeouts)
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	P999    float64 `json:"p999"`
	Max     float64 `json:"max"`
	// Late counts sends the generator made lateAfter or more behind their due time
	// with the connection free; LagP99 and LagMax are its own lag over all such sends.
	Late   int64   `json:"late"`
	LagP99 float64 `json:"lag_p99"`
	LagMax float64 `json:"lag_max"`
	// Queued counts requests that waited for their connection's previous answer.
	Queued int64 `json:"queued"`
}

// SentRate is the rate achieved over the window.
func (r Result) SentRate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Seconds
}

// Behind says whether the generator itself fell behind: more than 1% of the sends late,
// or fewer than 99% of the requests due sent.
func (r Result) Behind() bool {
	due := float64(r.Rate) * r.Seconds
	return r.Sent > 0 && (float64(r.Late) > 0.01*float64(r.Sent) || float64(r.Sent) < 0.99*due)
}

// loadConn is one connection's loop state.
type loadConn struct {
	lat, lag       Hist
	sent, ok, bad  int64
	errors, late   int64
	queued         int64
	conn           net.Conn
	br             *bufio.Reader
	resp           fasthttp.Response
	readDeadlineAt time.Time
}

// Run is the child's side of a tail run: it sends spec's schedule, writes the Result as
// JSON on stdout and returns the process's exit status (2: a spec it cannot run).
func Run(spec *Spec) int {
	if spec.Rate < 1 || spec.Conns < 1 || spec.Duration <= 0 {
		fmt.Fprintln(os.Stderr, "loadgen: tail: rate, conns and duration must be positive")
		return 2
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\n", spec.Path, spec.Host)
	keys := make([]string, 0, len(spec.Headers))
	for k := range spec.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&req, "%s: %s\r\n", k, spec.Headers[k])
	}
	req.WriteString("\r\n")
	raw := req.Bytes()

	conns := make([]*loadConn, spec.Conns)
	for i := range conns {
		conns[i] = &loadConn{}
	}
	// Every connection is open before the first request falls due, so a dial is never
	// counted as latency.
	for _, c := range conns {
		if err := c.dial(spec.Addr); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen: tail:", err)
			return 1
		}
	}
	start := time.Now().Add(20 * time.Millisecond)
	measureFrom := start.Add(spec.Warmup)
	end := measureFrom.Add(spec.Duration)
	// Request j is due at start + j/rate on connection j mod conns.
	step := float64(time.Second) / float64(spec.Rate)
	var wg sync.WaitGroup
	for k, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(spec.Addr, raw, start, measureFrom, end, k, spec.Conns, step)
		}()
	}
	wg.Wait()

	var lat, lag Hist
	r := Result{Rate: spec.Rate, Conns: spec.Conns, Seconds: spec.Duration.Seconds()}
	for _, c := range conns {
		lat.Merge(&c.lat)
		lag.Merge(&c.lag)
		r.Sent += c.sent
		r.OK += c.ok
		r.Bad += c.bad
		r.Errors += c.errors
		r.Late += c.late
		r.Queued += c.queued
		if c.conn != nil {
			c.conn.Close()
		}
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	r.P50, r.P90, r.P99, r.P999 = us(lat.Quantile(0.50)), us(lat.Quantile(0.90)), us(lat.Quantile(0.99)), us(lat.Quantile(0.999))
	r.Max = us(lat.Max())
	r.LagP99, r.LagMax = us(lag.Quantile(0.99)), us(lag.Max())
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

func (c *loadConn) dial(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	c.conn = conn
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	c.readDeadlineAt = time.Time{}
	return nil
}

// loop sends connection k's share of the schedule: requests k, k+n, k+2n… each due at
// start + j×step, recording those due in [measureFrom, end).
func (c *loadConn) loop(addr string, raw []byte, start, measureFrom, end time.Time, k, n int, step float64) {
	for j := k; ; j += n {
		due := start.Add(time.Duration(float64(j) * step))
		if !due.Before(end) {
			return
		}
		now := time.Now()
		queued := false
		if d := due.Sub(now); d > 0 {
			time.Sleep(d)
			now = time.Now()
		} else {
			queued = true // the previous answer came after this request was due
		}
		measured := !due.Before(measureFrom)
		if measured {
			c.sent++
			if queued {
				c.queued++
			} else {
				lag := now.Sub(due)
				c.lag.Record(int64(lag))
				if lag >= lateAfter {
					c.late++
				}
			}
		}
		status, err := c.roundTrip(addr, raw, now)
		if !measured {
			continue
		}
		// Counted from the due time: the wait for a busy connection is the gateway's delay.
		c.lat.Record(int64(time.Since(due)))
		switch {
		case err != nil:
			c.errors++
		case status >= 200 && status < 300:
			c.ok++
		default:
			c.bad++
		}
	}
}

// roundTrip writes the request and reads its answer, redialling after an error (the
// request then counts as an error; the next one goes on a new connection).
func (c *loadConn) roundTrip(addr string, raw []byte, now time.Time) (int, error) {
	if c.conn == nil {
		if err := c.dial(addr); err != nil {
			time.Sleep(10 * time.Millisecond) // a refused connect must not spin
			return 0, err
		}
	}
	// One deadline move a few seconds, not one per request: the generator's own timers
	// would be the churn it measures.
	if c.readDeadlineAt.Sub(now) < 5*time.Second {
		c.readDeadlineAt = now.Add(10 * time.Second)
		_ = c.conn.SetDeadline(c.readDeadlineAt)
	}
	_, err := c.conn.Write(raw)
	if err == nil {
		c.resp.Reset()
		err = c.resp.Read(c.br)
	}
	if err != nil {
		c.conn.Close()
		c.conn = nil
		return 0, err
	}
	if c.resp.ConnectionClose() {
		c.conn.Close()
		c.conn = nil
	}
	return c.resp.StatusCode(), nil
}
