// Package configfile keeps the edge's config file: the last config the edge applied, on
// local disk, so that an edge restarted while NATS is unreachable serves what it served
// before. It stands between the config watch and the edge (File); it knows KV keys and
// values, not what they mean, and must stay off the request path.
//
// Its names on disk, in metrics, in /readyz and in TOLLGATE_EDGE_SNAPSHOT_* settings say
// "snapshot", which is the same thing.
package configfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/client_golang/prometheus"

	"tollgate/tenants"
)

// An edge keeps the config it applied (every key's value and KV revision, and the bucket's
// name) in one file of its local state directory, so that a restart while NATS is
// unreachable can serve what it served before instead of answering 503 until NATS
// returns. The file is written off the request path: a short while after a change (the
// writes of a burst coalesce) and at shutdown, each time whole into a temporary file that
// is fsynced and renamed over the old one, and the directory fsynced, so a crash at any
// point leaves the old file or the new one, never a mixture.
//
// Layout: one header line, then the body, a JSON object:
//
//	tollgate-edge-config 1 <body length> <CRC-32C of the body, 8 hex digits>\n
//	{"bucket":"...","as_of":"<RFC 3339>","entries":[{"key":"...","revision":12,"value":"<base64>"},...]}
//
// as_of is when the config was last known to be the bucket's: the time of a write made
// while the edge followed the bucket, connected to NATS. A reader refuses anything that
// is not exactly this (a torn, truncated or flipped file, another version, another
// bucket) with an error that says why, and the caller starts as if there were no file.

// Name is the config file's name in its directory.
const Name = "edge-config.snapshot"

const (
	configFileMagic   = "tollgate-edge-config"
	configFileVersion = 1
	// maxConfigFile bounds what the reader takes in: far above any real bucket (5,000
	// routes are about 5 MB), below what could exhaust the process.
	maxConfigFile = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Contents is what a config file holds.
type Contents struct {
	Bucket  string    `json:"bucket"`
	AsOf    time.Time `json:"as_of"`
	Entries []Entry   `json:"entries"` // by key
}

// Entry is one key of the bucket as it was applied. Deleted keys are not kept.
type Entry struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	Value    []byte `json:"value"`
}

// Encode returns the file content of s.
func Encode(s *Contents) ([]byte, error) {
	var body bytes.Buffer
	if err := encodeSavedBody(&body, s.body()); err != nil {
		return nil, err
	}
	head := fmt.Sprintf("%s %d %d %08x\n", configFileMagic, configFileVersion, body.Len(), crc32.Checksum(body.Bytes(), castagnoli))
	return append([]byte(head), body.Bytes()...), nil
}

// savedBody is what a file's body is written from: the bucket, the time, and the
// entries in key order, taken one at a time so that a File can unpack each value
// into one reused buffer instead of holding them all unpacked at once.
type savedBody struct {
	bucket string
	asOf   time.Time
	n      int
	entry  func(i int) (Entry, error) // valid until the next call
}

func (s *Contents) body() savedBody {
	return savedBody{s.Bucket, s.AsOf, len(s.Entries), func(i int) (Entry, error) { return s.Entries[i], nil }}
}

// encodeSavedBody writes s's JSON body to w an entry at a time, so that writing the file
// of a bucket of 50,000 routes (tens of MB) never holds it whole in memory.
func encodeSavedBody(w io.Writer, s savedBody) error {
	head, err := json.Marshal(struct {
		Bucket string    `json:"bucket"`
		AsOf   time.Time `json:"as_of"`
	}{s.bucket, s.asOf})
	if err != nil {
		return err
	}
	if _, err := w.Write(head[:len(head)-1]); err != nil { // without its "}"
		return err
	}
	if _, err := io.WriteString(w, `,"entries":[`); err != nil {
		return err
	}
	enc := json.NewEncoder(w) // each entry and a newline, which JSON reads as space
	for i := range s.n {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		e, err := s.entry(i)
		if err != nil {
			return err
		}
		if err := enc.Encode(&e); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "]}")
	return err
}

