// Package meter counts the edge's requests for billing: per tenant, route, consumer,
// UTC hour and status class, with body bytes in and out and the run time of the tenant's
// functions (RecordFunction, in whole microseconds) (and, through RecordBytes, the
// bytes of a long-lived exchange without another request), in a memory-mapped state
// file that outlives the process (see state.go); and about once a second cuts the counts
// into a usage.Batch and hands it to a Sink (JetStream, see infra/usage),
// spooling it to local disk whenever the sink cannot take it and replaying the spool, in
// order and with the original ids, once it can. A run killed without warning leaves its
// counts and totals in the state file, and the next run on the same spool directory
// hands them over exactly once.
//
// # The hot path
//
// Record takes no lock shared by all cores and, in steady state, allocates nothing.
// Counts live in cells of the state file, found through shards (a few per core), each a
// small map from key to cell under its own mutex; a
// request picks a shard by a hash of its goroutine's stack address (see shardHint), so
// cores rarely meet on one mutex, and the same cell may be counted in several shards (the flush adds
// them up). The edge resolves a *Route handle per (tenant, route) and a *Consumer handle
// per consumer when it compiles a snapshot, so the per-request key is 24 bytes of plain
// memory — the two handles, and the hour, status class and origin packed in a word —
// hashed and compared without touching a string. Nothing is published, encoded, synced
// or logged per request: a count is four additions to mapped memory, which the kernel
// writes back on its own and the flusher fsyncs once per flush.
//
// # Exactly once
//
// Each batch has a deterministic id — edge id, boot id, sequence — used as its
// Nats-Msg-Id and as billing's batch key. A batch whose publish timed out (and may have
// been stored) is spooled and published again later with the same id: JetStream drops it
// within its duplicate window, billing's usage_batches key after it. So a batch is
// folded once however many times it is published.
//
// # When the spool is full: drop the oldest
//
// The spool is bounded (Config.SpoolMaxBytes). When a new batch does not fit, the oldest
// spooled segments are deleted to make room, and every request they held is counted as
// dropped: in tollgate_meter_dropped_requests_total{reason="spool_full"} and in the
// edge's totals (EdgeTotal.Dropped, per tenant and hour), which reconciliation reads. The
// edge never stops counting or serving: after an outage longer than the spool holds, the
// most recent usage is kept and the loss is at the start of the outage, bounded and
// accounted for per tenant-hour. (The alternative, refusing new batches, would lose the
// end of the outage instead with no better accounting, and leave the edge unable to
// meter until NATS returned.)
//
// Requests recorded after Close are not metered and are counted under
// reason="closed"; the edge should Close the meter after its listeners have drained.
//
// # Running totals
//
// The meter keeps, per tenant and hour, everything it handed over since boot (published,
// spooled or dropped), in the state file, and publishes those totals through the Sink
// after each flush that reaches it; Totals returns them. Reconciliation compares them
// with what billing folded. Totals still unpublished at Close (NATS down) are saved in
// the spool directory and published by the next run; those of a run that died are
// worked out from its state file by the next run and published the same way.
package meter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"tollgate/infra/usage"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// Sink is where batches and totals go: usage.Publisher in production.
type Sink interface {
	// Publish stores one encoded batch under msgID (its Nats-Msg-Id) and returns nil
	// only once it is durably accepted; a duplicate of a stored id is success. It should
	// fail fast while the transport is down.
	Publish(ctx context.Context, msgID string, data []byte) error
	// PutTotals records running totals; each replaces the previous value of its key
	// (usage.TotalsKey).
	PutTotals(ctx context.Context, totals []usage.EdgeTotal) error
}

// Config configures a Meter. Zero fields take the default in their comment.
type Config struct {
	// EdgeID names the edge in batch ids and totals. Required.
	EdgeID string
	// Sink receives batches and totals. Required.
	Sink Sink
	// SpoolDir holds batches the sink could not take, one directory per edge. Required.
	SpoolDir string
	// SpoolMaxBytes bounds the spool; when full the oldest batches are dropped (see the
	// package doc). Default: 256 MiB.
	SpoolMaxBytes int64
	// SpoolSegmentBytes is the size of one spool file, the unit that is dropped when the
	// spool is full. Default: SpoolMaxBytes/16, at least 64 KiB.
	SpoolSegmentBytes int64
	// NoSpoolReserve leaves the spool's disk space to be taken as batches come instead of
	// holding SpoolMaxBytes of it from the start; a disk that fills up while the sink is
	// away then loses usage. Default: false (reserved).
	NoSpoolReserve bool
	// FlushInterval is how often counts are cut into a batch. Default: 1s.
	FlushInterval time.Duration
	// PublishTimeout bounds one publish. Default: 5s.
	PublishTimeout time.Duration
	// KeyUseInterval is how often at most a use of one API key is reported (Key.Use):
	// the precision of keys.last_used_at. Whole seconds. Default: 30s.
	KeyUseInterval time.Duration
	// NoKeyUses turns the noting of key uses off: Key returns nil, keys cost nothing
	// per request for it, and keys.last_used_at stays where it is. Default: false
	// (noted).
	NoKeyUses bool
	// DenseLatency makes all of a route's latency bins at its first record instead of
	// the chunks its times fall in (latency.go): some 17 KiB a route in the hour it is
	// used, against about 1 KiB. Default: false (chunks).
	DenseLatency bool
	// TotalsRetention is how long running totals of a past hour are kept once
	// published. Default: 72h.
	TotalsRetention time.Duration
	// StateChunkBytes is the unit the state file grows by (a multiple of 4 KiB, 64 KiB
	// to 64 MiB). Default: 1 MiB.
	StateChunkBytes int
	// StateMaxBytes bounds the state file; cells that do not fit are counted on the heap,
	// where a crash loses them (tollgate_meter_state_fallback_total). Default: 256 MiB.
	StateMaxBytes int64
	// Shards is the number of count shards, rounded up to a power of two.
	// Default: 4 × GOMAXPROCS, at least 8.
	Shards int
	// BootID tells this run of the edge from earlier ones in batch ids. Default: random.
	BootID string
	// Registry receives the meter's metrics. Default: none.
	Registry prometheus.Registerer
	// Logger. Default: slog.Default().
	Logger *slog.Logger
}

