// Package tenantstore is the edge's local copy of its config bucket, on disk: every entry
// as it arrived, indexed by key, so one tenant's entries are one prefix scan, together
// with the last KV revision written, so a restarted edge resumes its watch after it.
//
// It is a Pebble database in the edge's state directory. Pebble rather than bbolt: the
// edge's memory must not grow with the config it holds, and a bbolt file is read through
// mmap, whose every touched page counts in the process's resident set (a full load
// touches all of them); Pebble reads with pread into a block cache of a fixed size.
//
// Writes are not synced: NATS is the source of truth, and a store that lost its last
// writes in a crash resumes from the revision those writes would have recorded, since the
// revision is written in the same batch as the entries.
//
// A Store is not safe for concurrent use: its one user (package lazy) serializes calls.
package tenantstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
)

// Dir is the store's directory under the edge's state directory.
const Dir = "config-store"

// Key prefixes: meta, entries, domains (a copy of the domain entries, read at open),
// tenant index, tenant tombstones.
const (
	pMeta   = "m/"
	pEntry  = "e/"
	pDomain = "d/"
	pIndex  = "i/"
	pTomb   = "t/"
)

var (
	kBucket = []byte(pMeta + "bucket")
	kSeq    = []byte(pMeta + "seq")
	kAt     = []byte(pMeta + "at")
	// kPartial marks a store still being backfilled: it holds every tenant's host entries
	// but not yet every tenant's other entries (lazy's fast start). Absent: complete.
	kPartial = []byte(pMeta + "partial")
)

// batchMax bounds the writes a batch collects before it is committed anyway.
const batchMax = 4096

// Store is the local copy of one bucket.
type Store struct {
	db      *pebble.DB
	dir     string
	bucket  string
	b       *pebble.Batch // indexed: reads see what it holds
	seq     uint64
	at      time.Time
	partial bool
	cache   *pebble.Cache
	opts    Options
}

// Options say where the store lives and how much memory its reads may cache.
type Options struct {
	Dir    string // the edge's state directory; the store is Dir/config-store
	Bucket string
	// CacheBytes is Pebble's block cache. Default 8 MiB.
	CacheBytes int64
	Logger     *slog.Logger
}

// Open opens the store of o.Bucket, or a new empty one when there is none, when the one
// there is of another bucket, or when it cannot be read (it is then discarded: the watch
// replays the bucket into a new one). The error is only that of making a new store.
func Open(o Options) (s *Store, discarded string, err error) {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 8 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	dir := filepath.Join(o.Dir, Dir)
	s, why := open(dir, o)
	if s != nil {
		return s, "", nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, why, fmt.Errorf("config store: discarding %s: %w", dir, err)
	}
	s, err2 := open(dir, o)
	if s == nil {
		return nil, why, fmt.Errorf("config store: %s", err2)
	}
	return s, why, nil
}

// open returns the store in dir, or nil and why it cannot be used.
func open(dir string, o Options) (s *Store, why string) {
	defer func() {
		if r := recover(); r != nil {
			s, why = nil, fmt.Sprintf("unreadable: %v", r)
		}
	}()
	cache := pebble.NewCache(o.CacheBytes)
	opts := &pebble.Options{
		Cache:        cache,
		MemTableSize: 4 << 20,
		Logger:       logger{o.Logger},
		// Every entry written is first looked up (the rev held), and while a first
		// start writes the whole bucket nearly every lookup misses: bloom filters
		// answer those without reading the tables' blocks.
		Levels: []pebble.LevelOptions{{FilterPolicy: bloom.FilterPolicy(10)}},
	}
	opts.EnsureDefaults()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		cache.Unref()
		return nil, err.Error()
	}
	s = &Store{db: db, dir: dir, bucket: o.Bucket, cache: cache, opts: o}
	fail := func(why string) (*Store, string) {
		_ = db.Close()
		cache.Unref()
		return nil, why
	}
	b, err := s.get(kBucket)
	switch {
	case err != nil:
		return fail(err.Error())
	case b == nil:
		if err := db.Set(kBucket, []byte(o.Bucket), pebble.NoSync); err != nil {
			return fail(err.Error())
		}
	case string(b) != o.Bucket:
		return fail(fmt.Sprintf("the store is of bucket %q", b))
	}
	if v, err := s.get(kSeq); err != nil {
		return fail(err.Error())
	} else if len(v) == 8 {
		s.seq = binary.BigEndian.Uint64(v)
	}
	if v, err := s.get(kAt); err != nil {
		return fail(err.Error())
	} else if len(v) == 8 {
		s.at = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
	}
	if v, err := s.get(kPartial); err != nil {
		return fail(err.Error())
	} else {
		s.partial = len(v) > 0
	}
	s.b = db.NewIndexedBatch()
	return s, ""
}

