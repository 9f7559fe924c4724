package edge

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/meter"
)

// BenchmarkKeyAuth is the key step alone on a found key: plain (no expiry, metering or
// last-use noting off), and with what a key may carry on top (an expiry to compare, a
// last use to note once per interval). The difference is the cost of expiry and last
// use per request.
func BenchmarkKeyAuth(b *testing.B) {
	m, err := meter.New(meter.Config{EdgeID: "bench", Sink: discardSink{}, SpoolDir: b.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close(context.Background()) })
	key := []byte("tg_0123456789abcdef0123456789abcdef")
	sum := sha256.Sum256(key)
	var req fasthttp.Request
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil) // sets the request's time, as the server does
	for _, c := range []struct {
		name string
		k    apiKey
	}{
		{"plain", apiKey{consumer: &Consumer{ID: "c"}}},
		{"expiry+last_use", apiKey{consumer: &Consumer{ID: "c"}, expires: time.Now().Add(time.Hour).Unix(), use: m.Key("t", "k")}},
		{"expiry", apiKey{consumer: &Consumer{ID: "c"}, expires: time.Now().Add(time.Hour).Unix()}},
		// What TOLLGATE_EDGE_KEY_LAST_USE=off saves on a key that never expires: this
		// against plain.
		{"last_use", apiKey{consumer: &Consumer{ID: "c"}, use: m.Key("t", "k2")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := &tenantConfig{keys: map[[32]byte]apiKey{sum: c.k}}
			step := keyAuthStep(&route{snapshot: s}, func(*exchange) {})
			x := &exchange{ctx: ctx}
			b.ReportAllocs()
			for b.Loop() {
				x.hs.apiKey = key
				step(x)
				if x.consumer == nil || x.reply != nil {
					b.Fatal("key refused")
				}
			}
		})
	}
}