// Meter counts requests and ships them as usage batches. Its methods are safe for
// concurrent use.
type Meter struct {
	cfg    Config
	log    *slog.Logger
	shards []shard
	mask   uint32

	routesMu  sync.Mutex
	routes    map[routeKey]*Route // keyed by the handle's own strings
	tenantIDs map[string]string   // one copy of each tenant's id for all its route handles
	consumers map[routeKey]*Consumer
	lookupC   sync.Map // routeKey → *Consumer, for Meter.Consumer without the lock

	// st is the state file; nil when it could not be made (cells live on the heap).
	st *stateFile

	// Flusher state, guarded by cycleMu.
	cycleMu sync.Mutex
	spool   *spool
	closed  bool // the spool is released
	seq     uint64
	marked  []*cellRec // the cells of the batches in flight
	// inherited: totals earlier runs saved at Close and could not publish.
	inherited      []usage.EdgeTotal
	inheritedFiles []string

	totalsMu sync.Mutex
	totals   map[totalKey]*totalRec

	keys keyUses   // keyuse.go
	lat  latencies // latency.go

	late      atomic.Int64
	lateBytes atomic.Int64 // RecordBytes calls after Close
	stop      chan struct{}
	done      chan struct{}
	runCtx    context.Context
	cancel    context.CancelFunc
	once      sync.Once

	m metrics
}

// Route is the meter's handle for one route of a tenant (or, with an empty route id, for
// the tenant's requests that matched no route). Get it once per compiled route with
// Meter.Route and call Record per request.
type Route struct {
	m        *Meter
	tenantID string
	routeID  string
	lat      atomic.Pointer[latencyHist] // latency.go
}

// Consumer is the meter's handle for one consumer of a tenant. Get it once per compiled
// consumer with Meter.Consumer; a nil *Consumer stands for traffic without one.
type Consumer struct {
	tenantID string
	id       string
}

type routeKey struct{ tenant, route string }

// cellKey is 24 bytes of plain memory, so the shard maps hash it with one memhash: the
// handles stand for the strings, and meta packs hour<<8 | class<<1 | upstream.
type cellKey struct {
	route    *Route
	consumer *Consumer
	meta     int64
}

type shard struct {
	mu     sync.Mutex
	closed bool
	cells  map[cellKey]*cellRec
	_      [128 - 24]byte // keep shards on their own cache lines
}

type aggKey struct {
	tenant, route, consumer string
	hour                    int64
	class                   uint8
}

type totalKey struct {
	tenant string
	hour   int64
}

// New starts a meter: it opens (and locks) the spool, replays what a previous run left
// in it on the first flush, and flushes every FlushInterval until Close.
func New(cfg Config) (*Meter, error) {
	if cfg.EdgeID == "" || cfg.Sink == nil || cfg.SpoolDir == "" {
		return nil, errors.New("meter: Config needs EdgeID, Sink and SpoolDir")
	}
	if cfg.SpoolMaxBytes <= 0 {
		cfg.SpoolMaxBytes = 256 << 20
	}
	if cfg.SpoolSegmentBytes <= 0 {
		cfg.SpoolSegmentBytes = max(cfg.SpoolMaxBytes/16, 64<<10)
	}
	cfg.SpoolSegmentBytes = min(cfg.SpoolSegmentBytes, cfg.SpoolMaxBytes)
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = time.Second
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.KeyUseInterval < time.Second {
		cfg.KeyUseInterval = 30 * time.Second
	}
	if cfg.TotalsRetention <= 0 {
		cfg.TotalsRetention = 72 * time.Hour
	}
	if cfg.StateChunkBytes <= 0 {
		cfg.StateChunkBytes = defaultStateChunk
	}
	cfg.StateChunkBytes = min(max((cfg.StateChunkBytes+4095)/4096*4096, minStateChunk), maxStateChunk)
	if cfg.StateMaxBytes <= 0 {
		cfg.StateMaxBytes = 256 << 20
	}
	if cfg.Shards <= 0 {
		cfg.Shards = max(4*runtime.GOMAXPROCS(0), 8)
	}
	n := 1
	for n < cfg.Shards && n < 1024 {
		n <<= 1
	}
	if cfg.BootID == "" {
		var b [8]byte
		rand.Read(b[:])
		cfg.BootID = hex.EncodeToString(b[:])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Meter{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "meter", "edge_id", cfg.EdgeID, "boot_id", cfg.BootID),
		shards:    make([]shard, n),
		mask:      uint32(n - 1),
		routes:    map[routeKey]*Route{},
		tenantIDs: map[string]string{},
		consumers: map[routeKey]*Consumer{},
		totals:    map[totalKey]*totalRec{},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		m:         newMetrics(),
	}
	m.keys.every = int64(cfg.KeyUseInterval / time.Second)
	for i := range m.shards {
		m.shards[i].cells = map[cellKey]*cellRec{}
	}
	if cfg.Registry != nil {
		if err := m.m.register(cfg.Registry); err != nil {
			return nil, err
		}
		late := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_meter_latency_late_total", Help: "Request times not recorded because their hour's slot had moved on two hours (a stream open across two hour turns); their requests are counted.",
		}, func() float64 { return float64(m.lat.late.Load()) })
		held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_meter_latency_routes", Help: "Routes whose latency counters the meter holds: those that recorded a time in the last hour and were not dropped since.",
		}, func() float64 { return float64(m.lat.held()) })
		for _, c := range []prometheus.Collector{late, held} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("meter: register metrics: %w", err)
			}
		}
	}
	sp, err := openSpool(cfg.SpoolDir, cfg.SpoolMaxBytes, cfg.SpoolSegmentBytes, !cfg.NoSpoolReserve, m.log)
	if err != nil {
		return nil, err
	}
	m.spool = sp
	m.recoverState()
	m.loadTotals()
	st, err := createState(filepath.Join(cfg.SpoolDir, stateFileName), cfg.EdgeID, cfg.BootID, cfg.StateChunkBytes, cfg.StateMaxBytes, sp.lend)
	if err != nil {
		// Metering goes on, in memory only: a crash of this run loses up to a flush of counts.
		m.log.Error("meter: no state file; counts live on the heap until the next start, and a crash loses those not yet handed over", "dir", cfg.SpoolDir, "err", err)
		m.m.stateFallback.Inc()
	} else {
		m.st = st
	}
	m.spoolGauges()
	if k := sp.Len(); k > 0 {
		m.log.Info("meter: spool holds batches of an earlier run; replaying them when the sink takes them", "batches", k, "bytes", sp.Bytes())
	}
	m.runCtx, m.cancel = context.WithCancel(context.Background())
	go m.run()
	return m, nil
}

