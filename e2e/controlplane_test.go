package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/testenv"
)

// outageDeadline bounds how long a change held back by a NATS outage takes to go out once
// NATS is back. Not a latency promise: the clients reconnect about a second apart and the
// relay backs off up to 5 s between failed publishes.
const outageDeadline = 30 * time.Second

// TestEdgeBootsFromBucketAlone: with the api stopped and the database unreachable, a new
// edge loads its config from the KV bucket and serves it.
func TestEdgeBootsFromBucketAlone(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	apiProc, api := s.startAPI()
	edgeProc, edge := s.startEdge()
	up := echoUpstream(t, "up")

	api.createTenant("solo")
	api.createRoute("solo", routeSpec("r", "/r", up.URL, "key"))
	c := api.createConsumer("solo", "c")
	_, key := api.createKey("solo", c)
	eventually(t, applyDeadline, "the key works", served(edge, "solo", "/r", "up", "X-API-Key", key))

	apiProc.stopClean(t, stopTimeout)
	edgeProc.stopClean(t, stopTimeout)
	edge.close()

	// Postgres is irrelevant to an edge: point it at nothing.
	_, edge = s.startEdge("TOLLGATE_DATABASE_URL=postgres://nobody@127.0.0.1:1/nothing?sslmode=disable&connect_timeout=1")
	if err := served(edge, "solo", "/r", "up", "X-API-Key", key)(); err != nil {
		t.Fatalf("the restarted edge, ready, does not serve the config: %v", err)
	}
	got := decodeEcho(t, edge.get(t, "solo", "/r/x", "X-API-Key", key))
	if ids := got.Headers["X-Consumer-Id"]; len(ids) != 1 || ids[0] != c {
		t.Errorf("upstream saw X-Consumer-Id %q, want [%s]", ids, c)
	}
	wantEnvelope(t, edge.get(t, "solo", "/r"), 401, "unauthenticated")
	wantEnvelope(t, edge.get(t, "solo", "/r", "X-API-Key", key+"x"), 401, "invalid_credential")
	wantEnvelope(t, edge.get(t, "solo", "/other", "X-API-Key", key), 404, "route_not_found")
}

// TestChangesSurviveNATSOutage: with NATS down the api keeps accepting changes (the
// outbox is in Postgres) and the edge keeps serving its last config; when NATS is back
// the changes reach the bucket and the edge.
func TestChangesSurviveNATSOutage(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")

	api.createTenant("outage")
	one := api.createRoute("outage", routeSpec("one", "/one", up.URL, "none"))
	eventually(t, applyDeadline, "route one is served", served(edge, "outage", "/one", "up"))

	s.ns.Shutdown()
	s.ns.WaitForShutdown()

	// The api answers as usual while NATS is down.
	two := api.createRoute("outage", routeSpec("two", "/two", up.URL, "none"))
	api.must(204, "DELETE", "/v1/tenants/outage/routes/"+str(t, one, "id"), nil)
	if err := s.allSent(); err == nil {
		t.Fatalf("the outbox holds no unsent change while NATS is down")
	}
	// The edge keeps serving what it has.
	if err := served(edge, "outage", "/one", "up")(); err != nil {
		t.Errorf("edge during the NATS outage: %v", err)
	}
	wantEnvelope(t, edge.get(t, "outage", "/two"), 404, "route_not_found")

	s.ns = testenv.RestartNATS(t, s.ns)
	took := eventually(t, outageDeadline, "route two served after NATS returned", served(edge, "outage", "/two", "up"))
	eventually(t, applyDeadline, "route one gone after NATS returned", answers(edge, "outage", "/one", 404, "route_not_found"))
	t.Logf("changes made during the outage reached the edge %s after NATS returned", took.Round(time.Millisecond))
	eventually(t, applyDeadline, "the outbox is drained", s.allSent)

	kv := s.openBucket()
	keys := bucketKeys(t, kv)
	tenantID := str(t, two, "tenant_id")
	if k := tenantID + ".route." + str(t, two, "id"); !slices.Contains(keys, k) {
		t.Errorf("bucket lacks %s: %v", k, keys)
	}
	if k := tenantID + ".route." + str(t, one, "id"); slices.Contains(keys, k) {
		t.Errorf("bucket still holds deleted %s", k)
	}
}