// Decode reads a config file's content, refusing anything but a complete,
// intact file of this version with a bucket, a time and well-formed, distinct keys.
func Decode(b []byte) (*Contents, error) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || nl > 128 {
		return nil, errors.New("no header line")
	}
	f := strings.Split(string(b[:nl]), " ")
	if len(f) != 4 || f[0] != configFileMagic {
		return nil, errors.New("not a config snapshot")
	}
	if f[1] != strconv.Itoa(configFileVersion) {
		return nil, fmt.Errorf("version %q, this edge reads %d", f[1], configFileVersion)
	}
	body := b[nl+1:]
	n, err := strconv.Atoi(f[2])
	if err != nil || n != len(body) {
		return nil, fmt.Errorf("body of %d bytes, the header says %s (a torn or truncated file)", len(body), f[2])
	}
	sum, err := strconv.ParseUint(f[3], 16, 32)
	if err != nil || len(f[3]) != 8 {
		return nil, fmt.Errorf("bad checksum field %q", f[3])
	}
	if got := crc32.Checksum(body, castagnoli); got != uint32(sum) {
		return nil, fmt.Errorf("checksum %08x, the header says %08x (a damaged file)", got, sum)
	}
	var s Contents
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	if s.Bucket == "" {
		return nil, errors.New("no bucket")
	}
	if s.AsOf.IsZero() {
		return nil, errors.New("no as_of time")
	}
	seen := make(map[string]struct{}, len(s.Entries))
	for _, e := range s.Entries {
		if _, err := tenants.ParseKey(e.Key); err != nil {
			return nil, fmt.Errorf("entry %q: %w", e.Key, err)
		}
		if _, dup := seen[e.Key]; dup {
			return nil, fmt.Errorf("entry %q twice", e.Key)
		}
		seen[e.Key] = struct{}{}
		if e.Revision == 0 || e.Value == nil {
			return nil, fmt.Errorf("entry %q has no revision or no value", e.Key)
		}
	}
	return &s, nil
}

