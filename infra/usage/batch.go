package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Batch is what an edge's meter publishes about once a second: the requests it
// counted since its previous batch, per tenant, UTC hour, route, consumer and status
// class. Its ID — edge id, boot id, sequence — is also its Nats-Msg-Id, so JetStream drops
// a republished copy within the stream's duplicate window, and billing records it under a
// unique key, so a copy arriving at any later time folds nothing.
type Batch struct {
	ID      string    `json:"id"`
	EdgeID  string    `json:"edge_id"`
	BootID  string    `json:"boot_id"`
	Seq     uint64    `json:"seq"`
	Created time.Time `json:"created"` // when the edge cut the batch
	Records []Record  `json:"records"`
	// KeyUses are the API keys the edge took since it last reported them, each at most
	// once per its report interval; billing moves keys.last_used_at forward from them.
	// Batches of edges that predate them have none.
	KeyUses []KeyUse `json:"key_uses,omitempty"`
	// Latencies are the route-hours' time distributions measured since the edge's
	// previous batch of them; billing merges them into its per route and hour sketches.
	// Batches of edges that predate them have none.
	Latencies []Latency `json:"latencies,omitempty"`
}

// KeyUse says an edge took an API key at At (Unix seconds): the first use in the edge's
// report interval, so last_used_at trails the key's latest call by up to that interval.
type KeyUse struct {
	KeyID    string `json:"key_id"`
	TenantID string `json:"tenant_id"`
	At       int64  `json:"at"`
}

// Record is one cell of a batch. Billable is already decided (see Billable); billing
// adds the counts to the rollup row of the same dimensions.
type Record struct {
	TenantID   string    `json:"tenant_id"`
	Hour       time.Time `json:"hour"`
	RouteID    string    `json:"route_id,omitempty"`
	ConsumerID string    `json:"consumer_id,omitempty"`
	Class      int       `json:"class"` // StatusClass
	Counts
}

// BatchID is the id of an edge's seq-th batch since boot.
func BatchID(edgeID, bootID string, seq uint64) string {
	return edgeID + "." + bootID + "." + strconv.FormatUint(seq, 10)
}

// Limits of a batch, checked when one is decoded.
const (
	MaxBatchRecords = 1 << 20
	// MaxBatchLatencies bounds a batch's latency entries (each up to two sketches of a
	// few KiB).
	MaxBatchLatencies = 1 << 12
	maxIDLen          = 256
)

// EncodeBatch is the batch's wire form (JSON).
func EncodeBatch(b *Batch) ([]byte, error) { return json.Marshal(b) }

// ErrInvalid is what every error of DecodeBatch and Validate wraps: the batch can never
// fold, so billing terminates its message instead of retrying it.
var ErrInvalid = errors.New("invalid usage batch")

// DecodeBatch parses and validates a batch's wire form. An error wraps ErrInvalid.
func DecodeBatch(data []byte) (*Batch, error) {
	var b Batch
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

// Validate checks what folding relies on: an id, tenant ids that are UUIDs, whole UTC
// hours, known status classes and counts that are not negative, with billable ≤ requests.
// An error wraps ErrInvalid.
func (b *Batch) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalid, b.ID, fmt.Sprintf(format, args...))
	}
	if b.ID == "" || len(b.ID) > maxIDLen {
		return bad("id must be 1–%d characters", maxIDLen)
	}
	if b.EdgeID == "" || len(b.EdgeID) > maxIDLen {
		return bad("edge_id must be 1–%d characters", maxIDLen)
	}
	if len(b.Records) > MaxBatchRecords {
		return bad("%d records, over the limit of %d", len(b.Records), MaxBatchRecords)
	}
	for i := range b.Records {
		r := &b.Records[i]
		if _, err := uuid.Parse(r.TenantID); err != nil || len(r.TenantID) != 36 {
			return bad("records[%d].tenant_id %q is not a UUID", i, r.TenantID)
		}
		if r.Hour.IsZero() || !r.Hour.Equal(r.Hour.UTC().Truncate(time.Hour)) {
			return bad("records[%d].hour %s is not a whole UTC hour", i, r.Hour.Format(time.RFC3339Nano))
		}
		r.Hour = r.Hour.UTC()
		if r.Class < 0 || r.Class > 5 {
			return bad("records[%d].class %d is not a status class", i, r.Class)
		}
		if len(r.RouteID) > maxIDLen || len(r.ConsumerID) > maxIDLen {
			return bad("records[%d]: route_id and consumer_id are at most %d characters", i, maxIDLen)
		}
		if r.Requests < 0 || r.Billable < 0 || r.BytesIn < 0 || r.BytesOut < 0 || r.FunctionUS < 0 || r.Billable > r.Requests {
			return bad("records[%d]: counts must be ≥ 0 with billable ≤ requests", i)
		}
	}
	if len(b.KeyUses) > MaxBatchRecords {
		return bad("%d key uses, over the limit of %d", len(b.KeyUses), MaxBatchRecords)
	}
	for i, u := range b.KeyUses {
		if u.KeyID == "" || len(u.KeyID) > maxIDLen || u.TenantID == "" || len(u.TenantID) > maxIDLen || u.At <= 0 {
			return bad("key_uses[%d]: key_id and tenant_id must be 1–%d characters and at a Unix time", i, maxIDLen)
		}
	}
	if len(b.Latencies) > MaxBatchLatencies {
		return bad("%d latencies, over the limit of %d", len(b.Latencies), MaxBatchLatencies)
	}
	for i := range b.Latencies {
		if err := validateLatency(&b.Latencies[i]); err != nil {
			return bad("latencies[%d]: %v", i, err)
		}
	}
	return nil
}

// Requests is the batch's request count.
func (b *Batch) Requests() int64 {
	var n int64
	for i := range b.Records {
		n += b.Records[i].Requests
	}
	return n
}

// EdgeTotal is an edge's own running count for one tenant and hour since it booted:
// every request it recorded (whether its batch was published, is still spooled, or was
// dropped) and, in Dropped, the requests it had to give up on (spool full, or recorded
// after the meter closed). Edges publish these to the TotalsBucket under TotalsKey, so
// reconciliation can compare them with what billing folded.
type EdgeTotal struct {
	EdgeID   string    `json:"edge_id"`
	BootID   string    `json:"boot_id"`
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"`
	Requests int64     `json:"requests"`
	Billable int64     `json:"billable"`
	Dropped  int64     `json:"dropped"`
	// DroppedBillable is the billable part of Dropped.
	DroppedBillable int64 `json:"dropped_billable"`
	// FunctionUS is the function time (µs) of Requests, DroppedFunctionUS that of
	// Dropped; zero from edges that predate function time.
	FunctionUS        int64 `json:"function_us,omitempty"`
	DroppedFunctionUS int64 `json:"dropped_function_us,omitempty"`
}

// TotalsKey is t's key in the TotalsBucket: "<YYYYMM>.<tenant>.<edge>.<boot>.<DDHH>", so
// one month's totals are listed with the filter TotalsFilter(year, month).
func TotalsKey(t *EdgeTotal) string {
	h := t.Hour.UTC()
	return fmt.Sprintf("%04d%02d.%s.%s.%s.%02d%02d", h.Year(), int(h.Month()), Token(t.TenantID),
		Token(t.EdgeID), Token(t.BootID), h.Day(), h.Hour())
}

// TotalsFilter is the key filter of the totals of one calendar month (UTC).
func TotalsFilter(year int, month time.Month) string {
	return fmt.Sprintf("%04d%02d.>", year, int(month))
}
