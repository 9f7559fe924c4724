package meter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The spool keeps the batches NATS could not take, in order, on local disk.
//
// Layout: a directory of segment files named <number>.seg, oldest first, each a sequence
// of records, plus a LOCK file held with flock so two meters never share a directory.
// Only the newest segment is appended to; a segment is deleted once every record in it
// was published again (or when the spool is full, see below). A record is
//
//	u32 length of body | u32 CRC-32C of body | body = u16 id length | id | batch
//
// little-endian. Reopening scans every segment and cuts each at its first record that is
// short or fails its checksum (the torn tail of a crash mid-write).
//
// Durability: every append is followed by fsync of the segment, and creating or deleting
// a segment by fsync of the directory, so a batch the meter considers spooled survives a
// crash or power loss. Appends happen at most once per flush (about once a second) while
// NATS is unreachable, so that is about one fsync a second. Replay progress within a
// segment is kept in memory only: after a crash the records of a partly replayed segment
// are published again, with their original ids, and dropped as duplicates by JetStream
// (within the stream's duplicate window) or by billing (after it).
//
// When full (MaxBytes), the oldest segments are deleted to make room: see the package doc
// for why, and the drop counters for how it is accounted.
//
// Space is reserved ahead: the spool holds MaxBytes of disk blocks from the start, so a
// disk that fills up while NATS is away (another process's logs, a core dump) cannot
// refuse a batch. A RESERVE file holds the blocks no segment uses yet; a new segment
// takes a segment's worth from it (the file shrinks, then the segment is allocated with
// fallocate, its size kept 0 so reading stops at the last record) and a deleted segment
// gives them back. Appending inside an allocated segment needs no new block. When the
// disk has not MaxBytes free at open, what could be reserved is reserved and the rest is
// taken as needed, as without a reservation (reservedBytes says how much is held).
type spool struct {
	dir    string
	lock   *os.File
	max    int64 // bytes, over all segments
	segMax int64 // bytes, per segment
	segs   []*segment
	size   int64 // unreplayed bytes over all segments
	next   uint64
	peeked int64 // length of the record peek returned
	log    *slog.Logger

	// rmu guards reserve and reserved: the state file borrows from the reserve (lend)
	// from whichever goroutine records.
	rmu      sync.Mutex
	reserve  *os.File // nil: no reservation
	reserved int64    // bytes allocated to reserve
	alloc    int64    // bytes allocated to segments, as far as known
}

type segment struct {
	n    uint64
	path string
	f    *os.File
	size int64 // bytes in the file
	head int64 // offset of the first record not yet replayed
	recs int   // records not yet replayed
	// sealed: a write failed part-way; nothing more is appended (the torn bytes past
	// size are cut when the spool is next opened).
	sealed bool
	alloc  int64 // disk bytes counted against the spool for this segment
}

