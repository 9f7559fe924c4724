package nats

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"tollgate/billing"
	"tollgate/infra/usage"
)

// Folder folds one batch into the rollups in one transaction, recording its id; it
// reports folded false when the id was already recorded (nothing changed). billing/postgres
// implements it.
type Folder interface {
	Fold(ctx context.Context, b *usage.Batch) (folded bool, err error)
}

// UsageReaderConfig configures a UsageReader. Zero fields take the default in their comment.
type UsageReaderConfig struct {
	// Prefix is the stack's NATS prefix. Required.
	Prefix string
	// Durable names the JetStream consumer; every billing replica uses the same one and
	// they share the work. Default: "billing".
	Durable string
	// AckWait is how long a delivered batch may stay unacknowledged before it is
	// delivered again (to this or another replica). Default: 30s.
	AckWait time.Duration
	// MaxAckPending bounds the batches delivered and not yet acknowledged. Default: 256.
	MaxAckPending int
	// FetchBatch is how many batches one pull asks for. Default: 32.
	FetchBatch int
	// RetryDelay is how long a batch that failed to fold waits before redelivery.
	// Default: 5s.
	RetryDelay time.Duration
	// Replicas of the usage stream when the reader creates it (TOLLGATE_NATS_REPLICAS;
	// raised on an existing stream, never lowered). The durable consumer inherits the
	// stream's. Default: 1.
	Replicas int
	// Logger. Default: slog.Default().
	Logger *slog.Logger
	// AfterFold, when set, runs after a batch's transaction committed (or found it folded
	// already) and before it is acknowledged: tests use it to die in between.
	AfterFold func(batchID string, folded bool)
	// Metrics, when set, counts batches and the fold lag.
	Metrics *billing.Metrics
	// Tracer, when set, makes a span of every batch's fold. Default: nil, no spans.
	Tracer trace.Tracer
}

// UsageReader reads the usage stream for billing through a durable JetStream pull
// consumer (JetStream's word; a consumer in Tollgate's domain is an API client, which this
// is not): each batch is folded (billing/postgres.Store.Fold) and acknowledged only after
// the fold's transaction committed, so a crash between the two redelivers a batch whose
// fold then changes nothing. A batch that cannot be decoded is terminated (logged, never retried); one whose
// fold fails is retried after RetryDelay.
type UsageReader struct {
	js     jetstream.JetStream
	folder Folder
	cfg    UsageReaderConfig
	log    *slog.Logger

	folded, duplicates, poison, failures atomic.Int64
}

// UsageReaderStats counts what a UsageReader did since it was made.
type UsageReaderStats struct {
	Folded     int64 // batches folded
	Duplicates int64 // batches found folded already
	Poison     int64 // batches terminated as undecodable
	Failures   int64 // folds that failed and were retried
}

// NewUsageReader returns a reader folding into folder.
func NewUsageReader(js jetstream.JetStream, folder Folder, cfg UsageReaderConfig) *UsageReader {
	if cfg.Durable == "" {
		cfg.Durable = "billing"
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAckPending <= 0 {
		cfg.MaxAckPending = 256
	}
	if cfg.FetchBatch <= 0 {
		cfg.FetchBatch = 32
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &UsageReader{js: js, folder: folder, cfg: cfg, log: cfg.Logger.With("component", "billing-consumer")}
}

// Stats returns the reader's counts.
func (c *UsageReader) Stats() UsageReaderStats {
	return UsageReaderStats{Folded: c.folded.Load(), Duplicates: c.duplicates.Load(), Poison: c.poison.Load(), Failures: c.failures.Load()}
}

// Run reads and folds until ctx ends, waiting out NATS outages. It returns nil when ctx ends.
func (c *UsageReader) Run(ctx context.Context) error {
	var cons jetstream.Consumer
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			if cons, err = c.durable(ctx); err != nil {
				c.log.Warn("billing: usage consumer not ready; retrying", "err", err)
				sleep(ctx, time.Second)
				continue
			}
		}
		batch, err := cons.Fetch(c.cfg.FetchBatch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				c.log.Debug("billing: fetch", "err", err)
				if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
					cons = nil
				}
				sleep(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			c.handle(ctx, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			c.log.Debug("billing: fetch ended", "err", err)
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				cons = nil
			}
			sleep(ctx, 250*time.Millisecond)
		}
	}
	return nil
}

// durable creates or updates the durable JetStream consumer the reader fetches from.
func (c *UsageReader) durable(ctx context.Context) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := usage.EnsureStream(cctx, c.js, c.cfg.Prefix, c.cfg.Replicas); err != nil {
		return nil, err
	}
	return c.js.CreateOrUpdateConsumer(cctx, usage.Stream(c.cfg.Prefix), jetstream.ConsumerConfig{
		Durable:       c.cfg.Durable,
		Description:   "Tollgate billing: folds usage batches into hourly rollups",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: c.cfg.MaxAckPending,
		FilterSubject: usage.Subjects(c.cfg.Prefix),
	})
}

func (c *UsageReader) handle(ctx context.Context, msg jetstream.Msg) {
	b, err := usage.DecodeBatch(msg.Data())
	if err != nil {
		c.poison.Add(1)
		c.cfg.Metrics.Batch(billing.BatchPoison, time.Time{}, time.Now())
		c.log.Error("billing: usage batch cannot be folded; terminated", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	folded, err := c.fold(ctx, b)
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down: the batch is redelivered after AckWait
		}
		c.failures.Add(1)
		c.cfg.Metrics.Batch(billing.BatchFailed, b.Created, time.Now())
		c.log.Error("billing: fold failed; retrying", "batch", b.ID, "err", err)
		_ = msg.NakWithDelay(c.cfg.RetryDelay)
		return
	}
	if folded {
		c.folded.Add(1)
		c.cfg.Metrics.Batch(billing.BatchFolded, b.Created, time.Now())
	} else {
		c.duplicates.Add(1)
		c.cfg.Metrics.Batch(billing.BatchDuplicate, b.Created, time.Now())
		c.log.Debug("billing: batch already folded", "batch", b.ID)
	}
	if c.cfg.AfterFold != nil {
		c.cfg.AfterFold(b.ID, folded)
	}
	if ctx.Err() != nil {
		return // committed but not acknowledged: redelivered, and then a no-op
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil && ctx.Err() == nil {
		c.log.Warn("billing: ack failed; the batch will be redelivered and found folded", "batch", b.ID, "err", err)
	}
}

// fold folds a batch, in a span of its own when tracing.
func (c *UsageReader) fold(ctx context.Context, b *usage.Batch) (bool, error) {
	if c.cfg.Tracer == nil {
		return c.folder.Fold(ctx, b)
	}
	ctx, span := c.cfg.Tracer.Start(ctx, "fold", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("tollgate.batch_id", b.ID), attribute.Int("tollgate.batch_records", len(b.Records))))
	defer span.End()
	folded, err := c.folder.Fold(ctx, b)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(attribute.Bool("tollgate.folded", folded))
	return folded, err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