// EdgeID and BootID identify the meter's batches.
func (m *Meter) EdgeID() string { return m.cfg.EdgeID }
func (m *Meter) BootID() string { return m.cfg.BootID }

// Route returns the handle of a tenant's route (routeID "" for requests of the tenant
// that matched no route). The same ids give the same handle until it is released
// (Route.Release). Call it when compiling, not per request. An edge holds one per route
// it has compiled: the handles of a tenant share one copy of its id, and the map holds
// nothing more than them.
func (m *Meter) Route(tenantID, routeID string) *Route {
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	r := m.routes[routeKey{tenantID, routeID}]
	if r == nil {
		tid, ok := m.tenantIDs[tenantID]
		if !ok {
			tid = strings.Clone(tenantID)
			m.tenantIDs[tid] = tid
		}
		r = &Route{m: m, tenantID: tid, routeID: strings.Clone(routeID)}
		m.routes[routeKey{r.tenantID, r.routeID}] = r
	}
	return r
}

// NewConsumer makes a handle for a tenant's consumer. Handles are not interned: two
// handles of the same consumer count in separate cells that the flush adds up, so the
// edge may make one per compiled consumer, or per cached verified token of a JWT caller
// ("<iss>|<claim>"), without any shared map growing with the callers it has seen. The
// handle is garbage once the edge drops it and its cells have been flushed.
func NewConsumer(tenantID, consumerID string) *Consumer {
	return &Consumer{tenantID: strings.Clone(tenantID), id: strings.Clone(consumerID)}
}

// Consumer returns an interned handle of a tenant's consumer: the same ids give the same
// handle, for the life of the meter (Meter.Record uses it; an edge with handles of its
// own should prefer NewConsumer).
func (m *Meter) Consumer(tenantID, consumerID string) *Consumer {
	if v, ok := m.lookupC.Load(routeKey{tenantID, consumerID}); ok {
		return v.(*Consumer)
	}
	k := routeKey{tenantID, consumerID}
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	c := m.consumers[k]
	if c == nil {
		c = NewConsumer(tenantID, consumerID)
		m.consumers[k] = c
		m.lookupC.Store(k, c)
	}
	return c
}

// Record counts one request when the caller has no handles at hand (consumerID "" for
// none); it costs a lock and two map lookups more than Route.Record.
func (m *Meter) Record(tenantID, routeID, consumerID string, status int, upstream bool, bytesIn, bytesOut int64, at time.Time) {
	r := m.Route(tenantID, routeID)
	var c *Consumer
	if consumerID != "" {
		c = m.Consumer(tenantID, consumerID)
	}
	r.Record(c, status, upstream, bytesIn, bytesOut, at)
}

// Record counts one request of the route: consumer is the authenticated consumer's handle
// (nil for none; it must be of the route's tenant), status the response's HTTP status,
// upstream whether the upstream produced the response (false for the edge's own answers,
// see usage.Billable), bytesIn and bytesOut the request and response body bytes that
// went through, at the time the request arrived (it decides the hour; zero means now).
func (r *Route) Record(consumer *Consumer, status int, upstream bool, bytesIn, bytesOut int64, at time.Time) {
	r.add(consumer, status, upstream, 1, bytesIn, bytesOut, 0, at)
}

// RecordFunction is Record for a request that ran the tenant's functions for fn (the
// guest's run time): it is counted in whole microseconds, rounded up, so a request whose
// functions ran at all counts at least 1 µs.
func (r *Route) RecordFunction(consumer *Consumer, status int, upstream bool, bytesIn, bytesOut int64, fn time.Duration, at time.Time) {
	r.add(consumer, status, upstream, 1, bytesIn, bytesOut, FunctionUS(fn), at)
}

// FunctionUS is fn in the unit it is metered in: whole microseconds, rounded up; 0 for
// none.
func FunctionUS(fn time.Duration) int64 {
	if fn <= 0 {
		return 0
	}
	return int64((fn + time.Microsecond - 1) / time.Microsecond)
}

// RecordBytes adds bytes to the route's counts without counting a request: the bytes a
// long-lived exchange (a WebSocket tunnel) relayed since it was last recorded, whose
// request was counted by Record when it started. at is when the bytes went through, so
// a tunnel open for a day spreads its bytes over the hours it carried them.
func (r *Route) RecordBytes(consumer *Consumer, status int, upstream bool, bytesIn, bytesOut int64, at time.Time) {
	if bytesIn == 0 && bytesOut == 0 {
		return
	}
	r.add(consumer, status, upstream, 0, bytesIn, bytesOut, 0, at)
}

