package meter

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"tollgate/infra/usage"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The records' layout is what readState parses: a field moved in the struct must move
// in the reader too.
func TestStateRecordLayout(t *testing.T) {
	var c cellRec
	var tr totalRec
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"cell.req", unsafe.Offsetof(c.req), 8}, {"cell.hour", unsafe.Offsetof(c.hour), 32},
		{"cell.tag", unsafe.Offsetof(c.tag), 40}, {"cell.class", unsafe.Offsetof(c.class), 48},
		{"cell.upstream", unsafe.Offsetof(c.upstream), 49}, {"cell.tenantLen", unsafe.Offsetof(c.tenantLen), 50},
		{"cell.routeLen", unsafe.Offsetof(c.routeLen), 52}, {"cell.consLen", unsafe.Offsetof(c.consLen), 54},
		{"cell.hReq", unsafe.Offsetof(c.hReq), 64}, {"cell.mReq", unsafe.Offsetof(c.mReq), 88},
		{"cell.iReq", unsafe.Offsetof(c.iReq), 112}, {"cell.fn", unsafe.Offsetof(c.fn), 136},
		{"cell.hFn", unsafe.Offsetof(c.hFn), 144}, {"cell.mFn", unsafe.Offsetof(c.mFn), 152},
		{"cell.iFn", unsafe.Offsetof(c.iFn), 160}, {"cell size", unsafe.Sizeof(c), uintptr(cellHdr)},
		{"cell size v1", unsafe.Offsetof(c.fn), uintptr(cellHdrV1)},
		{"total.requests", unsafe.Offsetof(tr.requests), 8}, {"total.droppedBillable", unsafe.Offsetof(tr.droppedBillable), 32},
		{"total.hour", unsafe.Offsetof(tr.hour), 40}, {"total.seq", unsafe.Offsetof(tr.seq), 48},
		{"total.pendReq", unsafe.Offsetof(tr.pendReq), 56}, {"total.pendSeq", unsafe.Offsetof(tr.pendSeq), 72},
		{"total.tenantLen", unsafe.Offsetof(tr.tenantLen), 80}, {"total.function", unsafe.Offsetof(tr.function), 88},
		{"total.droppedFunction", unsafe.Offsetof(tr.droppedFunction), 96}, {"total.pendFn", unsafe.Offsetof(tr.pendFn), 104},
		{"total size", unsafe.Sizeof(tr), uintptr(totalHdr)}, {"total size v1", unsafe.Offsetof(tr.function), uintptr(totalHdrV1)},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, the reader expects %d", f.name, f.got, f.want)
		}
	}
}

const (
	seedTenantA = "0190a000-0000-7000-8000-00000000000a"
	seedTenantB = "0190a000-0000-7000-8000-00000000000b"
)

// captureSink copies the state file when a batch is published: the file as a run killed
// between publish and commit leaves it.
type captureSink struct {
	mu     sync.Mutex
	path   string
	images [][]byte
	data   map[string][]byte
}

func (s *captureSink) Publish(_ context.Context, id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := os.ReadFile(s.path)
	if err != nil {
		return err
	}
	s.images = append(s.images, img)
	if s.data == nil {
		s.data = map[string][]byte{}
	}
	s.data[id] = append([]byte(nil), data...)
	return nil
}

func (s *captureSink) PutTotals(context.Context, []usage.EdgeTotal) error { return nil }

