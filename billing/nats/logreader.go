package nats

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/reqlog"
)

// LogStore stores request log batches; billing/postgres implements it.
type LogStore interface {
	// StoreLogBatch inserts a batch in one transaction recording its id; stored is
	// false when the id was recorded already.
	StoreLogBatch(ctx context.Context, b *reqlog.Batch) (stored bool, err error)
	// MaintainLogs creates the day partitions ahead and drops those past retention.
	MaintainLogs(ctx context.Context) (dropped []string, err error)
}

// LogReaderConfig configures a LogReader. Zero fields take the default in their comment.
type LogReaderConfig struct {
	Prefix string // the stack's NATS prefix. Required.
	// Durable names the JetStream consumer, shared by billing replicas. Default: "billing-reqlog".
	Durable string
	// Replicas of the stream when the reader creates it. Default: 1.
	Replicas int
	// MaintainEvery is how often partitions are made ahead and dropped. Default: 1h.
	MaintainEvery time.Duration
	Logger        *slog.Logger // Default: slog.Default().
}

// LogReader stores the request log stream in Postgres through a durable JetStream pull
// consumer: a batch is acknowledged after its transaction committed, so a crash in
// between redelivers one that then inserts nothing. A batch that cannot be decoded is
// terminated; one whose insert fails is retried after 5 s.
type LogReader struct {
	js    jetstream.JetStream
	store LogStore
	cfg   LogReaderConfig
	log   *slog.Logger

	stored, duplicates, poison atomic.Int64
}

// NewLogReader returns a reader storing into store.
func NewLogReader(js jetstream.JetStream, store LogStore, cfg LogReaderConfig) *LogReader {
	if cfg.Durable == "" {
		cfg.Durable = "billing-reqlog"
	}
	if cfg.MaintainEvery <= 0 {
		cfg.MaintainEvery = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &LogReader{js: js, store: store, cfg: cfg, log: cfg.Logger.With("component", "reqlog-consumer")}
}

// LogReaderStats counts what a LogReader did since it was made.
type LogReaderStats struct {
	Stored, Duplicates, Poison int64
}

// Stats returns the reader's counts.
func (r *LogReader) Stats() LogReaderStats {
	return LogReaderStats{Stored: r.stored.Load(), Duplicates: r.duplicates.Load(), Poison: r.poison.Load()}
}

// Run reads and stores until ctx ends, waiting out NATS and Postgres outages.
func (r *LogReader) Run(ctx context.Context) error {
	var cons jetstream.Consumer
	var maintained time.Time
	for ctx.Err() == nil {
		if time.Since(maintained) >= r.cfg.MaintainEvery {
			if dropped, err := r.store.MaintainLogs(ctx); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("request log: partition maintenance failed; retrying", "err", err)
				}
				maintained = time.Now().Add(-r.cfg.MaintainEvery + time.Minute)
			} else {
				maintained = time.Now()
				if len(dropped) > 0 {
					r.log.Info("request log: partitions past retention dropped", "partitions", dropped)
				}
			}
		}
		if cons == nil {
			var err error
			if cons, err = r.durable(ctx); err != nil {
				r.log.Warn("request log consumer not ready; retrying", "err", err)
				sleep(ctx, time.Second)
				continue
			}
		}
		batch, err := cons.Fetch(32, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
					cons = nil
				}
				sleep(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			r.handle(ctx, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				cons = nil
			}
			sleep(ctx, 250*time.Millisecond)
		}
	}
	return nil
}

func (r *LogReader) durable(ctx context.Context) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := reqlog.EnsureStream(cctx, r.js, r.cfg.Prefix, r.cfg.Replicas); err != nil {
		return nil, err
	}
	return r.js.CreateOrUpdateConsumer(cctx, reqlog.Stream(r.cfg.Prefix), jetstream.ConsumerConfig{
		Durable:       r.cfg.Durable,
		Description:   "Tollgate billing: stores request log batches in Postgres",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 256,
		FilterSubject: reqlog.Subjects(r.cfg.Prefix),
	})
}

func (r *LogReader) handle(ctx context.Context, msg jetstream.Msg) {
	b, err := reqlog.DecodeBatch(msg.Data())
	if err != nil {
		r.poison.Add(1)
		r.log.Error("request log batch cannot be stored; terminated", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	stored, err := r.store.StoreLogBatch(ctx, b)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("request log batch not stored; retrying", "batch", b.ID, "err", err)
			_ = msg.NakWithDelay(5 * time.Second)
		}
		return
	}
	if stored {
		r.stored.Add(1)
	} else {
		r.duplicates.Add(1)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil && ctx.Err() == nil {
		r.log.Warn("request log ack failed; the batch will be redelivered and found stored", "batch", b.ID, "err", err)
	}
}
