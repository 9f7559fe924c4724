package meter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"tollgate/infra/usage"
	"unsafe"
)

// The state file keeps the counts the meter has not handed over yet, and its running
// totals, where the death of the process cannot take them: in a file of the spool
// directory mapped into memory (MAP_SHARED), so every count Record makes is in the
// kernel's page cache the moment it is made, and outlives the process.
//
// Layout: a 4 KiB header page, then chunks of records (Config.StateChunkBytes each, every
// chunk a separate mapping, so growing the file never moves a record the hot path holds).
// A record is a whole number of 64-byte units:
//
//   - a cell (cellRec): one tenant, route, consumer, hour, status class and origin, with
//     its cumulative counts (Record adds to them, under the shard's mutex), the counts
//     already handed over (published or spooled), and the counts of the batch in flight
//     with that batch's sequence (tag);
//   - a total (totalRec): the boot's running total of a tenant's hour;
//   - free (reusable by a record of the same size) or zero (the end of the chunk's
//     records).
//
// The header, written only by the flusher, names the edge and boot, the next unused batch
// sequence and the batches in flight: their first and last sequence and creation time.
// It has two copies, each with a generation and a CRC-32C, written alternately, so a
// process killed while writing one leaves the other, and a reader takes the valid copy of
// the higher generation.
//
// # One flush
//
//  1. cut: for each cell with counts not handed over, tag it with the first sequence of
//     this flush and record its in-flight counts and its cumulative counts at the cut
//     (mark); tag first, so a cell caught half-written has a tag no header knows;
//  2. write the header naming the batches in flight, then fsync the file: from here on
//     their ids may be used, and a restart rebuilds them byte for byte from the tagged
//     cells (same records, same order, same split, the creation time from the header);
//  3. hand the batches over: publish, or spool (fsync);
//  4. commit: each total of the batches' tenant hours takes its new value (written first
//     to pending fields with the sequence, then copied, so a kill half-way is redone and
//     never added twice); each tagged cell's handed counts become its mark (an
//     assignment, so redoing it is harmless); then the header drops the batches in flight.
//
// A restart reads the file (readState, which trusts nothing in it), finishes the dead
// run's work in memory (plan): commits what it had handed over, rebuilds and hands over
// again the batches in flight (same ids, same bytes: JetStream's duplicate window or
// billing's usage_batches key drops the copy), cuts everything not yet handed over into
// new batches of the dead boot (sequences no header had used), and adds them to the dead
// boot's totals. The batches go to the spool (fsync) and the totals to a file beside it
// (fsync), which the meter publishes like any spool; only then is the state file replaced
// by a new one for the new boot. A restart that dies half-way does the same again and
// gets the same batches: the creation time of the new ones is the header's last write.
//
// # What survives what
//
// A killed process loses nothing it counted: the page cache holds every store. A machine
// that loses power keeps what reached the disk: the fsync at each cut (step 2) bounds the
// loss to the counts made since the last cut (one flush interval), and because that fsync
// precedes every use of the ids, no batch is ever rebuilt different under an id that was
// used. Pages the kernel wrote back after that fsync can only add counts. The totals of
// the last flush before the power went may be missing (the totals page not written back
// while a later header was): reconciliation then sees that flush folded beyond the
// totals and reports it as a double count of its size, naming this as a cause.

const (
	stateFileName = "meter.state"
	stateMagic    = "TGMETER\x01"
	stateVersion  = 2 // 2 added function time to cells and totals; 1 is still read
	stateUnit     = 64
	stateHeader   = 4096 // bytes before the first chunk
	headerCopy    = 2048 // offset of the header's second copy
	headerLen     = 588  // bytes of one copy, its CRC included
	maxStateID    = 256  // edge and boot id bytes in the header
	maxKeyBytes   = 4096 // tenant + route + consumer bytes of one cell

	defaultStateChunk = 1 << 20
	minStateChunk     = 64 << 10
	maxStateChunk     = 64 << 20
)

// Record states.
const (
	recEnd   = 0
	recFree  = 1
	recCell  = 2
	recTotal = 3
)

