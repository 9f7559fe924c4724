// Command scalebench measures an edge with TOLLGATE_EDGE_CONFIG_STORE=disk at scale: it
// fills a bucket with -routes routes over -tenants tenants, starts a tollgate-edge process
// on it twice (an empty store, then a restart with its store) and reports each start's
// time to ready, the process's idle RSS and a cold tenant's first-request latency. With
// a fast start (TOLLGATE_EDGE_FAST_START, -fast-start to set it) the first start also
// times cold tenants fetched ahead of the backfill, and when the backfill is through. With
// -serve it also serves shares of the tenants after the restart (each one request) and
// reads the RSS after each; -heap saves the edge's heap profile beside each reading.
//
//	go build -o /tmp/tollgate-edge ./cmd/tollgate-edge
//	go run ./edge/tenantstore/scalebench -edge /tmp/tollgate-edge -routes 1000000 -tenants 100000
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

func main() {
	var (
		routes   = flag.Int("routes", 100000, "routes in the bucket")
		nTenants = flag.Int("tenants", 10000, "tenants they are spread over")
		natsURL  = flag.String("nats", "nats://127.0.0.1:4222", "NATS server")
		edgeBin  = flag.String("edge", "/tmp/tollgate-edge", "the tollgate-edge binary")
		budget   = flag.String("budget", "", "TOLLGATE_EDGE_TENANT_MEMORY (default: the edge's)")
		cold     = flag.Int("cold", 200, "cold tenants to time a first request of")
		keep     = flag.Bool("keep", false, "keep the bucket and the store")
		fast     = flag.String("fast-start", "", "TOLLGATE_EDGE_FAST_START (default: the edge's)")
		serve    = flag.String("serve", "", "after the restart, serve these percentages of the tenants one after the other (e.g. 1,10), reading the RSS after each")
		metered  = flag.Bool("meter", false, "run the edge with its usage meter on (TOLLGATE_METER=on)")
		settle   = flag.Duration("settle", 3*time.Second, "wait after serving a share before reading the RSS")
		heap     = flag.String("heap", "", "directory to save the edge's heap profile to at each RSS reading after the restart")
	)
	flag.Parse()
	var shares []int
	for _, f := range strings.Split(*serve, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 100 {
			fmt.Fprintf(os.Stderr, "scalebench: -serve: %q is not a percentage\n", f)
			os.Exit(2)
		}
		shares = append(shares, n)
	}
	o := opts{serve: shares, meter: *metered, heap: *heap, settle: *settle}
	if err := run(*routes, *nTenants, *natsURL, *edgeBin, *budget, *fast, *cold, *keep, o); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

// opts are the readings beyond the starts'.
type opts struct {
	serve []int  // percentages of the tenants served after the restart
	meter bool   // the edge's meter on
	heap  string // where heap profiles go, "" for none
	// settle is the wait before an RSS reading after serving: the edge gives memory back
	// once a burst's allocation has fallen (edge/memory), some 10 s after it ends.
	settle time.Duration
}

func run(routes, nTenants int, natsURL, edgeBin, budget, fast string, cold int, keep bool, o opts) error {
	ctx := context.Background()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	prefix := "tgscale" + hex.EncodeToString(rb[:])
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	bucket := prefix + "_config"
	if _, err := tgnats.EnsureBucket(ctx, js, bucket, 1); err != nil {
		return err
	}
	if !keep {
		defer func() { _ = js.DeleteKeyValue(context.Background(), bucket) }()
	}
	up, err := upstream()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := fill(ctx, js, bucket, routes, nTenants, up); err != nil {
		return err
	}
	fmt.Printf("bucket: %d routes over %d tenants written in %s\n", routes, nTenants, time.Since(start).Round(time.Millisecond))

	dir, err := os.MkdirTemp("", "scalebench")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	meter := "off"
	if o.meter {
		meter = "on"
	}
	env := []string{
		"TOLLGATE_NATS_URL=" + natsURL, "TOLLGATE_NATS_PREFIX=" + prefix, "TOLLGATE_METER=" + meter,
		"TOLLGATE_METER_SPOOL_DIR=" + dir, "TOLLGATE_EDGE_CONFIG_STORE=disk", "TOLLGATE_EDGE_DOMAIN=gw.test",
		"TOLLGATE_UPSTREAM_ALLOW_CIDRS=127.0.0.0/8", "TOLLGATE_LOG_LEVEL=warn", "TOLLGATE_PPROF=true",
	}
	if budget != "" {
		env = append(env, "TOLLGATE_EDGE_TENANT_MEMORY="+budget)
	}
	if fast != "" {
		env = append(env, "TOLLGATE_EDGE_FAST_START="+fast)
	}
	for i, what := range []string{"first start (empty store)", "restart (with its store)"} {
		e, err := startEdge(edgeBin, env)
		if err != nil {
			return err
		}
		fmt.Printf("%s: ready in %s\n", what, e.ready.Round(time.Millisecond))
		if i == 0 && e.backfilling() {
			// Cold tenants the backfill has not reached yet are fetched from the bucket.
			measureCold(e, nTenants, routes/nTenants, min(cold, 20))
			for e.backfilling() {
				time.Sleep(100 * time.Millisecond)
			}
			fmt.Printf("  backfill complete after %s\n", (time.Since(e.started)).Round(time.Millisecond))
		}
		time.Sleep(2 * time.Second)
		fmt.Printf("  idle RSS %s\n", mib(e.rss()))
		if i == 1 {
			e.saveHeap(o.heap, "idle")
			served := 0
			for _, pct := range o.serve {
				n := max(served+1, nTenants*pct/100)
				failed := serveTenants(e, served, n)
				served = n
				time.Sleep(o.settle)
				fmt.Printf("  RSS after serving %d%% of the tenants (%d, %d not 200): %s\n", pct, n, failed, mib(e.rss()))
				e.saveHeap(o.heap, fmt.Sprintf("served%d", pct))
			}
			measureCold(e, nTenants, routes/nTenants, cold)
			fmt.Printf("  RSS after %d cold tenants loaded: %s\n", cold, mib(e.rss()))
		}
		e.stop()
	}
	if fi, err := dirSize(filepath.Join(dir, "config-store")); err == nil {
		fmt.Printf("store on disk: %s\n", mib(fi))
	}
	return nil
}

// fill writes the tenants and their routes with asynchronous publishes: a KV put is a
// publish to the key's subject.
func fill(ctx context.Context, js jetstream.JetStream, bucket string, routes, nTenants int, up string) error {
	rev := int64(0)
	put := func(e *tenants.Entry) error {
		rev++
		e.Rev = rev
		key, err := e.EntryKey()
		if err != nil {
			return err
		}
		b, _ := json.Marshal(e)
		if _, err := js.PublishAsync("$KV."+bucket+"."+key, b); err != nil {
			return err
		}
		if rev%2000 == 0 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				return fmt.Errorf("publishes not acknowledged")
			}
		}
		return nil
	}
	per := routes / nTenants
	for t := range nTenants {
		id := fmt.Sprintf("ten%06d", t)
		if err := put(&tenants.Entry{Tenant: &tenants.Tenant{ID: id, Slug: fmt.Sprintf("s%06d", t), Name: "Tenant " + id}}); err != nil {
			return err
		}
		for r := range per {
			rid := fmt.Sprintf("route%03d", r)
			err := put(&tenants.Entry{Route: &tenants.Route{ID: rid, TenantID: id, Name: "orders " + rid,
				Paths: []string{fmt.Sprintf("/v1/r%d/{id}", r)}, Methods: []string{"GET", "POST"}, Auth: tenants.AuthNone,
				Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up, Weight: 1}}}}})
			if err != nil {
				return err
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("publishes not acknowledged")
	}
	_ = ctx
	return nil
}

