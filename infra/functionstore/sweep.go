package functionstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Referrers is what names modules: tenants' function versions and routes (the Postgres
// store). A sweep deletes only what they no longer name.
type Referrers interface {
	// UnusedModules returns those of digests that no function version and no route of any
	// tenant names.
	UnusedModules(ctx context.Context, digests []string) ([]string, error)
	// DropModule calls drop when nothing names sha, holding off meanwhile every upload of
	// the same bytes from committing, and reports whether it called it. An upload that
	// waited commits after drop and must then put the module again.
	DropModule(ctx context.Context, sha string, drop func(context.Context) error) (bool, error)
}

// Sweep deletes the modules the store holds that nothing in refs names and that were put
// more than grace ago, and returns their digests. The grace keeps a module an upload has
// just put (the api puts it before Postgres has a version naming it, and a failed upload
// leaves it behind); DropModule keeps one whose upload commits meanwhile.
func (s *Store) Sweep(ctx context.Context, refs Referrers, grace time.Duration) ([]string, error) {
	infos, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("functionstore: sweep: list: %w", err)
	}
	cutoff := time.Now().Add(-grace)
	var old []string
	for _, info := range infos {
		// A name that is not a digest was not put here: leave it to whoever put it.
		if info.Deleted || !ValidDigest(info.Name) || info.ModTime.After(cutoff) {
			continue
		}
		old = append(old, info.Name)
	}
	slices.Sort(old)
	var deleted []string
	const page = 500
	for len(old) > 0 {
		n := min(page, len(old))
		unused, err := refs.UnusedModules(ctx, old[:n])
		if err != nil {
			return deleted, fmt.Errorf("functionstore: sweep: %w", err)
		}
		old = old[n:]
		for _, sha := range unused {
			dropped, err := refs.DropModule(ctx, sha, func(ctx context.Context) error { return s.Delete(ctx, sha) })
			if err != nil {
				return deleted, fmt.Errorf("functionstore: sweep %s: %w", sha, err)
			}
			if dropped {
				deleted = append(deleted, sha)
			}
		}
	}
	return deleted, nil
}

// SweepEvery runs Sweep against refs every interval until ctx ends, logging what it
// deleted and what failed. The first sweep waits an interval, so a process that restarts
// often does not list the bucket at each start.
func (l *Lazy) SweepEvery(ctx context.Context, refs Referrers, interval, grace time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, interval)
		s, err := l.Store(sctx)
		if err == nil {
			var deleted []string
			deleted, err = s.Sweep(sctx, refs, grace)
			if len(deleted) > 0 {
				log.Info("functionstore: deleted modules nothing names any more", "bucket", l.bucket, "modules", len(deleted))
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("functionstore: sweep", "bucket", l.bucket, "err", err)
		}
	}
}