// cellRec is a cell's record, in the state file (or, when the file is full or missing,
// on the heap). It holds no Go pointer: it may live in memory the collector never sees.
type cellRec struct {
	state, units      uint32
	req, in, out      int64 // cumulative; Record adds here
	hour              int64
	tag               uint64 // first sequence of the batches the in-flight counts went into
	class, upstream   uint8
	tenantLen         uint16
	routeLen, consLen uint16
	idle              uint8 // flushes without traffic (not needed by a restart)
	_                 [7]byte
	hReq, hIn, hOut   int64 // handed over
	mReq, mIn, mOut   int64 // cumulative at the cut tagged tag
	iReq, iIn, iOut   int64 // in flight under tag
	// Function time (µs), after the fields of version 1 so that its layout is a prefix:
	// cumulative, handed over, at the cut, in flight.
	fn, hFn, mFn, iFn int64
}

const (
	cellHdr   = int(unsafe.Sizeof(cellRec{}))
	cellHdrV1 = 136 // a version 1 cell, without function time
)

// totalRec is a running total of this boot for a tenant's hour.
type totalRec struct {
	state, units                                 uint32
	requests, billable, dropped, droppedBillable int64
	hour                                         int64
	seq                                          uint64 // the last batches committed into requests and billable
	pendReq, pendBill                            int64  // requests and billable after pendSeq
	pendSeq                                      uint64
	tenantLen                                    uint16
	dirty                                        uint8 // changed since last published
	_                                            [5]byte
	// Function time (µs), after the fields of version 1: like requests, dropped and
	// pendReq.
	function, droppedFunction, pendFn int64
}

const (
	totalHdr   = int(unsafe.Sizeof(totalRec{}))
	totalHdrV1 = 88
)

var errStateFull = errors.New("state file full")

// stateFile is the live state file of this boot.
type stateFile struct {
	path     string
	f        *os.File
	chunk    int
	maxBytes int64
	hdr      []byte   // the mapped header page
	chunks   [][]byte // the mapped chunks
	gen      uint64
	edge     string
	boot     string

	// borrow, when set, frees n bytes of disk elsewhere (the spool's reserve) so that an
	// allocation the full disk refused can be tried once more.
	borrow func(n int64) bool

	mu   sync.Mutex // allocation
	off  int        // bump offset in the last chunk
	free map[uint32][]unsafe.Pointer
}

// stateHeaderValues is what a header says besides who it belongs to.
type stateHeaderValues struct {
	nextSeq, inflFirst, inflLast uint64
	inflCreated, written         int64
}