func (r *Route) add(consumer *Consumer, status int, upstream bool, requests, bytesIn, bytesOut, fnUS int64, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	u := at.Unix()
	h := u / 3600
	if u < 0 && u%3600 != 0 {
		h--
	}
	meta := h<<8 | int64(usage.StatusClass(status))<<1
	if upstream {
		meta |= 1
	}
	k := cellKey{route: r, consumer: consumer, meta: meta}
	m := r.m
	s := &m.shards[shardHint()&m.mask]
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if requests > 0 {
			m.late.Add(requests)
			m.m.droppedClosed.Add(float64(requests))
		} else {
			m.lateBytes.Add(1)
		}
		return
	}
	c := s.cells[k]
	if c == nil {
		c = m.newCell(k)
		s.cells[k] = c
	}
	c.req += requests
	c.in += bytesIn
	c.out += bytesOut
	c.fn += fnUS
	s.mu.Unlock()
}

// newCell makes the record of a cell, in the state file when it has room.
func (m *Meter) newCell(k cellKey) *cellRec {
	if m.st != nil {
		cid := ""
		if k.consumer != nil {
			cid = k.consumer.id
		}
		if c := m.st.newCell(k.route.tenantID, k.route.routeID, cid, k.meta>>8, uint8(k.meta>>1&0x7f), k.meta&1 == 1); c != nil {
			return c
		}
	}
	m.m.stateFallback.Inc()
	return &cellRec{}
}

// shardHint picks a shard for the calling goroutine from the address of its stack: two
// goroutines running at once on different cores have different stacks and so, mostly,
// different shards, at the cost of a multiply (the runtime's random generator costs
// several times more, and there is no cheap way to ask which core we are on). A stack
// that moves when it grows just moves to another shard; a collision only means two
// goroutines share a mutex.
func shardHint() uint32 {
	var x byte
	a := uint64(uintptr(unsafe.Pointer(&x))) >> 10 // stack frames differ below 1 KiB
	return uint32((a * 0x9e3779b97f4a7c15) >> 40)
}

func (m *Meter) run() {
	defer close(m.done)
	t := time.NewTicker(m.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.cycle(m.runCtx)
		}
	}
}

// Flush cuts the counts so far into a batch and delivers it now (and the spool before it),
// spooling what the sink does not take. It returns an error only when a batch could be
// neither published nor spooled (and was dropped).
func (m *Meter) Flush(ctx context.Context) error { return m.cycle(ctx) }

// Close stops counting (later Records are dropped and counted as such), flushes the last
// counts and delivers the spool while ctx allows, spooling whatever the sink does not
// take by then, publishes the totals, and releases the spool. Nothing counted is lost
// unless it errors. It may be called more than once.
func (m *Meter) Close(ctx context.Context) error {
	var err error
	m.once.Do(func() {
		for i := range m.shards {
			s := &m.shards[i]
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
		}
		m.cancel() // abort a publish in progress: its batch is spooled
		close(m.stop)
		<-m.done
		err = m.cycle(ctx)
		m.cycleMu.Lock()
		if serr := m.saveTotals(); serr != nil && err == nil {
			err = serr
		}
		m.spool.close()
		m.closed = true
		m.releaseState(err == nil)
		m.cycleMu.Unlock()
		if n := m.late.Load(); n > 0 {
			m.log.Warn("meter: requests recorded after Close were not metered", "requests", n)
		}
		if n := m.lateBytes.Load(); n > 0 {
			m.log.Warn("meter: tunnel bytes recorded after Close were not metered", "records", n)
		}
	})
	return err
}

// releaseState moves what Totals reads to the heap and unmaps the state file; a clean
// close (everything handed over, the totals published or saved) deletes it.
func (m *Meter) releaseState(clean bool) {
	if m.st == nil {
		return
	}
	m.totalsMu.Lock()
	for k, t := range m.totals {
		c := *t
		c.units = 0
		m.totals[k] = &c
	}
	m.totalsMu.Unlock()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		clear(s.cells)
		s.mu.Unlock()
	}
	m.st.close(clean)
	m.st = nil
}

