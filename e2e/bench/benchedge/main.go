// Command benchedge runs one edge with a synthetic tenant for load tests (wrk): tenant
// "bench" on bench.localhost, routes /open (no auth), /keyed (key auth, key
// "tg_benchkey") and -routes filler routes, all pointing at -upstream. It is a tool for
// measuring the edge, not part of the product.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"tollgate/edge"
	"tollgate/tenants"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18000", "public listener")
	admin := flag.String("admin", "127.0.0.1:19000", "admin listener")
	up := flag.String("upstream", "http://127.0.0.1:18081", "upstream URL")
	routes := flag.Int("routes", 0, "filler routes")
	accessLog := flag.Bool("access-log", false, "access log to stderr")
	buffer := flag.Bool("buffer", false, "buffer responses instead of streaming them")
	noTimeouts := flag.Bool("no-timeouts", false, "no client-side read/write/idle timeouts")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := edge.Config{
		Domain:          "localhost",
		AddressRule:     &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Logger:          log,
		AccessLog:       *accessLog,
		Pprof:           true,
		BufferResponses: *buffer,
	}
	if *noTimeouts {
		cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout = -1, -1, -1
	}
	e, err := edge.New(cfg)
	if err != nil {
		panic(err)
	}
	rev := int64(0)
	put := func(ent tenants.Entry) {
		rev++
		ent.Rev = rev
		k, _ := ent.EntryKey()
		b, _ := json.Marshal(ent)
		e.Apply(k, b, uint64(rev))
	}
	tid := "t-bench"
	put(tenants.Entry{Tenant: &tenants.Tenant{ID: tid, Slug: "bench", Name: "bench"}})
	target := []tenants.Target{{URL: *up, Weight: 1}}
	put(tenants.Entry{Route: &tenants.Route{ID: "open", TenantID: tid, Name: "open", Paths: []string{"/open"}, Upstream: tenants.Upstream{Targets: target}}})
	put(tenants.Entry{Route: &tenants.Route{ID: "keyed", TenantID: tid, Name: "keyed", Paths: []string{"/keyed"}, Auth: tenants.AuthKey, Upstream: tenants.Upstream{Targets: target}}})
	for i := 0; i < *routes; i++ {
		id := fmt.Sprint("f", i)
		put(tenants.Entry{Route: &tenants.Route{ID: id, TenantID: tid, Name: id, Paths: []string{"/f/" + id}, Upstream: tenants.Upstream{Targets: target}}})
	}
	put(tenants.Entry{Consumer: &tenants.Consumer{ID: "c", TenantID: tid, Name: "bench"}})
	put(tenants.Entry{Key: &tenants.KeyEntry{ID: "k", TenantID: tid, ConsumerID: "c", Hash: tenants.HashSecret("tg_benchkey")}})
	e.Loaded()

	pub, err := net.Listen("tcp", *addr)
	if err != nil {
		panic(err)
	}
	adm, err := net.Listen("tcp", *admin)
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Shutdown(sctx)
	}()
	fmt.Fprintf(os.Stderr, "benchedge: pid %d on %s\n", os.Getpid(), *addr)
	if err := e.Serve(pub, adm); err != nil {
		panic(err)
	}
}
