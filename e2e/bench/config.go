package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"tollgate/e2e/bench/figures"
	"tollgate/e2e/bench/harness"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/tenants"
)

// configResult is the config scenario: how long after the api's 201 a change is in the
// KV bucket (and served by an edge).
type configResult struct {
	seqBucket, seqEdge figures.LatStats
	burstN             int
	burstWorkers       int
	burstBucket        figures.LatStats
	burstAPI           time.Duration // first POST sent → last 201
	burstTotal         time.Duration // first POST sent → last entry in the bucket
	burstEdgeLast      time.Duration // first POST sent → edge serves the route whose entry came last
}

// bucketWatch records when each key of a filter first changes in the KV bucket.
type bucketWatch struct {
	mu      sync.Mutex
	seen    map[string]time.Time
	waiters map[string]chan struct{}
}

func (w *bucketWatch) mark(key string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[key]; ok {
		return
	}
	w.seen[key] = at
	if ch, ok := w.waiters[key]; ok {
		close(ch)
		delete(w.waiters, key)
	}
}

func (w *bucketWatch) wait(ctx context.Context, key string, timeout time.Duration) (time.Time, error) {
	w.mu.Lock()
	if t, ok := w.seen[key]; ok {
		w.mu.Unlock()
		return t, nil
	}
	ch, ok := w.waiters[key]
	if !ok {
		ch = make(chan struct{})
		w.waiters[key] = ch
	}
	w.mu.Unlock()
	select {
	case <-ch:
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.seen[key], nil
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("entry %s did not appear in the KV bucket within %s", key, timeout)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// watchBucket watches keys matching filter in bucket, new changes only.
func watchBucket(ctx context.Context, b *bench, bucket, filter string) (*bucketWatch, func(), error) {
	nc, err := nats.Connect(b.NatsURL, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("NATS at %s: %v", b.NatsURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	var kv jetstream.KeyValue
	err = harness.WaitFor(ctx, "KV bucket "+bucket, b.ReadyTimeout, 100*time.Millisecond, nil, func() error {
		kv, err = js.KeyValue(ctx, bucket)
		return err
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	kw, err := kv.Watch(wctx, filter, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		cancel()
		nc.Close()
		return nil, nil, fmt.Errorf("watch %s %s: %v", bucket, filter, err)
	}
	w := &bucketWatch{seen: map[string]time.Time{}, waiters: map[string]chan struct{}{}}
	go func() {
		for e := range kw.Updates() {
			if e != nil {
				w.mark(e.Key(), time.Now())
			}
		}
	}()
	return w, func() { _ = kw.Stop(); cancel(); nc.Close() }, nil
}

// configLatency measures commit-to-bucket latency on a stack of its own: sequential single
// changes, then a concurrent burst.
func (b *bench) configLatency(ctx context.Context) (*configResult, error) {
	upPort, err := b.upstream(ctx)
	if err != nil {
		return nil, err
	}
	upURL := fmt.Sprintf("http://127.0.0.1:%d", upPort)
	s, err := b.NewStack(ctx, "config", "")
	if err != nil {
		return nil, err
	}
	if b.edgeInConfig {
		if err := s.StartEdge(ctx, 0, ""); err != nil {
			return nil, err
		}
	}
	const slug = "cfg"
	tid, err := s.Client.CreateTenant(ctx, slug)
	if err != nil {
		return nil, err
	}
	w, stop, err := watchBucket(ctx, b, s.Prefix+"_config", tenants.ObjectKey(tid, tenants.KindRoute, "*"))
	if err != nil {
		return nil, err
	}
	defer stop()
	res := &configResult{burstN: b.burst, burstWorkers: b.workers}
	host, edgeBase := slug+".localhost", "http://"+s.EdgeAddr
	// A fresh client per run so polling the edge never waits behind the api's connections.
	poll := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	var bucketLat, edgeLat []time.Duration
	for i := range b.cfgN {
		path := fmt.Sprintf("/cfg-seq-%d", i)
		var r harness.Created
		if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody(fmt.Sprintf("seq-%d", i), path, upURL, "none", false), &r); err != nil {
			return res, err
		}
		t201 := time.Now()
		seen, err := w.wait(ctx, tenants.ObjectKey(tid, tenants.KindRoute, r.ID), 30*time.Second)
		if err != nil {
			return res, err
		}
		bucketLat = append(bucketLat, seen.Sub(t201))
		if b.edgeInConfig {
			err := harness.WaitFor(ctx, "edge to serve "+path, 30*time.Second, time.Millisecond, s.Edge, func() error {
				code, err := harness.EdgeStatus(ctx, poll, edgeBase, host, path, nil)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("status %d", code)
				}
				return err
			})
			if err != nil {
				return res, err
			}
			edgeLat = append(edgeLat, time.Since(t201))
		}
	}
	res.seqBucket, res.seqEdge = figures.Summarize(bucketLat), figures.Summarize(edgeLat)
	fmt.Fprintf(os.Stderr, "bench: config: %d sequential changes: 201→bucket p50 %s p99 %s\n",
		b.cfgN, figures.FmtDur(res.seqBucket.P50), figures.FmtDur(res.seqBucket.P99))

	// The burst: every creation at once from many clients.
	type done struct {
		key, path string
		at        time.Time
	}
	dones := make([]done, b.burst)
	start := time.Now()
	err = s.Client.CreateRoutes(ctx, slug, b.burst, b.workers, func(i int) map[string]any {
		return harness.RouteBody(fmt.Sprintf("burst-%d", i), fmt.Sprintf("/cfg-burst-%d", i), upURL, "none", false)
	}, func(i int, id string, at time.Time) {
		dones[i] = done{key: tenants.ObjectKey(tid, tenants.KindRoute, id), path: fmt.Sprintf("/cfg-burst-%d", i), at: at}
	})
	if err != nil {
		return res, err
	}
	var lastAPI, lastSeen time.Time
	lastPath := ""
	lat := make([]time.Duration, 0, b.burst)
	for _, d := range dones {
		seen, err := w.wait(ctx, d.key, b.ReadyTimeout)
		if err != nil {
			return res, err
		}
		lat = append(lat, seen.Sub(d.at))
		if d.at.After(lastAPI) {
			lastAPI = d.at
		}
		if seen.After(lastSeen) {
			lastSeen, lastPath = seen, d.path
		}
	}
	res.burstBucket = figures.Summarize(lat)
	res.burstAPI, res.burstTotal = lastAPI.Sub(start), lastSeen.Sub(start)
	if b.edgeInConfig {
		err := harness.WaitFor(ctx, "edge to serve "+lastPath, b.ReadyTimeout, time.Millisecond, s.Edge, func() error {
			code, err := harness.EdgeStatus(ctx, poll, edgeBase, host, lastPath, nil)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("status %d", code)
			}
			return err
		})
		if err != nil {
			return res, err
		}
		res.burstEdgeLast = time.Since(start)
	}
	fmt.Fprintf(os.Stderr, "bench: config: burst of %d: 201→bucket p50 %s p99 %s max %s, all in bucket after %s\n",
		b.burst, figures.FmtDur(res.burstBucket.P50), figures.FmtDur(res.burstBucket.P99), figures.FmtDur(res.burstBucket.Max), figures.FmtDur(res.burstTotal))
	return res, nil
}

// rssResult is the edge's resident memory idle with one route, then with routes more.
// rssIdleAfter is how long after its routes are served an edge counts as idle: past a
// few periods of its memory returner (edge/memory, every 5 s).
const rssIdleAfter = 20 * time.Second

type rssResult struct {
	routes          int   // routes beside the first
	tenants         int   // the tenants holding them
	base, loaded    int64 // KB: RSS with 1 route; with routes+1, 2 s after they were served
	idle            int64 // KB: RSS with routes+1 once idle (rssIdleAfter after they were served)
	idleFile        int64 // KB: the part of idle that is file pages (rssFileKB)
	heap            int64 // KB: the Go heap in use with routes+1 (go_memstats_heap_inuse_bytes), once idle
	create, applied time.Duration
}

// rssRoutesRun loads each -rss-routes count of routes in turn (growing one tenant, on a
// stack of its own) and reads the idle edge's RSS once the routes are served.
func (b *bench) rssRoutesRun(ctx context.Context) ([]rssResult, error) {
	upPort, err := b.upstream(ctx)
	if err != nil {
		return nil, err
	}
	upURL := fmt.Sprintf("http://127.0.0.1:%d", upPort)
	s, err := b.NewStack(ctx, "rss", "", bulkAPIEnv...)
	if err != nil {
		return nil, err
	}
	if err := s.StartEdge(ctx, 0, ""); err != nil {
		return nil, err
	}
	const slug = "rss"
	host, base := slug+".localhost", "http://"+s.EdgeAddr
	if _, err := s.Client.CreateTenant(ctx, slug); err != nil {
		return nil, err
	}
	if err := s.Client.Call(ctx, "POST", "/v1/tenants/"+slug+"/routes", harness.RouteBody("first", "/first", upURL, "none", false), nil); err != nil {
		return nil, err
	}
	if err := b.WaitServed(ctx, s.Edge, base, host, []string{"/first"}, nil); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	baseKB := harness.RSSKB(s.Edge.Pid())
	// The routes go into tenants of rssPerTenant, beside the one with the first route.
	rs := &routeSet{per: rssPerTenant, upURL: upURL}
	var (
		out  []rssResult
		fill time.Duration
	)
	for _, n := range slices.Sorted(slices.Values(b.scale.rssRoutes)) {
		res := rssResult{routes: n, base: baseKB, tenants: (n + rs.per - 1) / rs.per}
		start := time.Now()
		if err := b.addTenants(ctx, s, rs, "rss", res.tenants); err != nil {
			return out, err
		}
		if res.create, err = b.fill(ctx, s, rs, n); err != nil {
			return out, err
		}
		if err := b.served(ctx, s, s.Edge, base, rs); err != nil {
			return out, err
		}
		res.applied = time.Since(start)
		fill += res.create
		time.Sleep(2 * time.Second)
		res.loaded = harness.RSSKB(s.Edge.Pid())
		// Loading is a burst of garbage (decoded entries, compiles); the edge gives what it
		// freed back once it is idle (its memory returner), which is what an edge that
		// holds these routes costs.
		time.Sleep(rssIdleAfter - 2*time.Second)
		res.idle, res.idleFile, res.heap = harness.RSSKB(s.Edge.Pid()), harness.RSSFileKB(s.Edge.Pid()), heapInuseKB(b, s.EdgeAdmin)
		out = append(out, res)
		fmt.Fprintf(os.Stderr, "bench: rss10k: edge RSS %s with 1 route, %s with %d 2 s after they were served, %s idle (%s of it file pages; Go heap %s); applied in %s, served after %s\n",
			figures.FmtKB(res.base), figures.FmtKB(res.loaded), n+1, figures.FmtKB(res.idle), figures.FmtKB(res.idleFile), figures.FmtKB(res.heap), res.create.Round(time.Millisecond), res.applied.Round(time.Millisecond))
	}
	b.scale.rssStack, b.scale.rssSet, b.scale.rssFill = s, rs, fill // for cold (scale.go)
	return out, nil
}

// rssMarkdown renders rss10k's rows.
func (r *report) rssMarkdown(s *strings.Builder) {
	if len(r.rss) == 0 {
		return
	}
	s.WriteString("## Edge RSS with many routes\n\n")
	fmt.Fprintf(s, "Routes loaded with PUT /v1/tenants/{slug}/config (%d routes an apply) into tenants of up to %d routes, "+
		"each count on top of the one before, beside a tenant with 1 route, into the same running edge (GOMAXPROCS unset); "+
		"RSS read 2 s after the last route of each tenant and 200 others answered, and idle: %s after. Per route = (idle RSS − RSS with 1 route) ÷ routes. "+
		"File pages are the part of the idle RSS that maps files, the binary's pages: clean, shared, and mapped more or less densely from one run to the next (±3 MiB on this machine).\n\n", configChunk, rssPerTenant, rssIdleAfter)
	s.WriteString("| routes | tenants | RSS idle | of it file pages | RSS 2 s after | RSS with 1 route | per route | Go heap in use | applied in | all served after |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.rss {
		fmt.Fprintf(s, "| %d | %d | %s | %s | %s | %s | %.2f KiB | %s | %s | %s |\n", x.routes+1, x.tenants+1, figures.FmtKB(x.idle), figures.FmtKB(x.idleFile), figures.FmtKB(x.loaded), figures.FmtKB(x.base),
			float64(x.idle-x.base)/float64(x.routes), figures.FmtKB(x.heap), x.create.Round(time.Millisecond), x.applied.Round(time.Millisecond))
	}
	s.WriteString("\n")
}
