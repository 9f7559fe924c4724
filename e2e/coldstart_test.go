package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge/configfile"
	"tollgate/infra/testenv"
)

// Cold start without NATS: an edge keeps the config it applied as a snapshot file in its
// spool directory and, restarted while NATS is unreachable, serves from it, then catches
// up when NATS returns.

// edgeReadyz is an edge's /readyz: its status and body.
func edgeReadyz(admin string) (int, map[string]any, error) {
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("/readyz %d: %s", resp.StatusCode, raw)
	}
	return resp.StatusCode, body, nil
}

// configSource is /readyz's config object of a ready edge.
func configSource(admin string) (source, message string, err error) {
	status, body, err := edgeReadyz(admin)
	if err != nil {
		return "", "", err
	}
	c, _ := body["config"].(map[string]any)
	if status != 200 || c == nil {
		return "", "", fmt.Errorf("/readyz %d %v", status, body)
	}
	source, _ = c["source"].(string)
	message, _ = c["message"].(string)
	return source, message, nil
}

// metricOf is the value of an unlabelled series in /metrics text.
func metricOf(metrics, name string) (float64, bool) {
	for _, l := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// stillNotReady checks, for a while, that an edge is not ready, says why on /readyz and
// refuses connections on its public port.
func stillNotReady(t *testing.T, p *proc, admin, public, why string) {
	t.Helper()
	eventually(t, readyTimeout, "/readyz says why the edge is not ready", func() error {
		status, body, err := edgeReadyz(admin)
		if err != nil {
			return err
		}
		if status != 503 || !strings.Contains(fmt.Sprint(body), why) {
			return fmt.Errorf("/readyz %d %v, want 503 saying %q", status, body, why)
		}
		return nil
	})
	// Well past the cold start's wait for the bucket (5 s): still not ready, still closed.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if p.exited() {
			t.Fatalf("%s exited: %v", p.name, p.err)
		}
		if status, body, _ := edgeReadyz(admin); status != 503 {
			t.Fatalf("/readyz %d %v, want 503", status, body)
		}
		if c, err := net.DialTimeout("tcp", public, time.Second); err == nil {
			c.Close()
			t.Fatalf("the public port %s accepts connections while the edge is not ready", public)
		}
	}
}

