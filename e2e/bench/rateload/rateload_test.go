package rateload_test

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/e2e/bench/rateload"

	"github.com/valyala/fasthttp"
)

// Every request of the schedule is sent and counted by its answer's status, per phase and
// stream, and the virtual host and headers reach the server.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		switch {
		case string(c.Host()) != "a.localhost" || string(c.Request.Header.Peek("X-Key")) != "k":
			c.SetStatusCode(400)
		case n.Add(1)%4 == 0:
			c.SetStatusCode(429)
		}
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()

	st := rateload.Stream{Name: "s", Host: "a.localhost", Path: "/", Headers: map[string]string{"X-Key": "k"}, Rate: 200}
	res := rateload.Run(ln.Addr().String(), []rateload.Phase{
		{Name: "one", Duration: 200 * time.Millisecond, Streams: []rateload.Stream{st}},
		{Name: "two", Duration: 100 * time.Millisecond, Streams: []rateload.Stream{st, st}},
	})
	if len(res) != 3 || res[0].Phase != "one" || res[2].Phase != "two" {
		t.Fatalf("results %+v, want one for phase one and two for phase two", res)
	}
	var sent, ok, limited int64
	for _, r := range res {
		sent, ok, limited = sent+r.Sent, ok+r.OK, limited+r.Limited
		if r.Bad != 0 || r.Errors != 0 || r.Sent != r.OK+r.Limited {
			t.Errorf("%s: %+v: every answer 200 or 429", r.Phase, r)
		}
	}
	if sent != 80 || limited != 20 || res[0].Sent != 40 {
		t.Errorf("sent %d (phase one %d), limited %d; want 80 (40) and 20", sent, res[0].Sent, limited)
	}
}
