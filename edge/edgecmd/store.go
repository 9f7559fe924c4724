package edgecmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge"
	"tollgate/edge/lazy"
	"tollgate/edge/tenantstore"
	"tollgate/infra/config"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// followStore is followBucket for TOLLGATE_EDGE_CONFIG_STORE=disk: the bucket is watched
// into the edge's config store (edge/tenantstore, beside the meter's spool), from the
// revision after the last one the store holds, and tenants are compiled when their
// traffic first needs them. current is closed once the store is caught up with the
// bucket; restore says whether the store may be served while NATS is unreachable.
func followStore(ctx context.Context, cfg *config.Config, e *edge.Edge, nc *nats.Conn, log *slog.Logger) (current <-chan struct{}, restore func() (time.Duration, bool, error), stop func(), err error) {
	st, why, err := tenantstore.Open(tenantstore.Options{Dir: cfg.MeterSpoolDir, Bucket: cfg.KVBucket(), Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	if why != "" {
		log.Warn("edge: config store discarded; the bucket is replayed into a new one", "why", why, "dir", st.Path())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		_ = st.Close()
		return nil, nil, nil, err
	}
	// A store ahead of the bucket is of an older bucket of that name (deleted and made
	// again): its revisions mean nothing any more.
	if seq := st.Seq(); seq > 0 && nc.IsConnected() {
		if last, ok := lastRevision(ctx, js, cfg.KVBucket()); ok && last < seq {
			log.Warn("edge: config store is ahead of the bucket (the bucket was made again); replaying it", "store", seq, "bucket", last)
			if st, err = st.Discard(); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	l, err := e.UseStore(st, cfg.EdgeTenantMemory)
	if err != nil {
		log.Warn("edge: config store unreadable; the bucket is replayed into a new one", "err", err)
		if st, err = st.Discard(); err != nil {
			return nil, nil, nil, err
		}
		if l, err = e.UseStore(st, cfg.EdgeTenantMemory); err != nil {
			_ = st.Close()
			return nil, nil, nil, err
		}
	}
	seq, at, partial := st.Seq(), st.At(), st.Partial()
	log.Info("edge: config store opened", "dir", st.Path(), "tenants", l.Tenants(), "revision", seq, "partial", partial)
	loaded := make(chan struct{})
	var loadedOnce sync.Once
	markLoaded := func() { loadedOnce.Do(func() { close(loaded) }) }
	// A store that is empty or half-filled starts fast: see fastStart.
	var side *fastStart
	var base uint64
	var oneRevision bool
	if cfg.EdgeFastStart && (seq == 0 || partial) && nc.IsConnected() {
		if info, ok := streamInfo(ctx, js, cfg.KVBucket()); ok && info.State.LastSeq > seq {
			side, base = &fastStart{}, info.State.LastSeq
			oneRevision = info.Config.MaxMsgsPerSubject == 1
		}
	}
	wc := tgnats.WatchConfig{
		AllRevisions: cfg.EdgeFastStart,
		OnUpdate: func(u tgnats.Update) {
			if side != nil && backfillHook != nil {
				backfillHook(ctx, side.backfilled)
				side.backfilled++
			}
			l.Update(u.Key, u.Value, u.Revision, u.Pending)
		},
		OnReady: func() {
			if side != nil {
				side.stop()
				l.EndBackfill()
				log.Info("edge: config store backfilled", "bucket", cfg.KVBucket())
			}
			l.Flush()
			markLoaded()
		},
		OnError: func(err error) { log.Warn("config watch", "err", err) },
	}
	if seq > 0 {
		wc.From = seq + 1
	}
	var (
		wmu     sync.Mutex
		w       *tgnats.Watcher
		stopped bool
	)
	startWatch := func() error {
		ww, err := tgnats.Watch(ctx, js, cfg.KVBucket(), wc)
		if err != nil {
			return err
		}
		wmu.Lock()
		defer wmu.Unlock()
		if stopped {
			go ww.Stop()
			return nil
		}
		w = ww
		return nil
	}
	if side != nil {
		err = side.start(ctx, js, cfg.KVBucket(), l, base, oneRevision, markLoaded, startWatch, log)
	} else {
		err = startWatch()
	}
	if err != nil {
		if side != nil {
			side.stop()
		}
		_ = l.Close()
		return nil, nil, nil, err
	}
	restore = func() (time.Duration, bool, error) {
		age := time.Since(at)
		switch {
		case seq == 0:
			return 0, false, errors.New("the config store is empty")
		case partial:
			return 0, false, errors.New("the config store is still being backfilled: it holds only some tenants whole")
		case cfg.EdgeSnapshotMaxAge == 0 || age > cfg.EdgeSnapshotMaxAge:
			return age, false, fmt.Errorf("the config store is %s old, beyond TOLLGATE_EDGE_SNAPSHOT_MAX_AGE", age.Round(time.Second))
		}
		return age, true, nil
	}
	stop = func() {
		if side != nil {
			side.stop()
		}
		wmu.Lock()
		stopped = true
		ww := w
		wmu.Unlock()
		if ww != nil {
			ww.Stop()
		}
		if err := l.Close(); err != nil {
			log.Warn("edge: closing the config store", "err", err)
		}
	}
	return loaded, restore, stop, nil
}

// lastRevision is the bucket's last revision, when NATS answers.
func lastRevision(ctx context.Context, js jetstream.JetStream, bucket string) (uint64, bool) {
	info, ok := streamInfo(ctx, js, bucket)
	if !ok {
		return 0, false
	}
	return info.State.LastSeq, true
}

// streamInfo is the bucket's stream's, when NATS answers.
func streamInfo(ctx context.Context, js jetstream.JetStream, bucket string) (*jetstream.StreamInfo, bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(cctx, "KV_"+bucket)
	if err != nil {
		return nil, false
	}
	return s.CachedInfo(), true
}

// fastStart is what an edge with an empty or half-filled store runs beside its watch
// (TOLLGATE_EDGE_FAST_START): it takes every tenant's host entries first and is ready
// with them; then it starts the watch, which backfills the store, follows the changes
// made since the backfill began, and fetches a tenant a request needs before the watch
// has backfilled it (package lazy merges the sources). The watch starts only once the
// host entries are in because NATS 2.9 makes one consumer of a stream at a time, and the
// host watches' consumers take it longest to make.
type fastStart struct {
	mu         sync.Mutex
	hosts      []*tgnats.Watcher
	live       *tgnats.Watcher
	stopped    bool
	backfilled int // updates the backfill delivered, for backfillHook
}

// backfillHook, when set (by tests), is called before each update the backfill of a fast
// start delivers, with the count delivered before it: it may hold the backfill there.
var backfillHook func(ctx context.Context, n int)

// hostFilters select the entries the host index needs of every tenant: the tenant (its
// slug) and its custom domains. Two watches: NATS 2.9 takes one filter per consumer.
var hostFilters = []string{"*." + tenants.KindTenant, "*." + tenants.KindDomain + ".*"}

// hostsTimeout is the first attempt's wait for a host watch's consumer, which NATS 2.9
// makes by walking the whole stream (over a second at 1,000,000 routes here).
const hostsTimeout = 10 * time.Second

// fetchTimeout bounds a tenant's fetch ahead of the backfill; its request waits for it.
const fetchTimeout = 10 * time.Second

// start begins the backfill from base, the bucket's last revision, starts the host
// watches and returns; ready is called once they are in, and backfill then starts the
// watch.
func (f *fastStart) start(ctx context.Context, js jetstream.JetStream, bucket string, l *lazy.Tenants[edge.Snapshot], base uint64, oneRevision bool, ready func(), backfill func() error, log *slog.Logger) error {
	fetch := func(id string, deliver func(key string, value []byte, rev uint64)) error {
		fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		w, err := tgnats.Watch(fctx, js, bucket, tgnats.WatchConfig{
			Filter: tenants.TenantFilter(id), AllRevisions: true, CreateTimeout: fetchTimeout,
			OnUpdate: func(u tgnats.Update) { deliver(u.Key, u.Value, u.Revision) },
		})
		if err != nil {
			return err
		}
		defer w.Stop()
		select {
		case <-w.Ready():
			return nil
		case <-fctx.Done():
			return fmt.Errorf("tenant %s not fetched within %s", id, fetchTimeout)
		}
	}
	if err := l.BeginBackfill(base, oneRevision, fetch); err != nil {
		return err
	}
	onErr := func(err error) { log.Warn("config watch (fast start)", "err", err) }
	side := func(u tgnats.Update) { l.Side(u.Key, u.Value, u.Revision, u.Pending == 0) }
	start := time.Now()
	var next atomic.Int32 // the host watch to start next
	var hostsIn func()
	startHosts := func() error {
		i := int(next.Add(1)) - 1
		w, err := tgnats.Watch(ctx, js, bucket, tgnats.WatchConfig{Filter: hostFilters[i], AllRevisions: true,
			CreateTimeout: hostsTimeout, OnError: onErr, OnUpdate: side, OnReady: hostsIn})
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.hosts = append(f.hosts, w)
		f.mu.Unlock()
		// Loaded, it is stopped: the live watch carries its keys' changes from the base
		// on, and a consumer left following would be made again (with its walk) each
		// time it misses heartbeats while the next one is made.
		go func() {
			select {
			case <-w.Ready():
				w.Stop()
			case <-ctx.Done():
			}
		}()
		return nil
	}
	hostsIn = func() {
		if int(next.Load()) < len(hostFilters) {
			// One after the other: while NATS 2.9 makes a filtered consumer, the
			// stream's other consumers miss their heartbeats and are made again.
			if err := startHosts(); err != nil {
				onErr(err)
			}
			return
		}
		l.Flush()
		log.Info("edge: every tenant's host entries are in; ready while the rest is backfilled", "took", time.Since(start).Round(time.Millisecond))
		ready()
		go func() { // not from a host watch's own callback
			f.stopHosts()
			// From the revision after base: the changes made since are not held up
			// behind the backfill, and the live watch carries the host entries' too.
			live, err := tgnats.Watch(ctx, js, bucket, tgnats.WatchConfig{From: base + 1, AllRevisions: true, OnError: onErr, OnUpdate: side})
			if err != nil {
				onErr(err)
				return
			}
			f.mu.Lock()
			if f.stopped {
				f.mu.Unlock()
				live.Stop()
				return
			}
			f.live = live
			f.mu.Unlock()
			if err := backfill(); err != nil {
				log.Error("edge: the backfill's watch did not start", "err", err)
			}
		}()
	}
	if err := startHosts(); err != nil {
		f.stop()
		return err
	}
	return nil
}

// stop ends the live watch and the host watches. Not from one of their callbacks.
func (f *fastStart) stop() {
	f.mu.Lock()
	f.stopped = true
	live := f.live
	f.mu.Unlock()
	if live != nil {
		live.Stop()
	}
	f.stopHosts()
}

func (f *fastStart) stopHosts() {
	f.mu.Lock()
	hosts := f.hosts
	f.mu.Unlock()
	for _, w := range hosts {
		w.Stop()
	}
}
