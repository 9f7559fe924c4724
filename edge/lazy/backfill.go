package lazy

import "time"

// A fast start (an empty or half-filled store) does not wait for the watch to write the
// whole bucket: the edge takes every tenant's host entries first (its tenant and domain
// keys), is ready, and the watch backfills the rest behind it. Meanwhile three other
// sources write to the store: that first fetch of host entries, a watch of the changes
// made since the backfill began (so they are not held up behind the backfill), and the
// fetch of a single tenant that a request needs before the backfill reached it. They
// deliver one key's updates out of order with each other, so during the backfill the
// KV revision applied to each key by any of them decides: an update not newer than it
// is dropped. Entry revs alone would not do: a delete carries none, and a late delete of
// an older value would remove a newer one.
//
// Only the watch moves the store's revision, so a restart resumes the backfill where it
// got to, and the store is marked partial until the watch has delivered the whole bucket.

// Fetcher delivers every entry of one tenant as the bucket holds it now (value nil: a
// delete marker), and returns once all are delivered.
type Fetcher func(id string, deliver func(key string, value []byte, rev uint64)) error

type backfill struct {
	// base is the bucket's last revision when the backfill began. The watch's updates
	// above it may also come from another source and are recorded in kv; those below it
	// come from the watch alone, or from a source whose update of that key is recorded.
	base uint64
	// kv is the KV revision last applied to each key by a source other than the watch,
	// or by the watch above base.
	kv      map[string]uint64
	maxSide uint64 // the highest revision in kv
	// done: the watch delivered the whole bucket, the other sources stop. kv is kept
	// until the watch is past maxSide.
	done  bool
	fetch Fetcher
	// fresh: the store was empty when the backfill began and the bucket keeps one
	// revision per key, so a key none of the other sources wrote is not in the store
	// (the watch delivers each key once): its write needs no lookup first. Those lookups
	// were most of a first start's time in the store.
	fresh bool
}

// admit says whether an update of key at rev is newer than what was applied of it, and
// records it if it is and side (it is not the watch's) or above base.
func (b *backfill) admit(key string, rev uint64, side bool) bool {
	if held, ok := b.kv[key]; ok && rev <= held {
		return false
	}
	if side || rev > b.base {
		b.kv[key] = rev
		b.maxSide = max(b.maxSide, rev)
	}
	return true
}

// BeginBackfill starts a fast start: base is the bucket's last revision now; fetch is how
// a tenant a request needs is fetched before the watch has written it. Until EndBackfill
// the store is marked partial, and updates from other sources go to Side.
// oneRevision says the bucket keeps one revision per key (its history is 1).
func (l *Tenants[T]) BeginBackfill(base uint64, oneRevision bool, fetch Fetcher) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	fresh := oneRevision && l.st.Seq() == 0 && !l.st.Partial() && len(l.byID) == 0
	l.bf = &backfill{base: base, kv: map[string]uint64{}, fetch: fetch, fresh: fresh}
	l.m.backfilling.Set(1)
	return l.st.SetPartial(true)
}

// Backfilling says a backfill runs: the watch has not yet delivered the whole bucket.
func (l *Tenants[T]) Backfilling() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bf != nil && !l.bf.done
}

// Side takes an update from a source other than the watch during a backfill; flush says
// its burst is over (the store commits and changed host maps are published). After the
// backfill it is dropped: the watch has delivered everything.
func (l *Tenants[T]) Side(key string, value []byte, rev uint64, flush bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bf == nil || l.bf.done {
		return
	}
	if !l.bf.admit(key, rev, true) {
		l.m.ignored.Inc()
	} else if value == nil {
		l.deleteLocked(key, rev)
	} else {
		l.putLocked(key, value, rev)
	}
	if err := l.st.Wrote(flush); err != nil {
		l.cfg.Logger.Warn("edge: config store write failed", "err", err)
	}
	if flush && l.hostsDirty {
		l.publishLocked()
	}
}

// EndBackfill says the watch has delivered the whole bucket: the store is whole, the
// other sources are stopped.
func (l *Tenants[T]) EndBackfill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bf == nil {
		return
	}
	l.bf.done = true
	l.m.backfilling.Set(0)
	if l.bf.maxSide <= l.st.Seq() {
		l.bf = nil
	}
	if err := l.st.SetPartial(false); err != nil {
		l.cfg.Logger.Warn("edge: config store write failed", "err", err)
	}
	if l.hostsDirty {
		l.publishLocked()
	}
}

// fetchLocked fetches t's entries into the store while a backfill has not reached them
// yet. It returns false when the tenant cannot be served: the fetch failed (NATS
// unreachable), or the tenant turned out deleted. l.mu is released during the fetch.
func (l *Tenants[T]) fetchLocked(t *tenant[T]) bool {
	if l.bf == nil || l.bf.done || t.fetched || t.resident {
		return true
	}
	fetch := l.bf.fetch
	l.mu.Unlock()
	start := time.Now()
	err := fetch(t.id, func(key string, value []byte, rev uint64) { l.Side(key, value, rev, false) })
	l.mu.Lock()
	if err != nil {
		l.cfg.Logger.Warn("edge: fetching a tenant the backfill has not reached yet", "tenant", t.id, "err", err)
		return false
	}
	l.cfg.Logger.Debug("edge: tenant fetched ahead of the backfill", "tenant", t.id, "took", time.Since(start))
	t.fetched = true
	l.m.fetches.Inc()
	if l.hostsDirty {
		l.publishLocked()
	}
	return !t.gone
}

// unwritten says key cannot be in the store: see backfill.fresh.
func (l *Tenants[T]) unwritten(key string) bool {
	if l.bf == nil || !l.bf.fresh {
		return false
	}
	_, ok := l.bf.kv[key]
	return !ok
}

// held is the store's Held, without the lookup for a key that cannot be there.
func (l *Tenants[T]) held(key string) (rev int64, size int, ok bool) {
	if l.unwritten(key) {
		return 0, 0, false
	}
	return l.st.Held(key)
}

// tomb is the store's Tomb of a tenant, whose tenant entry's key is key, without the
// lookup when that key cannot have been written (a tombstone is written on its delete).
func (l *Tenants[T]) tomb(id, key string) int64 {
	if l.unwritten(key) {
		return 0
	}
	return l.st.Tomb(id)
}

// Unfetched reports whether s's tenant exists but could not be loaded because a fetch
// ahead of the backfill failed (NATS did not answer in time): the edge should say
// "retry", not "no such tenant".
func (l *Tenants[T]) Unfetched(s *Slot[T]) bool {
	t := s.t
	if t == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !t.gone && !t.fetched && !t.resident && l.bf != nil && !l.bf.done
}
