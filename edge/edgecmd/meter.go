package edgecmd

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"tollgate/edge/meter"
	"tollgate/edge/reqlog"
	"tollgate/infra/config"
	wirelog "tollgate/infra/reqlog"
	"tollgate/infra/usage"
)

// meterDrain bounds how long a stopping edge waits for NATS to take its last usage
// batches; what it does not take by then stays in the spool for the next run.
const meterDrain = 10 * time.Second

// openMeter starts the edge's usage meter, publishing to JetStream under the stack's
// prefix and spooling to cfg.MeterSpoolDir while NATS is away. Nil (no metering) when
// TOLLGATE_METER=off.
func openMeter(cfg *config.Config, nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*meter.Meter, error) {
	if !cfg.Meter {
		log.Warn("metering is off (TOLLGATE_METER=off): this edge's traffic is not billed")
		return nil, nil
	}
	pub, err := usage.NewPublisher(nc, cfg.NATSPrefix, cfg.EdgeID)
	if err != nil {
		return nil, err
	}
	pub.SetReplicas(cfg.NATSReplicas)
	return meter.New(meter.Config{
		EdgeID:   cfg.EdgeID,
		Sink:     pub,
		SpoolDir: cfg.MeterSpoolDir,
		Registry: reg,
		Logger:   log,
		// TOLLGATE_EDGE_KEY_LAST_USE=off: for measuring what noting keys' uses costs.
		NoKeyUses:      !cfg.EdgeKeyLastUse,
		NoSpoolReserve: !cfg.MeterSpoolReserve,
		// TOLLGATE_METER_SPARSE_LATENCY=off: every latency bin of a route made at once.
		DenseLatency: !cfg.MeterSparseLatency,
	})
}

// closeMeter drains the meter: its last counts and the spool go to NATS, or stay spooled.
func closeMeter(m *meter.Meter, log *slog.Logger) {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), meterDrain)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		log.Error("meter close", "err", err, "spooled", m.Spooled())
	}
}

// openLogs starts the edge's request log, publishing to JetStream under the stack's
// prefix; it is off with the meter (TOLLGATE_METER=off, for benchmarks).
func openLogs(cfg *config.Config, nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*reqlog.Recorder, error) {
	if !cfg.Meter {
		return nil, nil
	}
	pub, err := wirelog.NewPublisher(nc, cfg.NATSPrefix, cfg.EdgeID, cfg.NATSReplicas)
	if err != nil {
		return nil, err
	}
	return reqlog.New(reqlog.Config{EdgeID: cfg.EdgeID, Sink: pub, Registry: reg, Logger: log}), nil
}

// closeLogs publishes the request log's last batches, for at most meterDrain.
func closeLogs(r *reqlog.Recorder) {
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), meterDrain)
	defer cancel()
	r.Close(ctx)
}