func (s *Store) get(k []byte) ([]byte, error) {
	v, c, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v = bytes.Clone(v)
	_ = c.Close()
	return v, nil
}

// Seq is the last KV revision written (0: none); At when it was committed.
func (s *Store) Seq() uint64     { return s.seq }
func (s *Store) At() time.Time   { return s.at }
func (s *Store) Bucket() string  { return s.bucket }
func (s *Store) Path() string    { return s.dir }
func (s *Store) pending() uint32 { return s.b.Count() }

// Partial says the store is being backfilled: its revision is how far the backfill got,
// and only the tenants fetched on their own are whole.
func (s *Store) Partial() bool { return s.partial }

// SetPartial marks the store as being backfilled, or as whole again, and commits.
func (s *Store) SetPartial(p bool) error {
	s.partial = p
	if p {
		_ = s.b.Set(kPartial, []byte{1}, nil)
	} else {
		_ = s.b.Delete(kPartial, nil)
	}
	return s.Commit()
}

// Held returns the rev held for key and the value's length: ok false when the key was
// never written, value length 0 when it was deleted.
func (s *Store) Held(key string) (rev int64, size int, ok bool) {
	v, c, err := s.b.Get(append([]byte(pEntry), key...))
	if err != nil {
		return 0, 0, false
	}
	defer c.Close()
	if len(v) < 8 {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), len(v) - 8, true
}

// Put stores an entry's value with its rev; a domain entry is also kept where Domains
// reads it.
func (s *Store) Put(key string, rev int64, value []byte, domain bool) {
	v := make([]byte, 8+len(value))
	binary.BigEndian.PutUint64(v, uint64(rev))
	copy(v[8:], value)
	_ = s.b.Set(append([]byte(pEntry), key...), v, nil)
	if domain {
		_ = s.b.Set(append([]byte(pDomain), key...), v[8:], nil)
	}
}

// Delete marks an entry deleted, keeping its rev (a late put of an older value stays
// ignored).
func (s *Store) Delete(key string, rev int64) {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(rev))
	_ = s.b.Set(append([]byte(pEntry), key...), v[:], nil)
	_ = s.b.Delete(append([]byte(pDomain), key...), nil)
}

// DeleteTenant removes a tenant's every entry and its index record, and keeps tomb: the
// rev of its tenant entry, below which a late put of that entry is ignored.
func (s *Store) DeleteTenant(id string, tomb int64) {
	for _, p := range []string{pEntry, pDomain} {
		_ = s.b.DeleteRange([]byte(p+id+"."), []byte(p+id+"/"), nil) // '/' follows '.'
	}
	_ = s.b.Delete([]byte(pIndex+id), nil)
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(tomb))
	_ = s.b.Set([]byte(pTomb+id), v[:], nil)
}

