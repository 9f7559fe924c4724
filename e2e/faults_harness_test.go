package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// The fault fleet: every process of a production deployment, each a real one started by
// the test — a 3-node NATS cluster at replicas 3, a Redis Cluster of 3 masters with a
// replica each, a Postgres of the test's own (so it can be stopped and frozen), the api,
// billing and three edges — shared by the fault tests, which take turns breaking it.

// faultFleet is the deployment the fault tests break.
type faultFleet struct {
	t      *testing.T // the test that owns the processes
	nats   *testenv.NATSCluster
	redis  *testenv.RedisNodes
	pg     *testenv.PGServer
	dbURL  string
	prefix string
	token  string
	rpfx   string // Redis key prefix

	api     *proc
	apiC    *apiClient
	billing *proc
	edges   []*faultEdge

	billingAdmin string // billing's /metrics

	nc *nats.Conn
	js jetstream.JetStream
}

// faultEdge is one edge of the fleet; it keeps its addresses, id and spool across a kill.
type faultEdge struct {
	name   string
	pub    string
	admin  string
	spool  string
	env    []string
	p      *proc
	client *edgeClient // keep-alive connections, redialled after a restart
}

// dbTimeout is the api's and billing's bound on one database call: short, so a frozen
// Postgres is reported within seconds.
const dbTimeout = "2s"

func startFaultFleet(t *testing.T, edges int) *faultFleet {
	t.Helper()
	f := &faultFleet{
		t:      t,
		prefix: testenv.Name("flt_"),
		token:  testenv.Name("tgadm_flt_"),
		rpfx:   testenv.RedisPrefix(t),
	}
	// The three clusters start at once: each waits mostly on its processes.
	var wg sync.WaitGroup
	wg.Go(func() { f.nats = testenv.StartNATSCluster(t, 3) })
	wg.Go(func() { f.redis = testenv.RedisCluster(t, 3, 1) })
	wg.Go(func() { f.pg = testenv.StartPostgres(t) })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	f.dbURL = f.pg.CreateDatabase("tollgate")

	nc, err := nats.Connect(f.nats.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f.nc = nc
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}

	f.api, f.apiC = f.startAPI()
	f.billingAdmin = freeAddr(t)
	f.billing = startProc(t, "billing", []string{"billing"}, f.env("TOLLGATE_BILLING_ADMIN_ADDR="+f.billingAdmin))
	for i := range edges {
		e := &faultEdge{name: fmt.Sprintf("edge-%d", i+1), spool: t.TempDir()}
		f.startEdge(e)
		e.client = newEdgeClient(e.pub)
		t.Cleanup(e.client.close)
		f.edges = append(f.edges, e)
	}
	for _, st := range []string{f.configStream(), usage.Stream(f.prefix)} {
		eventually(t, 30*time.Second, st+" on 3 peers", func() error {
			si, err := f.streamInfo(st)
			if err != nil {
				return err
			}
			if si.Config.Replicas != 3 || si.Cluster == nil || si.Cluster.Leader == "" || len(si.Cluster.Replicas) != 2 {
				return fmt.Errorf("%d replicas (%+v), want 3 with a leader", si.Config.Replicas, si.Cluster)
			}
			return nil
		})
	}
	return f
}

// env is the environment every process of the fleet shares, overridden by extra.
func (f *faultFleet) env(extra ...string) []string {
	env := []string{
		"TOLLGATE_DATABASE_URL=" + f.dbURL,
		"TOLLGATE_DB_TIMEOUT=" + dbTimeout,
		"TOLLGATE_NATS_URL=" + f.nats.URLs(),
		"TOLLGATE_NATS_REPLICAS=3",
		"TOLLGATE_NATS_PREFIX=" + f.prefix,
		"TOLLGATE_REDIS_URL=" + f.redis.ClusterURL(),
		"TOLLGATE_REDIS_PREFIX=" + f.rpfx,
		// A busy 2-core machine is not to be mistaken for a failover (see the limit tests).
		"TOLLGATE_REDIS_TIMEOUT=200ms",
		"TOLLGATE_ADMIN_TOKEN=" + f.token,
		"TOLLGATE_UPSTREAM_ALLOW_CIDRS=127.0.0.0/8",
		"TOLLGATE_EDGE_DOMAIN=localhost",
	}
	return append(env, extra...)
}

