// Package reqlog is the edge's side of the request log: it decides which requests are
// logged (every one with a status ≥ 400, a sample of the others), takes the entries off
// the request path through a bounded channel, and publishes them about once a second as
// a batch (infra/reqlog) to JetStream.
//
// The request path never waits and, for a request that is not logged, allocates
// nothing: Tenant.Keep is an atomic add or a random draw, and Record is a channel send
// that drops (and counts) when the channel is full. Batches that NATS does not take are
// held in memory, at most MaxPending of them; past that new entries are dropped and
// counted until NATS takes the held ones. Nothing is written to disk: a log is worth less than
// usage, and memory stays bounded.
package reqlog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	randv2 "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	wire "tollgate/infra/reqlog"
	"tollgate/tenants"
)

// Sink stores a batch under its id; infra/reqlog.Publisher is the real one.
type Sink interface {
	Publish(ctx context.Context, msgID string, data []byte) error
}

// Config configures a Recorder. Zero fields take the default in their comment.
type Config struct {
	EdgeID string // required
	Sink   Sink   // required
	// Interval between batches. Default: 1s.
	Interval time.Duration
	// Buffer is how many entries wait for the next batch before more are dropped.
	// Default: 8192.
	Buffer int
	// MaxPending is how many unpublished batches are held while NATS is away. Default: 60.
	MaxPending int
	// Registry, when set, gets the recorder's counters.
	Registry prometheus.Registerer
	Logger   *slog.Logger // Default: slog.Default().
}

// Recorder collects the entries of one edge.
type Recorder struct {
	cfg     Config
	log     *slog.Logger
	bootID  string
	entries chan wire.Entry
	quit    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	tenants map[string]*Tenant
	seq     uint64
	pending []pendingBatch
	failing bool // the last publish failed: logged once until one succeeds

	logged, dropped prometheus.Counter
}

type pendingBatch struct {
	id   string
	data []byte
}

// New starts a recorder; Close stops it.
func New(cfg Config) *Recorder {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 8192
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 60
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	r := &Recorder{
		cfg: cfg, log: cfg.Logger.With("component", "reqlog"), bootID: hex.EncodeToString(b[:]),
		entries: make(chan wire.Entry, cfg.Buffer), quit: make(chan struct{}), done: make(chan struct{}),
		tenants: map[string]*Tenant{},
		logged: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_edge_request_log_entries_total",
			Help: "Requests the edge put in the request log."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_edge_request_log_dropped_total",
			Help: "Request log entries dropped: buffer full, or held batches given up while NATS was away."}),
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(r.logged, r.dropped)
	}
	go r.run()
	return r
}

// Tenant is a tenant's handle: its sample rate and what it did not log. The edge gets
// one when it compiles the tenant, so the request path looks nothing up.
type Tenant struct {
	id string
	// threshold: a successful call is logged when a random uint64 is below it.
	threshold        atomic.Uint64
	sampled, dropped atomic.Int64
}

// Tenant returns the handle of tenant id, the same one for every call.
func (r *Recorder) Tenant(id string) *Tenant {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tenants[id]
	if t == nil {
		t = &Tenant{id: id}
		t.SetSamplePercent(tenants.DefaultLogSamplePercent)
		r.tenants[id] = t
	}
	return t
}

// SetSamplePercent sets the share (0–100) of successful calls that are logged.
func (t *Tenant) SetSamplePercent(p float64) {
	switch {
	case p <= 0:
		t.threshold.Store(0)
	case p >= 100:
		t.threshold.Store(^uint64(0))
	default:
		t.threshold.Store(uint64(p / 100 * (1 << 63) * 2))
	}
}

// Keep reports whether a request with this status is logged; one that is not is counted
// as sampled out.
func (t *Tenant) Keep(status int) bool {
	if status >= 400 {
		return true
	}
	th := t.threshold.Load()
	if th == ^uint64(0) || (th != 0 && randv2.Uint64() < th) {
		return true
	}
	t.sampled.Add(1)
	return false
}

