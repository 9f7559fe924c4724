// Package reqlog is what the edges and billing share about the request log: the batch
// an edge publishes (its wire format, limits and id), the JetStream stream that carries
// it, and the Publisher an edge writes it with. Billing stores the entries in Postgres
// and the api reads them back; the query types they share are here too.
//
// An entry is one request the edge chose to log: every refused or failed call (status
// ≥ 400) and a sample of the others. What an edge did not log is counted per tenant
// and carried in the same batch (NotLogged), so a reader is told how much it is not
// seeing. The wire format is JSON: add fields, never rename them.
package reqlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Entry is one logged request.
type Entry struct {
	Time      time.Time `json:"time"` // when the request arrived
	TenantID  string    `json:"tenant_id"`
	RequestID string    `json:"request_id"`
	Method    string    `json:"method"`
	// Path is the normalized request path without its query string: queries carry
	// secrets (tokens, signatures) a log must not keep.
	Path       string `json:"path"`
	RouteID    string `json:"route_id,omitempty"`
	RouteName  string `json:"route_name,omitempty"`
	ConsumerID string `json:"consumer_id,omitempty"`
	Status     int    `json:"status"`
	// Code is the edge's error code when the edge answered itself ("" when the
	// upstream's answer was relayed).
	Code string `json:"code,omitempty"`
	// GatewayUS is the time spent in the gateway (total minus UpstreamUS), UpstreamUS
	// the time spent in exchanges with the upstream, both in microseconds.
	GatewayUS  int64 `json:"gateway_us"`
	UpstreamUS int64 `json:"upstream_us"`
	BytesIn    int64 `json:"bytes_in"`
	BytesOut   int64 `json:"bytes_out"`
	// Reason is the edge's own answer in words (which target refused the connection,
	// which limit was reached…); "" when the upstream answered.
	Reason string `json:"reason,omitempty"`
}

// NotLogged counts a tenant's requests an edge did not log since its previous batch:
// Sampled were left out by the sample rate, Dropped were lost to a full buffer or a
// NATS outage longer than the edge holds batches.
type NotLogged struct {
	TenantID string    `json:"tenant_id"`
	Hour     time.Time `json:"hour"` // the UTC hour the requests arrived in
	Sampled  int64     `json:"sampled"`
	Dropped  int64     `json:"dropped"`
}

// Batch is what an edge publishes about once a second. Its ID — edge id, boot id,
// sequence — is also its Nats-Msg-Id, so JetStream drops a republished copy within the
// stream's duplicate window, and the store records it, so a later copy inserts nothing.
type Batch struct {
	ID        string      `json:"id"`
	EdgeID    string      `json:"edge_id"`
	Created   time.Time   `json:"created"`
	Entries   []Entry     `json:"entries"`
	NotLogged []NotLogged `json:"not_logged,omitempty"`
}

// BatchID is the id of an edge's seq-th batch since boot.
func BatchID(edgeID, bootID string, seq uint64) string {
	return edgeID + "." + bootID + "." + strconv.FormatUint(seq, 10)
}

// Limits of a batch and its entries, checked when one is decoded.
const (
	MaxBatchEntries = 1 << 16
	MaxIDLen        = 256
	MaxPathLen      = 2048
	MaxReasonLen    = 1024
	maxMethodLen    = 32
)

// ErrInvalid is what every error of DecodeBatch and Validate wraps: the batch can never
// be stored, so billing terminates its message instead of retrying it.
var ErrInvalid = errors.New("invalid request log batch")

// EncodeBatch is the batch's wire form (JSON).
func EncodeBatch(b *Batch) ([]byte, error) { return json.Marshal(b) }

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

// Validate checks what storing relies on: ids of bounded length, tenant ids that are
// UUIDs, times, statuses in 100–599, counts ≥ 0 and text that is UTF-8 without NUL
// (Postgres text refuses it). An error wraps ErrInvalid.
func (b *Batch) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalid, b.ID, fmt.Sprintf(format, args...))
	}
	if b.ID == "" || len(b.ID) > MaxIDLen || !text(b.ID) {
		return bad("id must be 1–%d characters", MaxIDLen)
	}
	if b.EdgeID == "" || len(b.EdgeID) > MaxIDLen || !text(b.EdgeID) {
		return bad("edge_id must be 1–%d characters", MaxIDLen)
	}
	if len(b.Entries) > MaxBatchEntries || len(b.NotLogged) > MaxBatchEntries {
		return bad("over the limit of %d entries", MaxBatchEntries)
	}
	for i := range b.Entries {
		e := &b.Entries[i]
		if !isUUID(e.TenantID) {
			return bad("entries[%d].tenant_id %q is not a UUID", i, e.TenantID)
		}
		if e.Time.IsZero() || e.Time.Year() < 2000 || e.Time.Year() > 9999 {
			return bad("entries[%d].time is missing or out of range", i)
		}
		e.Time = e.Time.UTC()
		if e.Status < 100 || e.Status > 599 {
			return bad("entries[%d].status %d is not an HTTP status", i, e.Status)
		}
		for _, f := range []struct {
			v   string
			max int
		}{{e.RequestID, MaxIDLen}, {e.Method, maxMethodLen}, {e.Path, MaxPathLen}, {e.RouteID, MaxIDLen},
			{e.RouteName, MaxIDLen}, {e.ConsumerID, MaxIDLen}, {e.Code, MaxIDLen}, {e.Reason, MaxReasonLen}} {
			if len(f.v) > f.max || !text(f.v) {
				return bad("entries[%d]: a text field is over %d bytes or not UTF-8 text", i, f.max)
			}
		}
		if e.GatewayUS < 0 || e.UpstreamUS < 0 || e.BytesIn < 0 || e.BytesOut < 0 {
			return bad("entries[%d]: times and bytes must be ≥ 0", i)
		}
	}
	for i := range b.NotLogged {
		n := &b.NotLogged[i]
		if !isUUID(n.TenantID) {
			return bad("not_logged[%d].tenant_id %q is not a UUID", i, n.TenantID)
		}
		if n.Hour.IsZero() || !n.Hour.Equal(n.Hour.UTC().Truncate(time.Hour)) || n.Hour.Year() > 9999 {
			return bad("not_logged[%d].hour is not a whole UTC hour", i)
		}
		n.Hour = n.Hour.UTC()
		if n.Sampled < 0 || n.Dropped < 0 {
			return bad("not_logged[%d]: counts must be ≥ 0", i)
		}
	}
	return nil
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// text: valid UTF-8 without NUL.
func text(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return false
		}
	}
	return true
}