func (f *faultFleet) startAPI() (*proc, *apiClient) {
	t := f.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		addr := freeAddr(t)
		p := startProc(t, "api@"+addr, []string{"api"}, f.env("TOLLGATE_API_ADDR="+addr))
		err := p.waitReady("http://"+addr+"/readyz", readyTimeout)
		if err == nil {
			p.addr = addr
			return p, &apiClient{t: t, base: "http://" + addr, token: f.token, hc: &http.Client{Timeout: 30 * time.Second}}
		}
		if p.bindFailed() && attempt < 5 {
			continue
		}
		t.Fatalf("api did not become ready: %v (its output is below)", err)
	}
}

// startEdge starts e (again: on its addresses and spool, if it has them) and waits for its
// /readyz.
func (f *faultFleet) startEdge(e *faultEdge) {
	t := f.t
	t.Helper()
	restart := e.pub != ""
	for attempt := 1; ; attempt++ {
		if !restart {
			e.pub, e.admin = freeAddr(t), freeAddr(t)
		}
		e.env = f.env("TOLLGATE_EDGE_ID="+e.name, "TOLLGATE_METER_SPOOL_DIR="+e.spool,
			"TOLLGATE_EDGE_ADDR="+e.pub, "TOLLGATE_EDGE_ADMIN_ADDR="+e.admin)
		name := e.name + "@" + e.pub
		if restart {
			name += " (restarted)"
		}
		p := startProc(t, name, []string{"edge"}, e.env)
		err := p.waitReady("http://"+e.admin+"/readyz", readyTimeout)
		if err == nil {
			p.addr, p.adminAddr = e.pub, e.admin
			e.p = p
			return
		}
		if p.bindFailed() && attempt < 5 {
			if restart {
				// The killed process's port is released with it; wait and take it again.
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		t.Fatalf("%s did not become ready: %v (its output is below)", e.name, err)
	}
}

// kill ends the edge's process group with SIGKILL and waits until it is gone.
func (e *faultEdge) kill(t *testing.T) {
	t.Helper()
	e.p.signal(syscall.SIGKILL)
	e.p.waitExit(t, 10*time.Second)
}

func (e *faultEdge) limitEdge() *limitEdge {
	return &limitEdge{name: e.name, p: e.p, client: e.client, admin: e.admin, env: e.env}
}

func (f *faultFleet) limitEdges() []*limitEdge {
	var out []*limitEdge
	for _, e := range f.edges {
		out = append(out, e.limitEdge())
	}
	return out
}

func (f *faultFleet) configStream() string { return "KV_" + f.prefix + "_config" }

func (f *faultFleet) streamInfo(stream string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := f.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// leader is the node index leading stream, waiting for one to be elected.
func (f *faultFleet) leader(t *testing.T, stream string) int {
	t.Helper()
	li := -1
	eventually(t, 30*time.Second, "a leader of "+stream, func() error {
		si, err := f.streamInfo(stream)
		if err != nil {
			return err
		}
		if si.Cluster == nil || si.Cluster.Leader == "" {
			return fmt.Errorf("no leader: %+v", si.Cluster)
		}
		if li = f.nats.Index(si.Cluster.Leader); li < 0 {
			return fmt.Errorf("leader %q is no node of the cluster", si.Cluster.Leader)
		}
		return nil
	})
	return li
}

// waitStreamCurrent waits until every replica of stream is current again (after a node
// came back), so the next fault does not find the stream on two legs.
func (f *faultFleet) waitStreamCurrent(t *testing.T, stream string) {
	t.Helper()
	eventually(t, 30*time.Second, stream+" replicas current", func() error {
		si, err := f.streamInfo(stream)
		if err != nil {
			return err
		}
		if si.Cluster == nil || si.Cluster.Leader == "" || len(si.Cluster.Replicas) != 2 {
			return fmt.Errorf("cluster %+v", si.Cluster)
		}
		for _, r := range si.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("replica %s not current", r.Name)
			}
		}
		return nil
	})
}

// usage is what billing folded for slug this month, read through the api.
func (f *faultFleet) usage(slug string) (usage.Counts, error) {
	r, err := f.apiC.try("GET", "/v1/tenants/"+slug+"/usage", nil)
	if err != nil {
		return usage.Counts{}, err
	}
	var rep billing.UsageReport
	if r.Status != 200 || json.Unmarshal(r.Raw, &rep) != nil {
		return usage.Counts{}, fmt.Errorf("usage: %s", r)
	}
	return rep.Total, nil
}

// wantBilled waits until billing's usage of slug equals what the load's clients received
// (requests and billable; up to lost more of each for answers lost in flight with a
// killed process, which the edge may have counted), fails at once if it goes past that,
// and checks that it stays there over two more meter flushes. It returns the usage and
// how long after the call it matched.
func (f *faultFleet) wantBilled(t *testing.T, slug string, tl *meterTally, lost int64) (usage.Counts, time.Duration) {
	t.Helper()
	req, bill := tl.counts()
	var got usage.Counts
	check := func() error {
		var err error
		if got, err = f.usage(slug); err != nil {
			return err
		}
		if got.Requests > req+lost || got.Billable > bill+lost {
			t.Fatalf("billed %+v is past what was served (%d requests, %d billable, %d answers lost in flight): %s",
				got, req, bill, lost, tl)
		}
		if got.Requests < req || got.Billable < bill {
			return fmt.Errorf("billed %+v, want %d requests, %d billable (%d answers lost in flight)", got, req, bill, lost)
		}
		if lost == 0 && (got.Requests != req || got.Billable != bill) {
			return fmt.Errorf("billed %+v, want %s", got, tl)
		}
		return nil
	}
	d := eventually(t, 60*time.Second, "billed = served", check)
	time.Sleep(2500 * time.Millisecond)
	if err := check(); err != nil {
		t.Fatalf("usage changed after it matched: %v", err)
	}
	return got, d
}

// ---------------------------------------------------------------------------------------
// Steady load

// steadyLoad sends GET slug path at a fixed total rate, request i to edge i mod n, from a
// pool of keep-alive clients (an open loop: a slow or failed answer does not slow the
// load), and counts every answer by status.
type steadyLoad struct {
	tl       *meterTally // what the meter should have counted, for billed = served
	mu       sync.Mutex
	statuses map[string]int // "edge-1 200", "edge-2 503 not_ready", "edge-1 transport"
	errs     []loadErr
	start    time.Time
	stop     chan struct{}
	done     sync.WaitGroup
}

type loadErr struct {
	edge       int
	sent, took time.Duration // from the load's start
	err        error
}

func startSteadyLoad(tl *meterTally, edges []*faultEdge, rate int, slug, path string, header ...string) *steadyLoad {
	l := &steadyLoad{tl: tl, statuses: map[string]int{}, start: time.Now(), stop: make(chan struct{})}
	jobs := make(chan int, 4*rate)
	for range 24 {
		l.done.Go(func() {
			for i := range jobs {
				l.one(edges, i%len(edges), slug, path, header...)
			}
		})
	}
	l.done.Go(func() {
		defer close(jobs)
		period := time.Second / time.Duration(rate)
		for i := 0; ; i++ {
			if w := time.Until(l.start.Add(time.Duration(i) * period)); w > 0 {
				select {
				case <-l.stop:
					return
				case <-time.After(w):
				}
			}
			select {
			case <-l.stop:
				return
			case jobs <- i:
			}
		}
	})
	return l
}

func (l *steadyLoad) one(edges []*faultEdge, i int, slug, path string, header ...string) {
	e := edges[i]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sent := time.Since(l.start)
	r, err := e.client.doCtx(ctx, "GET", slug, path, header...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.statuses[e.name+" transport"]++
		l.errs = append(l.errs, loadErr{edge: i, sent: sent, took: time.Since(l.start), err: err})
		return
	}
	l.tl.add(r)
	key := fmt.Sprint(e.name, " ", r.Status)
	if r.Status != 200 {
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(r.Body, &env)
		key += " " + env.Error.Code
	}
	l.statuses[key]++
}

// finish stops the load and waits for every answer.
func (l *steadyLoad) finish() {
	close(l.stop)
	l.done.Wait()
}

// at is a point in time as an offset of the load's start.
func (l *steadyLoad) at(t time.Time) time.Duration { return t.Sub(l.start) }

// count adds up the answers whose key contains every one of parts.
func (l *steadyLoad) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, v := range l.statuses {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(k, p)
		}
		if all {
			n += v
		}
	}
	return n
}