// createState replaces the file at path with a fresh one for this boot (through a
// temporary file and a rename, so a crash leaves the old or the new, never half) and maps
// it.
func createState(path, edge, boot string, chunk int, maxBytes int64, borrow func(int64) bool) (*stateFile, error) {
	if len(edge) > maxStateID || len(boot) > maxStateID {
		return nil, fmt.Errorf("edge id or boot id longer than %d bytes", maxStateID)
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, errors.New("the state file needs a little-endian machine")
	}
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o640)
	if err != nil {
		return nil, err
	}
	s := &stateFile{path: path, f: f, chunk: chunk, maxBytes: maxBytes, edge: edge, boot: boot, borrow: borrow, free: map[uint32][]unsafe.Pointer{}}
	fail := func(err error) (*stateFile, error) {
		s.unmap()
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := s.allocate(0, stateHeader); err != nil {
		return fail(fmt.Errorf("allocate: %w", err))
	}
	if s.hdr, err = syscall.Mmap(int(f.Fd()), 0, stateHeader, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); err != nil {
		return fail(fmt.Errorf("mmap: %w", err))
	}
	s.writeHeader(stateHeaderValues{nextSeq: 1, written: time.Now().UnixNano()})
	if err := s.grow(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	syncDir(filepath.Dir(path))
	return s, nil
}

// grow maps one more chunk, its blocks allocated on disk first: writing a page of a
// sparse file on a full disk would kill the process with SIGBUS.
func (s *stateFile) grow() error {
	off := int64(stateHeader) + int64(len(s.chunks))*int64(s.chunk)
	if off+int64(s.chunk) > s.maxBytes {
		return errStateFull
	}
	if err := s.allocate(off, int64(s.chunk)); err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	b, err := syscall.Mmap(int(s.f.Fd()), off, s.chunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	s.chunks = append(s.chunks, b)
	s.off = 0
	return nil
}

// allocate makes the file's blocks in [off, off+n) exist, borrowing them when the disk is
// full.
func (s *stateFile) allocate(off, n int64) error {
	err := syscall.Fallocate(int(s.f.Fd()), 0, off, n)
	if errors.Is(err, syscall.ENOSPC) && s.borrow != nil && s.borrow(n) {
		err = syscall.Fallocate(int(s.f.Fd()), 0, off, n)
	}
	return err
}

// writeHeader writes the older copy of the header, CRC last.
func (s *stateFile) writeHeader(v stateHeaderValues) {
	s.gen++
	b := s.hdr[int(s.gen%2)*headerCopy:][:headerLen]
	encodeHeader(b, s.gen, uint32(s.chunk), s.edge, s.boot, v)
}

func encodeHeader(b []byte, gen uint64, chunk uint32, edge, boot string, v stateHeaderValues) {
	le := binary.LittleEndian
	binary.LittleEndian.PutUint32(b[headerLen-4:], 0) // invalid until complete
	copy(b[0:8], stateMagic)
	le.PutUint32(b[8:], stateVersion)
	le.PutUint32(b[12:], stateUnit)
	le.PutUint32(b[16:], chunk)
	le.PutUint16(b[20:], uint16(len(edge)))
	le.PutUint16(b[22:], uint16(len(boot)))
	le.PutUint64(b[24:], gen)
	le.PutUint64(b[32:], v.nextSeq)
	le.PutUint64(b[40:], v.inflFirst)
	le.PutUint64(b[48:], v.inflLast)
	le.PutUint64(b[56:], uint64(v.inflCreated))
	le.PutUint64(b[64:], uint64(v.written))
	clear(b[72 : 72+2*maxStateID])
	copy(b[72:], edge)
	copy(b[72+maxStateID:], boot)
	le.PutUint32(b[headerLen-4:], crc32.Checksum(b[:headerLen-4], castagnoli))
}

// sync makes the file durable: the header and every record the mappings changed.
func (s *stateFile) sync() error { return s.f.Sync() }

// alloc returns a zeroed record of n bytes, nil when the file is full.
func (s *stateFile) alloc(n int) (unsafe.Pointer, uint32) {
	units := uint32((n + stateUnit - 1) / stateUnit)
	size := int(units) * stateUnit
	if size > s.chunk {
		return nil, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.free[units]; len(l) > 0 {
		p := l[len(l)-1]
		s.free[units] = l[:len(l)-1]
		clear(unsafe.Slice((*byte)(unsafe.Add(p, 8)), size-8)) // the state word stays free
		return p, units
	}
	if len(s.chunks) == 0 || s.off+size > s.chunk {
		if err := s.grow(); err != nil {
			return nil, 0
		}
	}
	p := unsafe.Pointer(&s.chunks[len(s.chunks)-1][s.off])
	s.off += size
	// The size goes in before the lock is let go: a scan of a file whose process died
	// while this record was being written (state still 0) steps over it to the records
	// other goroutines allocated after it.
	(*cellRec)(p).units = units
	return p, units
}

// newCell makes a cell's record; nil when the file has no room.
func (s *stateFile) newCell(tenant, route, consumer string, hour int64, class uint8, upstream bool) *cellRec {
	kl := len(tenant) + len(route) + len(consumer)
	if len(tenant) > 0xffff || len(route) > 0xffff || len(consumer) > 0xffff || kl > maxKeyBytes {
		return nil
	}
	p, units := s.alloc(cellHdr + kl)
	if p == nil {
		return nil
	}
	c := (*cellRec)(p)
	c.units = units
	c.hour, c.class = hour, class
	if upstream {
		c.upstream = 1
	}
	c.tenantLen, c.routeLen, c.consLen = uint16(len(tenant)), uint16(len(route)), uint16(len(consumer))
	key := unsafe.Slice((*byte)(unsafe.Add(p, cellHdr)), kl)
	copy(key, tenant)
	copy(key[len(tenant):], route)
	copy(key[len(tenant)+len(route):], consumer)
	storeState(&c.state, recCell) // last: the record is whole
	return c
}

// newTotal makes a total's record; nil when the file has no room.
func (s *stateFile) newTotal(tenant string, hour int64) *totalRec {
	if len(tenant) > maxKeyBytes {
		return nil
	}
	p, units := s.alloc(totalHdr + len(tenant))
	if p == nil {
		return nil
	}
	t := (*totalRec)(p)
	t.units = units
	t.hour = hour
	t.tenantLen = uint16(len(tenant))
	copy(unsafe.Slice((*byte)(unsafe.Add(p, totalHdr)), len(tenant)), tenant)
	storeState(&t.state, recTotal)
	return t
}

// release frees a record of the file for reuse (a heap record, units 0, is left to the
// collector).
func (s *stateFile) release(state *uint32, units uint32) {
	if s == nil || units == 0 {
		return
	}
	storeState(state, recFree)
	s.mu.Lock()
	s.free[units] = append(s.free[units], unsafe.Pointer(state))
	s.mu.Unlock()
}

// storeState publishes a record's state word after its other fields. A plain store: the
// reader is a later process, and the kernel's page cache sees the stores in order.
func storeState(p *uint32, v uint32) { *p = v }

func (s *stateFile) unmap() {
	for _, c := range s.chunks {
		syscall.Munmap(c)
	}
	s.chunks = nil
	if s.hdr != nil {
		syscall.Munmap(s.hdr)
		s.hdr = nil
	}
}

// close unmaps the file; remove deletes it too (a clean shutdown handed everything over).
func (s *stateFile) close(remove bool) {
	s.unmap()
	s.f.Close()
	if remove {
		os.Remove(s.path)
		syncDir(filepath.Dir(s.path))
	}
}

func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
}

// stateImage is what a state file says, read without trusting it.
type stateImage struct {
	edgeID, bootID string
	stateHeaderValues
	cells  []cellImage
	totals []totalImage
	// skipped counts records that did not read back sane (the rest of a chunk after a
	// malformed record is skipped with it).
	skipped int
}

type cellImage struct {
	tenant, route, consumer string
	hour                    int64
	class                   uint8
	upstream                bool
	tag                     uint64
	// Counts in the order of counts: requests, bytes in, bytes out, function µs.
	cum, handed, mark, infl counts
}

// counts are a cell's counters: requests, bytes in, bytes out and function time (µs).
type counts = [4]int64

type totalImage struct {
	tenant                                       string
	hour                                         int64
	requests, billable, dropped, droppedBillable int64
	seq, pendSeq                                 uint64
	pendReq, pendBill                            int64
	function, droppedFunction, pendFn            int64
}

// errStateHeader is a file whose header is not a valid header of this version: it is
// set aside, never read further.
var errStateHeader = errors.New("meter state file header")

// Hours a cell may name: 1970 to about 2500.
const maxHour = 5_000_000

// readState parses a state file. An error means its header is unusable (another version,
// torn, not a state file); a malformed record only ends its chunk's scan (skipped).
func readState(data []byte) (*stateImage, error) {
	if len(data) < stateHeader {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", errStateHeader, len(data))
	}
	le := binary.LittleEndian
	var best []byte
	var bestGen uint64
	var why error
	for _, off := range []int{0, headerCopy} {
		b := data[off : off+headerLen]
		switch {
		case string(b[0:8]) != stateMagic:
			why = fmt.Errorf("%w: not a state file of this version (magic %q)", errStateHeader, b[0:8])
		case le.Uint32(b[headerLen-4:]) != crc32.Checksum(b[:headerLen-4], castagnoli):
			why = fmt.Errorf("%w: checksum mismatch", errStateHeader)
		case le.Uint32(b[8:]) != stateVersion && le.Uint32(b[8:]) != 1 || le.Uint32(b[12:]) != stateUnit:
			why = fmt.Errorf("%w: version %d, unit %d", errStateHeader, le.Uint32(b[8:]), le.Uint32(b[12:]))
		default:
			if g := le.Uint64(b[24:]); best == nil || g > bestGen {
				best, bestGen = b, g
			}
		}
	}
	if best == nil {
		return nil, why
	}
	b := best
	chunk := int(le.Uint32(b[16:]))
	el, bl := int(le.Uint16(b[20:])), int(le.Uint16(b[22:]))
	if chunk < minStateChunk || chunk > maxStateChunk || chunk%4096 != 0 || el == 0 || el > maxStateID || bl == 0 || bl > maxStateID {
		return nil, fmt.Errorf("%w: chunk %d, id lengths %d and %d", errStateHeader, chunk, el, bl)
	}
	img := &stateImage{
		edgeID: string(b[72 : 72+el]),
		bootID: string(b[72+maxStateID : 72+maxStateID+bl]),
		stateHeaderValues: stateHeaderValues{
			nextSeq: le.Uint64(b[32:]), inflFirst: le.Uint64(b[40:]), inflLast: le.Uint64(b[48:]),
			inflCreated: int64(le.Uint64(b[56:])), written: int64(le.Uint64(b[64:])),
		},
	}
	if img.nextSeq == 0 || img.nextSeq > 1<<62 || img.inflFirst != 0 && (img.inflFirst > img.inflLast || img.inflLast >= img.nextSeq) {
		return nil, fmt.Errorf("%w: sequences %d, %d–%d", errStateHeader, img.nextSeq, img.inflFirst, img.inflLast)
	}
	cellLen, totalLen := cellHdr, totalHdr
	if le.Uint32(b[8:]) == 1 {
		cellLen, totalLen = cellHdrV1, totalHdrV1
	}
	for off := stateHeader; off+chunk <= len(data); off += chunk {
		img.readChunk(data[off:off+chunk], cellLen, totalLen)
	}
	return img, nil
}

// readChunk reads the records of a chunk whose cells and totals have headers of cellLen
// and totalLen bytes (shorter in version 1, without function time).
func (img *stateImage) readChunk(c []byte, cellLen, totalLen int) {
	le := binary.LittleEndian
	i64 := func(b []byte, off int) int64 { return int64(le.Uint64(b[off:])) }
	for off := 0; off+8 <= len(c); {
		state, units := le.Uint32(c[off:]), int(le.Uint32(c[off+4:]))
		if state == recEnd && units == 0 {
			return
		}
		size := units * stateUnit
		if units <= 0 || units > len(c)/stateUnit || off+size > len(c) || state > recTotal {
			img.skipped++
			return
		}
		r := c[off : off+size]
		off += size
		switch state {
		case recCell:
			if size < cellLen {
				img.skipped++
				return
			}
			tl, rl, cl := int(le.Uint16(r[50:])), int(le.Uint16(r[52:])), int(le.Uint16(r[54:]))
			if cellLen+tl+rl+cl > size {
				img.skipped++
				return
			}
			k := r[cellLen:]
			ci := cellImage{
				tenant: string(k[:tl]), route: string(k[tl : tl+rl]), consumer: string(k[tl+rl : tl+rl+cl]),
				hour: i64(r, 32), tag: le.Uint64(r[40:]), class: r[48], upstream: r[49] == 1,
			}
			for j := 0; j < 3; j++ {
				ci.cum[j] = i64(r, 8+8*j)
				ci.handed[j] = i64(r, 64+8*j)
				ci.mark[j] = i64(r, 88+8*j)
				ci.infl[j] = i64(r, 112+8*j)
			}
			if cellLen >= cellHdrV1+32 {
				ci.cum[3], ci.handed[3], ci.mark[3], ci.infl[3] = i64(r, 136), i64(r, 144), i64(r, 152), i64(r, 160)
			}
			if !ci.sane() {
				img.skipped++
				continue
			}
			img.cells = append(img.cells, ci)
		case recTotal:
			if size < totalLen {
				img.skipped++
				return
			}
			tl := int(le.Uint16(r[80:]))
			if totalLen+tl > size {
				img.skipped++
				return
			}
			ti := totalImage{
				tenant: string(r[totalLen : totalLen+tl]), hour: i64(r, 40),
				requests: i64(r, 8), billable: i64(r, 16), dropped: i64(r, 24), droppedBillable: i64(r, 32),
				seq: le.Uint64(r[48:]), pendReq: i64(r, 56), pendBill: i64(r, 64), pendSeq: le.Uint64(r[72:]),
			}
			if totalLen >= totalHdrV1+24 {
				ti.function, ti.droppedFunction, ti.pendFn = i64(r, 88), i64(r, 96), i64(r, 104)
			}
			if ti.hour < 0 || ti.hour > maxHour || ti.requests < 0 || ti.billable < 0 || ti.billable > ti.requests ||
				ti.dropped < 0 || ti.droppedBillable < 0 || ti.pendReq < 0 || ti.pendBill < 0 || ti.pendBill > ti.pendReq ||
				ti.function < 0 || ti.droppedFunction < 0 || ti.pendFn < 0 {
				img.skipped++
				continue
			}
			img.totals = append(img.totals, ti)
		}
	}
}

// sane: counts that only grow, handed and marked within what was counted.
func (c *cellImage) sane() bool {
	if c.hour < 0 || c.hour > maxHour || c.class > 5 {
		return false
	}
	for j := range c.cum {
		if c.handed[j] < 0 || c.handed[j] > c.cum[j] || c.mark[j] < 0 || c.mark[j] > c.cum[j] || c.infl[j] < 0 || c.infl[j] > c.mark[j] {
			return false
		}
	}
	return true
}

// recovery is what a dead run left to do, worked out from its state file.
type recovery struct {
	edgeID, bootID string
	inflight       []encodedBatch // rebuilt: the batches that were in flight
	rest           []encodedBatch // new: what was counted and not yet cut
	dropped        []*usage.Batch
	totals         []usage.EdgeTotal
}

func (r *recovery) requests() (n int64) {
	for _, e := range r.inflight {
		n += e.b.Requests()
	}
	for _, e := range r.rest {
		n += e.b.Requests()
	}
	return n
}

// plan finishes the dead run's flush in memory. It is a function of the image alone, so
// a restart that dies and runs again plans the same batches.
func (img *stateImage) plan() *recovery {
	r := &recovery{edgeID: img.edgeID, bootID: img.bootID}
	g := img.inflFirst
	cells := img.cells
	// Commit what the dead run handed over: every tag the header had moved past.
	for i := range cells {
		c := &cells[i]
		if c.tag != 0 && c.tag < img.nextSeq && c.tag != g {
			c.handed = c.mark
		}
	}
	totals := map[totalKey]*totalImage{}
	for i := range img.totals {
		t := &img.totals[i]
		k := totalKey{t.tenant, t.hour}
		if o := totals[k]; o != nil {
			o.requests += t.requests
			o.billable += t.billable
			o.dropped += t.dropped
			o.droppedBillable += t.droppedBillable
			o.function += t.function
			o.droppedFunction += t.droppedFunction
			continue
		}
		totals[k] = t
	}
	totalAt := func(tenant string, hour int64) *totalImage {
		k := totalKey{tenant, hour}
		t := totals[k]
		if t == nil {
			t = &totalImage{tenant: tenant, hour: hour}
			totals[k] = t
		}
		return t
	}
	cut := func(first uint64, created int64, acc aggregate) ([]encodedBatch, uint64) {
		recs := acc.records()
		out, next, dropped := cutBatches(img.edgeID, img.bootID, first, time.Unix(0, created).UTC(), recs, true)
		r.dropped = append(r.dropped, dropped...)
		for _, b := range dropped {
			for i := range b.Records {
				t := totalAt(b.Records[i].TenantID, b.Records[i].Hour.Unix()/3600)
				t.dropped += b.Records[i].Requests
				t.droppedBillable += b.Records[i].Billable
				t.droppedFunction += b.Records[i].FunctionUS
			}
		}
		return out, next
	}
	next := img.nextSeq
	if g != 0 {
		acc := aggregate{}
		for i := range cells {
			c := &cells[i]
			if c.tag == g {
				acc.add(c.tenant, c.route, c.consumer, c.hour, c.class, c.upstream, c.infl)
				c.handed = c.mark
			}
		}
		r.inflight, _ = cut(g, img.inflCreated, acc)
		for k, n := range acc.byTenantHour() {
			t := totalAt(k.tenant, k.hour)
			switch {
			case t.pendSeq == g:
				t.requests, t.billable, t.function = t.pendReq, t.pendBill, t.pendFn
			case t.seq < g:
				t.requests += n.Requests
				t.billable += n.Billable
				t.function += n.FunctionUS
			}
		}
	}
	acc := aggregate{}
	for i := range cells {
		c := &cells[i]
		var d counts
		for j := range d {
			d[j] = c.cum[j] - c.handed[j]
		}
		if d != (counts{}) {
			acc.add(c.tenant, c.route, c.consumer, c.hour, c.class, c.upstream, d)
		}
	}
	if len(acc) > 0 {
		r.rest, _ = cut(next, img.written, acc)
		for k, n := range acc.byTenantHour() {
			t := totalAt(k.tenant, k.hour)
			t.requests += n.Requests
			t.billable += n.Billable
			t.function += n.FunctionUS
		}
	}
	for _, t := range totals {
		if t.requests == 0 && t.dropped == 0 {
			continue
		}
		r.totals = append(r.totals, usage.EdgeTotal{
			EdgeID: img.edgeID, BootID: img.bootID, TenantID: t.tenant, Hour: time.Unix(t.hour*3600, 0).UTC(),
			Requests: t.requests, Billable: t.billable, Dropped: t.dropped, DroppedBillable: t.droppedBillable,
			FunctionUS: t.function, DroppedFunctionUS: t.droppedFunction,
		})
	}
	sortTotals(r.totals)
	return r
}