// TestTwoAPIsOneRelay: two api processes on one database and NATS; many route creations
// spread over both. Every change reaches the bucket exactly once with strictly increasing
// revs in publish order, and the edge serves every route. Then the active api stops and the
// other one's relay takes over.
func TestTwoAPIsOneRelay(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	proc1, api1 := s.startAPI()
	proc2, api2 := s.startAPI()
	procs, apis := []*proc{proc1, proc2}, []*apiClient{api1, api2}
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")
	kv := s.openBucket()
	rec := s.record(kv)

	tenant := api1.createTenant("pair")
	tenantID := str(t, tenant, "id")

	// create makes routes from..to-1 with 6 concurrent clients, alternating apis.
	create := func(from, to int, apis []*apiClient) []string {
		var (
			mu   sync.Mutex
			keys []string
			errs []string
			wg   sync.WaitGroup
			next = make(chan int)
		)
		for range 6 {
			wg.Go(func() {
				for i := range next {
					api := apis[i%len(apis)]
					r, err := api.try("POST", "/v1/tenants/pair/routes", routeSpec(fmt.Sprintf("r%d", i), fmt.Sprintf("/r%d", i), up.URL, "none"))
					mu.Lock()
					if err != nil || r.Status != 201 {
						errs = append(errs, fmt.Sprintf("route %d via %s: %v %s", i, api.base, err, r))
					} else {
						keys = append(keys, tenantID+".route."+r.Body["id"].(string))
					}
					mu.Unlock()
				}
			})
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("route creations failed:\n%s", strings.Join(errs, "\n"))
		}
		return keys
	}
	const n = 80
	keys := create(0, n, apis)
	took := eventually(t, 10*time.Second, "every route reaches the bucket", func() error { return rec.hasPuts(keys) })
	t.Logf("%d routes created over two apis reached the bucket %s after the last creation", n, took.Round(time.Millisecond))
	eventually(t, 10*time.Second, "the outbox is drained", s.allSent)
	phase1 := rec.snapshot()
	checkPublishOrder(t, phase1, 0, s.outbox())

	for i := range n {
		eventually(t, applyDeadline, fmt.Sprintf("route /r%d served", i), served(edge, "pair", fmt.Sprintf("/r%d/x", i), "up"))
	}

	// Exactly one relay is active.
	active := -1
	for i, p := range procs {
		if strings.Contains(p.output.String(), "outbox relay active") {
			if active >= 0 {
				t.Fatalf("both apis report an active relay")
			}
			active = i
		}
	}
	if active < 0 {
		t.Fatalf("no api reports an active relay")
	}

	// The active one stops; the other's relay takes over and its changes still go out.
	procs[active].stopClean(t, stopTimeout)
	other := 1 - active
	more := create(n, n+20, apis[other:other+1])
	took = eventually(t, outageDeadline, "routes made after the handover reach the bucket", func() error { return rec.hasPuts(more) })
	t.Logf("after the active api stopped, its standby published within %s", took.Round(time.Millisecond))
	eventually(t, 10*time.Second, "the outbox is drained", s.allSent)
	checkPublishOrder(t, rec.snapshot(), len(phase1), s.outbox())
	for i := n; i < n+20; i++ {
		eventually(t, applyDeadline, fmt.Sprintf("route /r%d served", i), served(edge, "pair", fmt.Sprintf("/r%d", i), "up"))
	}
}

