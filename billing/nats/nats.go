// Package nats carries usage over JetStream: the usage stream edges publish batches to
// (EnsureStream), the Publisher an edge's meter uses as its sink, the durable Consumer
// billing folds batches with, and the KV bucket of the edges' running totals that
// reconciliation reads (Totals).
//
// Every name is under the stack's prefix (billing.UsageStream, billing.TotalsBucket), and
// nothing here needs a NATS server newer than 2.9.
package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing"
	"tollgate/infra/natsconn"
	tgnats "tollgate/tenants/nats"
)

// Stream settings.
const (
	// DuplicateWindow is how long JetStream remembers a batch id and drops a republished
	// copy. Beyond it billing's usage_batches key still folds a batch only once.
	DuplicateWindow = 10 * time.Minute
	// StreamMaxAge is how long batches stay in the stream: the longest billing may be
	// down before usage is lost.
	StreamMaxAge = 14 * 24 * time.Hour
	// TotalsMaxAge is how long the edges' totals are kept for reconciliation.
	TotalsMaxAge = 100 * 24 * time.Hour
)

// EnsureStream creates the usage stream "<prefix>_usage" on subjects "<prefix>.usage.>"
// or brings an existing one to these settings: file storage, limits retention (batches
// stay for StreamMaxAge whether folded or not, for audit and replays), DuplicateWindow,
// and replicas copies (raised on an existing stream, never lowered: see natsconn.Replicas).
func EnsureStream(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) (jetstream.Stream, error) {
	r, err := natsconn.Replicas(ctx, js, billing.UsageStream(prefix), replicas)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", billing.UsageStream(prefix), err)
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        billing.UsageStream(prefix),
		Description: "Tollgate usage batches, one message per edge flush; folded into rollups by `tollgate billing`",
		Subjects:    []string{billing.UsageSubjects(prefix)},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      StreamMaxAge,
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		Replicas:    r,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", billing.UsageStream(prefix), err)
	}
	return s, nil
}

// EnsureTotalsBucket creates the totals bucket "<prefix>_meter_totals" (history 1, file
// storage, entries kept TotalsMaxAge, replicas copies, raised and never lowered) or
// brings the existing one to these settings.
func EnsureTotalsBucket(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) (jetstream.KeyValue, error) {
	r, err := natsconn.Replicas(ctx, js, tgnats.KVStream(billing.TotalsBucket(prefix)), replicas)
	if err != nil {
		return nil, fmt.Errorf("ensure kv bucket %s: %w", billing.TotalsBucket(prefix), err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      billing.TotalsBucket(prefix),
		Description: "Tollgate edges' running usage totals, <YYYYMM>.<tenant>.<edge>.<boot>.<DDHH>; read by `tollgate billing reconcile`",
		History:     1,
		TTL:         TotalsMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    r,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure kv bucket %s: %w", billing.TotalsBucket(prefix), err)
	}
	return kv, nil
}

// errNotConnected is returned at once while the connection is down, so the meter spools
// instead of waiting out its publish timeout.
var errNotConnected = errors.New("nats: not connected")

// Publisher is the meter's sink: batches to the usage stream, totals to the bucket. It
// creates both on first use (and again after an error, in case NATS lost them).
type Publisher struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	prefix   string
	subject  string
	replicas int

	mu    sync.Mutex
	ready bool // stream and bucket ensured
	kv    jetstream.KeyValue
}

// NewPublisher returns the sink of edge edgeID's meter. The stream and bucket it creates
// have one replica unless SetReplicas says otherwise.
func NewPublisher(nc *nats.Conn, prefix, edgeID string) (*Publisher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Publisher{nc: nc, js: js, prefix: prefix, subject: billing.UsageSubject(prefix, edgeID), replicas: 1}, nil
}

// SetReplicas sets the replicas of the stream and bucket p creates (TOLLGATE_NATS_REPLICAS);
// call it before the first Publish.
func (p *Publisher) SetReplicas(n int) {
	p.mu.Lock()
	p.replicas = n
	p.mu.Unlock()
}

func (p *Publisher) ensure(ctx context.Context) (jetstream.KeyValue, error) {
	if !p.nc.IsConnected() {
		return nil, errNotConnected
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready {
		return p.kv, nil
	}
	if _, err := EnsureStream(ctx, p.js, p.prefix, p.replicas); err != nil {
		return nil, err
	}
	kv, err := EnsureTotalsBucket(ctx, p.js, p.prefix, p.replicas)
	if err != nil {
		return nil, err
	}
	p.kv, p.ready = kv, true
	return kv, nil
}

// unready makes the next call ensure the stream and bucket again, in case NATS lost them.
func (p *Publisher) unready() {
	p.mu.Lock()
	p.ready = false
	p.mu.Unlock()
}

// Publish stores a batch with msgID as its Nats-Msg-Id; a duplicate counts as stored.
func (p *Publisher) Publish(ctx context.Context, msgID string, data []byte) error {
	if _, err := p.ensure(ctx); err != nil {
		return err
	}
	_, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: p.subject, Data: data},
		jetstream.WithMsgID(msgID), jetstream.WithExpectStream(billing.UsageStream(p.prefix)))
	if err != nil {
		p.unready()
		return fmt.Errorf("publish usage batch %s: %w", msgID, err)
	}
	return nil
}

// PutTotals writes each total under billing.TotalsKey.
func (p *Publisher) PutTotals(ctx context.Context, totals []billing.EdgeTotal) error {
	kv, err := p.ensure(ctx)
	if err != nil {
		return err
	}
	for i := range totals {
		v, err := json.Marshal(&totals[i])
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, billing.TotalsKey(&totals[i]), v); err != nil {
			p.unready()
			return fmt.Errorf("put usage totals: %w", err)
		}
	}
	return nil
}

// Totals reads the edges' totals from the bucket; it is reconciliation's
// billing.EdgeTotalsSource.
type Totals struct {
	js     jetstream.JetStream
	prefix string
}

// NewTotals reads the totals bucket of prefix.
func NewTotals(js jetstream.JetStream, prefix string) *Totals { return &Totals{js: js, prefix: prefix} }

// EdgeTotals returns every edge's and boot's totals for the period's hours.
func (t *Totals) EdgeTotals(ctx context.Context, p billing.Period) ([]billing.EdgeTotal, error) {
	kv, err := t.js.KeyValue(ctx, billing.TotalsBucket(t.prefix))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil // no edge has published yet
	}
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, billing.TotalsFilter(p), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []billing.EdgeTotal
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("totals watch closed")
			}
			if e == nil {
				return out, nil // the initial values are all in
			}
			var v billing.EdgeTotal
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				return nil, fmt.Errorf("totals entry %s: %w", e.Key(), err)
			}
			out = append(out, v)
		}
	}
}

// Interface guards.
var (
	_ billing.EdgeTotalsSource = (*Totals)(nil)
)