// cycle is one flush: cut the counts into batches and make them durable in flight,
// replay the spool, hand the new batches over (publish or spool), commit, publish totals.
func (m *Meter) cycle(ctx context.Context) error {
	m.cycleMu.Lock()
	defer m.cycleMu.Unlock()
	if m.closed {
		return errors.New("meter: closed")
	}
	now := time.Now().UTC()
	first := m.seq + 1
	acc := m.collect(now, first)
	uses := m.takeKeyUses()
	lats := m.collectLatencies()
	var out []encodedBatch
	var firstErr error
	if len(acc) > 0 || len(uses) > 0 || len(lats) > 0 {
		var dropped []*usage.Batch
		var next uint64
		out, next, dropped = cutBatches(m.cfg.EdgeID, m.cfg.BootID, first, now, acc.records(), false)
		// After the counts' batches, so a restart that rebuilds those from the state file
		// numbers them the same; the key uses' numbers are then left unused.
		var err error
		if out, next, err = cutKeyUses(out, m.cfg.EdgeID, m.cfg.BootID, next, now, uses); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("meter: encode key uses: %w", err)
		}
		if out, next, err = cutLatencies(out, m.cfg.EdgeID, m.cfg.BootID, next, now, lats); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("meter: encode latencies: %w", err)
		}
		m.seq = next - 1
		for _, b := range dropped {
			// Cannot happen with the ids the edge has; count it rather than lose it silently.
			m.dropBatch(b, "encode")
			if firstErr == nil {
				firstErr = fmt.Errorf("meter: encode batch %s", b.ID)
			}
		}
		if m.st != nil {
			// From here on these ids may be used: a restart rebuilds the same batches.
			m.st.writeHeader(stateHeaderValues{nextSeq: next, inflFirst: first, inflLast: next - 1, inflCreated: now.UnixNano(), written: now.UnixNano()})
			if err := m.st.sync(); err != nil {
				m.log.Warn("meter: state file fsync failed; a machine loss may lose this flush", "err", err)
			}
		}
	}
	up := m.replay(ctx)
	for _, e := range out {
		if up {
			if err := m.publish(ctx, e.b.ID, e.data); err != nil {
				up = false
			} else {
				m.m.batches.WithLabelValues("published").Inc()
			}
		}
		if !up {
			if err := m.spoolAppend(e.b.ID, e.data, e.b); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	if len(acc) > 0 || len(uses) > 0 || len(lats) > 0 {
		m.commit(first, acc, now)
	}
	if up {
		m.putTotals(ctx, now)
	}
	return firstErr
}

// commit records that the batches tagged first were handed over: the totals of their
// tenant hours, then the cells, then the header (see state.go for why in this order).
func (m *Meter) commit(first uint64, acc aggregate, now time.Time) {
	var n int64
	m.totalsMu.Lock()
	for k, c := range acc.byTenantHour() {
		t := m.totalAt(k)
		t.pendReq, t.pendBill, t.pendFn = t.requests+c.Requests, t.billable+c.Billable, t.function+c.FunctionUS
		t.pendSeq = first
		t.requests, t.billable, t.function = t.pendReq, t.pendBill, t.pendFn
		t.seq = first
		t.dirty = 1
		n += c.Requests
	}
	m.totalsMu.Unlock()
	for _, c := range m.marked {
		c.hReq, c.hIn, c.hOut, c.hFn = c.mReq, c.mIn, c.mOut, c.mFn
	}
	clear(m.marked)
	m.marked = m.marked[:0]
	if m.st != nil {
		m.st.writeHeader(stateHeaderValues{nextSeq: m.seq + 1, written: now.UnixNano()})
	}
	m.m.requests.Add(float64(n))
}

// encodedBatch is a batch and its wire form.
type encodedBatch struct {
	b    *usage.Batch
	data []byte
}

// cutBatches cuts ordered records into batches numbered from first (a batch too big for
// a message is split, and the sequence it would have had is left unused). It depends on
// nothing else, so a restart cuts the same records into the same batches, byte for byte.
// With validate, a batch billing would refuse is returned as dropped (records read back
// from a state file are not trusted).
func cutBatches(edge, boot string, first uint64, created time.Time, recs []usage.Record, validate bool) (out []encodedBatch, next uint64, dropped []*usage.Batch) {
	seq := first
	var cut func(recs []usage.Record)
	cut = func(recs []usage.Record) {
		b := &usage.Batch{
			ID:     usage.BatchID(edge, boot, seq),
			EdgeID: edge, BootID: boot, Seq: seq,
			Created: created, Records: recs,
		}
		seq++
		data, err := usage.EncodeBatch(b)
		if err == nil && len(data) > maxBatchBytes && len(recs) > 1 {
			cut(recs[:len(recs)/2])
			cut(recs[len(recs)/2:])
			return
		}
		if err == nil && len(data) > maxBatchBytes {
			err = fmt.Errorf("one record encodes to %d bytes", len(data))
		}
		if err == nil && validate {
			err = b.Validate()
		}
		if err != nil {
			dropped = append(dropped, b)
			return
		}
		out = append(out, encodedBatch{b, data})
	}
	for len(recs) > 0 {
		n := min(len(recs), maxBatchRecords)
		cut(recs[:n:n])
		recs = recs[n:]
	}
	return out, seq, dropped
}

// Bounds of one batch, well under NATS's default 1 MB message limit.
const (
	maxBatchRecords = 2000
	maxBatchBytes   = 512 << 10
)

// replay publishes spooled batches in order; false when the sink refused one (the rest
// stay spooled).
func (m *Meter) replay(ctx context.Context) bool {
	for {
		id, data, ok, err := m.spool.peek()
		if err != nil {
			m.m.dropped.WithLabelValues("spool_corrupt").Inc()
			continue
		}
		if !ok {
			m.spoolGauges()
			return true
		}
		if err := m.publish(ctx, id, data); err != nil {
			return false
		}
		m.spool.advance()
		m.m.batches.WithLabelValues("replayed").Inc()
		m.spoolGauges()
		if m.spool.Len() == 0 {
			m.log.Info("meter: spool replayed")
		}
	}
}

func (m *Meter) publish(ctx context.Context, id string, data []byte) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pctx, cancel := context.WithTimeout(ctx, m.cfg.PublishTimeout)
	defer cancel()
	err := m.cfg.Sink.Publish(pctx, id, data)
	if err != nil {
		m.m.publishErrors.Inc()
		m.log.Debug("meter: publish failed", "batch", id, "err", err)
	}
	return err
}

// spoolAppend spools a batch, counting as dropped whatever the spool gives up for it.
func (m *Meter) spoolAppend(id string, data []byte, b *usage.Batch) error {
	first := m.spool.Len() == 0
	dropped, err := m.spool.append(id, data)
	for _, d := range dropped {
		db, derr := usage.DecodeBatch(d)
		if derr != nil {
			m.m.dropped.WithLabelValues("spool_corrupt").Inc()
			continue
		}
		m.dropBatch(db, "spool_full")
	}
	if len(dropped) > 0 {
		m.log.Warn("meter: spool full, dropped its oldest batches", "batches", len(dropped), "max_bytes", m.cfg.SpoolMaxBytes)
	}
	m.spoolGauges()
	if err != nil {
		m.dropBatch(b, "spool_error")
		m.m.spoolFailing.Set(1)
		m.log.Error("meter: batch could not be spooled and is lost", "batch", id, "requests", b.Requests(), "err", err)
		return err
	}
	m.m.spoolFailing.Set(0)
	m.m.batches.WithLabelValues("spooled").Inc()
	if first {
		m.log.Warn("meter: sink unreachable, spooling usage batches", "dir", m.cfg.SpoolDir)
	}
	return nil
}

