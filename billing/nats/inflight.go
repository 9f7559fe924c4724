package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing"
	"tollgate/infra/usage"
)

// FoldedChecker says which batch ids have been folded; billing/postgres.Store is one.
type FoldedChecker interface {
	FoldedBatches(ctx context.Context, ids []string) (map[string]bool, error)
}

// DefaultMaxInFlight bounds the batches InFlight reads: past it the answer is partial.
const DefaultMaxInFlight = 200_000

// InFlightReader finds the usage batches that are in the stream and not folded: those
// after the UsageReader's durable consumer's acknowledgement floor whose id is not in usage_batches. It is
// reconciliation's billing.InFlightSource, and reads without acknowledging anything (an
// ordered consumer of its own, removed by the server once idle).
type InFlightReader struct {
	js      jetstream.JetStream
	prefix  string
	durable string
	folded  FoldedChecker
	// Max bounds the batches read. Default: DefaultMaxInFlight.
	Max int
}

// NewInFlight reads the usage stream of prefix behind the UsageReader's durable consumer
// (UsageReaderConfig.Durable; "" for the default).
func NewInFlight(js jetstream.JetStream, prefix, durable string, folded FoldedChecker) *InFlightReader {
	if durable == "" {
		durable = "billing"
	}
	return &InFlightReader{js: js, prefix: prefix, durable: durable, folded: folded}
}

// InFlight returns the counts of every batch not yet folded, by edge, boot, tenant and
// hour.
func (r *InFlightReader) InFlight(ctx context.Context) (*billing.InFlight, error) {
	out := &billing.InFlight{}
	stream, err := r.js.Stream(ctx, usage.Stream(r.prefix))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil // nothing was ever published
	}
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if info.State.Msgs == 0 {
		return out, nil
	}
	// Below the floor every batch was acknowledged, hence folded (or terminated as
	// undecodable, which reconcile then reports as lost).
	cons, err := stream.Consumer(ctx, r.durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	case err != nil:
		return nil, err
	default:
		ci, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		first = max(first, ci.Config.OptStartSeq, ci.AckFloor.Stream+1)
	}
	if first > last {
		return out, nil
	}
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       first,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("read usage stream: %w", err)
	}
	limit := r.Max
	if limit <= 0 {
		limit = DefaultMaxInFlight
	}
	type cell struct {
		edge, boot, tenant string
		hour               int64
	}
	sums := map[cell]*[3]int64{}
	var pending []*usage.Batch
	check := func() error {
		if len(pending) == 0 {
			return nil
		}
		ids := make([]string, len(pending))
		for i, b := range pending {
			ids[i] = b.ID
		}
		done, err := r.folded.FoldedBatches(ctx, ids)
		if err != nil {
			return err
		}
		for _, b := range pending {
			if done[b.ID] {
				continue
			}
			out.Batches++
			for i := range b.Records {
				rec := &b.Records[i]
				k := cell{b.EdgeID, b.BootID, rec.TenantID, rec.Hour.Unix()}
				c := sums[k]
				if c == nil {
					c = &[3]int64{}
					sums[k] = c
				}
				c[0] += rec.Requests
				c[1] += rec.Billable
				c[2] += rec.FunctionUS
			}
		}
		pending = pending[:0]
		return nil
	}
	read := 0
	for seq := first - 1; seq < last; {
		if read >= limit {
			out.Partial = true
			break
		}
		batch, err := oc.Fetch(min(500, limit-read), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read usage stream: %w", err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			read++
			md, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read usage stream: %w", err)
			}
			seq = md.Sequence.Stream
			if b, err := usage.DecodeBatch(msg.Data()); err == nil {
				pending = append(pending, b)
			}
			if seq >= last {
				break
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("read usage stream: %w", err)
		}
		if err := check(); err != nil {
			return nil, err
		}
		if got == 0 {
			break // the rest was deleted (or aged out) since the stream's info
		}
	}
	for k, c := range sums {
		out.Totals = append(out.Totals, billing.EdgeFolded{EdgeID: k.edge, BootID: k.boot, TenantID: k.tenant,
			Hour: time.Unix(k.hour, 0).UTC(), Requests: c[0], Billable: c[1], FunctionUS: c[2]})
	}
	return out, nil
}

// Interface guards.
var _ billing.InFlightSource = (*InFlightReader)(nil)
