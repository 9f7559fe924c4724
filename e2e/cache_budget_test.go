package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/infra/testenv"
)

// cacheUpstream answers every GET with size bytes that differ per path (so no two
// answers share memory anywhere), cacheable for an hour.
func cacheUpstream(t *testing.T, size int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		line := []byte(r.URL.Path + "\n")
		body := make([]byte, 0, size)
		for len(body) < size {
			body = append(body, line[:min(len(line), size-len(body))]...)
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestCacheBudget: a tenant whose plan lets it hold far more than the edge's whole
// response-cache budget (TOLLGATE_EDGE_CACHE_BYTES = 16 MiB) floods eight cached routes
// with 200 MiB of distinct cacheable answers through a real edge process. Without the
// budget each route would keep up to 64 MiB. With it:
//   - the edge's count of cached bytes never passes 16 MiB;
//   - its resident memory grows by at most the budget plus a slack of the budget again
//     and 24 MiB: Go's collector (GOGC=100) lets the heap reach twice its live size
//     between collections, and under a flood of misses the garbage is evicted answers,
//     so a live cache of B bytes costs up to 2·B of heap, plus the growth of the rest of
//     the edge's heap and its relay buffers (measured: +46 MiB for a 16 MiB budget,
//     against the 200 MiB offered; GOMEMLIMIT trades collector CPU for a tighter bound).
//     A race-built edge (E2E_RACE=1) keeps shadow memory for every heap page it touches,
//     so its RSS says little about what it holds (measured: +135 MiB): there the same
//     bound is asserted on the Go heap in use (go_memstats_heap_inuse_bytes) instead;
//   - another tenant, holding less than its fair share (16 MiB ÷ 2), keeps every
//     answer: the flood evicts the flooding tenant's own.
func TestCacheBudget(t *testing.T) {
	t.Parallel()
	const (
		mb      = 1 << 20
		budget  = 16 * mb
		slack   = budget + 24*mb
		answer  = 60 << 10 // under the edge's 64 KiB buffered-body threshold: cacheable
		offered = 200 * mb
		routes  = 8
	)
	s := newStack(t)
	_, api := s.startAPI()
	edgeProc, edge := s.startEdge("TOLLGATE_EDGE_CACHE_BYTES=" + strconv.Itoa(budget))
	defer edge.close()
	up := cacheUpstream(t, answer)

	flood, quiet := testenv.Name("flood"), testenv.Name("quiet")
	api.createTenant(flood) // unlimited: 1 GiB of cache_bytes, far over the edge's budget
	api.createTenant(quiet)
	cache := map[string]any{"ttl_ms": 3_600_000, "max_entries": 100_000}
	for i := range routes {
		api.createRoute(flood, routeSpec(fmt.Sprint("c", i), fmt.Sprint("/c", i), up.URL, "none", "cache", cache))
	}
	api.createRoute(quiet, routeSpec("q", "/q", up.URL, "none", "cache", cache))
	for i := range routes {
		eventually(t, applyDeadline, "the cached routes at the edge", func() error {
			r, err := edge.do("GET", flood, fmt.Sprintf("/c%d/warm", i))
			if err != nil {
				return err
			}
			if r.Status != 200 || len(r.Body) != answer {
				return fmt.Errorf("status %d, %d bytes", r.Status, len(r.Body))
			}
			return nil
		})
	}
	// The quiet tenant's route was made after the flood's, so it may reach the edge a relay
	// batch later.
	eventually(t, applyDeadline, "the quiet tenant's route at the edge", func() error {
		r, err := edge.do("GET", quiet, "/q/warm")
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("status %d", r.Status)
		}
		return nil
	})
	// The quiet tenant keeps 20 answers (1.2 MiB, well under its fair share).
	const quietN = 20
	for i := range quietN {
		if r := edge.get(t, quiet, fmt.Sprint("/q/", i)); r.Status != 200 || r.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("quiet %d: %s %v", i, r, r.Header)
		}
	}
	for i := range quietN {
		if r := edge.get(t, quiet, fmt.Sprint("/q/", i)); r.Header.Get("X-Cache") != "HIT" {
			t.Fatalf("quiet %d not cached: %v", i, r.Header)
		}
	}

	pid := edgeProc.cmd.Process.Pid
	time.Sleep(200 * time.Millisecond)
	before := procRSS(t, pid)
	heapBefore := metricValue(s.edgeAdm, "go_memstats_heap_inuse_bytes")
	var peak, peakCached, peakHeap atomic.Int64
	peak.Store(before)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if r := vmRSS(pid); r > peak.Load() {
					peak.Store(r)
				}
				if i%10 == 0 {
					if c := metricValue(s.edgeAdm, "tollgate_edge_cache_bytes"); c > peakCached.Load() {
						peakCached.Store(c)
					}
					if h := metricValue(s.edgeAdm, "go_memstats_heap_inuse_bytes"); h > peakHeap.Load() {
						peakHeap.Store(h)
					}
				}
			}
		}
	}()

	start := time.Now()
	const n = offered / answer
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				r, err := edge.do("GET", flood, fmt.Sprintf("/c%d/k%d", i%routes, i))
				if err != nil || r.Status != 200 || len(r.Body) != answer || r.Header.Get("X-Cache") != "MISS" {
					if failed.Add(1) == 1 {
						t.Errorf("flood request %d: %v %s", i, err, r)
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	sampler.Wait()
	if c := metricValue(s.edgeAdm, "tollgate_edge_cache_bytes"); c > peakCached.Load() {
		peakCached.Store(c)
	}

	growth := peak.Load() - before
	heapGrowth := peakHeap.Load() - heapBefore
	t.Logf("offered %d answers (%d MiB) in %v; edge RSS %.1f MiB before, peak %.1f MiB: +%.1f MiB; heap in use +%.1f MiB (sampled); cached bytes peak %.1f MiB (budget %d MiB; race build: %v)",
		n, offered/mb, took.Round(time.Millisecond), float64(before)/mb, float64(peak.Load())/mb, float64(growth)/mb,
		float64(heapGrowth)/mb, float64(peakCached.Load())/mb, budget/mb, raceBuild)
	if peakCached.Load() > budget {
		t.Errorf("the edge counted %d cached bytes, over its budget of %d", peakCached.Load(), budget)
	}
	if peakCached.Load() < budget/2 {
		t.Errorf("the edge cached only %d bytes under the flood: the test did not fill the budget", peakCached.Load())
	}
	what := "RSS"
	if raceBuild {
		what, growth = "heap in use", heapGrowth
	}
	if growth > budget+slack {
		t.Errorf("edge %s grew by %.1f MiB under a flood of %d MiB of cacheable answers, want at most the %d MiB budget + %d MiB of slack",
			what, float64(growth)/mb, offered/mb, budget/mb, slack/mb)
	}
	for i := range quietN {
		if r := edge.get(t, quiet, fmt.Sprint("/q/", i)); r.Header.Get("X-Cache") != "HIT" {
			t.Errorf("the quiet tenant's answer %d was evicted by the flood: %v", i, r.Header)
		}
	}
	if ev := meterSample(t, s.edgeAdm, `tollgate_edge_cache_evictions_total{reason="budget"}`); ev < float64(n)/2 {
		t.Errorf("%v evictions for the budget, want most of the %d answers offered", ev, n)
	}
}

// metricValue is the value of an unlabelled metric of the edge's /metrics, 0 when
// unreadable (it runs off the test goroutine).
func metricValue(adminAddr, name string) int64 {
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		sb.Write(buf[:k])
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(sb.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int64(f)
		}
	}
	return 0
}
