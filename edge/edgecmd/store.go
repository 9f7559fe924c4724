package edgecmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge"
	"tollgate/edge/tenantstore"
	"tollgate/infra/config"
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
	seq, at := st.Seq(), st.At()
	log.Info("edge: config store opened", "dir", st.Path(), "tenants", l.Tenants(), "revision", seq)
	loaded := make(chan struct{})
	wc := tgnats.WatchConfig{
		OnUpdate: func(u tgnats.Update) { l.Update(u.Key, u.Value, u.Revision, u.Pending) },
		OnReady: func() {
			l.Flush()
			close(loaded)
		},
		OnError: func(err error) { log.Warn("config watch", "err", err) },
	}
	if seq > 0 {
		wc.From = seq + 1
	}
	w, err := tgnats.Watch(ctx, js, cfg.KVBucket(), wc)
	if err != nil {
		_ = l.Close()
		return nil, nil, nil, err
	}
	restore = func() (time.Duration, bool, error) {
		age := time.Since(at)
		switch {
		case seq == 0:
			return 0, false, errors.New("the config store is empty")
		case cfg.EdgeSnapshotMaxAge == 0 || age > cfg.EdgeSnapshotMaxAge:
			return age, false, fmt.Errorf("the config store is %s old, beyond TOLLGATE_EDGE_SNAPSHOT_MAX_AGE", age.Round(time.Second))
		}
		return age, true, nil
	}
	stop = func() {
		w.Stop()
		if err := l.Close(); err != nil {
			log.Warn("edge: closing the config store", "err", err)
		}
	}
	return loaded, restore, stop, nil
}

// lastRevision is the bucket's last revision, when NATS answers.
func lastRevision(ctx context.Context, js jetstream.JetStream, bucket string) (uint64, bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(cctx, "KV_"+bucket)
	if err != nil {
		return 0, false
	}
	return s.CachedInfo().State.LastSeq, true
}