// dropBatch accounts for a batch that will never be published.
func (m *Meter) dropBatch(b *usage.Batch, reason string) {
	m.m.batches.WithLabelValues("dropped").Inc()
	var n int64
	m.totalsMu.Lock()
	for i := range b.Records {
		r := &b.Records[i]
		n += r.Requests
		t := m.totalAt(totalKey{r.TenantID, r.Hour.Unix() / 3600})
		t.dropped += r.Requests
		t.droppedBillable += r.Billable
		t.droppedFunction += r.FunctionUS
		t.dirty = 1
	}
	m.totalsMu.Unlock()
	m.m.dropped.WithLabelValues(reason).Add(float64(n))
}

// totalAt is the total of a tenant hour, made in the state file if new; totalsMu held.
func (m *Meter) totalAt(k totalKey) *totalRec {
	t := m.totals[k]
	if t == nil {
		if m.st != nil {
			t = m.st.newTotal(k.tenant, k.hour)
		}
		if t == nil {
			m.m.stateFallback.Inc()
			t = &totalRec{hour: k.hour}
		}
		m.totals[k] = t
	}
	return t
}

// collect cuts every cell with counts not yet handed over: it tags them with first and
// records what goes in flight (m.marked), and returns the counts by dimensions. Cells
// idle for a few flushes, or of past hours, are freed.
func (m *Meter) collect(now time.Time, first uint64) aggregate {
	cur := now.Unix() / 3600
	acc := aggregate{}
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for k, c := range s.cells {
			hour, class, upstream := k.meta>>8, uint8(k.meta>>1&0x7f), k.meta&1 == 1
			d := counts{c.req - c.hReq, c.in - c.hIn, c.out - c.hOut, c.fn - c.hFn}
			if d == (counts{}) {
				c.idle++
				if c.idle > 3 || hour < cur {
					delete(s.cells, k)
					m.st.release(&c.state, c.units)
				}
				continue
			}
			c.idle = 0
			// The tag first: a cell caught half-way carries a tag no header names yet.
			c.tag = first
			c.iReq, c.iIn, c.iOut, c.iFn = d[0], d[1], d[2], d[3]
			c.mReq, c.mIn, c.mOut, c.mFn = c.req, c.in, c.out, c.fn
			m.marked = append(m.marked, c)
			cid := ""
			if k.consumer != nil {
				cid = k.consumer.id
			}
			acc.add(k.route.tenantID, k.route.routeID, cid, hour, class, upstream, d)
		}
		s.mu.Unlock()
	}
	return acc
}

// aggregate adds cells up by the dimensions of a usage record.
type aggregate map[aggKey]*usage.Counts

func (a aggregate) add(tenant, route, consumer string, hour int64, class uint8, upstream bool, d counts) {
	k := aggKey{tenant: tenant, route: route, consumer: consumer, hour: hour, class: class}
	c := a[k]
	if c == nil {
		c = &usage.Counts{}
		a[k] = c
	}
	c.Requests += d[0]
	origin := usage.OriginEdge
	if upstream {
		origin = usage.OriginUpstream
	}
	if usage.Billable(int(class), origin) {
		c.Billable += d[0]
	}
	c.BytesIn += d[1]
	c.BytesOut += d[2]
	c.FunctionUS += d[3]
}

// records are the usage records, in the one order batches are cut in.
func (a aggregate) records() []usage.Record {
	if len(a) == 0 {
		return nil
	}
	recs := make([]usage.Record, 0, len(a))
	for k, c := range a {
		recs = append(recs, usage.Record{
			TenantID: k.tenant, Hour: time.Unix(k.hour*3600, 0).UTC(), RouteID: k.route,
			ConsumerID: k.consumer, Class: int(k.class), Counts: *c,
		})
	}
	sort.Slice(recs, func(i, j int) bool {
		a, b := &recs[i], &recs[j]
		switch {
		case a.TenantID != b.TenantID:
			return a.TenantID < b.TenantID
		case !a.Hour.Equal(b.Hour):
			return a.Hour.Before(b.Hour)
		case a.RouteID != b.RouteID:
			return a.RouteID < b.RouteID
		case a.ConsumerID != b.ConsumerID:
			return a.ConsumerID < b.ConsumerID
		}
		return a.Class < b.Class
	})
	return recs
}

// byTenantHour sums the counts per tenant and hour, the totals' key.
func (a aggregate) byTenantHour() map[totalKey]usage.Counts {
	out := map[totalKey]usage.Counts{}
	for k, c := range a {
		tk := totalKey{k.tenant, k.hour}
		o := out[tk]
		o.Add(*c)
		out[tk] = o
	}
	return out
}

// putTotals publishes the totals that changed, and forgets published ones past retention.
func (m *Meter) putTotals(ctx context.Context, now time.Time) {
	if len(m.inherited) > 0 {
		pctx, cancel := context.WithTimeout(ctx, m.cfg.PublishTimeout)
		err := m.cfg.Sink.PutTotals(pctx, m.inherited)
		cancel()
		if err != nil {
			return
		}
		for _, f := range m.inheritedFiles {
			os.Remove(f)
		}
		m.inherited, m.inheritedFiles = nil, nil
	}
	m.totalsMu.Lock()
	var dirty []usage.EdgeTotal
	var keys []totalKey
	for k, t := range m.totals {
		if t.dirty != 0 {
			dirty = append(dirty, m.edgeTotal(k, t))
			keys = append(keys, k)
		}
	}
	m.totalsMu.Unlock()
	if len(dirty) > 0 {
		pctx, cancel := context.WithTimeout(ctx, m.cfg.PublishTimeout)
		err := m.cfg.Sink.PutTotals(pctx, dirty)
		cancel()
		if err != nil {
			m.log.Debug("meter: totals not published; retrying next flush", "err", err)
			return
		}
	}
	oldest := now.Add(-m.cfg.TotalsRetention).Unix() / 3600
	m.totalsMu.Lock()
	for i, k := range keys {
		// Clean only if unchanged since it was read.
		if t := m.totals[k]; t != nil && t.requests == dirty[i].Requests && t.dropped == dirty[i].Dropped {
			t.dirty = 0
		}
	}
	for k, t := range m.totals {
		if t.dirty == 0 && k.hour < oldest {
			delete(m.totals, k)
			m.st.release(&t.state, t.units)
		}
	}
	m.totalsMu.Unlock()
}