// Read reads the config file in dir and checks that it is of bucket and no older
// than maxAge (0: no snapshot is young enough) at now.
func Read(dir, bucket string, maxAge time.Duration, now time.Time) (*Contents, error) {
	if maxAge <= 0 {
		return nil, errors.New("snapshots are off (TOLLGATE_EDGE_SNAPSHOT_MAX_AGE=0)")
	}
	path := filepath.Join(dir, Name)
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil {
		return nil, err
	} else if st.Size() > maxConfigFile {
		return nil, fmt.Errorf("%s: %d bytes, more than a snapshot can be", path, st.Size())
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(fh); err != nil {
		return nil, err
	}
	s, err := Decode(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Bucket != bucket {
		return nil, fmt.Errorf("%s: of bucket %q, this edge watches %q", path, s.Bucket, bucket)
	}
	if age := now.Sub(s.AsOf); age > maxAge {
		return nil, fmt.Errorf("%s: %s old, older than TOLLGATE_EDGE_SNAPSHOT_MAX_AGE (%s)", path, age.Round(time.Second), maxAge)
	}
	return s, nil
}

// writeFile replaces the config file in dir with s's: a temporary file, fsynced, renamed
// over the old one, and the directory fsynced so the rename itself survives a crash. The
// body streams into the file; the header line goes first with its length zero-padded to
// a fixed width (any reader of the format takes it) and is filled in once the body is
// written.
func writeFile(dir string, s savedBody) error {
	tmp, err := os.CreateTemp(dir, "."+Name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	header := func(n int64, sum uint32) string {
		return fmt.Sprintf("%s %d %010d %08x\n", configFileMagic, configFileVersion, n, sum)
	}
	bw := bufio.NewWriterSize(tmp, 64<<10)
	crc := crc32.New(castagnoli)
	body := &countWriter{w: io.MultiWriter(bw, crc)}
	_, err = io.WriteString(bw, header(0, 0))
	if err == nil {
		err = encodeSavedBody(body, s)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && body.n > maxConfigFile {
		err = fmt.Errorf("%d bytes, more than a snapshot can be", body.n)
	}
	if err == nil {
		_, err = tmp.WriteAt([]byte(header(body.n, crc.Sum32())), 0)
	}
	if err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, Name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Config configures a File. Dir, Bucket and Apply are required.
type Config struct {
	Dir    string // the edge's local state directory (created if missing)
	Bucket string // the KV bucket the edge watches
	// Apply passes an update on to the edge (Edge.Apply). The File calls it for
	// every update, for the entries of a snapshot it serves, and for the keys the bucket
	// no longer has when the watch's initial load shows so.
	Apply func(key string, value []byte, revision uint64)
	// Connected reports whether the edge is connected to NATS: a write made while it is
	// not keeps the as_of of the last one, since the edge cannot know the config is still
	// current. Default: always connected.
	Connected func() bool
	// Debounce is how long a change waits for more before the file is written; at most
	// one write per Debounce, or per 10 times the last write's duration when that is
	// longer. Default: 1s.
	Debounce time.Duration
	// Refresh rewrites an unchanged file this often while connected, so a quiet bucket's
	// snapshot stays young. Default: 1h.
	Refresh time.Duration
	// RawValues keeps every value as the watch delivered it. Default (false): once a
	// value has been written to the file it is kept compressed against a dictionary of
	// its kind (the first value of that kind seen), which cuts what an edge holds per
	// route several times over, for a few microseconds per changed value at each write.
	RawValues bool
	// Hog writes the file without pausing. Default (false): the writer sleeps a
	// millisecond (and lets go of the lock on the entries) after each fraction of a
	// millisecond of copying, sorting or encoding, so that on a one-core edge a change to
	// apply or a request to serve waits for a fraction of a millisecond, not for the
	// scheduler to preempt a write of tens of milliseconds (10 ms at a time).
	Hog      bool
	Registry prometheus.Registerer // Default: none, no metrics
	Logger   *slog.Logger          // Default: slog.Default()
}

// File stands between the config watch and the edge: it passes every update on,
// keeps a copy of what it passed, and writes that copy to the config file. At start it
// can serve the edge the file's config (Restore) until the watch's initial load is in (Current),
// which then deletes the keys the snapshot had and the bucket no longer has.
type File struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]savedValue
	seen    map[string]struct{} // keys the current initial load delivered; nil once current
	live    bool                // the initial load is in: entries are the bucket's
	dirty   bool
	asOf    time.Time // the as_of of the last write, or of the snapshot restored
	closed  bool

	serving   atomic.Pointer[time.Time] // as_of of the snapshot being served; nil: not serving one
	restoreIs atomic.Pointer[string]    // why no snapshot could be served, for /readyz

	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}

	pack packer // used by write only: by the writer goroutine, then by Close once it ended

	writes      *prometheus.CounterVec
	lastWritten prometheus.Gauge
}

type savedValue struct {
	value []byte
	rev   uint64
	dict  *s2.Dict // not nil: value is compressed against it (packer)
	done  bool     // the writer has packed it, or found packing does not pay
}

// savedItem is an entry as write takes it out of the map.
type savedItem struct {
	key string
	savedValue
}

// packer compresses the values a File keeps. Values of one kind (routes, keys,
// consumers...) are JSON documents of the same shape that differ in a few fields, so
// each is compressed against the first value of its kind seen, kept as the kind's
// dictionary: a route of about 500 bytes keeps about 65.
type packer struct {
	dicts map[string]*s2.Dict // by kind
	buf   []byte              // scratch for Encode and Decode
}

// packMin is the shortest value worth packing; a dictionary needs s2.MinDictSize bytes.
const packMin = 64

// pack returns v compressed in a slice of its own, or nil when that does not pay.
func (p *packer) pack(key string, v []byte) ([]byte, *s2.Dict) {
	if len(v) < packMin {
		return nil, nil
	}
	kind := keyKind(key)
	d := p.dicts[kind]
	if d == nil {
		if p.dicts == nil {
			p.dicts = map[string]*s2.Dict{}
		}
		// The first bytes of v are where a value of its kind starts: the dictionary's
		// first match is looked for there.
		if d = s2.MakeDict(bytes.Clone(v), v[:16]); d == nil {
			return nil, nil
		}
		p.dicts[kind] = d
	}
	p.buf = d.Encode(p.buf[:cap(p.buf)], v)
	if len(p.buf) > len(v)*3/4 {
		return nil, nil
	}
	return bytes.Clone(p.buf), d
}

// value returns v's value, unpacked into the packer's scratch when packed: valid until
// the next call.
func (p *packer) value(v savedValue) ([]byte, error) {
	if v.dict == nil {
		return v.value, nil
	}
	out, err := v.dict.Decode(p.buf[:cap(p.buf)], v.value)
	if err != nil {
		return nil, fmt.Errorf("unpacking a kept value: %w", err)
	}
	p.buf = out
	return out, nil
}

// keyKind is the kind of a key (tenants.ParseKey's Kind) without taking it apart:
// "<tenant>.<kind>" or "<tenant>.<kind>.<id>".
func keyKind(key string) string {
	_, rest, _ := strings.Cut(key, ".")
	kind, _, _ := strings.Cut(rest, ".")
	return kind
}

// Open returns a File holding nothing yet, with its writer started.
// Leftover temporary files of an earlier run are removed.
func Open(cfg Config) (*File, error) {
	if cfg.Dir == "" || cfg.Bucket == "" || cfg.Apply == nil {
		return nil, errors.New("edge: Config needs Dir, Bucket and Apply")
	}
	if cfg.Connected == nil {
		cfg.Connected = func() bool { return true }
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = time.Second
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("edge: config snapshot directory: %w", err)
	}
	if old, _ := filepath.Glob(filepath.Join(cfg.Dir, "."+Name+".tmp-*")); len(old) > 0 {
		for _, p := range old {
			_ = os.Remove(p)
		}
	}
	f := &File{
		cfg:     cfg,
		log:     cfg.Logger,
		entries: map[string]savedValue{},
		seen:    map[string]struct{}{},
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_edge_config_snapshot_writes_total",
			Help: "Writes of the edge's config snapshot file, by result (ok, error).",
		}, []string{"result"}),
		lastWritten: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_edge_config_snapshot_written_timestamp_seconds",
			Help: "When the config snapshot file was last written (Unix time); 0: not yet.",
		}),
	}
	if r := cfg.Registry; r != nil {
		serving := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_edge_config_snapshot_serving",
			Help: "1 while the edge serves the config of its snapshot file (NATS was unreachable at start) instead of the bucket's.",
		}, func() float64 {
			if f.serving.Load() != nil {
				return 1
			}
			return 0
		})
		age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_edge_config_snapshot_age_seconds",
			Help: "While serving from the snapshot file: how old its config is (since it was last known current); 0 otherwise.",
		}, func() float64 {
			if t := f.serving.Load(); t != nil {
				return time.Since(*t).Seconds()
			}
			return 0
		})
		for _, c := range []prometheus.Collector{f.writes, f.lastWritten, serving, age} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("edge: registering config snapshot metrics: %w", err)
			}
		}
	}
	f.writes.WithLabelValues("ok")
	f.writes.WithLabelValues("error")
	go f.writer()
	return f, nil
}

