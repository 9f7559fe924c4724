package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"
)

// The cost of traces (-traces): after the plain runs of S1/S2…, the edge is restarted
// with TOLLGATE_OTEL_ENDPOINT pointing at a sink in this process, which reads each OTLP
// export and discards it, so the CPU measured is the edge's own (spans made, batched,
// encoded and sent), and the scenarios are measured again at each sample rate. The rows
// are labelled "tollgate (traces 1%)" beside the plain "tollgate" rows.

// traceSink is an OTLP/HTTP receiver that answers every export with an empty success.
type traceSink struct {
	url     string
	exports atomic.Int64
	bytes   atomic.Int64
}

func (b *bench) traceSink() (*traceSink, error) {
	if b.sink != nil {
		return b.sink, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &traceSink{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse is zero bytes
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Clean.Add(func() { _ = srv.Close() })
	b.sink = s
	return s, nil
}

// parseTraceSamples reads -traces: "off" or sample rates from 0 to 1 (0.01 is 1%).
func parseTraceSamples(v string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(v) {
		if f == "off" {
			continue
		}
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || p < 0 || p > 1 {
			return nil, fmt.Errorf("-traces: %q is not off or a sample rate from 0 to 1", f)
		}
		out = append(out, p)
	}
	return out, nil
}

func traceLabel(p float64) string {
	return "tollgate (traces " + strings.TrimSuffix(strconv.FormatFloat(p*100, 'f', 2, 64), ".00") + "%)"
}

// traceRuns measures the HTTP scenarios again with the edge exporting traces at each of
// b.traceSamples, procs as the plain run. extra is the edge's environment of that run.
func (b *bench) traceRuns(ctx context.Context, st *harness.Stack, procs int, cpus string, extra []string, scs []*perfScenario, rep *report) error {
	if len(b.traceSamples) == 0 {
		return nil
	}
	sink, err := b.traceSink()
	if err != nil {
		return err
	}
	for _, p := range b.traceSamples {
		st.StopEdge()
		env := append(append([]string(nil), extra...),
			"TOLLGATE_OTEL_ENDPOINT="+sink.url, "TOLLGATE_OTEL_SAMPLE="+strconv.FormatFloat(p, 'g', -1, 64))
		if err := st.StartEdge(ctx, procs, cpus, env...); err != nil {
			return err
		}
		b.perfAdmin = st.EdgeAdmin
		base := "http://" + st.EdgeAddr
		label := traceLabel(p)
		exports0, bytes0 := sink.exports.Load(), sink.bytes.Load()
		for _, sc := range scs {
			if sc.ws || sc.tls || sc.h2 {
				continue // on the plain listener with wrk only
			}
			if err := b.WaitServed(ctx, st.Edge, base, sc.host, sc.paths, sc.headers); err != nil {
				return fmt.Errorf("%s %s: %w", label, sc.id, err)
			}
			r, err := b.measure(ctx, "tollgate", procs, sc, st.Edge, base)
			if err != nil {
				return err
			}
			r.gateway = label
			rep.perf = append(rep.perf, r)
			plain := rep.find(sc.id, "tollgate", procs)
			delta := ""
			if plain != nil && plain.usPerReq > 0 {
				delta = fmt.Sprintf("  %+.1f%% CPU/req vs tracing off", 100*(r.usPerReq/plain.usPerReq-1))
			}
			fmt.Fprintf(os.Stderr, "bench: %-4s %-22s procs=%d  %8.0f req/s  p50 %s  p99 %s  %6.2f µs/req%s\n",
				sc.id, label, procs, r.load.qps(), figures.FmtUS(r.load.P50), figures.FmtUS(r.load.P99), r.usPerReq, delta)
		}
		fmt.Fprintf(os.Stderr, "bench: %s: the sink took %d exports, %d KiB\n", label, sink.exports.Load()-exports0, (sink.bytes.Load()-bytes0)>>10)
	}
	return nil
}