// serverErrors is how many answers had a 5xx status.
func (l *steadyLoad) serverErrors() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, v := range l.statuses {
		if f := strings.Fields(k); len(f) > 1 && strings.HasPrefix(f[1], "5") {
			n += v
		}
	}
	return n
}

// lostInFlight is how many requests to edge were sent before killed and failed other than
// by a refused connection: their answers died with the process, which may have counted
// them. (A refused one never reached it.)
func (l *steadyLoad) lostInFlight(edge int, killed time.Duration) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, e := range l.errs {
		if e.edge == edge && e.sent <= killed && !errors.Is(e.err, syscall.ECONNREFUSED) {
			n++
		}
	}
	return n
}

func (l *steadyLoad) String() string {
	l.mu.Lock()
	keys := make([]string, 0, len(l.statuses))
	for k := range l.statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, l.statuses[k])
	}
	var ex []string
	for i, e := range l.errs {
		if i == 3 {
			break
		}
		ex = append(ex, fmt.Sprintf("edge %d at %s: %v", e.edge+1, e.sent.Round(time.Millisecond), e.err))
	}
	l.mu.Unlock()
	if len(ex) > 0 {
		fmt.Fprintf(&b, " (errors: %s)", strings.Join(ex, "; "))
	}
	return b.String()
}