// stateSeeds are state files of a run: counted and not cut, in flight (twice, the second
// with totals of an earlier flush), and with a freed record.
func stateSeeds(tb testing.TB) (files [][]byte, sink *captureSink) {
	dir := tb.TempDir()
	sink = &captureSink{path: filepath.Join(dir, stateFileName)}
	m, err := New(Config{EdgeID: "seed-edge", Sink: sink, SpoolDir: dir, BootID: "seed", FlushInterval: time.Hour,
		StateChunkBytes: minStateChunk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Close(context.Background())
	// An hour within TotalsRetention, so the published totals stay in the file.
	at := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	ra, rb := m.Route(seedTenantA, "r1"), m.Route(seedTenantB, "")
	ca := NewConsumer(seedTenantA, "consumer-a")
	ra.RecordFunction(ca, 200, true, 10, 20, 1500*time.Nanosecond, at) // 2 µs
	ra.Record(nil, 401, false, 0, 5, at)
	rb.Record(nil, 200, true, 1, 2, at.Add(time.Hour))
	cur, err := os.ReadFile(sink.path)
	if err != nil {
		tb.Fatal(err)
	}
	files = append(files, cur)
	m.Flush(context.Background())
	ra.RecordFunction(ca, 503, true, 3, 4, 7*time.Microsecond, at)
	m.Flush(context.Background())
	files = append(files, sink.images...)
	return files, sink
}

// A run killed between publishing a batch and committing it leaves a file from which the
// next run rebuilds the batch byte for byte, and nothing else in flight.
func TestStatePlanRebuildsInFlightBatches(t *testing.T) {
	files, sink := stateSeeds(t)
	if len(sink.images) != 2 {
		t.Fatalf("%d publishes", len(sink.images))
	}
	for i, img := range sink.images {
		st, err := readState(img)
		if err != nil {
			t.Fatal(err)
		}
		if st.skipped != 0 {
			t.Errorf("image %d: %d records skipped", i, st.skipped)
		}
		r := st.plan()
		if len(r.inflight) != 1 || len(r.rest) != 0 {
			t.Fatalf("image %d: %d in flight, %d new", i, len(r.inflight), len(r.rest))
		}
		e := r.inflight[0]
		if want := sink.data[e.b.ID]; !bytes.Equal(e.data, want) {
			t.Fatalf("image %d: rebuilt %s:\n%s\npublished:\n%s", i, e.b.ID, e.data, want)
		}
	}
	// A process killed while writing the header (the newest copy torn) was killed before
	// the batches it names were used: the older copy is read, and their cells are cut
	// again, as new batches from the same sequence.
	last := append([]byte(nil), sink.images[1]...)
	newest := 0
	if binaryGen(last[headerCopy:]) > binaryGen(last) {
		newest = headerCopy
	}
	last[newest+40] ^= 0xff
	st, err := readState(last)
	if err != nil {
		t.Fatalf("a torn newest header copy: %v", err)
	}
	if st.inflFirst != 0 || st.nextSeq != 2 {
		t.Fatalf("older copy: next %d, in flight %d", st.nextSeq, st.inflFirst)
	}
	if r := st.plan(); len(r.inflight) != 0 || len(r.rest) != 1 || r.rest[0].b.Seq != 2 || r.requests() != 1 {
		t.Fatalf("plan with the older header: %d in flight, %d new, %d requests", len(r.inflight), len(r.rest), r.requests())
	}

	// Before any flush: everything is new, under sequence 1, and in the totals.
	st, err = readState(files[0])
	if err != nil {
		t.Fatal(err)
	}
	r := st.plan()
	if len(r.inflight) != 0 || len(r.rest) != 1 || r.rest[0].b.ID != "seed-edge.seed.1" || r.requests() != 3 {
		t.Fatalf("plan of an uncut file: %d in flight, %d new, %d requests", len(r.inflight), len(r.rest), r.requests())
	}
	var n, fn int64
	for _, et := range r.totals {
		n += et.Requests
		fn += et.FunctionUS
	}
	if n != 3 || fn != 2 {
		t.Fatalf("totals of an uncut file: %d requests, %d µs of function time; want 3 and 2", n, fn)
	}
	var got int64
	for _, rec := range r.rest[0].b.Records {
		got += rec.FunctionUS
	}
	if got != 2 {
		t.Fatalf("recovered function time %d µs, want 2", got)
	}
}

// A state file of version 1, without function time, left by the edge before an upgrade,
// is still read: its counts are handed over with no function time.
func TestStateFileVersion1IsRead(t *testing.T) {
	for i, want := range []int64{3, 3, 1} {
		data, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzStateFile", fmt.Sprintf("seed-v1-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		var parts [2][]byte
		for j := range parts {
			q, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1+j], "[]byte("), ")"))
			if err != nil {
				t.Fatal(err)
			}
			parts[j] = []byte(q)
		}
		img := make([]byte, stateHeader+minStateChunk)
		copy(img, parts[0])
		copy(img[stateHeader:], parts[1])
		if v := max(binary.LittleEndian.Uint32(img[8:]), binary.LittleEndian.Uint32(img[headerCopy+8:])); v != 1 {
			t.Fatalf("seed-v1-%d is version %d", i, v)
		}
		st, err := readState(img)
		if err != nil {
			t.Fatalf("seed-v1-%d: %v", i, err)
		}
		if st.skipped != 0 {
			t.Fatalf("seed-v1-%d: %d records skipped", i, st.skipped)
		}
		r := st.plan()
		if got := r.requests(); got != want {
			t.Errorf("seed-v1-%d: %d requests handed over, want %d", i, got, want)
		}
		for _, list := range [][]encodedBatch{r.inflight, r.rest} {
			for _, e := range list {
				for _, rec := range e.b.Records {
					if rec.FunctionUS != 0 {
						t.Errorf("seed-v1-%d: function time %d from a file without it", i, rec.FunctionUS)
					}
				}
			}
		}
	}
}

