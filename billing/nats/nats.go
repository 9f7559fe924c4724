// Package nats is billing's side of usage over JetStream: the UsageReader billing folds
// batches with (a durable JetStream consumer), and Totals, which reads the edges' running
// totals from their KV bucket for reconciliation. The stream and bucket, and the Publisher
// edges write them with, are infra/usage's, which the edge links without any of billing.
//
// Every name is under the stack's prefix (usage.Stream, usage.TotalsBucket), and
// nothing here needs a NATS server newer than 2.9.
package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing"
	"tollgate/infra/usage"
)

// Totals reads the edges' totals from the bucket; it is reconciliation's
// billing.EdgeTotalsSource.
type Totals struct {
	js     jetstream.JetStream
	prefix string
}

// NewTotals reads the totals bucket of prefix.
func NewTotals(js jetstream.JetStream, prefix string) *Totals { return &Totals{js: js, prefix: prefix} }

// EdgeTotals returns every edge's and boot's totals for the period's hours.
func (t *Totals) EdgeTotals(ctx context.Context, p billing.Period) ([]usage.EdgeTotal, error) {
	kv, err := t.js.KeyValue(ctx, usage.TotalsBucket(t.prefix))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil // no edge has published yet
	}
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, usage.TotalsFilter(p.Year, p.Month), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []usage.EdgeTotal
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("totals watch closed")
			}
			if e == nil {
				return out, nil // the initial values are all in
			}
			var v usage.EdgeTotal
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				return nil, fmt.Errorf("totals entry %s: %w", e.Key(), err)
			}
			out = append(out, v)
		}
	}
}

// Interface guards.
var (
	_ billing.EdgeTotalsSource = (*Totals)(nil)
)
