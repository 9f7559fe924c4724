package edge_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge"
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

	b.Run("h1", func(b *testing.B) {
		client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
		b.ReportAllocs()
		b.SetParallelism(8)
		benchCPU(b, func() {
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
	b.Run("h2c", func(b *testing.B) { benchH2c(b, h.public, "/open/items/42") })
}

// benchH2c sends GETs of path to tenant acme at addr over h2c with prior knowledge, from
// 8 goroutines per CPU sharing one connection pool, as h2load's streams do.
func benchH2c(b *testing.B, addr, path string) {
	client := h2cClient()
	b.ReportAllocs()
	b.SetParallelism(8)
	benchCPU(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
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
}

// BenchmarkH2HeaderTable is BenchmarkHandlerH2's h2c request with the edge's HPACK
// dynamic table off (the default) and at Go's 4096 bytes, to an HTTP/1.1 upstream
// ("door": the answers' header blocks) and to an HTTP/2 one ("upstream": the requests'
// too). cpu-ns/op is the whole process: the client's and the h2c upstream's decoders,
// which read the edge's blocks, count on both sides.
func BenchmarkH2HeaderTable(b *testing.B) {
	h1URL, h2URL := benchUpstream(b), benchH2Upstream(b)
	tables := []uint32{0, 4096}
	edges := make([]*harness, len(tables))
	for i, table := range tables {
		h := newHarness(b, func(c *edge.Config) { c.HTTP2HeaderTable = table })
		acme := h.tenant("acme")
		h.route(acme, "door", []string{"/door"}, nil, tenants.AuthNone, h1URL)
		h.put(&tenants.Route{ID: "upstream", TenantID: acme, Name: "upstream", Paths: []string{"/upstream"},
			Upstream: tenants.Upstream{Protocol: tenants.ProtocolH2, Targets: []tenants.Target{{URL: h2URL}}}})
		h.e.Loaded()
		edges[i] = h
	}
	for _, path := range []string{"door", "upstream"} {
		for i, table := range tables {
			h := edges[i]
			b.Run(fmt.Sprintf("%s/table=%d", path, table), func(b *testing.B) {
				benchH2c(b, h.public, "/"+path+"/items/42")
			})
		}
	}
}

// benchCPU reports the process's CPU time per op while run runs, as cpu-ns/op.
func benchCPU(b *testing.B, run func()) {
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	run()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	d := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(d)/float64(b.N), "cpu-ns/op")
}

// benchH2Upstream is benchUpstream over h2c with prior knowledge: Go's HTTP/2 server.
func benchH2Upstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	body := []byte(`{"hello":"world"}`)
	up := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	go func() { _ = up.Serve(ln) }()
	b.Cleanup(func() { _ = up.Close() })
	return "http://" + ln.Addr().String()
}
