package edgecmd

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge/fnchain"
	"tollgate/infra/config"
	"tollgate/infra/functionstore"
)

// functionConfig is the edge's function runtime: modules from the stack's object store,
// compiled code and module bytes in cfg.EdgeFunctionCacheDir, logs to the tenants' log
// stream.
func functionConfig(cfg *config.Config, nc *nats.Conn, log *slog.Logger) fnchain.Config {
	src := &lazyStore{nc: nc, bucket: functionstore.BucketName(cfg.NATSPrefix), replicas: cfg.NATSReplicas}
	go ensureLogStream(nc, cfg, log)
	return fnchain.Config{
		Timeout:     cfg.EdgeFunctionTimeout,
		WallFactor:  cfg.EdgeFunctionWallFactor,
		MemoryBytes: cfg.EdgeFunctionMemory,
		Concurrency: cfg.EdgeFunctionConcurrency,
		CacheDir:    cfg.EdgeFunctionCacheDir,
		CacheGrace:  cfg.EdgeFunctionCacheGrace,
		Source:      src,
		Publish:     nc.Publish,
		LogSubject:  cfg.NATSPrefix + ".fnlog",
	}
}

// lazyStore opens the module store on the first fetch, so an edge that starts while NATS
// is away serves from its disk cache and fetches once NATS is back.
type lazyStore struct {
	nc       *nats.Conn
	bucket   string
	replicas int

	mu sync.Mutex
	s  *functionstore.Store
}

func (l *lazyStore) Get(ctx context.Context, sha256hex string) ([]byte, error) {
	l.mu.Lock()
	s := l.s
	if s == nil {
		js, err := jetstream.New(l.nc)
		if err != nil {
			l.mu.Unlock()
			return nil, err
		}
		if s, err = functionstore.Open(ctx, js, l.bucket, l.replicas); err != nil {
			l.mu.Unlock()
			return nil, err
		}
		l.s = s
	}
	l.mu.Unlock()
	return s.Get(ctx, sha256hex)
}

// ensureLogStream creates the tenants' function log stream, retrying while NATS is away:
// the edge publishes with core NATS, and lines published before the stream exists are
// lost, as lines are when the rate limit drops them.
func ensureLogStream(nc *nats.Conn, cfg *config.Config, log *slog.Logger) {
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		js, err := jetstream.New(nc)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = functionstore.EnsureLogStream(ctx, js, cfg.NATSPrefix, cfg.NATSReplicas)
			cancel()
		}
		if err == nil || nc.IsClosed() {
			return
		}
		log.Debug("edge: function log stream not created yet", "err", err)
		time.Sleep(wait)
	}
}