// A state file that is not one (another version, a torn header, garbage) never stops the
// edge: it is set aside with a log line and a metric, and the meter starts afresh.
func TestStateFileRejectedIsSetAside(t *testing.T) {
	files, _ := stateSeeds(t)
	good := files[0]
	otherVersion := append([]byte(nil), good...)
	otherVersion[7] = 9
	otherVersion[headerCopy+7] = 9
	torn := append([]byte(nil), good...)
	for i := 30; i < 60; i++ {
		torn[i] ^= 0xff
		torn[headerCopy+i] ^= 0xff
	}
	for name, data := range map[string][]byte{
		"version": otherVersion, "torn": torn, "short": good[:100], "empty": nil, "garbage": bytes.Repeat([]byte("x"), 9000),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, stateFileName)
			if err := os.WriteFile(path, data, 0o640); err != nil {
				t.Fatal(err)
			}
			m, err := New(Config{EdgeID: "e", Sink: &captureSink{path: path}, SpoolDir: dir, FlushInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer m.Close(context.Background())
			aside, _ := filepath.Glob(path + ".rejected-*")
			if len(aside) != 1 {
				t.Fatalf("set aside: %v", aside)
			}
			if got := testCounter(m.m.stateRejected.WithLabelValues("rejected")); got != 1 {
				t.Fatalf("tollgate_meter_state_rejected_total{reason=rejected} = %v", got)
			}
			if m.Spooled() != 0 {
				t.Fatalf("%d batches spooled from a rejected file", m.Spooled())
			}
		})
	}
}

// FuzzStateFile feeds readState and plan a header page and a chunk of records: whatever
// the bytes, nothing panics, and every batch planned is one billing accepts.
func FuzzStateFile(f *testing.F) {
	files, _ := stateSeeds(f)
	for _, b := range files {
		hdr, recs := splitSeed(b)
		f.Add(hdr, recs)
	}
	f.Fuzz(func(t *testing.T, hdr, recs []byte) {
		data := make([]byte, stateHeader+minStateChunk)
		copy(data[:stateHeader], hdr)
		copy(data[stateHeader:], recs)
		img, err := readState(data)
		if err != nil {
			return
		}
		r := img.plan()
		for _, list := range [][]encodedBatch{r.inflight, r.rest} {
			for _, e := range list {
				if _, err := usage.DecodeBatch(e.data); err != nil {
					t.Fatalf("planned batch %s refused by billing: %v", e.b.ID, err)
				}
			}
		}
		for _, et := range r.totals {
			if et.Requests < 0 || et.Billable < 0 || et.Dropped < 0 || et.FunctionUS < 0 || et.DroppedFunctionUS < 0 {
				t.Fatalf("negative total %+v", et)
			}
		}
	})
}

