package upstreamh2_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"

	"tollgate/edge/upstreamh2"
)

// FuzzClientConn: whatever an upstream sends after its SETTINGS, once the request's
// HEADERS has come, the client neither panics nor hangs: RoundTrip returns, and so does
// reading the answer's body.
func FuzzClientConn(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		cli, srv := net.Pipe()
		h := upstreamh2.New(upstreamh2.Config{
			Addr:           "upstream.test:80",
			Dial:           func(string, time.Duration) (net.Conn, error) { return cli, nil },
			ConnectTimeout: time.Second, MaxInFlight: 4, IdleTimeout: time.Minute,
		})
		defer h.CloseIdleConnections()
		// A pipe has no buffer: the server reads all the time, and writes once the
		// request's HEADERS has come.
		headers := make(chan struct{})
		go func() {
			defer close(headers)
			if _, err := io.ReadFull(srv, make([]byte, len(http2.ClientPreface))); err != nil {
				return
			}
			fr := http2.NewFramer(nil, srv)
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					return
				}
				if f.Header().Type == http2.FrameHeaders {
					break
				}
			}
			headers <- struct{}{}
			_, _ = io.Copy(io.Discard, srv)
		}()
		go func() {
			defer srv.Close()
			if http2.NewFramer(srv, nil).WriteSettings() != nil {
				return
			}
			if _, ok := <-headers; ok {
				_, _ = srv.Write(data)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var rh fasthttp.RequestHeader
		rh.SetMethod("POST")
		r, err := h.NewRequest(ctx, &rh, []byte("/svc/Method"), []byte("upstream.test"), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.RoundTrip(r)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
		if ctx.Err() != nil {
			t.Fatalf("hung until the deadline (%v)", err)
		}
	})
}
