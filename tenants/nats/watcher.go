package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Update is one change of the bucket as a Watcher delivers it.
type Update struct {
	Key      string
	Value    []byte // nil: the key was deleted (or purged); never nil for a put. The caller's to keep.
	Revision uint64 // the KV revision (stream sequence); rises strictly along one Watcher
	// Pending is how many more updates the server had queued behind this one when it sent
	// it. An edge applying a burst (the initial load, a resync) can defer the expensive
	// part, such as recompiling a tenant, until an update with Pending 0.
	Pending uint64
}

// WatchConfig says what to watch and where to deliver it.
type WatchConfig struct {
	// Filter limits the watch to the keys it matches, e.g. tenants.TenantFilter(id).
	// Default: every key.
	Filter string
	// OnUpdate receives every update, one at a time, in revision order. Required.
	OnUpdate func(Update)
	// OnReady is called once, after OnUpdate has returned for the last entry of the initial
	// load; at once for an empty bucket. Optional: Ready() says the same.
	OnReady func()
	// OnError hears of the errors the Watcher recovers from by itself: the server being
	// unreachable, missed heartbeats, its consumer being lost. For logs and metrics.
	// Optional.
	OnError func(error)
	// BatchSize is how many messages the client asks for at once. Default: 1000.
	BatchSize int
	// AllRevisions starts the initial load with every message the stream holds rather than
	// each key's last one. With the bucket's history of 1 (Tollgate's buckets) that is the
	// same set, and the server need not work out each key's last message, which NATS 2.9
	// does by reading the whole stream: creating the consumer took seconds per 100,000
	// keys. With a longer history a key's older values arrive before its last, in order.
	AllRevisions bool
	// CreateTimeout is how long the first attempt to create the watch's consumer waits
	// for the server (later ones double it, up to 10 s). Default 1 s: a request sent just
	// as the server went away is lost without an answer. A filtered watch of a large
	// bucket wants more: NATS 2.9 walks the stream to create it, and every attempt given
	// up on still costs the server that walk.
	CreateTimeout time.Duration
	// From, when above 1, starts the watch at that revision instead of with a full load:
	// every message from there on, which is each key changed since with its latest
	// state, deleted keys as deletes (a caller that kept what an earlier watch delivered
	// up to From-1). The "initial load" OnReady ends is then that catching up.
	From uint64
}

// reconnectPoll is how often a Watcher checks whether its connection reconnected.
const reconnectPoll = 250 * time.Millisecond

// Watcher loads the bucket (or the part its filter selects) and then follows it, through
// outages of NATS, until stopped.
//
// What it guarantees. Updates arrive one at a time in revision order, and along one
// Watcher a revision is never delivered twice: when the connection or the server comes
// back, the Watcher recreates its consumer at the revision after the last one it
// delivered. It misses no key's latest state: an update made while it was cut off
// arrives when it resumes, but a key changed several times meanwhile arrives once, with
// its latest value (the bucket keeps one revision per key), and a deleted key arrives as
// a delete. Two limits: delete markers removed from the bucket (PurgeDeletes) while a
// Watcher is cut off cannot be seen by it, and a bucket deleted and recreated restarts
// revisions, which a running Watcher does not notice; rebuild the bucket with Resync
// instead. A new Watcher (a restarted edge) starts over with a full load, so what it
// delivers repeats what an earlier one did: de-duplicate by the entry's Rev. The initial
// load includes the delete markers the bucket still holds, so a delete may name a key
// the caller never had.
type Watcher struct {
	js     jetstream.JetStream
	stream string
	prefix string
	cfg    WatchConfig

	ready    chan struct{}
	stop     chan struct{}
	done     chan struct{} // closed when run has returned and no callback runs any more
	stopOnce sync.Once

	// mu serializes deliveries and retires a replaced consumer: its callback delivers
	// only while gen is still the one it was started with.
	mu  sync.Mutex
	gen uint64

	// Used under mu by the consume callback, and by start between consumers.
	initDone    bool
	initPending uint64
	received    uint64
	last        atomic.Uint64 // the last revision delivered, read by run to resume after it
}

