package reqlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
	"tollgate/infra/usage"
)

// Stream settings.
const (
	// DuplicateWindow is how long JetStream remembers a batch id and drops a republished
	// copy; beyond it the store's batch table still inserts a batch only once.
	DuplicateWindow = 10 * time.Minute
	// StreamMaxAge is how long batches wait in the stream for billing to store them: a
	// log is worth less than usage, so a day rather than usage's two weeks.
	StreamMaxAge = 24 * time.Hour
	// StreamMaxMsgs bounds the stream by batches (a day of a hundred edges' flushes);
	// the oldest go first. Not a byte bound: a stream's MaxBytes is reserved from the
	// server's JetStream storage when the stream is made, and would take that much from
	// the usage stream's room whether the log used it or not.
	StreamMaxMsgs = 10_000_000
)

// Stream is the stream of request log batches: "<prefix>_reqlog".
func Stream(prefix string) string { return prefix + "_reqlog" }

// Subjects is the stream's subject filter: "<prefix>.reqlog.>".
func Subjects(prefix string) string { return prefix + ".reqlog.>" }

// Subject is the subject an edge publishes its batches on: "<prefix>.reqlog.<edge>".
func Subject(prefix, edgeID string) string { return prefix + ".reqlog." + usage.Token(edgeID) }

// EnsureStream creates the stream or brings an existing one to these settings: file
// storage, limits retention, DuplicateWindow, StreamMaxAge, StreamMaxMsgs and replicas
// copies (raised on an existing stream, never lowered: see natsconn.Replicas).
func EnsureStream(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) (jetstream.Stream, error) {
	return natsconn.EnsureStream(ctx, js, jetstream.StreamConfig{
		Name:        Stream(prefix),
		Description: "Tollgate request log batches, one message per edge flush; stored in Postgres by `tollgate billing`",
		Subjects:    []string{Subjects(prefix)},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      StreamMaxAge,
		MaxMsgs:     StreamMaxMsgs,
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		Replicas:    replicas,
	})
}

// errNotConnected is returned at once while the connection is down, so the edge keeps
// the batch for later instead of waiting out a publish timeout.
var errNotConnected = errors.New("nats: not connected")

// Publisher writes an edge's batches to the stream, creating it on first use (and again
// after an error, in case NATS lost it).
type Publisher struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	prefix   string
	subject  string
	replicas int

	mu    sync.Mutex
	ready bool
}

// NewPublisher returns the publisher of edge edgeID with replicas copies of the stream.
func NewPublisher(nc *nats.Conn, prefix, edgeID string, replicas int) (*Publisher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Publisher{nc: nc, js: js, prefix: prefix, subject: Subject(prefix, edgeID), replicas: replicas}, nil
}

// Publish stores a batch with msgID as its Nats-Msg-Id; a duplicate counts as stored.
func (p *Publisher) Publish(ctx context.Context, msgID string, data []byte) error {
	if !p.nc.IsConnected() {
		return errNotConnected
	}
	p.mu.Lock()
	if !p.ready {
		if _, err := EnsureStream(ctx, p.js, p.prefix, p.replicas); err != nil {
			p.mu.Unlock()
			return err
		}
		p.ready = true
	}
	p.mu.Unlock()
	_, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: p.subject, Data: data},
		jetstream.WithMsgID(msgID), jetstream.WithExpectStream(Stream(p.prefix)))
	if err != nil {
		p.mu.Lock()
		p.ready = false
		p.mu.Unlock()
		return fmt.Errorf("publish request log batch %s: %w", msgID, err)
	}
	return nil
}
