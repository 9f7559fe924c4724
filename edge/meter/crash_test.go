package meter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tollgate/edge/meter"
	"tollgate/infra/usage"
)

// The crash tests run this test binary again as a child that meters and is killed with
// SIGKILL; the child's sink appends what it is given to a log file (the page cache keeps
// it, as JetStream would), and the parent reads it back.
const (
	envChild = "TOLLGATE_METER_CRASH_CHILD" // the child's mode
	envSpool = "TOLLGATE_METER_CRASH_SPOOL"
	envLog   = "TOLLGATE_METER_CRASH_LOG"
	envBoot  = "TOLLGATE_METER_CRASH_BOOT"
	// envDown makes the "count" child's sink refuse every batch; envSpoolMax sizes its spool.
	envDown     = "TOLLGATE_METER_CRASH_DOWN"
	envSpoolMax = "TOLLGATE_METER_CRASH_SPOOL_MAX"

	crashEdge    = "crash-edge.1"
	crashWorkers = 4
)

// logSink appends every batch and every totals update to a file: 'B' u32 len, u16 id
// length, id, batch; or 'T' u32 len, totals JSON. A record cut short by the kill is not
// counted as published. failEvery > 0 refuses every failEvery-th publish, so batches also
// take the spool's path; killOnPublish kills the process right after the first batch is
// stored, before the meter learns it was.
type logSink struct {
	mu            sync.Mutex
	f             *os.File
	n             int
	failEvery     int
	killOnPublish bool
}

func (s *logSink) append(kind byte, payload []byte) error {
	rec := make([]byte, 5+len(payload))
	rec[0] = kind
	binary.LittleEndian.PutUint32(rec[1:], uint32(len(payload)))
	copy(rec[5:], payload)
	_, err := s.f.Write(rec)
	return err
}

func (s *logSink) Publish(_ context.Context, id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.failEvery > 0 && s.n%s.failEvery == 0 {
		return errDown
	}
	p := make([]byte, 2+len(id)+len(data))
	binary.LittleEndian.PutUint16(p, uint16(len(id)))
	copy(p[2:], id)
	copy(p[2+len(id):], data)
	if err := s.append('B', p); err != nil {
		return err
	}
	if s.killOnPublish {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return nil
}

func (s *logSink) PutTotals(_ context.Context, ts []usage.EdgeTotal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	return s.append('T', data)
}

// published is what reached the sinks, deduplicated by batch id as billing does.
type published struct {
	batches map[string][]byte
	totals  map[string]usage.EdgeTotal // by TotalsKey, the last value
}

func newPublished() *published {
	return &published{batches: map[string][]byte{}, totals: map[string]usage.EdgeTotal{}}
}

// add records a published batch; a second copy of an id must be byte for byte the first.
func (p *published) add(t *testing.T, id string, data []byte) {
	t.Helper()
	if old, ok := p.batches[id]; ok {
		if !bytes.Equal(old, data) {
			t.Fatalf("batch %s published twice with different content:\n%s\n%s", id, old, data)
		}
		return
	}
	p.batches[id] = append([]byte(nil), data...)
}

func (p *published) readLog(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for len(data) >= 5 {
		l := int(binary.LittleEndian.Uint32(data[1:]))
		if 5+l > len(data) {
			break // torn by the kill: never acknowledged
		}
		payload := data[5 : 5+l]
		switch data[0] {
		case 'B':
			il := int(binary.LittleEndian.Uint16(payload))
			p.add(t, string(payload[2:2+il]), payload[2+il:])
		case 'T':
			var ts []usage.EdgeTotal
			if err := json.Unmarshal(payload, &ts); err != nil {
				t.Fatal(err)
			}
			for _, et := range ts {
				p.totals[usage.TotalsKey(&et)] = et
			}
		}
		data = data[5+l:]
	}
}

func (p *published) readSink(t *testing.T, s *memSink) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range s.ids {
		p.add(t, id, s.data[i])
	}
	for k, et := range s.totals {
		p.totals[k] = et
	}
}

