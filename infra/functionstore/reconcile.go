package functionstore

import (
	"context"
	"fmt"
)

// Source is where the modules the store must hold are kept (the Postgres store).
type Source interface {
	// FunctionDigests returns up to limit digests after after, in order.
	FunctionDigests(ctx context.Context, after string, limit int) ([]string, error)
	// ModuleByDigest returns the module of a digest.
	ModuleByDigest(ctx context.Context, sha256hex string) ([]byte, error)
}

// Reconcile puts back every module src keeps that s lost (a bucket deleted or rebuilt,
// a NATS store lost), so the edges can fetch what routes name, and returns how many it
// put. It reads digests a page at a time and asks s about each.
func (s *Store) Reconcile(ctx context.Context, src Source) (int, error) {
	const page = 500
	put := 0
	after := ""
	for {
		digests, err := src.FunctionDigests(ctx, after, page)
		if err != nil {
			return put, fmt.Errorf("functionstore: reconcile: %w", err)
		}
		for _, d := range digests {
			ok, err := s.Has(ctx, d)
			if err != nil {
				return put, err
			}
			if ok {
				continue
			}
			m, err := src.ModuleByDigest(ctx, d)
			if err != nil {
				return put, fmt.Errorf("functionstore: reconcile %s: %w", d, err)
			}
			if got, err := s.Put(ctx, m); err != nil {
				return put, err
			} else if got != d {
				return put, fmt.Errorf("functionstore: reconcile: the source's module %s hashes to %s", d, got)
			}
			put++
		}
		if len(digests) < page {
			return put, nil
		}
		after = digests[len(digests)-1]
	}
}
