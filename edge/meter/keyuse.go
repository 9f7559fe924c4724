package meter

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"tollgate/infra/usage"
)

// Last use of API keys. The edge notes the key of every request it authenticates with
// Key.Use; the meter keeps at most one use per key per Config.KeyUseInterval and ships
// the uses of each flush in batches of their own (usage.Batch.KeyUses, no
// records), numbered in the same sequence as the usage, so they are published, spooled
// and deduplicated like it and billing moves keys.last_used_at forward from them.
//
// Cost per request: one atomic load and a comparison with the request's second, inlined
// into the caller; only the first use of a key in an interval makes a call, which takes
// a CAS and a short mutex to append to the pending list. Config.NoKeyUses turns noting
// off (Meter.Key hands out nil), so the cost can be measured. Unlike counts, uses are not in the state file: a crash loses the uses
// not yet handed over, which the key's next call in a later interval restores.

// maxPendingKeyUses bounds the uses waiting for the next flush; more are not noted
// (tollgate_meter_key_uses_total{result="dropped"}), and their keys are noted again one
// interval later.
const maxPendingKeyUses = 1 << 17

// maxBatchKeyUses bounds the uses in one batch: about 140 bytes each on the wire keeps a
// batch under maxBatchBytes.
const maxBatchKeyUses = 2000

// Key is the meter's handle for one API key of a tenant. Make it once per key with
// Meter.Key and keep it across recompiles: it remembers when the key was last noted. A
// nil *Key notes nothing.
type Key struct {
	noted    atomic.Int64 // Unix second of the last use noted
	every    int64        // Config.KeyUseInterval in seconds, here so Use reads one line
	m        *Meter
	tenantID string
	id       string
}

// keyUses is the list of uses waiting for the next flush.
type keyUses struct {
	mu      sync.Mutex
	pending []usage.KeyUse
	every   int64 // Config.KeyUseInterval in seconds
}

// Key returns a new handle for a tenant's API key; nil on a nil meter or with
// Config.NoKeyUses.
func (m *Meter) Key(tenantID, keyID string) *Key {
	if m == nil || m.cfg.NoKeyUses {
		return nil
	}
	return &Key{every: m.keys.every, m: m, tenantID: strings.Clone(tenantID), id: strings.Clone(keyID)}
}

// Use notes that the key authenticated a request arriving in Unix second at, unless a
// use of it was noted less than the key use interval before. It is small enough to be
// inlined: the common case (noted in this interval already) is a load and a compare.
func (k *Key) Use(at int64) {
	if k != nil && at-k.noted.Load() >= k.every {
		k.note(at)
	}
}

// note is Use's rare path: the first use of an interval. Of requests racing here, the
// one whose CAS wins notes the use.
func (k *Key) note(at int64) {
	last := k.noted.Load()
	if at-last < k.every || !k.noted.CompareAndSwap(last, at) {
		return
	}
	k.m.noteKeyUse(usage.KeyUse{KeyID: k.id, TenantID: k.tenantID, At: at})
}

func (m *Meter) noteKeyUse(u usage.KeyUse) {
	ku := &m.keys
	ku.mu.Lock()
	ok := len(ku.pending) < maxPendingKeyUses
	if ok {
		ku.pending = append(ku.pending, u)
	}
	ku.mu.Unlock()
	if ok {
		m.m.keyNoted.Inc()
	} else {
		m.m.keyDropped.Inc()
	}
}

// takeKeyUses empties the pending list.
func (m *Meter) takeKeyUses() []usage.KeyUse {
	ku := &m.keys
	ku.mu.Lock()
	defer ku.mu.Unlock()
	if len(ku.pending) == 0 {
		return nil
	}
	out := ku.pending
	ku.pending = make([]usage.KeyUse, 0, len(out))
	return out
}

// cutKeyUses appends the batches of key uses numbered from seq and returns the next
// free sequence number.
func cutKeyUses(out []encodedBatch, edge, boot string, seq uint64, created time.Time, uses []usage.KeyUse) ([]encodedBatch, uint64, error) {
	for len(uses) > 0 {
		n := min(len(uses), maxBatchKeyUses)
		b := &usage.Batch{
			ID:     usage.BatchID(edge, boot, seq),
			EdgeID: edge, BootID: boot, Seq: seq,
			Created: created, KeyUses: uses[:n:n],
		}
		data, err := usage.EncodeBatch(b)
		if err != nil {
			return out, seq, err
		}
		out = append(out, encodedBatch{b, data})
		seq++
		uses = uses[n:]
	}
	return out, seq, nil
}
