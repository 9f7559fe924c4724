package edge_test

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"golang.org/x/sync/errgroup"
)

// BenchmarkFunctionCost is what a function adds to a whole request at the edge, measured
// so that a shared machine's drift cancels out: each op is one round in which a route
// without functions, one with the no-op filter and one with the header-adding filter
// each serve a batch of requests back to back, the order turning every round, and the
// process's CPU time is read around every batch. A round's figure is a variant's CPU per
// request over the plain route's in the same round, so a neighbour that slows the machine
// for a while slows both sides of the ratio alike. The reported ratios are the medians
// over the rounds (run -benchtime 100x or more), the ns figures each variant's median
// CPU per request and its median excess over the plain route's.
//
// The client reaches the edge over fasthttp's in-memory listener, so no client syscall
// dilutes the ratio; the upstream is a loopback fasthttp server in this process, as
// BenchmarkHandler's. Both count in every variant alike, so the excess is the edge's
// own, and the ratio is below what the bench's S1f ÷ S1 would read on the same machine
// (whose S1 has no in-process client or upstream in its denominator) only by the
// client's share. conns=1 sends one request at a time; conns=64 keeps 64 in flight per
// variant, as the bench's wrk does. Run with -cpu 1 for the one-core figure.
func BenchmarkFunctionCost(b *testing.B) {
	const batch = 640
	h := functionBenchRoutes(b)

	mem := fasthttputil.NewInmemoryListener()
	go func() { _ = h.e.Serve(mem, nil) }()

	for _, conns := range []int{1, 64} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			functionCostRounds(b, mem, conns, batch)
		})
	}
}

// client is one keep-alive connection of BenchmarkFunctionCost's.
type client struct {
	bw   *bufio.Writer
	br   *bufio.Reader
	req  fasthttp.Request
	resp fasthttp.Response
}

// functionCostRounds is BenchmarkFunctionCost over conns connections per variant, each
// sending batch/conns requests of every batch, one at a time, as wrk's connections do.
func functionCostRounds(b *testing.B, mem *fasthttputil.InmemoryListener, conns, batch int) {
	peer := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}
	type variant struct {
		name    string
		clients []*client
		perOp   []float64 // CPU ns per request, per round
	}
	vs := []*variant{{name: "open"}, {name: "noop"}, {name: "headers"}}
	for _, v := range vs {
		for range conns {
			c, err := mem.DialWithLocalAddr(peer)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			cl := &client{bw: bufio.NewWriter(c), br: bufio.NewReader(c)}
			cl.req.SetRequestURI("/" + v.name + "/items/42")
			cl.req.Header.SetHost("acme." + domain)
			cl.req.Header.Set("User-Agent", "wrk/4.2")
			v.clients = append(v.clients, cl)
		}
	}
	serve := func(v *variant, n int) {
		var g errgroup.Group
		for _, cl := range v.clients {
			g.Go(func() error {
				for range n / len(v.clients) {
					if err := cl.req.Write(cl.bw); err != nil {
						return err
					}
					if err := cl.bw.Flush(); err != nil {
						return err
					}
					if err := cl.resp.Read(cl.br); err != nil {
						return err
					}
					if cl.resp.StatusCode() != 200 {
						return fmt.Errorf("%s: %d %s", v.name, cl.resp.StatusCode(), cl.resp.Body())
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	for _, v := range vs {
		serve(v, batch) // warm: instances started, connections to the upstream open
	}

	round := 0
	for b.Loop() {
		order := slices.Clone(vs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			cpu0 := processCPU(b)
			serve(v, batch)
			v.perOp = append(v.perOp, float64(processCPU(b)-cpu0)/float64(batch/conns*conns))
		}
		round++
	}

	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	open := vs[0].perOp
	b.ReportMetric(median(open), "open-cpu-ns/req")
	for _, v := range vs[1:] {
		ratios, excess := make([]float64, len(open)), make([]float64, len(open))
		for i := range open {
			ratios[i], excess[i] = v.perOp[i]/open[i], v.perOp[i]-open[i]
		}
		b.ReportMetric(median(v.perOp), v.name+"-cpu-ns/req")
		b.ReportMetric(median(excess), v.name+"-excess-ns/req")
		b.ReportMetric(median(ratios), v.name+"÷open")
	}
	b.ReportMetric(0, "ns/op")
}
