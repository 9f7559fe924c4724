package tailload

import (
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// The histogram's quantiles stay within 0.4% of the exact ones, over values spread across
// many orders of magnitude, and its max is exact.
func TestHistAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Hist
	vals := make([]int64, 0, 200_000)
	for range 200_000 {
		v := int64(math.Exp(rng.Float64() * 25)) // 1 ns … ~72 s, log-uniform
		vals = append(vals, v)
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
		rank := max(int(math.Ceil(q*float64(len(vals)))), 1)
		want := vals[rank-1]
		got := h.Quantile(q)
		if d := math.Abs(float64(got-want)) / float64(max(want, 1)); d > 1.0/256 && got != want {
			t.Errorf("q%.4f = %d, want %d (error %.3f%%)", q, got, want, d*100)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Count() != int64(len(vals)) {
		t.Errorf("max %d count %d, want %d and %d", h.Max(), h.Count(), vals[len(vals)-1], len(vals))
	}
}

// Every bucket's value maps back to that bucket, buckets are in order, and the extremes
// (0, small exact values, the largest int64) fit.
func TestHistBuckets(t *testing.T) {
	prev := int64(-1)
	for i := range histBuckets {
		v := histValue(i)
		if v <= prev {
			t.Fatalf("bucket %d value %d not above bucket %d's %d", i, v, i-1, prev)
		}
		if j := histIndex(v); j != i {
			t.Fatalf("bucket %d value %d maps to bucket %d", i, v, j)
		}
		prev = v
	}
	var h Hist
	for _, v := range []int64{-5, 0, 1, 255, 256, math.MaxInt64} {
		h.Record(v)
	}
	if h.Quantile(0) != 0 || h.Max() != math.MaxInt64 || h.Quantile(1) != math.MaxInt64 {
		t.Errorf("extremes: q0 %d, q1 %d, max %d", h.Quantile(0), h.Quantile(1), h.Max())
	}
	var a, b Hist
	a.Record(10)
	b.Record(1000)
	a.Merge(&b)
	a.Merge(&Hist{})
	if a.Count() != 2 || a.Quantile(0) != 10 || a.Max() != 1000 {
		t.Errorf("merge: count %d min %d max %d", a.Count(), a.Quantile(0), a.Max())
	}
}

// The generator counts latency from each request's due time: one stall of the server
// shows in every request due during it, not only in the one the server held (which a
// closed-loop client would report, coordinated omission), and it keeps to its rate.
func TestGeneratorNoCoordinatedOmission(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		// The 60th request (0.3 s in at 200/s on one connection) is held 200 ms.
		if n.Add(1) == 60 {
			time.Sleep(200 * time.Millisecond)
		}
		c.SetBodyString("ok")
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()

	c := &loadConn{}
	if err := c.dial(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	raw := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	start := time.Now().Add(10 * time.Millisecond)
	end := start.Add(time.Second)
	c.loop(ln.Addr().String(), raw, start, start, end, 0, 1, float64(time.Second)/200)
	c.conn.Close()

	if c.sent != 200 || c.ok != 200 || c.errors != 0 || c.bad != 0 {
		t.Fatalf("sent %d ok %d errors %d bad %d, want 200 answered", c.sent, c.ok, c.errors, c.bad)
	}
	// The stall delays the ~40 requests due during its 200 ms: 20% of the run waits,
	// so p90 is well above a millisecond, and about 40 requests counted as queued.
	if p90 := c.lat.Quantile(0.90); p90 < int64(20*time.Millisecond) {
		t.Errorf("p90 %v: the stall's delay to the requests due during it was not counted", time.Duration(p90))
	}
	if c.queued < 30 {
		t.Errorf("queued %d, want the ~40 requests due during the stall", c.queued)
	}
	if mx := c.lat.Max(); mx < int64(190*time.Millisecond) {
		t.Errorf("max %v, want the stall's 200 ms", time.Duration(mx))
	}
}

// A refused connection is an error per request, never a crash or a spin, and the
// result says so.
func TestGeneratorErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	c := &loadConn{}
	if err := c.dial(addr); err != nil {
		t.Fatal(err)
	}
	ln.Close()
	start := time.Now()
	c.loop(addr, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), start, start, start.Add(100*time.Millisecond), 0, 1, float64(time.Second)/100)
	if c.sent == 0 || c.errors != c.sent {
		t.Errorf("sent %d errors %d: every request to a closed listener is an error", c.sent, c.errors)
	}
}

func TestResultBehind(t *testing.T) {
	ok := Result{Rate: 1000, Seconds: 1, Sent: 1000, Late: 5}
	if ok.Behind() {
		t.Error("0.5% late flagged")
	}
	if late := (Result{Rate: 1000, Seconds: 1, Sent: 1000, Late: 20}); !late.Behind() {
		t.Error("2% late not flagged")
	}
	if short := (Result{Rate: 1000, Seconds: 1, Sent: 900}); !short.Behind() {
		t.Error("10% of the schedule unsent not flagged")
	}
}
