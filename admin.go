package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tollgate/api"
	"tollgate/infra/admin"
)

// outboxPollEvery is how often the api reads the outbox backlog for its gauges: a
// scrape reads the last value, so many scrapers cost the database nothing more.
const outboxPollEvery = 2 * time.Second

// apiMetrics is the api process's registry and series.
func apiMetrics() (*prometheus.Registry, *api.Metrics, error) {
	reg := admin.NewRegistry()
	m, err := api.NewMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("api: registering metrics: %w", err)
	}
	return reg, m, nil
}

// listenAdmin binds an admin listener, naming the setting when it cannot.
func listenAdmin(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return ln, nil
}

// serveAdmin serves the api's admin endpoints on cp.adminLn, with the outbox backlog
// and the relay's state polled into the metrics, until the returned stop is called.
// /readyz fails from drain on, before the api stops accepting requests.
func (cp *controlPlane) serveAdmin(ctx context.Context, log *slog.Logger) (drain, stop func()) {
	if cp.adminLn == nil {
		return func() {}, func() {}
	}
	srv := admin.Serve(cp.adminLn, cp.reg, log, func(ctx context.Context) error {
		if err := cp.db.Ping(ctx); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		return nil
	})
	log.Info("api admin listening", "addr", cp.adminLn.Addr().String())
	pctx, cancel := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		cp.pollOutbox(pctx, log)
	}()
	return srv.Drain, func() {
		cancel()
		<-polled
		sctx, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = srv.Shutdown(sctx)
	}
}

// pollOutbox sets the backlog gauges and the relay's active flag every outboxPollEvery.
func (cp *controlPlane) pollOutbox(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(outboxPollEvery)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, outboxPollEvery)
		rows, oldest, err := cp.db.OutboxBacklog(qctx)
		cancel()
		switch {
		case err == nil:
			cp.metrics.SetOutboxBacklog(rows, oldest)
		case ctx.Err() == nil:
			log.Debug("outbox backlog", "err", err)
		}
		cp.metrics.SetRelayActive(cp.relay.Status().Active)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