// Totals a run could not publish before it closed are saved beside the spool, and the
// next run publishes them (before, or with, the batches it replays from that run), so an
// edge that shut down during an outage still reports everything it counted.
const totalsFilePrefix = "totals-"

// saveTotals writes the totals not yet published, if any, to the spool directory.
func (m *Meter) saveTotals() error {
	m.totalsMu.Lock()
	var dirty []usage.EdgeTotal
	for k, t := range m.totals {
		if t.dirty != 0 {
			dirty = append(dirty, m.edgeTotal(k, t))
		}
	}
	m.totalsMu.Unlock()
	dirty = append(dirty, m.inherited...)
	if len(dirty) == 0 {
		return nil
	}
	path := filepath.Join(m.cfg.SpoolDir, totalsFilePrefix+usage.Token(m.cfg.BootID)+".json")
	if err := writeTotals(path, dirty, m.spool.lend); err != nil {
		return err
	}
	for _, f := range m.inheritedFiles {
		if f != path {
			os.Remove(f)
		}
	}
	m.spool.syncDir()
	m.log.Info("meter: totals saved for the next run to publish", "file", path, "entries", len(dirty))
	return nil
}

// writeTotals replaces the file at path with totals, durably.
// writeTotals saves totals at path. On a full disk it borrows the room from the spool's
// reserve (borrow, when not nil) and tries once more: totals lost make reconciliation
// report a run as unaccounted for.
func writeTotals(path string, totals []usage.EdgeTotal, borrow func(int64) bool) error {
	data, err := json.Marshal(totals)
	if err != nil {
		return err
	}
	err = writeTotalsOnce(path, data)
	// Whole pages: the file's data, and a page for the directory entry.
	if errors.Is(err, syscall.ENOSPC) && borrow != nil && borrow(int64(len(data))/4096*4096+2*4096) {
		err = writeTotalsOnce(path, data)
	}
	return err
}

func writeTotalsOnce(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("meter: save totals: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("meter: save totals: %w", err)
	}
	syncDir(filepath.Dir(path))
	return nil
}

// recoverState hands over what a run that died left in the state file: the batches it
// had in flight, rebuilt under their ids, and what it had counted and not cut, as new
// batches of its boot, all into the spool; and its totals, into a totals file that
// loadTotals then reads. Only then is the file replaced (by New). A file that cannot be
// read is set aside, never trusted and never fatal.
func (m *Meter) recoverState() {
	path := filepath.Join(m.cfg.SpoolDir, stateFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	setAside := func(reason string, err error) {
		aside := fmt.Sprintf("%s.%s-%d", path, reason, time.Now().UnixNano())
		if rerr := os.Rename(path, aside); rerr != nil {
			m.log.Error("meter: cannot set the state file aside", "file", path, "err", rerr)
		}
		m.m.stateRejected.WithLabelValues(reason).Inc()
		m.log.Error("meter: state file of an earlier run set aside, its counts not recovered", "file", aside, "reason", reason, "err", err)
	}
	if err != nil {
		setAside("unreadable", err)
		return
	}
	img, err := readState(data)
	if err != nil {
		setAside("rejected", err)
		return
	}
	if img.skipped > 0 {
		m.m.stateRejected.WithLabelValues("record").Add(float64(img.skipped))
		m.log.Warn("meter: state file records that did not read back sane were skipped", "file", path, "records", img.skipped)
	}
	r := img.plan()
	failed := false
	for _, b := range r.dropped {
		m.m.dropped.WithLabelValues("state_corrupt").Add(float64(b.Requests()))
	}
	for _, list := range [][]encodedBatch{r.inflight, r.rest} {
		for _, e := range list {
			if err := m.spoolAppend(e.b.ID, e.data, e.b); err != nil {
				failed = true
			}
		}
	}
	if len(r.totals) > 0 {
		tp := filepath.Join(m.cfg.SpoolDir, totalsFilePrefix+"recovered-"+usage.Token(r.bootID)+".json")
		if err := writeTotals(tp, r.totals, m.spool.lend); err != nil {
			m.log.Error("meter: totals of an earlier run not saved", "err", err)
			failed = true
		}
	}
	if failed {
		setAside("unrecovered", errors.New("spool or totals not written"))
		return
	}
	n := r.requests()
	m.m.recovered.Add(float64(n))
	if n > 0 || len(r.inflight) > 0 {
		m.log.Info("meter: recovered the counts of a run that did not shut down cleanly",
			"from_edge", r.edgeID, "from_boot", r.bootID, "requests", n,
			"batches_in_flight", len(r.inflight), "batches_new", len(r.rest))
	}
}

// loadTotals reads the totals earlier runs saved.
func (m *Meter) loadTotals() {
	files, _ := filepath.Glob(filepath.Join(m.cfg.SpoolDir, totalsFilePrefix+"*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		var ts []usage.EdgeTotal
		if err == nil {
			err = json.Unmarshal(data, &ts)
		}
		if err != nil {
			m.log.Warn("meter: unreadable saved totals ignored", "file", f, "err", err)
			continue
		}
		m.inherited = append(m.inherited, ts...)
		m.inheritedFiles = append(m.inheritedFiles, f)
	}
}

func (m *Meter) edgeTotal(k totalKey, t *totalRec) usage.EdgeTotal {
	return usage.EdgeTotal{
		EdgeID: m.cfg.EdgeID, BootID: m.cfg.BootID, TenantID: k.tenant,
		Hour:     time.Unix(k.hour*3600, 0).UTC(),
		Requests: t.requests, Billable: t.billable, Dropped: t.dropped, DroppedBillable: t.droppedBillable,
		FunctionUS: t.function, DroppedFunctionUS: t.droppedFunction,
	}
}

// Totals is what this edge counted since boot, per tenant and hour (for the hours still
// kept, see Config.TotalsRetention), ordered by tenant and hour. Counts still in the
// shards, not yet cut into a batch, are not included.
func (m *Meter) Totals() []usage.EdgeTotal {
	m.totalsMu.Lock()
	out := make([]usage.EdgeTotal, 0, len(m.totals))
	for k, t := range m.totals {
		out = append(out, m.edgeTotal(k, t))
	}
	m.totalsMu.Unlock()
	sortTotals(out)
	return out
}

func sortTotals(out []usage.EdgeTotal) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].TenantID != out[j].TenantID {
			return out[i].TenantID < out[j].TenantID
		}
		return out[i].Hour.Before(out[j].Hour)
	})
}

