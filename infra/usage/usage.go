// Package usage is what an edge's meter and billing share: the usage batch the meter
// publishes and billing folds (its wire format, limits and ids), the billable rule the
// meter applies when it counts, the edges' running totals that reconciliation reads, the
// JetStream names of the stream and bucket that carry them, and the Publisher an edge
// writes both with.
//
// It imports neither side: the edge-only binary links this package and no billing code,
// and billing reads what edges wrote through the same types. The wire format is JSON and
// must stay readable by both sides across versions: add fields, never rename them.
package usage

// Origin says who produced a response: the tenant's upstream, or the edge itself.
type Origin uint8

const (
	// OriginEdge: the gateway answered on its own (401, 403, 404, 413, 429, 502, 503, 504…).
	OriginEdge Origin = iota
	// OriginUpstream: the upstream's response was relayed, whatever its status.
	OriginUpstream
)

// StatusClass is the hundreds digit of an HTTP status: 1 for 1xx … 5 for 5xx, 0 for a
// status outside 100–599.
func StatusClass(status int) int {
	if status < 100 || status > 599 {
		return 0
	}
	return status / 100
}

// Billable is the billing rule, applied in this one place (the meter calls it when it
// builds a batch; nothing downstream second-guesses it):
//
//   - a response the upstream produced is billable, whatever its status: 2xx to 5xx,
//     including the upstream's own 5xx, since the gateway did all of its work (auth,
//     policy, limits, proxying) and the upstream is the tenant's;
//   - a response the edge produced itself is counted but never billed: rejections (401,
//     403, 404, 413, 429), shedding and not-ready (503), and the edge's answers for an
//     upstream that failed or timed out (502, 504);
//   - a status outside 100–599 is not billable.
func Billable(class int, origin Origin) bool {
	return origin == OriginUpstream && class >= 1 && class <= 5
}

// Names of the JetStream objects, all under the stack's prefix (TOLLGATE_NATS_PREFIX).

// Stream is the stream of usage batches: "<prefix>_usage".
func Stream(prefix string) string { return prefix + "_usage" }

// Subjects is the stream's subject filter: "<prefix>.usage.>".
func Subjects(prefix string) string { return prefix + ".usage.>" }

// Subject is the subject an edge publishes its batches on: "<prefix>.usage.<edge>",
// the edge id made a single subject token (see Token).
func Subject(prefix, edgeID string) string { return prefix + ".usage." + Token(edgeID) }

// TotalsBucket is the KV bucket of the edges' running totals: "<prefix>_meter_totals".
func TotalsBucket(prefix string) string { return prefix + "_meter_totals" }

// Token makes s usable as one NATS subject token or KV key token: every character
// outside [A-Za-z0-9_-] becomes '_' (so "web-1.eu" is "web-1_eu"); empty becomes "_".
func Token(s string) string {
	if s == "" {
		return "_"
	}
	ok := true
	for i := 0; i < len(s); i++ {
		if !tokenChar(s[i]) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !tokenChar(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func tokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Counts are the counters of usage.
type Counts struct {
	Requests int64 `json:"requests"`
	Billable int64 `json:"billable"`
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// FunctionUS is the run time of the tenant's functions (Wasm filters) in
	// microseconds: the wall time of the guest's callbacks, the host's waits excluded.
	// It is billed whatever the status (the tenant's code ran), so it is not split into
	// a billable part. Omitted when zero, and absent from the batches of edges that
	// predate it, which decode as zero.
	FunctionUS int64 `json:"function_us,omitempty"`
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Requests += o.Requests
	c.Billable += o.Billable
	c.BytesIn += o.BytesIn
	c.BytesOut += o.BytesOut
	c.FunctionUS += o.FunctionUS
}