// byBoot sums the published requests and the last totals of each boot.
func (p *published) byBoot(t *testing.T) (batches, totals map[string]int64) {
	batches, totals = map[string]int64{}, map[string]int64{}
	for _, data := range p.batches {
		b, err := usage.DecodeBatch(data)
		if err != nil {
			t.Fatal(err)
		}
		batches[b.BootID] += b.Requests()
	}
	for _, et := range p.totals {
		totals[et.BootID] += et.Requests - et.Dropped
	}
	return batches, totals
}

// TestCrashChild is the child process of the crash tests; run alone it does nothing.
func TestCrashChild(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		t.Skip("the crash tests' child process")
	}
	logf, err := os.OpenFile(os.Getenv(envLog), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	sink := &logSink{f: logf}
	cfg := meter.Config{EdgeID: crashEdge, Sink: sink, SpoolDir: os.Getenv(envSpool), BootID: os.Getenv(envBoot),
		Logger: quiet, StateChunkBytes: 64 << 10}
	if n, err := strconv.ParseInt(os.Getenv(envSpoolMax), 10, 64); err == nil {
		cfg.SpoolMaxBytes = n
	}
	switch mode {
	case "count":
		sink.failEvery = 3
		if os.Getenv(envDown) != "" {
			sink.failEvery = 1 // every batch goes to the spool
		}
		cfg.FlushInterval = 2 * time.Millisecond
	case "publish-kill":
		sink.killOnPublish = true
		cfg.FlushInterval = time.Hour
	}
	if f := os.Getenv("TOLLGATE_METER_CRASH_STARTED"); f != "" {
		os.WriteFile(f, nil, 0o640) // New recovers the previous run's state from here
	}
	m, err := meter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f := os.Getenv("TOLLGATE_METER_CRASH_STARTED"); f != "" {
		os.WriteFile(f+".new", nil, 0o640) // recovered
	}
	routes := []*meter.Route{m.Route(tenantA, "r1"), m.Route(tenantA, "r2"), m.Route(tenantB, "")}
	consumers := []*meter.Consumer{meter.NewConsumer(tenantA, "c1"), meter.NewConsumer(tenantA, "c1"), meter.NewConsumer(tenantB, "c2")}
	statuses := []int{200, 200, 404, 502, 101}
	record := func(i int) {
		k := i % len(routes)
		var c *meter.Consumer
		if i%2 == 0 {
			c = consumers[k]
		}
		routes[k].Record(c, statuses[i%len(statuses)], i%7 != 0, int64(i%100), int64(i%1000), time.Time{})
	}
	switch mode {
	case "count":
		// One byte down the pipe per Record that returned.
		pipe := os.NewFile(3, "progress")
		var wg sync.WaitGroup
		for w := 0; w < crashWorkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				one := []byte{1}
				for i := w; ; i += crashWorkers {
					record(i)
					if _, err := pipe.Write(one); err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
	case "publish-kill":
		n, _ := strconv.Atoi(os.Getenv("TOLLGATE_METER_CRASH_N"))
		for i := 0; i < n; i++ {
			record(i)
		}
		m.Flush(context.Background()) // killed inside, after the publish
		t.Fatal("the sink did not kill the process")
	}
}

// startChild starts the child in mode; progress is the read end of its pipe, or nil.
func startChild(t *testing.T, mode, spool, logPath, boot string, env ...string) (*exec.Cmd, *os.File) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envSpool+"="+spool, envLog+"="+logPath, envBoot+"="+boot)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	var r *os.File
	if mode == "count" {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.ExtraFiles = []*os.File{pw}
		r = pr
		defer pw.Close()
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("child %s output:\n%s", boot, out.String())
		}
	})
	return cmd, r
}