// Spooled is the number of batches waiting in the spool.
func (m *Meter) Spooled() int {
	m.cycleMu.Lock()
	defer m.cycleMu.Unlock()
	if m.closed {
		return 0
	}
	return m.spool.Len()
}

// spoolGauges reports the spool's size and reservation.
func (m *Meter) spoolGauges() {
	m.m.spoolBytes.Set(float64(m.spool.Bytes()))
	m.m.spoolReserved.Set(float64(m.spool.reservedBytes()))
}

type metrics struct {
	requests      prometheus.Counter
	batches       *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	droppedClosed prometheus.Counter
	publishErrors prometheus.Counter
	spoolBytes    prometheus.Gauge
	spoolFailing  prometheus.Gauge
	spoolReserved prometheus.Gauge
	stateRejected *prometheus.CounterVec
	stateFallback prometheus.Counter
	recovered     prometheus.Counter
	keyUses       *prometheus.CounterVec
	keyNoted      prometheus.Counter
	keyDropped    prometheus.Counter
}

func newMetrics() metrics {
	m := metrics{
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_meter_requests_total", Help: "Requests metered (counted at each flush).",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_meter_batches_total", Help: "Usage batches by outcome: published, spooled (sink unreachable), replayed (from the spool), dropped (never to be published).",
		}, []string{"result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_meter_dropped_requests_total", Help: "Metered requests given up on, by reason: spool_full (oldest spooled batches deleted to make room), spool_error (disk), spool_corrupt, state_corrupt (recovered from a state file into a batch billing would refuse), closed (recorded after Close), encode.",
		}, []string{"reason"}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_meter_publish_errors_total", Help: "Failed attempts to publish a usage batch.",
		}),
		spoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_meter_spool_bytes", Help: "Bytes of usage batches waiting in the local spool.",
		}),
		spoolFailing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_meter_spool_failing", Help: "1 while the last batch the spool was given could not be written (a full or failing disk) and was dropped: usage is being lost until a write succeeds; 0 otherwise.",
		}),
		spoolReserved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_meter_spool_reserved_bytes", Help: "Disk bytes the spool holds ahead, used or not; below its maximum (256 MiB by default) the rest is taken from the disk as batches come, and a full disk would lose them.",
		}),
		stateRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_meter_state_rejected_total", Help: "State files of earlier runs set aside unread (reason rejected: another version, torn or corrupt header; unreadable; unrecovered: the spool could not take their batches), and records skipped in files that were read (reason record).",
		}, []string{"reason"}),
		stateFallback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_meter_state_fallback_total", Help: "Cells and totals kept on the heap, where a crash loses them, because the state file was full or could not be made.",
		}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_meter_recovered_requests_total", Help: "Requests a run that died had counted and not handed over, handed over at this start from its state file.",
		}),
		keyUses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_meter_key_uses_total", Help: "API key uses noted for last_used_at (at most one per key per key use interval), and those dropped because too many were waiting for the flush.",
		}, []string{"result"}),
	}
	m.keyNoted, m.keyDropped = m.keyUses.WithLabelValues("noted"), m.keyUses.WithLabelValues("dropped")
	for _, r := range []string{"rejected", "unreadable", "unrecovered", "record"} {
		m.stateRejected.WithLabelValues(r)
	}
	for _, r := range []string{"published", "spooled", "replayed", "dropped"} {
		m.batches.WithLabelValues(r)
	}
	for _, r := range []string{"spool_full", "spool_error", "spool_corrupt", "state_corrupt", "closed"} {
		m.dropped.WithLabelValues(r)
	}
	m.droppedClosed = m.dropped.WithLabelValues("closed")
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.batches, m.dropped, m.publishErrors, m.spoolBytes, m.spoolFailing, m.spoolReserved, m.stateRejected, m.stateFallback, m.recovered, m.keyUses} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("meter: register metrics: %w", err)
		}
	}
	return nil
}

// Usage is one request's meter record, copied out of the exchange when its handler
// returns, for a record made later: when a streamed body or a tunnel ends.
type Usage struct {
	Route    *Route
	Consumer *Consumer
	Status   int
	Upstream bool
	At       time.Time // the request's arrival: it decides the hour
	In, Out  int64
	Function time.Duration // the guest run time of the request's functions
	// Gateway is the edge's own time until the handler returned; the rest of the
	// request's time, to the close, is the upstream's (the wait for its head, then its
	// body as it streamed). CalledUpstream false: the edge answered itself.
	Gateway        time.Duration
	CalledUpstream bool
}

// Record records u on its route, and its times with the time of the close.
func (u *Usage) Record() {
	u.Route.add(u.Consumer, u.Status, u.Upstream, 1, u.In, u.Out, FunctionUS(u.Function), u.At)
	if !u.At.IsZero() {
		u.Route.RecordLatency(u.At, u.Gateway, max(time.Since(u.At)-u.Gateway, 0), u.CalledUpstream)
	}
}