// Record queues an entry of t (Keep said yes) for the next batch, or drops and counts it
// when the buffer is full. It never blocks.
func (r *Recorder) Record(t *Tenant, e *wire.Entry) {
	e.TenantID = t.id
	select {
	case r.entries <- *e:
	default:
		t.dropped.Add(1)
		r.dropped.Inc()
	}
}

func (r *Recorder) run() {
	defer close(r.done)
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	var buf []wire.Entry
	for {
		select {
		case e := <-r.entries:
			buf = append(buf, e)
			if len(buf) >= wire.MaxBatchEntries {
				r.cut(buf)
				buf = nil
			}
		case <-tick.C:
			r.cut(buf)
			buf = nil
			r.publish(context.Background())
		case <-r.quit:
			for len(r.entries) > 0 {
				buf = append(buf, <-r.entries)
			}
			r.cut(buf)
			return
		}
	}
}

// cut makes a batch of buf and the tenants' not-logged counts and holds it for
// publishing. With MaxPending batches held already (NATS away), buf's entries are
// dropped and counted, and the counts wait in the tenants for a batch NATS takes: the
// oldest held batches are kept, so an outage costs its newest entries and nothing churns.
func (r *Recorder) cut(buf []wire.Entry) {
	now := time.Now().UTC()
	hour := now.Truncate(time.Hour)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) >= r.cfg.MaxPending {
		r.dropped.Add(float64(len(buf)))
		for i := range buf {
			if t := r.tenants[buf[i].TenantID]; t != nil {
				t.dropped.Add(1)
			}
		}
		return
	}
	var nl []wire.NotLogged
	for _, t := range r.tenants {
		s, d := t.sampled.Swap(0), t.dropped.Swap(0)
		if s != 0 || d != 0 {
			nl = append(nl, wire.NotLogged{TenantID: t.id, Hour: hour, Sampled: s, Dropped: d})
		}
	}
	if len(buf) == 0 && len(nl) == 0 {
		return
	}
	r.seq++
	b := &wire.Batch{ID: wire.BatchID(r.cfg.EdgeID, r.bootID, r.seq), EdgeID: r.cfg.EdgeID, Created: now, Entries: buf, NotLogged: nl}
	data, err := wire.EncodeBatch(b)
	if err != nil { // entries are plain values: cannot happen, but never lose them silently
		r.log.Error("request log batch not encoded", "err", err)
		return
	}
	r.logged.Add(float64(len(buf)))
	r.pending = append(r.pending, pendingBatch{id: b.ID, data: data})
}

// publish sends the held batches in order, stopping at the first failure.
func (r *Recorder) publish(ctx context.Context) {
	for {
		r.mu.Lock()
		if len(r.pending) == 0 {
			r.mu.Unlock()
			return
		}
		p := r.pending[0]
		r.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.cfg.Sink.Publish(pctx, p.id, p.data)
		cancel()
		r.mu.Lock()
		if err != nil {
			if !r.failing {
				r.log.Warn("request log batches not published; held for retry", "held", len(r.pending), "err", err)
			}
			r.failing = true
			r.mu.Unlock()
			return
		}
		r.failing = false
		if len(r.pending) > 0 && r.pending[0].id == p.id {
			r.pending = r.pending[1:]
		}
		r.mu.Unlock()
	}
}

// Pending is how many batches wait for NATS.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Close cuts the last batch and publishes what is held until ctx ends; what NATS did not
// take by then is lost (and logged). Entries recorded after Close are dropped.
func (r *Recorder) Close(ctx context.Context) {
	close(r.quit)
	<-r.done
	for ctx.Err() == nil && r.Pending() > 0 {
		r.publish(ctx)
		if r.Pending() > 0 {
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	if n := r.Pending(); n > 0 {
		r.log.Warn("request log batches lost at close", "batches", n)
	}
}

// TenantOf is the handle of a tenant being compiled, at its platform plan's sample rate;
// nil on a nil Recorder (the edge keeps no request log).
func (r *Recorder) TenantOf(t *tenants.Tenant) *Tenant {
	if r == nil {
		return nil
	}
	h := r.Tenant(t.ID)
	var p *tenants.LogPolicy
	if t.Limits != nil {
		p = t.Limits.Logs
	}
	h.SetSamplePercent(p.Sample())
	return h
}