// Update passes one update of the watch on to the edge and keeps it (value nil: a delete).
func (f *File) Update(key string, value []byte, revision uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen != nil {
		f.seen[key] = struct{}{}
	}
	if value == nil {
		delete(f.entries, key)
	} else {
		f.entries[key] = savedValue{value: value, rev: revision}
	}
	f.cfg.Apply(key, value, revision)
	f.changedLocked()
}

// Restore serves the snapshot in the directory, if there is one of the bucket no older
// than maxAge: its entries go to the edge, except keys the watch has delivered meanwhile.
// It returns false with the reason when there is no usable snapshot, and false with no
// error when the initial load is already in (there is nothing to restore). A refused file is left in place: the
// next write replaces it.
func (f *File) Restore(maxAge time.Duration) (bool, error) {
	s, err := Read(f.cfg.Dir, f.cfg.Bucket, maxAge, time.Now())
	if err != nil {
		msg := err.Error()
		if errors.Is(err, os.ErrNotExist) {
			msg = "no config snapshot"
		}
		f.restoreIs.Store(&msg)
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live {
		return false, nil // the bucket's initial load came in meanwhile: nothing to restore
	}
	for _, e := range s.Entries {
		if _, ok := f.seen[e.Key]; ok {
			continue
		}
		f.entries[e.Key] = savedValue{value: e.Value, rev: e.Revision}
		f.cfg.Apply(e.Key, e.Value, e.Revision)
	}
	f.asOf = s.AsOf
	asOf := s.AsOf
	f.serving.Store(&asOf)
	return true, nil
}

// Current tells the File the watch's initial load is in: every key the bucket has
// was delivered, so a key held (from a snapshot) and not delivered is gone from the bucket
// and is deleted at the edge. From now on the edge serves the bucket's config.
func (f *File) Current() (vanished int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live {
		return 0
	}
	for key := range f.entries {
		if _, ok := f.seen[key]; !ok {
			delete(f.entries, key)
			f.cfg.Apply(key, nil, 0)
			vanished++
		}
	}
	f.seen = nil
	f.live = true
	f.asOf = time.Now().UTC() // known current now, even if NATS goes before the first write
	f.serving.Store(nil)
	f.changedLocked()
	return vanished
}

// Serving reports whether the edge serves a snapshot's config, and the snapshot's as_of.
func (f *File) Serving() (bool, time.Time) {
	if t := f.serving.Load(); t != nil {
		return true, *t
	}
	return false, time.Time{}
}

// Refresh is how often the file is rewritten while nothing changes (Config.Refresh):
// a file older than that was not kept current.
func (f *File) Refresh() time.Duration { return f.cfg.Refresh }

// Unusable is why no snapshot could be served, "" if that was not tried.
func (f *File) Unusable() string {
	if s := f.restoreIs.Load(); s != nil {
		return *s
	}
	return ""
}

func (f *File) changedLocked() {
	f.dirty = true
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// writer writes the file Debounce after the first change of a burst, and every Refresh
// while nothing changes.
func (f *File) writer() {
	defer close(f.stopped)
	refresh := time.NewTicker(f.cfg.Refresh)
	defer refresh.Stop()
	wait := f.cfg.Debounce
	for {
		select {
		case <-f.stop:
			return
		case <-refresh.C:
			if !f.cfg.Connected() {
				continue
			}
			f.mu.Lock()
			f.dirty = f.dirty || f.live
			f.mu.Unlock()
		case <-f.kick:
			select {
			case <-f.stop:
				return
			case <-time.After(wait):
			}
		}
		start := time.Now()
		f.write(!f.cfg.Hog)
		// A big bucket's file takes a while to write (50,000 routes: about 60 ms of CPU,
		// a quarter of a second or so paced): the next waits at least 10 times as long, so
		// that a stream of changes never spends more than a tenth of a core on the file.
		wait = max(f.cfg.Debounce, 10*time.Since(start))
	}
}

// writerSlice is how long the writer works between two pauses, and writerPause how long
// each pause sleeps: the writer takes at most about a quarter of a core, and a write of
// 50,000 routes (about 60 ms of CPU) spreads over a quarter of a second or so, which a
// change to apply or a request to serve never waits out. The slice is measured, not
// counted in entries: an entry's cost varies several times over with the keys' layout
// (runtime trace: 2,048 entries copied in about 0.4 ms with one tenant, 3–6 ms with 1,000).
//
// It sleeps rather than calling runtime.Gosched, which was measured worse (runtime
// trace, one-core edge): a yielding goroutine stays runnable, and the scheduler looks
// for sockets that became ready only when nothing is runnable, or every 10 ms from its
// monitor thread, so answers from upstreams waited up to 10 ms. A sleep shorter than the
// requests it lets through is no better: the writer, woken by its timer, runs next,
// ahead of every goroutine that yielded, and takes most of the core.
const (
	writerSlice = 300 * time.Microsecond
	writerPause = time.Millisecond
)

// pacer tells the writer when its slice is up. It reads the clock every 64 steps (a
// step: an entry copied, encoded or packed, two keys compared).
type pacer struct {
	on    bool
	n     int
	since time.Time
}

func newPacer(on bool) *pacer { return &pacer{on: on, since: time.Now()} }

// due reports whether the writer should pause now (then it must call rest).
func (p *pacer) due() bool {
	if !p.on {
		return false
	}
	p.n++
	return p.n%64 == 0 && time.Since(p.since) >= writerSlice
}

// rest pauses and starts the next slice.
func (p *pacer) rest() {
	time.Sleep(writerPause)
	p.since = time.Now()
}

// write writes the file if anything changed since the last write; paced, it pauses
// after each writerSlice of work (pacer). Nothing is written before the initial load is
// in: until then the entries are a snapshot's (whose file is already there) or a partial
// load.
func (f *File) write(paced bool) {
	f.mu.Lock()
	if !f.dirty || !f.live {
		f.mu.Unlock()
		return
	}
	asOf := f.asOf
	if f.cfg.Connected() {
		asOf = time.Now().UTC()
	}
	f.dirty = false
	items := make([]savedItem, 0, len(f.entries))
	pace := newPacer(paced)
	for k, v := range f.entries {
		items = append(items, savedItem{k, v})
		// Copying 50,000 entries takes about 10 ms, which a change to apply would wait
		// for on the lock. Between two chunks the lock is free: a change made meanwhile
		// may or may not be in this file, and it set dirty, so the next write has it.
		// Go's map iteration allows the map to change between two steps.
		if pace.due() {
			f.mu.Unlock()
			pace.rest()
			f.mu.Lock()
		}
	}
	f.mu.Unlock()
	slices.SortFunc(items, func(a, b savedItem) int {
		// Sorting 50,000 keys is 30–40 ms of comparisons, which the scheduler would
		// otherwise preempt only every 10 ms or more.
		if pace.due() {
			pace.rest()
		}
		return strings.Compare(a.key, b.key)
	})
	err := writeFile(f.cfg.Dir, savedBody{f.cfg.Bucket, asOf, len(items), func(i int) (Entry, error) {
		if pace.due() {
			pace.rest()
		}
		v, err := f.pack.value(items[i].savedValue)
		return Entry{Key: items[i].key, Revision: items[i].rev, Value: v}, err
	}})
	if !f.cfg.RawValues {
		f.packNew(items, pace)
	}
	if err != nil {
		f.writes.WithLabelValues("error").Inc()
		f.log.Error("edge: writing the config snapshot failed; the old one stays", "dir", f.cfg.Dir, "err", err)
		f.mu.Lock()
		f.dirty = true // try again with the next change or refresh
		f.mu.Unlock()
		return
	}
	f.mu.Lock()
	f.asOf = asOf
	f.mu.Unlock()
	f.writes.WithLabelValues("ok").Inc()
	f.lastWritten.Set(float64(time.Now().Unix()))
}

// packNew packs the values of items the writer has not seen before (new since the last
// write) and puts them in place of the raw ones, unless they changed meanwhile. It
// pauses like the rest of the write: after a cold start every value is new, about 4 µs
// each to pack.
func (f *File) packNew(items []savedItem, pace *pacer) {
	var packed []savedItem
	for _, it := range items {
		if it.done {
			continue
		}
		if pace.due() {
			pace.rest()
		}
		v, d := f.pack.pack(it.key, it.value)
		if v != nil {
			it.value, it.dict = v, d
		}
		it.done = true
		packed = append(packed, it)
	}
	if len(packed) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range packed {
		if cur, ok := f.entries[it.key]; ok && !cur.done && cur.rev == it.rev {
			f.entries[it.key] = it.savedValue
		}
	}
}

// Close stops the writer and writes what changed since the last write. Call it after
// the watch has stopped.
func (f *File) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	close(f.stop)
	<-f.stopped
	f.write(false) // the edge is stopping: nothing to make way for
}