func upstream() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	}()
	return "http://" + ln.Addr().String(), nil
}

type edgeProc struct {
	cmd      *exec.Cmd
	pub, adm string
	ready    time.Duration
	started  time.Time
}

// backfilling says the edge's store is still being backfilled behind a fast start.
func (e *edgeProc) backfilling() bool {
	resp, err := http.Get("http://" + e.adm + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), "\ntollgate_edge_config_store_backfilling 1")
}

func freeAddr() string {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	return ln.Addr().String()
}

func startEdge(bin string, env []string) (*edgeProc, error) {
	e := &edgeProc{pub: freeAddr(), adm: freeAddr()}
	e.cmd = exec.Command(bin)
	e.cmd.Env = append(append(os.Environ(), env...), "TOLLGATE_EDGE_ADDR="+e.pub, "TOLLGATE_EDGE_ADMIN_ADDR="+e.adm)
	e.cmd.Stderr = os.Stderr
	start := time.Now()
	e.started = start
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	for time.Since(start) < 10*time.Minute {
		resp, err := http.Get("http://" + e.adm + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				e.ready = time.Since(start)
				return e, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.stop()
	return nil, fmt.Errorf("edge not ready after 10 minutes")
}

func (e *edgeProc) stop() {
	_ = e.cmd.Process.Signal(os.Interrupt)
	_ = e.cmd.Wait()
}

func (e *edgeProc) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n << 10
		}
	}
	return 0
}

