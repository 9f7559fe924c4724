// Command bareproxy is the floor the edge is measured against: a fasthttp reverse proxy
// with nothing but the pooled upstream call (no routing, auth, headers or timeouts).
// A measuring tool, not part of the product.
package main

import (
	"flag"
	"net/http"
	_ "net/http/pprof"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18001", "listener")
	up := flag.String("upstream", "127.0.0.1:18081", "upstream host:port")
	flag.Parse()
	go func() { _ = http.ListenAndServe("127.0.0.1:19001", nil) }()
	hc := &fasthttp.HostClient{Addr: *up, MaxConns: 1024}
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error("bad gateway", 502)
		}
	}}
	if err := s.ListenAndServe(*addr); err != nil {
		panic(err)
	}
}