// splitSeed is a state file as the fuzz target's two inputs, without trailing zeros.
func splitSeed(b []byte) (hdr, recs []byte) {
	hdr = bytes.TrimRight(b[:stateHeader], "\x00")
	recs = bytes.TrimRight(b[stateHeader:min(len(b), stateHeader+minStateChunk)], "\x00")
	return hdr, recs
}

// TestWriteStateSeedCorpus refreshes testdata/fuzz/FuzzStateFile after a format change:
// TOLLGATE_WRITE_FUZZ_SEEDS=1 go test -run TestWriteStateSeedCorpus ./edge/meter/
func TestWriteStateSeedCorpus(t *testing.T) {
	if os.Getenv("TOLLGATE_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set TOLLGATE_WRITE_FUZZ_SEEDS=1 to write the seed corpus")
	}
	files, _ := stateSeeds(t)
	dir := filepath.Join("testdata", "fuzz", "FuzzStateFile")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range files {
		hdr, recs := splitSeed(b)
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n[]byte(%s)\n", strconv.Quote(string(hdr)), strconv.Quote(string(recs)))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func testCounter(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return -1
	}
	return d.GetCounter().GetValue()
}

func binaryGen(b []byte) uint64 { return binary.LittleEndian.Uint64(b[24:]) }

// A run killed half-way through a commit (some totals and cells already updated, the
// header still naming the batches in flight) is planned exactly like one killed before
// the commit began: the commit's steps are redone, never added twice.
func TestStatePlanRedoesAHalfDoneCommit(t *testing.T) {
	_, sink := stateSeeds(t)
	img := sink.images[1] // killed at the second flush's publish, before its commit
	base, err := readState(img)
	if err != nil {
		t.Fatal(err)
	}
	g := base.inflFirst
	want := base.plan()
	for step := 0; step < 5; step++ {
		st, _ := readState(img)
		// What the live commit would have written by this step.
		for i := range st.totals {
			tr := &st.totals[i]
			var add usage.Counts
			for _, e := range want.inflight {
				for _, r := range e.b.Records {
					if r.TenantID == tr.tenant && r.Hour.Unix()/3600 == tr.hour {
						add.Add(r.Counts)
					}
				}
			}
			if add.Requests == 0 {
				continue
			}
			if step >= 1 {
				tr.pendReq, tr.pendBill, tr.pendFn, tr.pendSeq = tr.requests+add.Requests, tr.billable+add.Billable, tr.function+add.FunctionUS, g
			}
			if step >= 2 {
				tr.requests, tr.billable, tr.function = tr.pendReq, tr.pendBill, tr.pendFn // the kill may fall before seq
			}
			if step >= 3 {
				tr.seq = g
			}
		}
		if step >= 4 {
			for i := range st.cells {
				if c := &st.cells[i]; c.tag == g {
					c.handed = c.mark
				}
			}
		}
		got := st.plan()
		if fmt.Sprint(got.totals) != fmt.Sprint(want.totals) {
			t.Errorf("step %d: totals %v, want %v", step, got.totals, want.totals)
		}
		if len(got.inflight) != len(want.inflight) || len(got.rest) != len(want.rest) || got.requests() != want.requests() {
			t.Errorf("step %d: %d in flight, %d new, %d requests; want %d, %d, %d", step,
				len(got.inflight), len(got.rest), got.requests(), len(want.inflight), len(want.rest), want.requests())
		}
	}
}