// Watch starts watching bucket and returns at once. It does not fail when NATS or the
// bucket is not there yet: it keeps trying (reporting each failure to OnError) until it
// gets the initial load, so an edge booted during an outage becomes ready when NATS
// returns. It stops when ctx ends or Stop is called.
func Watch(ctx context.Context, js jetstream.JetStream, bucket string, cfg WatchConfig) (*Watcher, error) {
	if cfg.OnUpdate == nil {
		return nil, fmt.Errorf("watch %s: OnUpdate is required", bucket)
	}
	if cfg.Filter == "" {
		cfg.Filter = ">"
	}
	if !validFilter(cfg.Filter) {
		return nil, fmt.Errorf("watch %s: %q is not a valid key filter", bucket, cfg.Filter)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	w := &Watcher{
		js:     js,
		stream: streamName(bucket),
		prefix: subjectPrefix(bucket),
		cfg:    cfg,
		ready:  make(chan struct{}),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if cfg.From > 1 {
		w.last.Store(cfg.From - 1)
	}
	go w.run(ctx)
	return w, nil
}

// Ready is closed once the initial load has been delivered (after OnReady returned).
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Stop ends the watch and returns when no callback runs any more. Do not call it from a
// callback.
func (w *Watcher) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	from := w.cfg.From // the revision to resume at; 0: the initial load
	for {
		cons := w.start(ctx, from)
		if cons == nil {
			return
		}
		// The ordered consumer lives on one server. When that server is lost, nats.go
		// notices (missed heartbeats, a reconnect) and recreates the consumer, but it
		// retries a failing create in the background without a word: against a 2.9
		// cluster that left a watch silent for good. So a lost consumer is replaced here
		// instead, from the revision after the last one delivered, with the errors
		// reported and the retries paced by start's backoff.
		lost := make(chan struct{}, 1)
		w.mu.Lock()
		gen := w.gen
		w.mu.Unlock()
		cc, err := cons.Consume(func(m jetstream.Msg) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.gen == gen {
				w.handle(m)
			}
		},
			jetstream.PullMaxMessages(w.cfg.BatchSize),
			// A consumer lost with its server shows as missed heartbeats: two of them.
			jetstream.PullHeartbeat(2*time.Second),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				w.report(err)
				if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
					errors.Is(err, jetstream.ErrConsumerNotFound) {
					select {
					case lost <- struct{}{}:
					default:
					}
				}
			}),
		)
		if err != nil {
			// Consume only fails on bad options; the consumer itself was created above.
			w.report(fmt.Errorf("watch %s: %w", w.stream, err))
			return
		}
		// After a reconnect nats.go recreates the consumer the same silent way, so a
		// reconnect is a lost consumer too.
		reconnects := w.js.Conn().Stats().Reconnects
		tick := time.NewTicker(reconnectPoll)
		again := false
		// Taken once: each call of Closed starts a goroutine that lives as long as the
		// consumer, and this loop wakes four times a second.
		closed := cc.Closed()
	wait:
		for {
			select {
			case <-ctx.Done():
			case <-w.stop:
			case <-closed: // the connection was closed for good, or the consumer gave up
				again = !w.js.Conn().IsClosed()
			case <-lost:
				again = true
			case <-tick.C:
				if w.js.Conn().Stats().Reconnects == reconnects || !w.js.Conn().IsConnected() {
					continue
				}
				again = true
			}
			break wait
		}
		tick.Stop()
		cc.Stop()
		// Closed can take as long as a create nats.go has in flight (up to 10 s), so the
		// old consumer is retired by generation instead: once gen moves on, none of its
		// messages is delivered, and a callback running now has finished.
		w.mu.Lock()
		w.gen++
		w.mu.Unlock()
		go func() {
			<-closed
			// The server drops an idle consumer by itself (after 5 minutes); don't wait for that.
			if info := cons.CachedInfo(); info != nil {
				dctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = w.js.DeleteConsumer(dctx, w.stream, info.Name)
				cancel()
			}
		}()
		if !again {
			return
		}
		from = w.last.Load() + 1
		w.report(fmt.Errorf("watch %s: consumer lost; resuming at revision %d", w.stream, from))
	}
}

// start creates the ordered consumer, retrying until it succeeds or the watch is stopped,
// and signals readiness at once when there is nothing to load. While the connection is
// down it waits for it instead of sending requests that can only time out. from > 0
// resumes after a lost consumer: every message from that revision on (with one revision
// kept per key, that is each changed key's latest state).
func (w *Watcher) start(ctx context.Context, from uint64) jetstream.Consumer {
	// A request sent just as the server went away is lost without an answer, so the
	// first attempts time out quickly; later ones allow a slow server more.
	const minBackoff, minTimeout = 250 * time.Millisecond, time.Second
	backoff, timeout := minBackoff, max(minTimeout, w.cfg.CreateTimeout)
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{w.prefix + w.cfg.Filter}, // one filter: NATS 2.9 takes no list
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	}
	if w.cfg.AllRevisions {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
		if w.cfg.Filter == ">" {
			// The stream holds the bucket's keys alone, and a consumer with no filter
			// is made from the stream's counts instead of a walk of its subjects.
			cfg.FilterSubjects = nil
		}
	}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	for {
		wait := 100 * time.Millisecond
		if w.js.Conn().IsConnected() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			cons, err := w.js.OrderedConsumer(cctx, w.stream, cfg)
			cancel()
			if err == nil {
				if !w.initDone {
					// Resumed during the initial load: what was delivered plus what is
					// pending now bounds it.
					w.initPending = w.received + cons.CachedInfo().NumPending
					if cons.CachedInfo().NumPending == 0 {
						w.markReady()
					}
				}
				return cons
			}
			w.report(fmt.Errorf("watch %s: %w", w.stream, err))
			wait, backoff = backoff, min(2*backoff, 5*time.Second)
			timeout = max(min(2*timeout, 10*time.Second), w.cfg.CreateTimeout)
		} else {
			backoff, timeout = minBackoff, max(minTimeout, w.cfg.CreateTimeout)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.stop:
			return nil
		case <-time.After(wait):
		}
	}
}

// handle turns one stream message into an Update.
func (w *Watcher) handle(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		w.report(fmt.Errorf("watch %s: %w", w.stream, err))
		return
	}
	u := Update{
		// A copy: the key is kept as long as its entry (the edge keeps one per route),
		// and as a substring it would keep the whole subject, prefix and all.
		Key:      strings.Clone(strings.TrimPrefix(m.Subject(), w.prefix)),
		Revision: meta.Sequence.Stream,
		Pending:  meta.NumPending,
	}
	h := m.Headers()
	if !isDelete(h.Get(kvOperation), h.Get(markerReason)) {
		u.Value = m.Data()
		if u.Value == nil {
			u.Value = []byte{}
		}
	}
	w.cfg.OnUpdate(u)
	w.last.Store(u.Revision)
	if !w.initDone {
		w.received++
		// Writes during the load can keep Pending above 0; the count taken when the
		// consumer was created bounds the load regardless.
		if meta.NumPending == 0 || w.received >= w.initPending {
			w.markReady()
		}
	}
}

func (w *Watcher) markReady() {
	w.initDone = true
	if w.cfg.OnReady != nil {
		w.cfg.OnReady()
	}
	close(w.ready)
}

func (w *Watcher) report(err error) {
	if w.cfg.OnError != nil {
		w.cfg.OnError(err)
	}
}
