package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"tollgate/tenants"
)

// DefaultPublishTimeout bounds one Publish call.
const DefaultPublishTimeout = 5 * time.Second

// Publisher writes outbox changes to the config bucket. It is what the outbox relay's
// publisher interface is satisfied by.
//
// Ordering: a batch goes out on one connection in slice order, without retries inside the
// client (a message retried behind a later one could leave an older value as a key's
// latest), and JetStream stores a connection's messages in the order it sent them. A
// batch that fails is retried whole by the caller; since each key's later change follows
// its earlier one in the batch, the bucket again ends on the latest value. Calls to
// Publish are serialized, so two batches never interleave. What Publish cannot order is
// another process publishing to the same bucket: run one relay at a time (the edges
// still ignore a value whose Rev is older than the one they hold).
type Publisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	bucket  string
	stream  string
	timeout time.Duration
	mu      sync.Mutex // one batch at a time
	tracer  trace.Tracer
}

// SetTracer makes a span of every Publish, linked to the traces of the changes it
// carries (tenants.Entry.Trace). Call it before the first Publish.
func (p *Publisher) SetTracer(t trace.Tracer) { p.tracer = t }

// NewPublisher returns a Publisher for bucket on nc. timeout bounds a whole Publish call:
// every ack must be in by then. Default (0): DefaultPublishTimeout.
func NewPublisher(nc *nats.Conn, bucket string, timeout time.Duration) (*Publisher, error) {
	if timeout <= 0 {
		timeout = DefaultPublishTimeout
	}
	// A Publisher owns its JetStream context so that acks the server never sends expire
	// (and free their slot) instead of piling up in a context shared with others.
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(timeout),
		jetstream.WithPublishAsyncMaxPending(4096),
	)
	if err != nil {
		return nil, fmt.Errorf("nats publisher: %w", err)
	}
	return &Publisher{nc: nc, js: js, bucket: bucket, stream: streamName(bucket), timeout: timeout}, nil
}

