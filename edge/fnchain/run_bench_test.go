package fnchain

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
	"tollgate/tenants"
)

// BenchmarkRun is one request's pass through a route's chain, the edge's side of it:
// Start, the request callbacks, the response callbacks and Finish over a fasthttp request
// and response, with no network. It is what a route's functions add to a request, on one
// goroutine; cpu-ns/op counts every thread of the process (the watchdog's too).
// "+cap" takes a slot of the tenant's cap for each run of callbacks even where it cannot
// bind (function.SetSkipIdleCap(false)): run it at -cpu 1, where the default cap is one.
// "+nolast" ends each context in a run of its own at Finish
// (function.SetEndWithLastCallback(false)). "+locked" begins and ends each run under a
// lock (function.SetLockFreeRuns(false)), "+nopool" allocates each request's Call
// (function.SetReuseCalls(false)), "+ctxvalue" runs guest calls with a context.WithValue
// (function.SetOwnContext(false)), "+unmerged" enters the guest once per callback
// (function.SetMergedEntries(false)).
func BenchmarkRun(b *testing.B) {
	variants := []string{"", "+cap", "+nolast", "+locked", "+nopool", "+ctxvalue", "+unmerged"}
	names := []string{functiontest.WatHeaders}
	for _, v := range variants {
		names = append(names, functiontest.WatNoop+v)
	}
	for _, name := range names {
		b.Run(name, func(b *testing.B) {
			guest, variant, _ := strings.Cut(name, "+")
			function.SetSkipIdleCap(variant != "cap")
			defer function.SetSkipIdleCap(true)
			function.SetEndWithLastCallback(variant != "nolast")
			defer function.SetEndWithLastCallback(true)
			function.SetLockFreeRuns(variant != "locked")
			defer function.SetLockFreeRuns(true)
			function.SetReuseCalls(variant != "nopool")
			defer function.SetReuseCalls(true)
			function.SetOwnContext(variant != "ctxvalue")
			defer function.SetOwnContext(true)
			function.SetMergedEntries(variant != "unmerged")
			defer function.SetMergedEntries(true)
			mod := functiontest.Build(b, guest)
			dir := b.TempDir()
			sha := digest(mod)
			if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "modules", sha+".wasm"), mod, 0o644); err != nil {
				b.Fatal(err)
			}
			h, err := New(context.Background(), Config{CacheDir: dir, Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = h.Close(context.Background()) })
			c := h.Build(RouteSpec{TenantID: "t", TenantLabel: "t", RouteID: "r",
				Functions: []tenants.FunctionRef{{Name: guest, SHA256: sha}}})
			if c.Unavailable != nil {
				b.Fatal(c.Unavailable)
			}
			ctx := &fasthttp.RequestCtx{}
			ctx.Request.SetRequestURI("/orders/42")
			ctx.Request.Header.SetHost("acme.example")
			ctx.Request.Header.Set("User-Agent", "wrk/4.2")
			ctx.Request.Header.Set("Accept", "*/*")
			props := Props{RouteID: "r", RequestID: []byte("0123456789abcdef"), Host: []byte("acme.example")}
			b.ReportAllocs()
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			for b.Loop() {
				ctx.Request.Header.Del("x-function")
				ctx.Response.Reset()
				ctx.Response.Header.SetContentType("application/json")
				ctx.Response.SetBodyString(`{"hello":"world"}`)
				r := Start(c, ctx, props)
				if o := r.Request(false); o != Continue {
					b.Fatal(o, r.Err())
				}
				if o := r.Response(); o != Continue {
					b.Fatal(o, r.Err())
				}
				r.Finish()
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
