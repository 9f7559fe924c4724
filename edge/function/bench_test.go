package function_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"tollgate/edge/function"
	"tollgate/edge/function/functiontest"
)

// benchHTTP is an HTTP that allocates nothing, so the benchmarks measure the host and the
// guest, not a test double.
type benchHTTP struct {
	req, resp   []function.HeaderPair
	nreq, nresp int // the fixed headers; added ones are dropped at reset
	consumer    []byte
}

func newBenchHTTP() *benchHTTP {
	h := &benchHTTP{
		req: []function.HeaderPair{
			{Key: []byte(":method"), Value: []byte("GET")}, {Key: []byte(":path"), Value: []byte("/orders/42")},
			{Key: []byte(":authority"), Value: []byte("api.example.com")}, {Key: []byte(":scheme"), Value: []byte("https")},
			{Key: []byte("user-agent"), Value: []byte("bench")}, {Key: []byte("accept"), Value: []byte("*/*")},
		},
		resp: []function.HeaderPair{{Key: []byte(":status"), Value: []byte("200")}, {Key: []byte("content-type"), Value: []byte("application/json")}},
	}
	h.nreq, h.nresp = len(h.req), len(h.resp)
	return h
}

func (h *benchHTTP) reset() { h.req, h.resp = h.req[:h.nreq], h.resp[:h.nresp] }

func (h *benchHTTP) m(m function.MapType) *[]function.HeaderPair {
	switch m {
	case function.RequestHeaders:
		return &h.req
	case function.ResponseHeaders:
		return &h.resp
	}
	return nil
}

func (h *benchHTTP) HeaderValue(m function.MapType, key []byte) ([]byte, bool) {
	if p := h.m(m); p != nil {
		for _, kv := range *p {
			if bytes.EqualFold(kv.Key, key) {
				return kv.Value, true
			}
		}
	}
	return nil, false
}

func (h *benchHTTP) HeaderCount(m function.MapType) int {
	if p := h.m(m); p != nil {
		return len(*p)
	}
	return 0
}

func (h *benchHTTP) VisitHeaders(m function.MapType, fn func(k, v []byte)) bool {
	p := h.m(m)
	if p == nil {
		return false
	}
	for _, kv := range *p {
		fn(kv.Key, kv.Value)
	}
	return true
}

func (h *benchHTTP) SetHeaders(function.MapType, []function.HeaderPair) bool { return true }

func (h *benchHTTP) AddHeader(m function.MapType, k, v []byte) bool {
	p := h.m(m)
	if p == nil {
		return false
	}
	// The bytes are the guest's: a real edge copies them into its header buffer; the
	// benchmark keeps the fixed key and value the guest always sends.
	*p = append(*p, function.HeaderPair{Key: xFunction, Value: xValue})
	return true
}

var xFunction, xValue = []byte("x-function"), []byte("value")

func (h *benchHTTP) ReplaceHeader(m function.MapType, k, v []byte) bool { return h.AddHeader(m, k, v) }
func (h *benchHTTP) RemoveHeader(function.MapType, []byte) bool         { return true }
func (h *benchHTTP) Buffer(function.BufferType) ([]byte, bool)          { return nil, true }
func (h *benchHTTP) SetBuffer(function.BufferType, []byte) bool         { return true }
func (h *benchHTTP) Property(p []byte) ([]byte, bool) {
	switch string(p) {
	case function.PropMethod:
		return h.req[0].Value, true
	case function.PropPath:
		return h.req[1].Value, true
	}
	return nil, false
}

func (h *benchHTTP) SetProperty(p, v []byte) bool {
	h.consumer = append(h.consumer[:0], v...)
	return string(p) == function.PropConsumer
}
func (h *benchHTTP) SendLocalReply(int, []byte, []byte, []function.HeaderPair) {
}
func (h *benchHTTP) Log(function.LogLevel, []byte) {}

// benchRequests runs b.N whole requests (Start, request headers, response headers, Done)
// through a filter of guest, from one goroutine: ns/op is the host's and the guest's CPU
// per request on one core.
func benchRequests(b *testing.B, guest string) { benchFilter(b, guest, "", newBenchHTTP()) }

func benchFilter(b *testing.B, guest, config string, h *benchHTTP) {
	// The edge's variable, so that the two settings can be measured in turns by one
	// test binary.
	function.SetMergedEntries(os.Getenv("TOLLGATE_EDGE_FUNCTION_MERGED_ENTRIES") != "off")
	defer function.SetMergedEntries(true)
	// A generous timeout: the benchmark measures CPU, and a machine shared with builds
	// deschedules a thread for longer than the default's 5 ms now and then.
	r := newRuntime(b, function.Config{Timeout: time.Second})
	f := filter(b, r, guest, "bench", config, function.Limits{})
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		h.reset()
		c, err := f.Start(h)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.OnRequestHeaders(true); err != nil {
			b.Fatal(err)
		}
		if _, err := c.OnResponseHeaders(true); err != nil {
			b.Fatal(err)
		}
		c.Done()
	}
	// The process's CPU time, every thread (the watchdog's and the collector's too): on
	// a machine shared with other work, ns/op is wall time and says little.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkNoopGo(b *testing.B)    { benchRequests(b, functiontest.Noop) }
func BenchmarkNoopWAT(b *testing.B)   { benchRequests(b, functiontest.WatNoop) }
func BenchmarkHeadersGo(b *testing.B) { benchRequests(b, functiontest.Headers) }

// BenchmarkHMACGo is seed 000's signature check on a request that passes it.
func BenchmarkHMACGo(b *testing.B) {
	h := newBenchHTTP()
	date := time.Now().UTC().Format(http.TimeFormat)
	h.req = append(h.req,
		function.HeaderPair{Key: []byte("x-key-id"), Value: []byte("alice")},
		function.HeaderPair{Key: []byte("x-date"), Value: []byte(date)},
		function.HeaderPair{Key: []byte("x-signature"), Value: []byte(sign("s3cret", "GET", "/orders/42", date))})
	h.nreq = len(h.req)
	benchFilter(b, functiontest.HMAC, "alice=s3cret", h)
	if string(h.consumer) != "alice" {
		b.Fatalf("consumer %q: the signature did not pass", h.consumer)
	}
}

// BenchmarkNestedWAT makes 202 guest calls a request, 100 deep: what it costs beyond
// BenchmarkNoopWAT is the guest's calls, each with the fuel and depth checks.
func BenchmarkNestedWAT(b *testing.B) { benchRequests(b, functiontest.Nested) }

// BenchmarkGuestCalls is the cost of a guest's call with instrument's checks (fuel and
// depth at entry, depth at exit): one op is down(1000), 1001 calls. No host: wazero alone.
func BenchmarkGuestCalls(b *testing.B) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	out, err := function.Instrument(functiontest.WAT(b, `(module
  (func $down (export "down") (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n)) (then (i32.const 0))
      (else (i32.add (call $down (i32.sub (local.get $n) (i32.const 1))) (i32.const 1))))))`))
	if err != nil {
		b.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, out)
	if err != nil {
		b.Fatal(err)
	}
	fuel := mod.ExportedGlobal("tollgate_stop").(api.MutableGlobal)
	down := mod.ExportedFunction("down")
	var stack [1]uint64
	cpu0 := processCPU()
	for b.Loop() {
		fuel.Set(1 << 62)
		stack[0] = 1000
		if err := down.CallWithStack(ctx, stack[:]); err != nil || stack[0] != 1000 {
			b.Fatal(stack[0], err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1001, "cpu-ns/call")
}