// Publish puts every change with a Value under its Key and deletes every Key whose Value
// is nil, in slice order, and returns nil only when the server acknowledged all of them.
// It sends the whole batch before waiting (one round trip of latency, not one per
// change), and gives up after the Publisher's timeout or when ctx ends. While the
// connection is down it fails at once, so the relay can back off without waiting.
func (p *Publisher) Publish(ctx context.Context, changes []tenants.Change) (err error) {
	if len(changes) == 0 {
		return nil
	}
	// Refuse a bad batch before any of it is sent: a key the KV cannot hold would
	// otherwise fail on every retry after its predecessors were written again.
	for _, c := range changes {
		if !validKey(c.Key) {
			return fmt.Errorf("publish rev %d: %q is not a valid KV key", c.Rev, c.Key)
		}
		if len(c.Value) > MaxValueSize {
			return fmt.Errorf("publish rev %d: %s is %d bytes, over the %d byte limit", c.Rev, c.Key, len(c.Value), MaxValueSize)
		}
	}
	if p.tracer != nil {
		var span trace.Span
		ctx, span = p.startSpan(ctx, changes)
		defer func() {
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.nc.IsConnected() {
		return fmt.Errorf("publish %d changes: %w", len(changes), errNotConnected)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()

	futures := make([]jetstream.PubAckFuture, 0, len(changes))
	for _, c := range changes {
		m := &nats.Msg{Subject: subject(p.bucket, c.Key), Data: c.Value, Header: nats.Header{}}
		if c.Value == nil {
			m.Header.Set(kvOperation, kvDelete)
		}
		f, err := p.js.PublishMsgAsync(m,
			jetstream.WithMsgID(msgID(c.Rev)),
			jetstream.WithExpectStream(p.stream),
			jetstream.WithRetryAttempts(0),
			jetstream.WithStallWait(max(time.Until(deadline), time.Millisecond)),
		)
		if err != nil {
			return fmt.Errorf("publish rev %d (%s), %d of %d sent: %w", c.Rev, c.Key, len(futures), len(changes), err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish rev %d (%s): %w", changes[i].Rev, changes[i].Key, err)
		case <-ctx.Done():
			return fmt.Errorf("publish %d changes: %d acked before %w", len(changes), i, context.Cause(ctx))
		}
	}
	return nil
}

// startSpan starts a publish's span, linked to the trace of each change made by a traced
// request.
func (p *Publisher) startSpan(ctx context.Context, changes []tenants.Change) (context.Context, trace.Span) {
	var links []trace.Link
	for _, c := range changes {
		if c.Value == nil {
			continue
		}
		var e struct {
			Trace string `json:"trace"`
		}
		if json.Unmarshal(c.Value, &e) != nil || e.Trace == "" {
			continue
		}
		pctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": e.Trace})
		if sc := trace.SpanContextFromContext(pctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return p.tracer.Start(ctx, "relay publish", trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", p.bucket),
			attribute.Int("messaging.batch.message_count", len(changes)),
			attribute.Int64("tollgate.first_rev", changes[0].Rev),
		))
}

// msgID is a change's Nats-Msg-Id: its outbox Rev, which no other change has. A batch
// retried after a lost ack (a server lost, a stream leader changing between storing a
// change and acknowledging it) then stores nothing twice within the bucket's duplicate
// window, so edges are sent each change once.
func msgID(rev int64) string { return "rev-" + strconv.FormatInt(rev, 10) }

// Resync makes the bucket hold exactly the entries of changes: the Value of each Key
// (the last one, where a key repeats), no other key. It is how `tollgate api --resync`
// rebuilds the bucket from Postgres.
//
// It reads the bucket first and writes only what differs, so a resync of a healthy
// bucket sends the edges nothing. It keeps what the live relay may have published since
// changes were read: a key whose stored Rev is newer than the change's is not
// overwritten, and a key absent from changes is not deleted when its stored Rev is newer
// than every Rev in changes. Puts and deletes run concurrently (different keys only).
func Resync(ctx context.Context, kv jetstream.KeyValue, changes []tenants.Change) error {
	var maxRev int64
	for _, c := range changes {
		maxRev = max(maxRev, c.Rev)
	}
	return resync(ctx, kv, changes, maxRev)
}

// resync is Resync where maxRev, not changes, bounds which absent keys are deleted: with
// cells, changes are one bucket's share of a snapshot whose revs go up to maxRev.
func resync(ctx context.Context, kv jetstream.KeyValue, changes []tenants.Change, maxRev int64) error {
	want := make(map[string]tenants.Change, len(changes))
	for _, c := range changes {
		if !validKey(c.Key) {
			return fmt.Errorf("resync: %q is not a valid KV key", c.Key)
		}
		want[c.Key] = c
	}

	have, err := readBucket(ctx, kv)
	if err != nil {
		return fmt.Errorf("resync %s: %w", kv.Bucket(), err)
	}

	var ops []func(context.Context) error
	for key, c := range want {
		cur, ok := have[key]
		switch {
		case c.Value == nil:
			continue // handled with the keys that should not exist
		case ok && string(cur) == string(c.Value):
			continue
		case ok && entryRev(cur) > c.Rev:
			continue
		}
		ops = append(ops, func(ctx context.Context) error {
			if _, err := kv.Put(ctx, key, c.Value); err != nil {
				return fmt.Errorf("put %s: %w", key, err)
			}
			return nil
		})
	}
	for key, cur := range have {
		if c, ok := want[key]; ok && c.Value != nil {
			continue
		}
		if entryRev(cur) > maxRev {
			continue
		}
		ops = append(ops, func(ctx context.Context) error {
			if err := kv.Delete(ctx, key); err != nil {
				return fmt.Errorf("delete %s: %w", key, err)
			}
			return nil
		})
	}
	if err := runConcurrently(ctx, 32, ops); err != nil {
		return fmt.Errorf("resync %s: %w", kv.Bucket(), err)
	}
	return nil
}

// readBucket returns every live key of the bucket with its value.
func readBucket(ctx context.Context, kv jetstream.KeyValue) (map[string][]byte, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	have := make(map[string][]byte)
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watch closed during the initial load")
			}
			if e == nil {
				return have, nil // end of the initial values
			}
			have[e.Key()] = e.Value()
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// entryRev is the Rev an entry carries, 0 when it is not an entry at all.
func entryRev(value []byte) int64 {
	var e struct {
		Rev int64 `json:"rev"`
	}
	if json.Unmarshal(value, &e) != nil {
		return 0
	}
	return e.Rev
}

// runConcurrently runs ops on n goroutines and returns the first error, stopping the
// rest.
func runConcurrently(ctx context.Context, n int, ops []func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan func(context.Context) error)
	var wg sync.WaitGroup
	for range min(n, len(ops)) {
		wg.Go(func() {
			for op := range next {
				if err := op(ctx); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for _, op := range ops {
		select {
		case next <- op:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
