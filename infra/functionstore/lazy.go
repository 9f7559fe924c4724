package functionstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lazy opens the store on first use and again after a failed open, so a process that
// starts while NATS is down serves meanwhile (an upload then fails, and is retried by
// the client) instead of refusing to start.
type Lazy struct {
	js       jetstream.JetStream
	bucket   string
	replicas int

	mu sync.Mutex
	s  *Store
}

// NewLazy is the store of bucket, opened when first needed.
func NewLazy(js jetstream.JetStream, bucket string, replicas int) *Lazy {
	return &Lazy{js: js, bucket: bucket, replicas: replicas}
}

// Store opens the store if it is not open yet.
func (l *Lazy) Store(ctx context.Context) (*Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		return l.s, nil
	}
	s, err := Open(ctx, l.js, l.bucket, l.replicas)
	if err != nil {
		return nil, err
	}
	l.s = s
	return s, nil
}

// Put is Store.Put.
func (l *Lazy) Put(ctx context.Context, module []byte) (string, error) {
	s, err := l.Store(ctx)
	if err != nil {
		return "", err
	}
	return s.Put(ctx, module)
}

// Delete is Store.Delete.
func (l *Lazy) Delete(ctx context.Context, sha256hex string) error {
	s, err := l.Store(ctx)
	if err != nil {
		return err
	}
	return s.Delete(ctx, sha256hex)
}

// ReconcileEvery runs Reconcile against src at once and then every interval until ctx
// ends, logging what it put back and what failed.
func (l *Lazy) ReconcileEvery(ctx context.Context, src Source, interval time.Duration, log *slog.Logger) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, interval)
		s, err := l.Store(rctx)
		if err == nil {
			var n int
			n, err = s.Reconcile(rctx, src)
			if n > 0 {
				log.Warn("functionstore: put back modules the object store had lost", "bucket", l.bucket, "modules", n)
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("functionstore: reconcile", "bucket", l.bucket, "err", err)
		}
		t.Reset(interval)
	}
}
