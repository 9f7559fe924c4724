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
	"tollgate/infra/natsconn"
)

// functionConfig is the edge's function runtime: modules from the stack's object store,
// compiled code and module bytes in cfg.EdgeFunctionCacheDir, logs to the tenants' log
// stream.
func functionConfig(cfg *config.Config, nc *nats.Conn, log *slog.Logger) fnchain.Config {
	src := &lazyStore{nc: nc, bucket: functionstore.BucketName(cfg.NATSPrefix), replicas: cfg.NATSReplicas}
	go ensureLogStream(nc, cfg, log)
	return fnchain.Config{
		Timeout:     cfg.EdgeFunctionTimeout,
		MemoryBytes: cfg.EdgeFunctionMemory,
		Concurrency: cfg.EdgeFunctionConcurrency,
		CacheDir:    cfg.EdgeFunctionCacheDir,
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
			var sc jetstream.StreamConfig
			if sc, err = FunctionLogStream(ctx, js, cfg.NATSPrefix, cfg.NATSReplicas); err == nil {
				_, err = js.CreateOrUpdateStream(ctx, sc)
			}
			cancel()
		}
		if err == nil || nc.IsClosed() {
			return
		}
		log.Debug("edge: function log stream not created yet", "err", err)
		time.Sleep(wait)
	}
}

// FunctionLogStream is the stream of tenants' function logs: each tenant's last 1,000
// lines for a day. The api creates the same stream (whoever starts first does), so the
// two configurations must stay equal, or each start would change the other's.
func FunctionLogStream(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) (jetstream.StreamConfig, error) {
	name := prefix + "_function_logs"
	r, err := natsconn.Replicas(ctx, js, name, replicas)
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	return jetstream.StreamConfig{
		Name:              name,
		Description:       "Tollgate tenants' function logs, <prefix>.fnlog.<tenant_id>; read by the api",
		Subjects:          []string{prefix + ".fnlog.*"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1000,
		MaxAge:            24 * time.Hour,
		Discard:           jetstream.DiscardOld,
		Replicas:          r,
	}, nil
}
