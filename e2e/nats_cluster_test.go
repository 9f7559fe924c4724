package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/testenv"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// TestNATSClusterRidesThroughLoss runs the api (with its relay), an edge and billing on a
// 3-node NATS cluster at TOLLGATE_NATS_REPLICAS=3, and kills the node leading the config
// bucket while routes are being created through the api and the edge is serving metered
// traffic. Every change reaches the bucket once and the edge once, every route is served,
// and billing's rollups equal what the edge served.
func TestNATSClusterRidesThroughLoss(t *testing.T) {
	t.Parallel()
	c := testenv.StartNATSCluster(t, 3)
	cluster := []string{"TOLLGATE_NATS_URL=" + c.URLs(), "TOLLGATE_NATS_REPLICAS=3"}
	s := newStack(t)
	_, api := s.startAPI(cluster...)
	const slug = "fleet"
	api.createTenant(slug)
	up := echoUpstream(t, "up")
	api.createRoute(slug, routeSpec("r", "/r", up.URL, tenants.AuthKey))
	_, key := api.createKey(slug, api.createConsumer(slug, "app"))
	b := &billingStack{stack: s, t: t, api: api, slug: slug, key: key}
	_, e := s.startEdge(append(cluster, "TOLLGATE_EDGE_ID=edge-1")...)
	defer e.close()
	startProc(t, "billing", []string{"billing"}, s.env(cluster...))
	b.warm(e)

	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info := func(stream string) *jetstream.StreamInfo {
		t.Helper()
		var si *jetstream.StreamInfo
		eventually(t, 15*time.Second, "stream info of "+stream, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			si = st.CachedInfo()
			return nil
		})
		return si
	}
	cfgStream, usageStream := "KV_"+s.bucket(), usage.Stream(s.prefix)
	eventually(t, 15*time.Second, "usage stream created", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.Stream(ctx, usageStream)
		return err
	})
	for _, st := range []string{cfgStream, usageStream, "KV_" + usage.TotalsBucket(s.prefix)} {
		eventually(t, 10*time.Second, st+" on 3 peers", func() error {
			si := info(st)
			if si.Config.Replicas != 3 || si.Cluster == nil || si.Cluster.Leader == "" || len(si.Cluster.Replicas) != 2 {
				return fmt.Errorf("%d replicas (%+v), want 3 with a leader", si.Config.Replicas, si.Cluster)
			}
			return nil
		})
	}

	stop := make(chan struct{})
	load := b.load(e, 4, stop)
	const routes = 12
	var created sync.WaitGroup
	created.Add(1)
	go func() {
		defer created.Done()
		for i := range routes {
			api.createRoute(slug, routeSpec(fmt.Sprintf("r%d", i), fmt.Sprintf("/r%d", i), up.URL, tenants.AuthKey))
			time.Sleep(150 * time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	leader := info(cfgStream).Cluster.Leader
	li := c.Index(leader)
	if li < 0 {
		t.Fatalf("config bucket leader %q is no node", leader)
	}
	killed := time.Now()
	c.Kill(li)
	created.Wait()
	for i := range routes {
		path := fmt.Sprintf("/r%d/x", i)
		eventually(t, 30*time.Second, "route "+path+" served", func() error {
			r, err := e.do("GET", slug, path, "X-API-Key", key)
			if err != nil {
				return err
			}
			b.tl.add(r) // metered like any call
			if r.Status != 200 {
				return fmt.Errorf("GET %s: %s", path, r)
			}
			return nil
		})
	}
	t.Logf("node %s (config bucket leader) killed; all %d routes served %s later; new leader %s",
		leader, routes, time.Since(killed).Round(time.Millisecond), info(cfgStream).Cluster.Leader)
	c.Start(li)
	time.Sleep(time.Second)
	close(stop)
	load.Wait()

	// Stored once: the bucket's stream holds one message per outbox row the relay sent.
	conn, err := pgx.Connect(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows, unsent int64
	eventually(t, 15*time.Second, "outbox sent", func() error {
		if err := conn.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE sent_at IS NULL) FROM outbox`).Scan(&rows, &unsent); err != nil {
			return err
		}
		if unsent > 0 {
			return fmt.Errorf("%d of %d outbox rows unsent", unsent, rows)
		}
		return nil
	})
	if seq := info(cfgStream).State.LastSeq; seq != uint64(rows) {
		t.Errorf("the config bucket stored %d messages for %d outbox rows", seq, rows)
	}
	// Reached the edge once: a duplicate would be applied again or ignored as not newer.
	if ign := metricSum(t, s.edgeAdm, "tollgate_edge_config_ignored_total"); ign != 0 {
		t.Errorf("the edge ignored %v config entries: some reached it twice", ign)
	}
	applied := metricSum(t, s.edgeAdm, "tollgate_edge_config_applied_total")
	got := b.wantUsage()
	t.Logf("%d outbox rows stored once, %v entries applied by the edge, usage %d requests folded exactly", rows, applied, got.Requests)
}

// metricSum adds up every series of the edge's metric name, whatever its labels.
func metricSum(t *testing.T, adminAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for line := range strings.SplitSeq(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{")) {
			continue
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		sum, found = sum+f, true
	}
	if !found {
		t.Fatalf("the edge exports no %s", name)
	}
	return sum
}
