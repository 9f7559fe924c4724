package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge"
	"tollgate/edge/meter"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// memSink keeps what a meter publishes.
type memSink struct {
	mu      sync.Mutex
	batches []*usage.Batch
}

func (s *memSink) Publish(_ context.Context, _ string, data []byte) error {
	b := new(usage.Batch) // not DecodeBatch: the harness's tenant ids are not UUIDs
	if err := json.Unmarshal(data, b); err != nil {
		return err
	}
	s.mu.Lock()
	s.batches = append(s.batches, b)
	s.mu.Unlock()
	return nil
}

func (s *memSink) PutTotals(context.Context, []usage.EdgeTotal) error { return nil }

// sum adds up the records by "tenant route consumer class".
func (s *memSink) sum() map[string]usage.Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]usage.Counts{}
	for _, b := range s.batches {
		for _, r := range b.Records {
			k := fmt.Sprintf("%s %s %s %d", r.TenantID, r.RouteID, r.ConsumerID, r.Class)
			c := out[k]
			c.Add(r.Counts)
			out[k] = c
		}
	}
	return out
}

func newMeter(tb testing.TB, sink meter.Sink) *meter.Meter {
	tb.Helper()
	m, err := meter.New(meter.Config{EdgeID: "test", Sink: sink, SpoolDir: tb.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// TestMetering: each request of a known tenant is counted once, by route, consumer and
// status class, billable only when the upstream answered; unknown tenants are not counted.
func TestMetering(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, sink)
	h := newHarness(t, func(c *edge.Config) { c.Meter = m })
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, up.URL)
	h.route(acme, "open", []string{"/open"}, nil, tenants.AuthNone, up.URL)
	h.put(&tenants.Consumer{ID: "c1", TenantID: acme, Name: "c1"})
	k1 := h.key(acme, "c1", "k1")
	h.e.Loaded()
	host := "acme." + domain

	for i := 0; i < 3; i++ {
		if r := h.get(host, "/keyed/x", "X-API-Key: "+k1); r.status != 200 {
			t.Fatalf("keyed: %s", r)
		}
	}
	for i := 0; i < 2; i++ {
		if r := h.get(host, "/open/y"); r.status != 200 {
			t.Fatalf("open: %s", r)
		}
	}
	if r := h.get(host, "/keyed/x"); r.status != 401 {
		t.Fatalf("no key: %s", r)
	}
	if r := h.get(host, "/nowhere"); r.status != 404 {
		t.Fatalf("no route: %s", r)
	}
	if r := h.get("nobody."+domain, "/open"); r.status != 404 {
		t.Fatalf("no tenant: %s", r)
	}
	r := send(t, h.public, "POST", host, "/open/z", nil, strings.Repeat("b", 100))
	if r.status != 200 {
		t.Fatalf("post: %s", r)
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := sink.sum()
	want := map[string][2]int64{ // requests, billable
		acme + " keyed c1 2": {3, 3},
		acme + " open  2":    {3, 3},
		acme + " keyed  4":   {1, 0},
		acme + "   4":        {1, 0},
	}
	if len(got) != len(want) {
		t.Errorf("cells %v, want %v", got, want)
	}
	for k, w := range want {
		if c := got[k]; c.Requests != w[0] || c.Billable != w[1] {
			t.Errorf("%q: %+v, want %d requests, %d billable", k, c, w[0], w[1])
		}
	}
	if c := got[acme+" open  2"]; c.BytesIn != 100 || c.BytesOut == 0 {
		t.Errorf("open bytes: %+v, want 100 in and some out", c)
	}
}

// BenchmarkHandlerMetered is BenchmarkHandler's keyed request with the meter on (its
// batches go nowhere): compare allocs/op and ns/op with BenchmarkHandler/auth=key.
func BenchmarkHandlerMetered(b *testing.B) {
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"hello":"world"}`)
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}}
	go up.Serve(upLn)
	b.Cleanup(func() { _ = up.Shutdown() })

	m := newMeter(b, nopSink{})
	h := newHarness(b, func(c *edge.Config) { c.Meter = m })
	acme := h.tenant("acme")
	h.route(acme, "keyed", []string{"/keyed"}, nil, tenants.AuthKey, "http://"+upLn.Addr().String())
	h.put(&tenants.Consumer{ID: "c", TenantID: acme, Name: "c"})
	key := h.key(acme, "c", "k")
	h.e.Loaded()

	client := &fasthttp.HostClient{Addr: h.public, MaxConns: 64}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("/keyed/items/42")
	req.Header.SetHost("acme." + domain)
	req.Header.Set("User-Agent", "wrk/4.2")
	req.Header.Set("X-API-Key", key)
	b.ReportAllocs()
	for b.Loop() {
		if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
		}
	}
}

type nopSink struct{}

func (nopSink) Publish(context.Context, string, []byte) error      { return nil }
func (nopSink) PutTotals(context.Context, []usage.EdgeTotal) error { return nil }

// TestMeteringJWTCaller: a JWT caller is metered as the consumer "<iss>|<claim>".
func TestMeteringJWTCaller(t *testing.T) {
	sink := &memSink{}
	m := newMeter(t, sink)
	h := newHarness(t, func(c *edge.Config) { c.Meter = m })
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.put(&tenants.Issuer{ID: "ia", TenantID: acme, Issuer: issA, Audiences: []string{audA}, Keys: []tenants.JWK{rsaJWK(rsaKey(0), "a1")}})
	h.route(acme, "api", []string{"/"}, nil, tenants.AuthJWT, up.URL)
	h.e.Loaded()
	tok := rs256(t, rsaKey(0), "a1", claims(issA, "alice"))
	for i := 0; i < 4; i++ {
		if r := h.get("acme."+domain, "/x", bearerH(tok)); r.status != 200 {
			t.Fatalf("jwt: %s", r)
		}
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	k := acme + " api " + issA + "|alice 2"
	if c := sink.sum()[k]; c.Requests != 4 || c.Billable != 4 {
		t.Fatalf("%q: %+v, want 4 billable requests (cells %v)", k, c, sink.sum())
	}
}
