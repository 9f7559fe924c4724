package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
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
	return natsconn.EnsureStream(ctx, js, jetstream.StreamConfig{
		Name:        Stream(prefix),
		Description: "Tollgate usage batches, one message per edge flush; folded into rollups by `tollgate billing`",
		Subjects:    []string{Subjects(prefix)},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      StreamMaxAge,
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		Replicas:    replicas,
	})
}

// EnsureTotalsBucket creates the totals bucket "<prefix>_meter_totals" (history 1, file
// storage, entries kept TotalsMaxAge, replicas copies, raised and never lowered) or
// brings the existing one to these settings.
func EnsureTotalsBucket(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) (jetstream.KeyValue, error) {
	// JetStream keeps a KV bucket in the stream "KV_<bucket>".
	r, err := natsconn.Replicas(ctx, js, "KV_"+TotalsBucket(prefix), replicas)
	if err != nil {
		return nil, fmt.Errorf("ensure kv bucket %s: %w", TotalsBucket(prefix), err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      TotalsBucket(prefix),
		Description: "Tollgate edges' running usage totals, <YYYYMM>.<tenant>.<edge>.<boot>.<DDHH>; read by `tollgate billing reconcile`",
		History:     1,
		TTL:         TotalsMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    r,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure kv bucket %s: %w", TotalsBucket(prefix), err)
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
	return &Publisher{nc: nc, js: js, prefix: prefix, subject: Subject(prefix, edgeID), replicas: 1}, nil
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
		jetstream.WithMsgID(msgID), jetstream.WithExpectStream(Stream(p.prefix)))
	if err != nil {
		p.unready()
		return fmt.Errorf("publish usage batch %s: %w", msgID, err)
	}
	return nil
}

// PutTotals writes each total under TotalsKey.
func (p *Publisher) PutTotals(ctx context.Context, totals []EdgeTotal) error {
	kv, err := p.ensure(ctx)
	if err != nil {
		return err
	}
	for i := range totals {
		v, err := json.Marshal(&totals[i])
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, TotalsKey(&totals[i]), v); err != nil {
			p.unready()
			return fmt.Errorf("put usage totals: %w", err)
		}
	}
	return nil
}