// metricTotal adds up every series of metric name on each of the admin addresses (0 for
// a process that does not export it yet).
func metricTotal(name string, admins ...string) float64 {
	var sum float64
	c := &http.Client{Timeout: 5 * time.Second}
	for _, a := range admins {
		resp, err := c.Get("http://" + a + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for line := range strings.SplitSeq(string(body), "\n") {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || (!strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{")) {
				continue
			}
			if v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

func (f *faultFleet) edgeAdmins() []string {
	var out []string
	for _, e := range f.edges {
		out = append(out, e.admin)
	}
	return out
}

// ---------------------------------------------------------------------------------------
// Limiter timeline

// limiterTimeline records each edge's limiter state (from /readyz) as it changes.
type limiterTimeline struct {
	edges []*limitEdge
	mu    sync.Mutex
	last  []string
	log   [][]limiterChange
}

type limiterChange struct {
	at    time.Time
	state string // "cluster/3", "degraded/3"
}

func newLimiterTimeline(edges []*limitEdge) *limiterTimeline {
	return &limiterTimeline{edges: edges, last: make([]string, len(edges)), log: make([][]limiterChange, len(edges))}
}

// look reads every edge's state once.
func (lt *limiterTimeline) look() {
	for i, e := range lt.edges {
		st, err := e.limiter()
		if err != nil {
			continue
		}
		s := fmt.Sprintf("%s/%d", st.Mode, st.LiveEdges)
		if st.Degraded && st.Mode != "degraded" {
			s = "degraded:" + s
		}
		lt.mu.Lock()
		if s != lt.last[i] {
			lt.last[i] = s
			lt.log[i] = append(lt.log[i], limiterChange{time.Now(), s})
		}
		lt.mu.Unlock()
	}
}

// episode reads the changes after from: how long after it the first edge left cluster
// mode (-1: none did) and the last one was back in it, and how far apart the edges made
// each of the two changes (the edges in different modes meanwhile).
func (lt *limiterTimeline) episode(from time.Time) (degraded, back, spread time.Duration) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	var firstOut, lastOut, firstBack, lastBack time.Time
	for _, changes := range lt.log {
		for _, c := range changes {
			if c.at.Before(from) {
				continue
			}
			if strings.HasPrefix(c.state, "cluster/") {
				if firstBack.IsZero() || c.at.Before(firstBack) {
					firstBack = c.at
				}
				if c.at.After(lastBack) {
					lastBack = c.at
				}
				continue
			}
			if firstOut.IsZero() || c.at.Before(firstOut) {
				firstOut = c.at
			}
			if c.at.After(lastOut) {
				lastOut = c.at
			}
		}
	}
	if firstOut.IsZero() {
		return -1, 0, 0
	}
	if lastBack.IsZero() {
		return firstOut.Sub(from), 0, lastOut.Sub(firstOut)
	}
	return firstOut.Sub(from), lastBack.Sub(from), lastOut.Sub(firstOut) + lastBack.Sub(firstBack)
}

func (lt *limiterTimeline) String() string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	var b strings.Builder
	for i, changes := range lt.log {
		fmt.Fprintf(&b, "%s:", lt.edges[i].name)
		for _, c := range changes {
			fmt.Fprintf(&b, " %s %s", c.at.Format("15:04:05.000"), c.state)
		}
		b.WriteString("; ")
	}
	return strings.TrimSuffix(b.String(), "; ")
}