// TestColdStartFromSnapshot: an edge restarted while NATS is down serves its routes from
// its snapshot, says so on /readyz and in its metrics, and once NATS is back catches up:
// a route added meanwhile is served, one deleted meanwhile is gone, and so is one whose
// key vanished from the bucket without a delete marker to say so. An edge whose snapshot
// is older than TOLLGATE_EDGE_SNAPSHOT_MAX_AGE stays not ready instead.
func TestColdStartFromSnapshot(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	spool := t.TempDir()
	first, ec := s.startEdge("TOLLGATE_METER_SPOOL_DIR=" + spool)
	up := echoUpstream(t, "up")

	api.createTenant("cold")
	api.createRoute("cold", routeSpec("keep", "/keep", up.URL, "none"))
	gone := api.createRoute("cold", routeSpec("gone", "/gone", up.URL, "none"))
	vanish := api.createRoute("cold", routeSpec("vanish", "/vanish", up.URL, "none"))
	for _, p := range []string{"/keep", "/gone", "/vanish"} {
		eventually(t, applyDeadline, p+" served", served(ec, "cold", p, "up"))
	}
	tenantID := str(t, vanish, "tenant_id")
	routeKey := func(r map[string]any) string { return tenantID + ".route." + str(t, r, "id") }
	eventually(t, applyDeadline, "the snapshot file holds the three routes", func() error {
		saved, err := configfile.Read(spool, s.bucket(), time.Hour, time.Now())
		if err != nil {
			return err
		}
		var keys []string
		for _, e := range saved.Entries {
			keys = append(keys, e.Key)
		}
		if !slices.Contains(keys, routeKey(gone)) || !slices.Contains(keys, routeKey(vanish)) {
			return fmt.Errorf("snapshot keys %v", keys)
		}
		return nil
	})
	// Killed: the snapshot written after the last change is what the next start has.
	first.signal(syscall.SIGKILL)
	first.waitExit(t, 10*time.Second)

	// "vanish" is deleted and its delete marker purged, so the bucket no longer says it
	// ever held the key: only comparing with the bucket's whole initial load can tell.
	api.must(204, "DELETE", "/v1/tenants/cold/routes/"+str(t, vanish, "id"), nil)
	eventually(t, applyDeadline, "the outbox is drained", s.allSent)
	kv := s.openBucket()
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
			t.Fatalf("purge delete markers: %v", err)
		}
	}()
	if slices.Contains(bucketKeys(t, kv), routeKey(vanish)) {
		t.Fatal("the bucket still has the vanished route")
	}

	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	// Changes made while NATS is down wait in the api's outbox.
	api.must(204, "DELETE", "/v1/tenants/cold/routes/"+str(t, gone, "id"), nil)
	api.createRoute("cold", routeSpec("added", "/added", up.URL, "none"))

	// A snapshot older than the bound is not served.
	stale := startProc(t, "edge-stale", []string{"edge"}, s.env("TOLLGATE_METER_SPOOL_DIR="+spool, "TOLLGATE_EDGE_SNAPSHOT_MAX_AGE=1ms"))
	stillNotReady(t, stale, s.edgeAdm, s.edgeAddr, "older than TOLLGATE_EDGE_SNAPSHOT_MAX_AGE")
	// Stopped before it was ever ready, it exits cleanly and leaves the snapshot as it was.
	stale.stopClean(t, 30*time.Second)

	start := time.Now()
	p, ec := s.startEdge("TOLLGATE_METER_SPOOL_DIR=" + spool)
	t.Logf("with NATS down, the edge was ready from its snapshot %s after it was started", time.Since(start).Round(time.Millisecond))
	source, msg, err := configSource(s.edgeAdm)
	if err != nil || source != "snapshot" || !strings.HasPrefix(msg, "config from snapshot, age ") {
		t.Fatalf("/readyz config: %q %q %v, want source snapshot and its age", source, msg, err)
	}
	t.Logf("/readyz while NATS is down: %s", msg)
	m := scrape(t, s.edgeAdm)
	if v, _ := metricOf(m, "tollgate_edge_config_snapshot_serving"); v != 1 {
		t.Errorf("tollgate_edge_config_snapshot_serving %v, want 1", v)
	}
	if v, _ := metricOf(m, "tollgate_edge_config_snapshot_age_seconds"); v <= 0 {
		t.Errorf("tollgate_edge_config_snapshot_age_seconds %v, want > 0", v)
	}
	for _, path := range []string{"/keep", "/gone", "/vanish"} {
		if err := served(ec, "cold", path, "up")(); err != nil {
			t.Errorf("from the snapshot: %v", err)
		}
	}
	wantEnvelope(t, ec.get(t, "cold", "/added"), 404, "route_not_found")

	s.ns = testenv.RestartNATS(t, s.ns)
	took := eventually(t, outageDeadline, "the route added while NATS was down is served", served(ec, "cold", "/added", "up"))
	eventually(t, applyDeadline, "the route deleted while NATS was down is gone", answers(ec, "cold", "/gone", 404, "route_not_found"))
	eventually(t, applyDeadline, "the vanished route is gone", answers(ec, "cold", "/vanish", 404, "route_not_found"))
	if err := served(ec, "cold", "/keep", "up")(); err != nil {
		t.Errorf("after catching up: %v", err)
	}
	eventually(t, applyDeadline, "/readyz says the config is the bucket's", func() error {
		if source, msg, err := configSource(s.edgeAdm); err != nil || source != "nats" {
			return fmt.Errorf("config source %q %q %v", source, msg, err)
		}
		return nil
	})
	if v, _ := metricOf(scrape(t, s.edgeAdm), "tollgate_edge_config_snapshot_serving"); v != 0 {
		t.Errorf("tollgate_edge_config_snapshot_serving %v after catching up, want 0", v)
	}
	if !strings.Contains(p.output.String(), "keys of the snapshot the bucket no longer has were deleted") {
		t.Errorf("the edge did not log the vanished keys it deleted")
	}
	t.Logf("caught up %s after NATS returned", took.Round(time.Millisecond))
	p.stopClean(t, 30*time.Second)
}