const (
	recHeader   = 8
	segSuffix   = ".seg"
	reserveName = "RESERVE"
	// reserveStep is the unit a reservation the disk cannot make whole is made in.
	reserveStep = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errSpoolCorrupt = errors.New("spool record corrupt")

// ErrSpoolUnwritable is New's error when the spool directory cannot be made or written
// (read-only filesystem, permissions, a path under a file). The edge does not start then:
// a spool is where usage goes while NATS is away and where a dead run's counts are handed
// over from, and a meter without one would lose both without a trace, while an edge that
// refuses to start is seen at once.
var ErrSpoolUnwritable = errors.New("meter spool directory cannot be written; the edge does not start without one (point TOLLGATE_METER_SPOOL_DIR at a writable directory, or set TOLLGATE_METER=off to serve unmetered)")

func openSpool(dir string, max, segMax int64, reserve bool, log *slog.Logger) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSpoolUnwritable, dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSpoolUnwritable, dir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("meter spool %s is in use by another meter (each edge needs its own spool directory): %w", dir, err)
	}
	s := &spool{dir: dir, lock: lock, max: max, segMax: segMax, next: 1, log: log}
	names, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil {
		s.close()
		return nil, err
	}
	type numbered struct {
		n    uint64
		path string
	}
	var found []numbered
	for _, p := range names {
		n, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), segSuffix), 10, 64)
		if err != nil {
			continue
		}
		found = append(found, numbered{n, p})
	}
	sort.Slice(found, func(i, j int) bool { return found[i].n < found[j].n })
	for _, fd := range found {
		seg, err := s.recover(fd.n, fd.path)
		if err != nil {
			s.close()
			return nil, err
		}
		if fd.n >= s.next {
			s.next = fd.n + 1
		}
		if seg == nil {
			continue
		}
		s.segs = append(s.segs, seg)
		s.size += seg.size
		s.alloc += seg.alloc
	}
	if !reserve {
		os.Remove(filepath.Join(dir, reserveName))
		return s, nil
	}
	s.reserve, err = os.OpenFile(filepath.Join(dir, reserveName), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("%w: %s: %v", ErrSpoolUnwritable, dir, err)
	}
	if st, err := s.reserve.Stat(); err == nil {
		s.reserved = st.Size()
	}
	// The segment appended to next gets its full allocation now, like a new one would.
	if k := len(s.segs); k > 0 {
		s.preallocate(s.segs[k-1], segMax)
	}
	s.refill()
	if s.reserved+s.alloc < max {
		log.Warn("meter spool: the disk has not room for the whole spool; the rest is taken as batches come, and a full disk then loses them",
			"dir", dir, "reserved_bytes", s.reserved+s.alloc, "max_bytes", max)
	}
	return s, nil
}

// reservedBytes is the disk space the spool holds, used or not.
func (s *spool) reservedBytes() int64 {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.reserve == nil {
		return 0
	}
	return s.reserved + s.alloc
}

// lend gives n bytes of the reserve back to the disk for the meter's state file to take
// when the disk is full: counts the state file cannot hold are lost in a crash, while
// the spool is only needed once NATS is away. False when the reserve has not n bytes.
func (s *spool) lend(n int64) bool {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.reserve == nil || s.reserved < n {
		return false
	}
	s.shrinkReserveLocked(s.reserved - n)
	return true
}

// refill grows the reserve back to what the segments leave of max, as far as the disk
// allows: whole if it can, else step by step.
func (s *spool) refill() {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.reserve == nil {
		return
	}
	want := max(s.max-s.alloc, 0)
	if want <= s.reserved {
		s.shrinkReserveLocked(want)
		return
	}
	fd := int(s.reserve.Fd())
	if syscall.Fallocate(fd, 0, s.reserved, want-s.reserved) == nil {
		s.reserved = want
		return
	}
	for s.reserved < want {
		n := min(int64(reserveStep), want-s.reserved)
		if syscall.Fallocate(fd, 0, s.reserved, n) != nil {
			break
		}
		s.reserved += n
	}
	// A failed fallocate may leave blocks past the size it did not change.
	s.reserve.Truncate(s.reserved)
}

// shrinkReserveLocked gives the reserve's blocks past n back to the disk; rmu held.
func (s *spool) shrinkReserveLocked(n int64) {
	if s.reserve == nil || n >= s.reserved {
		return
	}
	if err := s.reserve.Truncate(n); err != nil {
		s.log.Warn("meter spool: shrink the reserve", "err", err)
		return
	}
	s.reserved = n
}

// take gives up to n bytes of the reserve back to the disk.
func (s *spool) take(n int64) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.shrinkReserveLocked(max(s.reserved-n, 0))
}

// preallocate makes g's blocks up to n bytes exist on disk without changing its size.
func (s *spool) preallocate(g *segment, n int64) {
	if s.reserve == nil || n <= g.alloc {
		return
	}
	const keepSize = 0x01 // FALLOC_FL_KEEP_SIZE
	// The reserve gives up what the segment takes, so the pair never holds more than max.
	s.take(n - g.alloc)
	if err := syscall.Fallocate(int(g.f.Fd()), keepSize, 0, n); err != nil {
		s.log.Warn("meter spool: could not allocate a segment ahead", "segment", g.path, "err", err)
		return
	}
	s.alloc += n - g.alloc
	g.alloc = n
}