// TestResyncRebuildsWipedBucket: with the api stopped, every key of the bucket is
// deleted (the edge then knows no tenant); `tollgate api --resync` puts them all back
// and exits 0, and the edge serves again. An api started afterwards publishes on top.
func TestResyncRebuildsWipedBucket(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	apiProc, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")
	kv := s.openBucket()

	api.createTenant("wiped")
	api.createRoute("wiped", routeSpec("r", "/r", up.URL, "key"))
	c := api.createConsumer("wiped", "c")
	_, key := api.createKey("wiped", c)
	eventually(t, applyDeadline, "the key works", served(edge, "wiped", "/r", "up", "X-API-Key", key))
	apiProc.stopClean(t, stopTimeout)

	before := bucketKeys(t, kv)
	if len(before) != 4 {
		t.Fatalf("bucket holds %d keys, want 4 (tenant, route, consumer, key): %v", len(before), before)
	}
	deleteKeys(t, kv, before)
	eventually(t, applyDeadline, "the edge forgets the tenant", answers(edge, "wiped", "/r", 404, "tenant_not_found", "X-API-Key", key))

	s.resync()
	if after := bucketKeys(t, kv); !slices.Equal(after, before) {
		t.Fatalf("after resync the bucket holds %v, want %v", after, before)
	}
	eventually(t, applyDeadline, "the edge serves after the resync", served(edge, "wiped", "/r", "up", "X-API-Key", key))

	// Changes made afterwards still go out (their revs are above the resync's).
	_, api = s.startAPI()
	api.createRoute("wiped", routeSpec("later", "/later", up.URL, "none"))
	eventually(t, applyDeadline, "a route made after the resync is served", served(edge, "wiped", "/later", "up"))
	if err := served(edge, "wiped", "/r", "up", "X-API-Key", key)(); err != nil {
		t.Errorf("after a new change: %v", err)
	}
}

// TestResyncWhileAPIRuns: the operator's case: the api is serving (its relay active) when
// a key is deleted from the bucket by hand; `tollgate api --resync` restores it and
// exits 0. (As of this writing it fails: the resync process waits, silently and without
// end, for the relay advisory lock that the running api's active relay never gives up.)
func TestResyncWhileAPIRuns(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "up")
	kv := s.openBucket()

	api.createTenant("live")
	route := api.createRoute("live", routeSpec("r", "/r", up.URL, "none"))
	eventually(t, applyDeadline, "the route is served", served(edge, "live", "/r", "up"))

	before := bucketKeys(t, kv)
	routeKey := str(t, route, "tenant_id") + ".route." + str(t, route, "id")
	deleteKeys(t, kv, []string{routeKey})
	eventually(t, applyDeadline, "the edge drops the route", answers(edge, "live", "/r", 404, "route_not_found"))

	s.resync()
	if after := bucketKeys(t, kv); !slices.Equal(after, before) {
		t.Fatalf("after resync the bucket holds %v, want %v", after, before)
	}
	eventually(t, applyDeadline, "the edge serves the route again", served(edge, "live", "/r", "up"))
}

// resyncDeadline bounds `tollgate api --resync` from start to exit.
const resyncDeadline = 20 * time.Second

// resync runs `tollgate api --resync` and fails the test unless it exits 0 within
// resyncDeadline, saying it rebuilt the bucket.
func (s *stack) resync() {
	t := s.t
	t.Helper()
	p := startProc(t, "api --resync", []string{"api", "--resync"}, s.env("TOLLGATE_API_ADDR="+freeAddr(t)))
	select {
	case <-p.done:
	case <-time.After(resyncDeadline):
		t.Fatalf("`tollgate api --resync` still running after %s (its output is below)", resyncDeadline)
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("`tollgate api --resync` exit status %d (its output is below)", code)
	}
	if out := p.stdout.String(); !strings.Contains(out, "rebuilt") {
		t.Errorf("`tollgate api --resync` printed %q, want a line saying the bucket was rebuilt", out)
	}
	t.Logf("resync: %s", strings.TrimSpace(p.stdout.String()))
}

func deleteKeys(t *testing.T, kv jetstream.KeyValue, keys []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range keys {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatalf("delete %s from the bucket: %v", k, err)
		}
	}
}