// TestColdStartWithoutSnapshot: an edge with no snapshot, started while NATS is down,
// stays not ready with its public port closed, and becomes ready when NATS returns.
func TestColdStartWithoutSnapshot(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	up := echoUpstream(t, "up")
	api.createTenant("nosnap")
	api.createRoute("nosnap", routeSpec("r", "/r", up.URL, "none"))
	eventually(t, applyDeadline, "the outbox is drained", s.allSent)

	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	p := startProc(t, "edge-nosnap", []string{"edge"}, s.env("TOLLGATE_METER_SPOOL_DIR="+t.TempDir()))
	stillNotReady(t, p, s.edgeAdm, s.edgeAddr, "no usable snapshot")

	s.ns = testenv.RestartNATS(t, s.ns)
	if err := p.waitReady("http://"+s.edgeAdm+"/readyz", outageDeadline); err != nil {
		t.Fatal(err)
	}
	ec := newEdgeClient(s.edgeAddr)
	eventually(t, applyDeadline, "the route is served", served(ec, "nosnap", "/r", "up"))
	if source, _, err := configSource(s.edgeAdm); err != nil || source != "nats" {
		t.Errorf("config source %q %v, want nats", source, err)
	}
}

// TestEdgeRestartUnderLoadNo503: an edge restarted under load answers no request 503
// not_ready "still loading": until it is ready its public port refuses connections, so
// a client (or a load balancer) retries instead of being told to.
func TestEdgeRestartUnderLoadNo503(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	spool := t.TempDir()
	p, ec := s.startEdge("TOLLGATE_METER_SPOOL_DIR=" + spool)
	up := echoUpstream(t, "up")
	api.createTenant("restart")
	api.createRoute("restart", routeSpec("r", "/r", up.URL, "none"))
	eventually(t, applyDeadline, "the route is served", served(ec, "restart", "/r", "up"))

	var ok, refused, loading, draining, other atomic.Int64
	var otherMu sync.Mutex
	var others []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A connection per request, as a load balancer's health-checked pool would see
			// a restart: what a new connection meets.
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", "http://"+s.edgeAddr+"/r", nil)
				req.Host = "restart.localhost:" + portOf(s.edgeAddr)
				resp, err := c.Do(req)
				if err != nil {
					refused.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode == 503 && strings.Contains(string(body), "still loading"):
					loading.Add(1)
				case resp.StatusCode == 503 && strings.Contains(string(body), "shutting down"):
					draining.Add(1)
				default:
					other.Add(1)
					otherMu.Lock()
					others = append(others, fmt.Sprintf("%d %s", resp.StatusCode, body))
					otherMu.Unlock()
				}
			}
		}()
	}
	waitOK := func(n int64) {
		t.Helper()
		from := ok.Load()
		eventually(t, readyTimeout, fmt.Sprintf("%d more requests answered 200", n), func() error {
			if ok.Load() < from+n {
				return errNotYet
			}
			return nil
		})
	}
	waitOK(200)
	for i := range 2 {
		p.stopClean(t, 30*time.Second)
		p, _ = s.startEdge("TOLLGATE_METER_SPOOL_DIR=" + spool)
		waitOK(200)
		t.Logf("restart %d: %d answered 200, %d connections refused so far", i+1, ok.Load(), refused.Load())
	}
	close(stop)
	wg.Wait()
	t.Logf("%d answered 200, %d refused connections, %d 503 shutting down (the old process draining), %d 503 still loading, %d other",
		ok.Load(), refused.Load(), draining.Load(), loading.Load(), other.Load())
	if loading.Load() != 0 {
		t.Errorf("%d requests answered 503 still loading during a restart, want 0", loading.Load())
	}
	if other.Load() != 0 {
		t.Errorf("%d other answers: %v", other.Load(), others[:min(5, len(others))])
	}
	if refused.Load() == 0 {
		t.Logf("no connection was refused: the restarts were quicker than a request")
	}
}