// recover opens a segment left by a previous run, validating every record and cutting the
// file at the first bad one. An empty segment is deleted (nil, nil).
func (s *spool) recover(n uint64, path string) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("meter spool: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("meter spool: %w", err)
	}
	seg := &segment{n: n, path: path, f: f, size: st.Size(), alloc: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		seg.alloc = max(seg.alloc, sys.Blocks*512)
	}
	var off int64
	for off < seg.size {
		_, _, l, err := seg.read(off)
		if err != nil {
			s.log.Warn("meter spool: cutting segment at a torn or corrupt record",
				"segment", path, "offset", off, "discarded_bytes", seg.size-off, "err", err)
			if err := f.Truncate(off); err != nil {
				f.Close()
				return nil, fmt.Errorf("meter spool: truncate %s: %w", path, err)
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return nil, fmt.Errorf("meter spool: %w", err)
			}
			seg.size = off
			break
		}
		off += l
		seg.recs++
	}
	if seg.size == 0 {
		f.Close()
		os.Remove(path)
		return nil, nil
	}
	return seg, nil
}

// read returns the record at off: its id, batch and length on disk.
func (g *segment) read(off int64) (id string, data []byte, n int64, err error) {
	var h [recHeader]byte
	if _, err := g.f.ReadAt(h[:], off); err != nil {
		return "", nil, 0, fmt.Errorf("%w: header: %v", errSpoolCorrupt, err)
	}
	l := int64(binary.LittleEndian.Uint32(h[0:4]))
	sum := binary.LittleEndian.Uint32(h[4:8])
	if l < 2 || off+recHeader+l > g.size {
		return "", nil, 0, fmt.Errorf("%w: length %d past the end", errSpoolCorrupt, l)
	}
	body := make([]byte, l)
	if _, err := g.f.ReadAt(body, off+recHeader); err != nil && !(errors.Is(err, io.EOF) && int64(len(body)) == l) {
		return "", nil, 0, fmt.Errorf("%w: body: %v", errSpoolCorrupt, err)
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return "", nil, 0, fmt.Errorf("%w: checksum mismatch", errSpoolCorrupt)
	}
	il := int64(binary.LittleEndian.Uint16(body[0:2]))
	if 2+il > l {
		return "", nil, 0, fmt.Errorf("%w: id length %d", errSpoolCorrupt, il)
	}
	return string(body[2 : 2+il]), body[2+il:], recHeader + l, nil
}

// Len is the number of records waiting for replay.
func (s *spool) Len() int {
	n := 0
	for _, g := range s.segs {
		n += g.recs
	}
	return n
}

// Bytes is the size of the records waiting for replay.
func (s *spool) Bytes() int64 { return s.size }