// measureCold times the first request of cold tenants (each loads from the store and
// compiles) and, for comparison, a second request of each (compiled).
func measureCold(e *edgeProc, nTenants, per, n int) {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	get := func(t int) (time.Duration, int) {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/v1/r3/42", e.pub), nil)
		req.Host = fmt.Sprintf("s%06d.gw.test", t)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return time.Since(start), 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start), resp.StatusCode
	}
	get(0) // the connection
	var first, warm []time.Duration
	step := max(1, nTenants/n)
	for i := 0; i < n; i++ {
		t := (i*step + 1) % nTenants
		d, code := get(t)
		if code != 200 {
			fmt.Printf("  tenant %d: status %d\n", t, code)
		}
		first = append(first, d)
		d, _ = get(t)
		warm = append(warm, d)
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[min(len(ds)-1, int(float64(len(ds))*p))].Round(10 * time.Microsecond)
	}
	fmt.Printf("  cold tenant first request (%d tenants of %d routes): p50 %s, p90 %s, p99 %s, max %s; its second request p50 %s\n",
		n, per, q(first, .5), q(first, .9), q(first, .99), q(first, 1), q(warm, .5))
}

// serveTenants sends one request to each tenant from..to-1 over 8 connections and
// returns how many were not answered 200.
func serveTenants(e *edgeProc, from, to int) int {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	next := make(chan int)
	failed := make(chan int, 8)
	for range 8 {
		go func() {
			n := 0
			for t := range next {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/v1/r3/42", e.pub), nil)
				req.Host = fmt.Sprintf("s%06d.gw.test", t)
				resp, err := c.Do(req)
				if err != nil {
					n++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					n++
				}
			}
			failed <- n
		}()
	}
	for t := from; t < to; t++ {
		next <- t
	}
	close(next)
	n := 0
	for range 8 {
		n += <-failed
	}
	return n
}

// saveHeap writes the edge's heap profile (after a GC) to dir/heap-name.pb.gz.
func (e *edgeProc) saveHeap(dir, name string) {
	if dir == "" {
		return
	}
	resp, err := http.Get("http://" + e.adm + "/debug/pprof/heap?gc=1")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench: heap profile:", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := os.WriteFile(filepath.Join(dir, "heap-"+name+".pb.gz"), b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench: heap profile:", err)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	return n, err
}
