package edge_test

import (
	"bufio"
	"net"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"tollgate/edge"
	"tollgate/tenants"
)

// BenchmarkChainParallel is the whole request chain from many goroutines at once: host →
// tenant snapshot → route → key auth → the tenant's rate limit (never reached) → meter →
// proxy to a loopback upstream → response. Run it with -cpu 1,2,4,8 and -mutexprofile /
// -blockprofile to see whether anything on the request path serializes: no edge lock
// should carry a real share of either profile, and cpu-ns/op (the process's CPU time per
// request) should stay flat across -cpu values.
//
// conn=inmem reaches the edge over fasthttputil's in-memory listener, so the client side
// costs no syscalls and the figure is mostly the edge's own work (plus the upstream's
// loopback exchange); conn=tcp goes through the kernel like a real client and includes
// the edge's TCP-only connection wrapper. Each goroutine has its own keep-alive
// connection and writes and reads it directly, so the client takes no lock beyond the
// in-memory pipe's. allocs/op and cpu-ns/op count the client and the upstream too.
func BenchmarkChainParallel(b *testing.B) {
	upURL := benchUpstream(b)

	m := newMeter(b, nopSink{})
	h := newHarness(b, func(c *edge.Config) { c.Meter = m })
	// A limit far above what the benchmark can send: counted on every request, never
	// refusing one.
	acme := h.limitedTenant("acme", &tenants.PlatformPlan{Name: "big", RateLimit: &tenants.RateLimit{RPS: 1_000_000, Burst: 1_000_000}})
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, upURL)
	h.put(&tenants.Consumer{ID: "c", TenantID: acme, Name: "c"})
	key := h.key(acme, "c", "k")
	h.e.Loaded()
	if r := h.get("acme."+domain, "/keyed/items/42", "X-API-Key: "+key); r.status != 200 || r.header.Get("RateLimit-Limit") == "" {
		b.Fatalf("setup: %s %v, want 200 with the limit's headers", r, r.header)
	}

	// The edge serves the in-memory listener beside the harness's TCP one; the harness's
	// Shutdown closes both.
	mem := fasthttputil.NewInmemoryListener()
	go func() { _ = h.e.Serve(mem, nil) }()
	client := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}

	for _, c := range []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"conn=inmem", func() (net.Conn, error) { return mem.DialWithLocalAddr(client) }},
		{"conn=tcp", func() (net.Conn, error) { return net.Dial("tcp", h.public) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				conn, err := c.dial()
				if err != nil {
					b.Error(err)
					return
				}
				defer conn.Close()
				bw, br := bufio.NewWriter(conn), bufio.NewReader(conn)
				var req fasthttp.Request
				var resp fasthttp.Response
				req.SetRequestURI("/keyed/items/42")
				req.Header.SetHost("acme." + domain)
				req.Header.Set("User-Agent", "wrk/4.2")
				req.Header.Set("X-API-Key", key)
				for pb.Next() {
					if err := req.Write(bw); err != nil {
						b.Error(err)
						return
					}
					if err := bw.Flush(); err != nil {
						b.Error(err)
						return
					}
					if err := resp.Read(br); err != nil || resp.StatusCode() != 200 {
						b.Errorf("%v %d %s", err, resp.StatusCode(), resp.Body())
						return
					}
				}
			})
			// The process's CPU time per request (client, edge and upstream together):
			// unlike ns/op it does not depend on how many requests are in flight, so it
			// stays flat across -cpu values when nothing serializes or spins.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the user+system time this process has used, in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
