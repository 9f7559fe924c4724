package edge_test

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"tollgate/tenants"
)

// Benchmarks: go test -run '^$' -bench . -benchmem ./edge/

func BenchmarkKeyLookup(b *testing.B) {
	h := newHarness(b)
	acme := h.tenant("acme")
	h.route(acme, "r", []string{"/"}, nil, tenants.AuthKey, "http://127.0.0.1:9")
	var key string
	for i := 0; i < 10_000; i++ {
		c := fmt.Sprint("c", i)
		h.put(&tenants.Consumer{ID: c, TenantID: acme, Name: c})
		key = h.key(acme, c, fmt.Sprint("k", i))
	}
	h.e.Loaded()
	snap := h.e.Snapshot("acme")
	plain := []byte(key)
	b.ReportAllocs()
	for b.Loop() {
		sum := sha256.Sum256(plain)
		if snap.KeyLookup(&sum) == "" {
			b.Fatal("key not found")
		}
	}
}

// benchRequest is a typical client request.
func benchRequest(b *testing.B, target, key string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	req.SetRequestURI(target)
	req.Header.SetHost("acme." + domain)
	req.Header.Set("User-Agent", "wrk/4.2")
	req.Header.Set("Accept", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	// Parse it back from the wire so the raw header block is what a server would see.
	var parsed fasthttp.Request
	if err := parsed.Read(bufioReader(req.String())); err != nil {
		b.Fatal(err)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&parsed, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}, nil)
	return ctx
}

// BenchmarkPreProxy is everything the edge does for a request before the upstream
// exchange: routing, key auth, upstream pick, URI and header rewriting.
func BenchmarkPreProxy(b *testing.B) {
	h := newHarness(b)
	acme := h.tenant("acme")
	h.route(acme, "open", []string{"/open"}, nil, tenants.AuthNone, "http://127.0.0.1:9")
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, "http://127.0.0.1:9")
	for i := 0; i < 5000; i++ {
		h.route(acme, fmt.Sprint("filler", i), []string{fmt.Sprintf("/f/%d", i)}, nil, "", "http://127.0.0.1:9")
	}
	h.put(&tenants.Consumer{ID: "c", TenantID: acme, Name: "c"})
	key := h.key(acme, "c", "k")
	h.e.Loaded()
	for _, c := range []struct{ name, target, key string }{
		{"auth=none", "/open/items/42?x=1", ""},
		{"auth=key", "/keyed/items/42?x=1", key},
	} {
		ctx := benchRequest(b, c.target, c.key)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s := h.e.ServePreProxy(ctx); s != 200 {
					b.Fatalf("status %d", s)
				}
			}
		})
	}
}

// BenchmarkHandler is one whole request over loopback: client → edge → upstream (a
// minimal fasthttp server) → edge → client, all in this process. allocs/op counts the
// client and the upstream too.
func BenchmarkHandler(b *testing.B) {
	upURL := benchUpstream(b)

	h := newHarness(b)
	acme := h.tenant("acme")
	h.route(acme, "open", []string{"/open"}, nil, tenants.AuthNone, upURL)
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, upURL)
	h.put(&tenants.Consumer{ID: "c", TenantID: acme, Name: "c"})
	key := h.key(acme, "c", "k")
	h.e.Loaded()

	client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
	for _, c := range []struct{ name, target, key string }{
		{"auth=none", "/open/items/42", ""},
		{"auth=key", "/keyed/items/42", key},
	} {
		b.Run(c.name, func(b *testing.B) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI(c.target)
			req.Header.SetHost("acme." + domain)
			req.Header.Set("User-Agent", "wrk/4.2")
			if c.key != "" {
				req.Header.Set("X-API-Key", c.key)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

// BenchmarkCompile is one recompile of a tenant with 50,000 routes (what a route change
// of such a tenant costs, off the request path).
func BenchmarkCompile(b *testing.B) {
	h := newHarness(b)
	acme := h.tenant("acme")
	for i := 0; i < 50_000; i++ {
		h.route(acme, fmt.Sprint("r", i), []string{fmt.Sprintf("/r%d/x", i)}, nil, "", "http://127.0.0.1:9")
	}
	h.e.Loaded()
	b.ReportAllocs()
	for b.Loop() {
		h.e.RecompileForTest(acme)
	}
}

// benchUpstream starts a minimal fasthttp server answering a small JSON body, the
// upstream of the benchmarks, and returns its URL.
func benchUpstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"hello":"world"}`)
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}}
	go up.Serve(ln)
	b.Cleanup(func() { _ = up.Shutdown() })
	return "http://" + ln.Addr().String()
}