// append writes one batch at the tail and fsyncs it. To make room it first deletes the
// oldest segments, returning their unreplayed batches so the caller can count them.
func (s *spool) append(id string, data []byte) (dropped [][]byte, err error) {
	body := 2 + len(id) + len(data)
	n := int64(recHeader + body)
	if n > s.max || len(id) > 0xffff || body > 0xffffffff {
		return nil, fmt.Errorf("meter spool: batch %s of %d bytes is larger than the spool (%d bytes)", id, n, s.max)
	}
	tail := func() *segment {
		if k := len(s.segs); k > 0 && !s.segs[k-1].sealed && s.segs[k-1].size+n <= s.segMax {
			return s.segs[k-1]
		}
		return nil
	}
	// Full counts the blocks a new segment would take too: beyond max they would come
	// from the disk outside the reservation.
	segBytes := max(s.segMax, n)
	for len(s.segs) > 0 && (s.size+n > s.max || s.reserve != nil && tail() == nil && s.alloc+segBytes > s.max) {
		d, err := s.dropOldest()
		dropped = append(dropped, d...)
		if err != nil {
			return dropped, err
		}
	}
	w := tail()
	if w == nil {
		if w, err = s.newSegment(segBytes); err != nil {
			return dropped, err
		}
	}
	rec := make([]byte, n)
	binary.LittleEndian.PutUint32(rec[0:4], uint32(body))
	binary.LittleEndian.PutUint16(rec[8:10], uint16(len(id)))
	copy(rec[10:], id)
	copy(rec[10+len(id):], data)
	binary.LittleEndian.PutUint32(rec[4:8], crc32.Checksum(rec[8:], castagnoli))
	if _, err := w.f.Write(rec); err != nil {
		// A partial write is cut off at the next open; stop appending to this segment.
		w.sealed = true
		return dropped, fmt.Errorf("meter spool: write %s: %w", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		w.sealed = true
		return dropped, fmt.Errorf("meter spool: fsync %s: %w", w.path, err)
	}
	w.size += n
	w.recs++
	s.size += n
	return dropped, nil
}

func (s *spool) newSegment(alloc int64) (*segment, error) {
	path := filepath.Join(s.dir, fmt.Sprintf("%020d%s", s.next, segSuffix))
	// The reserve's blocks go back to the disk first, so that on a full disk the new
	// file's inode and blocks can be had.
	s.take(alloc)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR|os.O_APPEND, 0o640)
	if err != nil {
		s.refill()
		return nil, fmt.Errorf("meter spool: %w", err)
	}
	g := &segment{n: s.next, path: path, f: f}
	s.next++
	s.segs = append(s.segs, g)
	s.preallocate(g, alloc)
	s.syncDir()
	return g, nil
}

// dropOldest deletes the oldest segment and returns the batches it still held.
func (s *spool) dropOldest() ([][]byte, error) {
	g := s.segs[0]
	var out [][]byte
	for off := g.head; off < g.size; {
		_, data, l, err := g.read(off)
		if err != nil {
			break // the rest is unreadable: nothing more to count
		}
		out = append(out, data)
		off += l
	}
	s.removeHead()
	return out, nil
}

// removeHead deletes the oldest segment.
func (s *spool) removeHead() {
	g := s.segs[0]
	s.size -= g.size - g.head
	g.f.Close()
	if err := os.Remove(g.path); err != nil {
		s.log.Warn("meter spool: remove segment", "segment", g.path, "err", err)
	} else {
		s.alloc -= g.alloc
	}
	s.segs[0] = nil
	s.segs = s.segs[1:]
	s.syncDir()
	s.refill()
}

// peek returns the oldest unreplayed batch, ok false when the spool is empty. A record
// that no longer reads back intact drops the rest of its segment (errSpoolCorrupt is
// returned once, with the bytes lost, for the caller to count).
func (s *spool) peek() (id string, data []byte, ok bool, err error) {
	for len(s.segs) > 0 {
		g := s.segs[0]
		if g.head >= g.size {
			s.removeHead()
			continue
		}
		id, data, l, err := g.read(g.head)
		if err != nil {
			s.log.Error("meter spool: unreadable record, dropping the rest of its segment", "segment", g.path, "offset", g.head, "err", err)
			s.removeHead()
			return "", nil, false, err
		}
		s.peeked = l
		return id, data, true, nil
	}
	return "", nil, false, nil
}

// advance marks the batch peek returned as replayed.
func (s *spool) advance() {
	g := s.segs[0]
	l := s.peeked
	g.head += l
	g.recs--
	s.size -= l
	if g.head >= g.size {
		s.removeHead()
	}
}

func (s *spool) syncDir() {
	d, err := os.Open(s.dir)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
}

func (s *spool) close() {
	for _, g := range s.segs {
		g.f.Close()
	}
	s.segs = nil
	s.rmu.Lock()
	if s.reserve != nil {
		s.reserve.Close()
		s.reserve = nil
	}
	s.rmu.Unlock()
	if s.lock != nil {
		syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		s.lock.Close()
		s.lock = nil
	}
}
