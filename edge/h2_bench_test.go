package edge_test

import (
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// BenchmarkHandlerH2 is BenchmarkHandler's loopback request on one route, over HTTP/1.1
// and over h2c with prior knowledge (many streams on a few connections, as h2load sends
// them): the difference is what the HTTP/2 door costs a request. Client and edge share
// the process, so cpu-ns/op holds the client's share too; -cpuprofile separates them.
func BenchmarkHandlerH2(b *testing.B) {
	upURL := benchUpstream(b)
	h := newHarness(b)
	acme := h.tenant("acme")
	h.route(acme, "open", []string{"/open"}, nil, tenants.AuthNone, upURL)
	h.e.Loaded()

	cpu := func(b *testing.B, run func()) {
		var ru0, ru1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		run()
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		d := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		b.ReportMetric(float64(d)/float64(b.N), "cpu-ns/op")
	}
	b.Run("h1", func(b *testing.B) {
		client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
		b.ReportAllocs()
		b.SetParallelism(8)
		cpu(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				req.SetRequestURI("/open/items/42")
				req.Header.SetHost("acme." + domain)
				for pb.Next() {
					if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Fatalf("%v %d", err, resp.StatusCode())
					}
				}
			})
		})
	})
	b.Run("h2c", func(b *testing.B) {
		client := h2cClient()
		b.ReportAllocs()
		b.SetParallelism(8)
		cpu(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest("GET", "http://"+h.public+"/open/items/42", nil)
				req.Host = "acme." + domain
				for pb.Next() {
					resp, err := client.Do(req)
					if err != nil || resp.StatusCode != 200 {
						b.Fatalf("%v %v", err, resp)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	})
}