// A run killed with SIGKILL at a random point, again and again on the same spool
// directory, loses nothing and doubles nothing: every request whose Record returned
// before the kill is published exactly once (by the run itself, or by the next run from
// its state file), none that was not started is, and each dead boot's totals, published
// by the next run, are what its batches hold.
func TestCrashKill9MidCount(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	spool, logPath := filepath.Join(dir, "spool"), filepath.Join(dir, "published.log")
	rounds := 8
	var returned int64
	for i := 0; i < rounds; i++ {
		boot := fmt.Sprintf("boot%d", i)
		started := filepath.Join(dir, "started-"+boot)
		cmd, progress := startChild(t, "count", spool, logPath, boot, "TOLLGATE_METER_CRASH_STARTED="+started)
		var n atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			br := bufio.NewReader(progress)
			buf := make([]byte, 4096)
			for {
				k, err := br.Read(buf)
				n.Add(int64(k))
				if err != nil {
					return
				}
			}
		}()
		// Kill at a random count, anywhere from the first flushes to many; every other
		// round at a random time from the start instead, which may fall while the child
		// is still recovering the previous one's state (the next child must then do the
		// same again, to the byte).
		early := i%2 == 1
		at := 1 + rand.Int64N(150_000)
		if early {
			for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
				if _, err := os.Stat(started); err == nil {
					break
				}
			}
			time.Sleep(time.Duration(rand.Int64N(int64(8 * time.Millisecond))))
		} else {
			deadline := time.Now().Add(2 * time.Minute)
			for n.Load() < at && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		<-done
		progress.Close()
		_, err := os.Stat(started + ".new")
		t.Logf("round %d: killed after %d Records returned (early %v, aimed at %d; while recovering the previous run's state: %v)", i, n.Load(), early, at, err != nil)
		if n.Load() == 0 && !early {
			t.Fatalf("round %d: the child recorded nothing", i)
		}
		returned += n.Load()
	}

	sink := &memSink{}
	m, err := meter.New(meter.Config{EdgeID: crashEdge, Sink: sink, SpoolDir: spool, BootID: "final", FlushInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(spool, "meter.state")); !os.IsNotExist(err) {
		t.Errorf("state file left after a clean close: %v", err)
	}
	p := newPublished()
	p.readLog(t, logPath)
	p.readSink(t, sink)
	batches, totals := p.byBoot(t)
	var got int64
	for _, n := range batches {
		got += n
	}
	started := returned + int64(rounds*crashWorkers)
	t.Logf("Records returned %d, at most %d started, published %d (per boot %v, totals %v)", returned, started, got, batches, totals)
	if got < returned || got > started {
		t.Fatalf("published %d requests; want between %d (returned before the kills) and %d (started)", got, returned, started)
	}
	for i := 0; i < rounds; i++ {
		boot := fmt.Sprintf("boot%d", i)
		if batches[boot] != totals[boot] {
			t.Errorf("%s: batches hold %d requests, its published totals %d", boot, batches[boot], totals[boot])
		}
	}
}

// A run killed after the sink stored a batch and before the meter committed it: the next
// run publishes the batch again under the same id with the same bytes (billing drops the
// copy), and nothing else of it.
func TestCrashKill9BetweenPublishAndCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	spool, logPath := filepath.Join(dir, "spool"), filepath.Join(dir, "published.log")
	const n = 1000
	cmd, _ := startChild(t, "publish-kill", spool, logPath, "dead", "TOLLGATE_METER_CRASH_N="+strconv.Itoa(n))
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL", err)
	}
	before := newPublished()
	before.readLog(t, logPath)
	if len(before.batches) != 1 {
		t.Fatalf("the dead run published %d batches, want 1", len(before.batches))
	}
	var id string
	for k := range before.batches {
		id = k
	}
	if id != usage.BatchID(crashEdge, "dead", 1) {
		t.Fatalf("published %s", id)
	}

	sink := &memSink{}
	m := newMeter(t, meter.Config{EdgeID: crashEdge, Sink: sink, SpoolDir: spool, BootID: "next"})
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	ids := append([]string(nil), sink.ids...)
	sink.mu.Unlock()
	if fmt.Sprint(ids) != fmt.Sprint([]string{id}) {
		t.Fatalf("the next run published %v, want only %s again", ids, id)
	}
	after := newPublished()
	after.readLog(t, logPath)
	after.readSink(t, sink) // fails on the same id with other bytes
	batches, totals := after.byBoot(t)
	if batches["dead"] != n || totals["dead"] != n {
		t.Fatalf("dead boot: %d requests in batches, %d in its totals; want %d", batches["dead"], totals["dead"], n)
	}
	keys := make([]string, 0, len(after.totals))
	for k := range after.totals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if et := after.totals[k]; et.BootID != "dead" {
			t.Errorf("totals of boot %s published: %+v", et.BootID, et)
		}
	}
}
