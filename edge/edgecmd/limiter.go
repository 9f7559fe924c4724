package edgecmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"tollgate/edge/limit"
	"tollgate/infra/config"
)

// edgeLimiter is an edge's flow control: the limiter, the registry the edge and the
// limiter share (so /metrics shows tollgate_limit_*), and the Redis client behind it
// when TOLLGATE_REDIS_URL is set.
type edgeLimiter struct {
	lim *limit.Limiter
	rdb redis.UniversalClient
	reg *prometheus.Registry
}

// openLimiter builds the limiter: cluster-wide through Redis when cfg.RedisURL is set
// (Redis being down is not an error: the limiter starts degraded and recovers by
// itself), local limits only otherwise.
func openLimiter(cfg *config.Config, log *slog.Logger) (*edgeLimiter, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	el := &edgeLimiter{reg: reg}
	if cfg.RedisURL != "" {
		quietRedis(log)
		rdb, err := limit.NewRedisClient(cfg.RedisURL, cfg.RedisTimeout)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_REDIS_URL: %w", err)
		}
		el.rdb = rdb
	}
	cl := limit.Config{
		Prefix: cfg.RedisPrefix,
		// Unique per process: the live-edge count divides local shares, and several
		// edges may run on one host under one TOLLGATE_EDGE_ID.
		EdgeID:     fmt.Sprintf("%s-%d", cfg.EdgeID, os.Getpid()),
		Logger:     log,
		Registerer: reg,
		Timeout:    cfg.RedisTimeout, // 0: limit.DefaultTimeout
	}
	if el.rdb != nil {
		cl.Redis = el.rdb
	}
	lim, err := limit.New(cl)
	if err != nil {
		el.closeRedis()
		return nil, err
	}
	el.lim = lim
	if el.rdb != nil {
		st := lim.State()
		// The addresses, never the URL: it may carry passwords in its query.
		t, _ := limit.ParseRedisURL(cfg.RedisURL)
		log.Info("flow control: cluster-wide limits in Redis", "topology", t.Topology.String(), "redis", t.Addrs(), "prefix", cfg.RedisPrefix,
			"mode", st.Mode, "live_edges", st.LiveEdges)
	} else {
		log.Info("flow control: local limits only (TOLLGATE_REDIS_URL is not set)")
	}
	return el, nil
}

// close stops the limiter (pushing its last counts) and then closes Redis. Call it after
// the edge has drained.
func (el *edgeLimiter) close() {
	_ = el.lim.Close()
	el.closeRedis()
}

func (el *edgeLimiter) closeRedis() {
	if el.rdb != nil {
		_ = el.rdb.Close()
	}
}

var redisLogOnce sync.Once

// quietRedis routes go-redis's own logging (dial errors on every reconnect attempt) to
// debug level: the limiter logs Redis going away and coming back once per transition.
func quietRedis(log *slog.Logger) {
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{log}) })
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.Debug("redis: " + fmt.Sprintf(format, v...))
	}
}