// Tomb is the rev of a deleted tenant's tenant entry, 0 when it was not deleted.
func (s *Store) Tomb(id string) int64 {
	v, c, err := s.b.Get([]byte(pTomb + id))
	if err != nil {
		return 0
	}
	defer c.Close()
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

// SetIndex records a tenant's slug and the rev of its newest entry.
func (s *Store) SetIndex(id, slug string, maxRev int64) {
	v := make([]byte, 8+len(slug))
	binary.BigEndian.PutUint64(v, uint64(maxRev))
	copy(v[8:], slug)
	_ = s.b.Set([]byte(pIndex+id), v, nil)
}

// Index calls fn with every tenant's index record.
func (s *Store) Index(fn func(id, slug string, maxRev int64)) error {
	return s.scan(pIndex, func(k string, v []byte) {
		if len(v) >= 8 {
			fn(k, string(v[8:]), int64(binary.BigEndian.Uint64(v)))
		}
	})
}

// Domains calls fn with every domain entry held.
func (s *Store) Domains(fn func(key string, value []byte)) error {
	return s.scan(pDomain, fn)
}

// Tenant calls fn with every entry of a tenant that is not deleted: the value is fn's
// only for the call.
func (s *Store) Tenant(id string, fn func(key string, value []byte)) error {
	return s.scan(pEntry+id+".", func(k string, v []byte) {
		if len(v) > 8 {
			fn(id+"."+k, v[8:])
		}
	})
}

// scan calls fn with every key under prefix (without it) and its value.
func (s *Store) scan(prefix string, fn func(key string, value []byte)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("config store: %v", r)
		}
	}()
	upper := []byte(prefix)
	upper[len(upper)-1]++
	it, err := s.b.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: upper})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		fn(strings.Clone(string(it.Key()[len(prefix):])), it.Value())
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return err
	}
	return it.Close()
}

// Written records that every revision up to seq was written, and commits the batch when
// flush says the burst is over or the batch is large.
func (s *Store) Written(seq uint64, flush bool) error {
	if seq > s.seq {
		s.seq = seq
	}
	if !flush && s.pending() < batchMax {
		return nil
	}
	return s.Commit()
}

// Wrote commits the batch when flush says a burst is over or the batch is large, without
// moving the store's revision: for entries that did not come from the watch the revision
// stands for.
func (s *Store) Wrote(flush bool) error {
	if !flush && s.pending() < batchMax {
		return nil
	}
	return s.Commit()
}

// Commit writes the batch with the revision it brings the store to.
func (s *Store) Commit() error {
	if s.b.Empty() {
		return nil
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], s.seq)
	_ = s.b.Set(kSeq, bytes.Clone(v[:]), nil)
	now := time.Now()
	binary.BigEndian.PutUint64(v[:], uint64(now.UnixNano()))
	_ = s.b.Set(kAt, v[:], nil)
	err := s.b.Commit(pebble.NoSync)
	_ = s.b.Close()
	s.b = s.db.NewIndexedBatch()
	if err != nil {
		return fmt.Errorf("config store: %w", err)
	}
	s.at = now
	return nil
}

// Discard closes the store, deletes it and returns a new empty one in its place.
func (s *Store) Discard() (*Store, error) {
	_ = s.b.Close()
	_ = s.db.Close()
	s.cache.Unref()
	if err := os.RemoveAll(s.dir); err != nil {
		return nil, fmt.Errorf("config store: discarding %s: %w", s.dir, err)
	}
	n, _, err := Open(s.opts)
	return n, err
}

// Close commits what is pending and closes the store.
func (s *Store) Close() error {
	err := s.Commit()
	_ = s.b.Close()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	s.cache.Unref()
	return err
}

// logger sends Pebble's lines to the edge's log. Fatalf panics rather than exiting the
// process: open recovers from it and discards the store.
type logger struct{ log *slog.Logger }

func (l logger) Infof(format string, args ...any) {
	l.log.Debug("config store: " + fmt.Sprintf(format, args...))
}

func (l logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("config store: " + msg)
	panic(msg)
}
