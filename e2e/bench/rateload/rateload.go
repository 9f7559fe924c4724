// Package rateload is the child-process side of the bench's fixed-rate scenarios (S7's
// burst, the noisy neighbour, hotupdate's load): phases one after the other, each with
// streams of requests sent concurrently at fixed rates, open loop, so a slow answer does
// not delay the next send. A stream's latencies run from a request's send to its answer;
// a send the generator made late is counted apart, not hidden.
//
// It knows nothing of gateways or scenarios: the bench says what to send where and runs
// it in a process of its own, pinned to the load CPUs.
package rateload

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Phase is a stretch of the run: its streams sent together for Duration.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	Streams  []Stream      `json:"streams"`
}

// Stream is requests for one path on one virtual host at a fixed rate.
type Stream struct {
	Name    string            `json:"name"`
	Host    string            `json:"host"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Rate    int               `json:"rate"` // requests per second
}

// Result is one stream's outcome in one phase. Latencies in µs, from the request's
// send to its answer; Late counts requests sent 5 ms or more behind schedule (the
// generator fell behind: its figures are then suspect).
type Result struct {
	Phase, Stream                      string
	Rate                               int
	Sent, OK, Limited, Overloaded, Bad int64
	Errors, Late                       int64
	P50, P90, P99, Max                 float64
	StatusSamples                      map[int]int64 `json:",omitempty"`
	Seconds                            float64
}

// Run sends phases one after the other to addr (host:port, plain HTTP/1.1), every stream
// of a phase concurrently at its rate, and returns each stream's Result in each phase, in
// order.
func Run(addr string, phases []Phase) []Result {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 8192, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		MaxIdleConnDuration: time.Minute}
	var out []Result
	for _, ph := range phases {
		var wg sync.WaitGroup
		res := make([]Result, len(ph.Streams))
		start := time.Now().Add(5 * time.Millisecond)
		for i, st := range ph.Streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = runStream(hc, addr, ph, st, start)
			}()
		}
		wg.Wait()
		out = append(out, res...)
	}
	return out
}

// runStream sends st's requests of phase ph from start on: each due at its slot of the
// rate, sent by the first worker free, and counts their answers by status.
func runStream(hc *fasthttp.HostClient, addr string, ph Phase, st Stream, start time.Time) Result {
	r := Result{Phase: ph.Name, Stream: st.Name, Rate: st.Rate, Seconds: ph.Duration.Seconds()}
	n := int(float64(st.Rate) * ph.Duration.Seconds())
	if n <= 0 {
		return r
	}
	lat := make([]float64, n)
	status := make([]int, n)
	var late atomic.Int64
	var wg sync.WaitGroup
	due := func(i int) time.Time {
		return start.Add(time.Duration(float64(i) / float64(st.Rate) * float64(time.Second)))
	}
	// A pool of workers takes the requests as they fall due: enough of them that the
	// loop stays open (a slow answer does not delay the next send) without a goroutine
	// per request.
	jobs := make(chan int, n)
	for range min(1024, st.Rate/20+32) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + addr + st.Path)
			req.UseHostHeader = true
			req.Header.SetHost(st.Host)
			for k, v := range st.Headers {
				req.Header.Set(k, v)
			}
			for i := range jobs {
				t0 := time.Now()
				if t0.Sub(due(i)) > 5*time.Millisecond {
					late.Add(1) // the generator (or its workers) fell behind
				}
				err := hc.DoTimeout(req, resp, 10*time.Second)
				lat[i] = float64(time.Since(t0)) / float64(time.Microsecond)
				if err != nil {
					status[i] = -1
					continue
				}
				status[i] = resp.StatusCode()
				resp.Reset()
			}
		}()
	}
	for i := 0; i < n; i++ {
		if d := time.Until(due(i)); d > time.Millisecond {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	r.Sent, r.Late = int64(n), late.Load()
	r.StatusSamples = map[int]int64{}
	for _, s := range status {
		switch {
		case s == 200:
			r.OK++
		case s == 429:
			r.Limited++
		case s == 503:
			r.Overloaded++
		case s < 0:
			r.Errors++
		default:
			r.Bad++
		}
		if s != 200 {
			r.StatusSamples[s]++
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	r.P50, r.P90, r.P99, r.Max = pct(0.50), pct(0.90), pct(0.99), lat[len(lat)-1]
	return r
}
