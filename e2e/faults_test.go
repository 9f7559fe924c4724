package e2e

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/infra/usage"
	"tollgate/tenants"
)

// TestFaults breaks one production-shaped fleet (see faultFleet) in turn, each time under
// steady load through all three edges, and checks what the README promises for each
// failure: nothing lost or counted twice, no 5xx that the fault does not excuse, config
// complete everywhere, limits within their degraded bound. The subtests share the fleet
// and run in order; each uses tenants of its own, so its counts are its own.
func TestFaults(t *testing.T) {
	t.Parallel()
	f := startFaultFleet(t, 3)
	up := echoUpstream(t, "up")
	const rate = 150 // requests/s across the three edges

	t.Run("EdgeKilled", func(t *testing.T) {
		// kill -9 of an edge mid-traffic, started again on the same spool: every answer the
		// clients got is billed, once.
		const slug = "flt-edge"
		tl := &meterTally{}
		f.tenant(t, slug, up.URL, tl)
		l := startSteadyLoad(tl, f.edges, rate, slug, "/r/x")
		time.Sleep(3 * time.Second)
		victim := f.edges[0]
		victim.kill(t)
		killed := time.Now()
		time.Sleep(time.Second)
		restarted := time.Now()
		f.startEdge(victim)
		back := time.Since(restarted)
		time.Sleep(3 * time.Second)
		l.finish()
		lost := l.lostInFlight(0, l.at(killed))
		got, d := f.wantBilled(t, slug, tl, lost)
		req, bill := tl.counts()
		t.Logf("FIGURES edge kill -9: served %d (billable %d), billed %+v, answers lost in flight %d, 5xx %d, "+
			"edge started again 1 s after the kill and ready %s later, billed = served %s after the load; the restarted edge recovered %v requests of the dead run; %s",
			req, bill, got, lost, l.serverErrors(), back.Round(time.Millisecond), d.Round(10*time.Millisecond),
			metricTotal("tollgate_meter_recovered_requests_total", victim.admin), l)
		// The victim's own clients lose what was in flight; nobody else may notice.
		for _, e := range f.edges {
			if e == victim {
				continue
			}
			if n := l.count(e.name+" 5") + l.count(e.name+" transport"); n > 0 {
				t.Errorf("%s answered %d requests with a 5xx or failed while another edge was killed: %s", e.name, n, l)
			}
		}
	})

	t.Run("NATSNodeKilled", func(t *testing.T) {
		// The node leading the usage stream killed during metered traffic: the edges keep
		// serving, publish once a new leader is elected, and billing folds all of it once.
		const slug = "flt-nats"
		tl := &meterTally{}
		f.tenant(t, slug, up.URL, tl)
		usage := usage.Stream(f.prefix)
		f.waitStreamCurrent(t, usage)
		admins := f.edgeAdmins()
		errsBefore := metricTotal("tollgate_meter_publish_errors_total", admins...)
		l := startSteadyLoad(tl, f.edges, rate, slug, "/r/x")
		time.Sleep(2 * time.Second)
		li := f.leader(t, usage)
		leader := f.nats.Name(li)
		f.nats.Kill(li)
		killed := time.Now()
		nl := f.leader(t, usage)
		elected := time.Since(killed)
		time.Sleep(5 * time.Second)
		f.nats.Start(li)
		time.Sleep(2 * time.Second)
		l.finish()
		got, d := f.wantBilled(t, slug, tl, 0)
		req, bill := tl.counts()
		t.Logf("FIGURES NATS node kill: usage leader %s killed, %s elected within %s; served %d (billable %d), billed %+v, 5xx %d, "+
			"billed = served %s after the load; the edges' failed publishes meanwhile %v; %s",
			leader, f.nats.Name(nl), elected.Round(time.Millisecond), req, bill, got, l.serverErrors(), d.Round(10*time.Millisecond),
			metricTotal("tollgate_meter_publish_errors_total", admins...)-errsBefore, l)
		if n := l.serverErrors() + l.count("transport"); n > 0 {
			t.Errorf("%d answers were 5xx or failed while a NATS node was down: %s", n, l)
		}
		f.waitStreamCurrent(t, usage)
	})

	t.Run("NATSClusterDown", func(t *testing.T) {
		// Every NATS node killed under metered traffic, a route created meanwhile, then the
		// cluster started again: the edges serve throughout, the route reaches every edge
		// and billing folds everything served once the cluster is back. The figures are the
		// README's catch-up on a three-node cluster.
		const slug = "flt-natsdown"
		tl := &meterTally{}
		f.tenant(t, slug, up.URL, tl)
		l := startSteadyLoad(tl, f.edges, rate, slug, "/r/x")
		time.Sleep(2 * time.Second)
		for i := range 3 {
			f.nats.Kill(i)
		}
		f.apiC.createRoute(slug, routeSpec("late", "/late", up.URL, tenants.AuthNone))
		time.Sleep(3 * time.Second)
		restarted := time.Now()
		f.nats.StartAll()
		healthy := time.Since(restarted)
		var served []string
		for _, e := range f.edges {
			eventually(t, outageDeadline, e.name+" serves the route made while NATS was down", func() error {
				r, err := e.client.do("GET", slug, "/late/x")
				if err != nil {
					return err
				}
				tl.add(r) // the tenant's too: billed like the load
				if r.Status != 200 {
					return fmt.Errorf("%s", r)
				}
				return nil
			})
			served = append(served, e.name+" "+time.Since(restarted).Round(10*time.Millisecond).String())
		}
		caughtUp := time.Since(restarted)
		l.finish()
		got, d := f.wantBilled(t, slug, tl, 0)
		req, bill := tl.counts()
		t.Logf("FIGURES NATS cluster down 3 s: the 3 nodes healthy %s after their start; the route made meanwhile served by every edge %s after it (%s); "+
			"served %d (billable %d), billed %+v, billed = served %s after the load; 5xx %d; %s",
			healthy.Round(10*time.Millisecond), caughtUp.Round(10*time.Millisecond), strings.Join(served, ", "),
			req, bill, got, d.Round(10*time.Millisecond), l.serverErrors(), l)
		if n := l.serverErrors() + l.count("transport"); n > 0 {
			t.Errorf("%d answers were 5xx or failed while NATS was down: %s", n, l)
		}
		f.waitStreamCurrent(t, usage.Stream(f.prefix))
		f.waitStreamCurrent(t, f.configStream())
	})

	t.Run("ConfigLeaderKilled", func(t *testing.T) {
		// kill -9 of the config stream's leader during 2,000 route changes through the api:
		// every edge ends with every route.
		const (
			tenantsN = 10 // the routes spread over tenants, as a fleet's would
			routes   = 2000
		)
		stream := f.configStream()
		f.waitStreamCurrent(t, stream)
		slug := func(i int) string { return fmt.Sprintf("flt-cfg-%d", i%tenantsN) }
		for i := range tenantsN {
			f.apiC.createTenant(slug(i))
		}
		var (
			created atomic.Int64
			retried atomic.Int64 // 503 not_ready answers retried, as a client would
			errs    []string
			mu      sync.Mutex
			wg      sync.WaitGroup
			jobs    = make(chan int)
		)
		for range 8 {
			wg.Go(func() {
				for n := range jobs {
					path := "/v1/tenants/" + slug(n) + "/routes"
					spec := routeSpec(fmt.Sprintf("c%d", n), fmt.Sprintf("/c%d", n), up.URL, tenants.AuthNone)
					r, err := f.apiC.try("POST", path, spec)
					// 503 not_ready is the api's "retry after Retry-After": the write did not
					// finish within TOLLGATE_DB_TIMEOUT (2 s here) on a machine busy with the
					// re-election, and a client retries it. A 409 on the retry means the first
					// attempt committed after all: route c<n> at /c<n> is this job's alone.
					for try := 0; try < 3 && err == nil && r.Status == 503 && strings.Contains(string(r.Raw), `"`+tenants.ENotReady+`"`); try++ {
						retried.Add(1)
						secs, _ := strconv.Atoi(r.Header.Get("Retry-After"))
						time.Sleep(time.Duration(max(secs, 1)) * time.Second)
						if r, err = f.apiC.try("POST", path, spec); err == nil && r.Status == 409 {
							r.Status = 201
						}
					}
					if err != nil || r.Status != 201 {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("route %d: %v %s", n, err, r))
						mu.Unlock()
						continue
					}
					created.Add(1)
				}
			})
		}
		started := time.Now()
		go func() {
			for n := range routes {
				jobs <- n
			}
			close(jobs)
		}()
		eventually(t, 120*time.Second, "a quarter of the routes created", func() error {
			if c := created.Load(); c < routes/4 {
				return fmt.Errorf("%d created", c)
			}
			return nil
		})
		li := f.leader(t, stream)
		leader := f.nats.Name(li)
		f.nats.Kill(li)
		killedAt := created.Load()
		wg.Wait()
		allCreated := time.Now()
		if len(errs) > 0 {
			t.Fatalf("%d route changes failed, e.g. %s", len(errs), errs[0])
		}
		f.nats.Start(li)

		// Every edge serves every route: probe each until none is missing.
		type probe struct{ edge, route int }
		var missing []probe
		for e := range f.edges {
			for n := range routes {
				missing = append(missing, probe{e, n})
			}
		}
		var last string
		eventually(t, 120*time.Second, "every edge serves all 2,000 routes", func() error {
			var still []probe
			var smu sync.Mutex
			work := make(chan probe)
			var pw sync.WaitGroup
			for range 16 {
				pw.Go(func() {
					for p := range work {
						r, err := f.edges[p.edge].client.do("GET", slug(p.route), fmt.Sprintf("/c%d/x", p.route))
						if err != nil || r.Status != 200 {
							smu.Lock()
							still = append(still, p)
							if err != nil {
								last = err.Error()
							} else {
								last = r.String()
							}
							smu.Unlock()
						}
					}
				})
			}
			for _, p := range missing {
				work <- p
			}
			close(work)
			pw.Wait()
			missing = still
			if len(missing) > 0 {
				per := make([]int, len(f.edges))
				for _, p := range missing {
					per[p.edge]++
				}
				time.Sleep(200 * time.Millisecond)
				return fmt.Errorf("routes missing per edge %v (last: %s)", per, last)
			}
			return nil
		})
		t.Logf("FIGURES config leader kill: %d route changes in %s (%d answers 503 not_ready, retried), leader %s killed after %d; "+
			"every edge served all %d routes %s after the last change",
			routes, allCreated.Sub(started).Round(time.Millisecond), retried.Load(), leader, killedAt, routes,
			time.Since(allCreated).Round(10*time.Millisecond))
		f.waitStreamCurrent(t, stream)
	})

	t.Run("RedisMasterKilled", func(t *testing.T) {
		// The Redis master of a tenant's slot killed under an exact limit the load exceeds:
		// no 5xx, the fleet admits within the bound of its modes, and every edge is back
		// on Redis after the failover.
		const (
			slug  = "flt-redis"
			limit = 50 // requests/s, exact
			burst = 10
			secs  = 10
		)
		f.apiC.createTenant(slug)
		f.apiC.createRoute(slug, routeSpec("lim", "/lim", up.URL, tenants.AuthNone,
			"rate_limit", map[string]any{"rps": limit, "burst": burst, "mode": "exact"}))
		es := f.limitEdges()
		waitCluster(t, es...)
		for _, e := range es {
			eventually(t, 30*time.Second, e.name+" serves /lim", func() error {
				r, err := e.client.do("GET", slug, "/lim")
				if err != nil {
					return err
				}
				if r.Status != 200 && r.Status != 429 {
					return fmt.Errorf("%s", r)
				}
				return nil
			})
		}
		time.Sleep(time.Second) // the bucket refills
		victim := tenantMaster(t, f.redis.ClusterURL(), slug)
		var (
			states    = newLimiterTimeline(es)
			stopWatch = make(chan struct{})
			watchDone = make(chan struct{})
			killedAt  = make(chan time.Time, 1)
			killed    time.Time
		)
		go func() {
			defer close(watchDone)
			for {
				select {
				case <-stopWatch:
					return
				case <-time.After(20 * time.Millisecond):
				}
				states.look()
			}
		}()
		kill := time.AfterFunc(2*time.Second, func() { f.redis.Kill(victim); killedAt <- time.Now() })
		defer kill.Stop()
		loadStart := time.Now()
		shots := pacedLoad(t, es, 3*limit, secs*time.Second, slug, "/lim")
		waitCluster(t, es...)
		states.look()
		close(stopWatch)
		<-watchDone
		tl := count(shots, len(es), 0, secs*time.Second)
		select {
		case killed = <-killedAt:
		default:
			t.Fatalf("the master was not killed during the load")
		}
		degradedAt, backAt, spread := states.episode(killed)
		k := killed.Sub(loadStart)
		t.Logf("before the kill: %s", count(shots, len(es), 0, k))
		t.Logf("until every edge was back on Redis: %s", count(shots, len(es), k, k+backAt))
		t.Logf("after: %s", count(shots, len(es), k+backAt, secs*time.Second))
		// The README's bound is r·w + b over any window in either mode, the local shares
		// (r/E, burst ⌈b/E⌉ at each of E edges) rounding up by at most one request an edge.
		// The run has three spans — Redis, local shares, Redis again (the promoted replica
		// finds the bucket full) — and while the edges are in different modes (spread) those
		// already or still local, E−1 at most, admit their shares beside the whole rate that
		// Redis grants the others.
		//
		// The window is the span the requests were actually sent over, which a busy machine
		// stretches beyond the schedule.
		first, last := shots[0].sent, shots[0].sent
		for _, s := range shots {
			first, last = min(first, s.sent), max(last, s.sent)
		}
		w := max(last-first, secs*time.Second)
		e := len(es)
		bound := int(math.Ceil(limit*w.Seconds()+float64(limit*(e-1))/float64(e)*spread.Seconds())) + 3*burst + e
		t.Logf("FIGURES Redis master kill: master %s of the tenant's slot killed at 2 s of %d s at %d/s (limit %d/s, burst %d): %s; "+
			"admitted %d in %s, bound %d; a perfect limiter %d; first edge degraded %s after the kill, every edge back on Redis %s after it (the edges' changes %s apart); %s",
			victim, secs, 3*limit, limit, burst, tl, tl.ok, w.Round(time.Millisecond), bound, gcraAdmits(shots, limit, burst),
			degradedAt.Round(10*time.Millisecond), backAt.Round(10*time.Millisecond), spread.Round(time.Millisecond), states)
		if tl.serverErr+tl.transport+tl.other > 0 {
			t.Errorf("requests failed while the master was down: %v", tl.examples)
		}
		if tl.ok > bound {
			t.Errorf("the fleet admitted %d in %s, more than the bound %d", tl.ok, w.Round(time.Millisecond), bound)
		}
		if tl.ok < limit*secs/2 {
			t.Errorf("the fleet admitted %d in %d s of a %d/s limit: refusing what it should admit", tl.ok, secs, limit)
		}
		if degradedAt < 0 {
			t.Errorf("no edge reported degraded while the master was down: %s", states)
		}
		for _, e := range es {
			m := scrape(t, e.admin)
			if !strings.Contains(m, "tollgate_limit_degraded 0") || strings.Contains(m, "tollgate_limit_mode_changes_total 0") {
				t.Errorf("%s /metrics does not show the episode:\n%s", e.name, grepLines(m, "tollgate_limit_"))
			}
		}
	})

	t.Run("PostgresDown", func(t *testing.T) {
		// Postgres stopped, then frozen: the edges keep serving, the api answers 503
		// not_ready, and billing folds exactly what was served once Postgres is back.
		const slug = "flt-pg"
		tl := &meterTally{}
		f.tenant(t, slug, up.URL, tl)
		failedBefore := metricTotal(`tollgate_billing_batches_total{result="failed"}`, f.billingAdmin)
		foldedBefore := metricTotal(`tollgate_billing_batches_total{result="folded"}`, f.billingAdmin)
		l := startSteadyLoad(tl, f.edges, rate, slug, "/r/x")
		time.Sleep(2 * time.Second)
		var (
			amu     sync.Mutex
			answers = map[string]int{} // what the api answered while Postgres was away
			slowest time.Duration      // its slowest answer meanwhile
		)
		notReady := func() error {
			t0 := time.Now()
			r, err := f.apiC.try("GET", "/v1/tenants/"+slug, nil)
			took := time.Since(t0)
			key := "transport error"
			if err == nil {
				code := ""
				if e, ok := r.Body["error"].(map[string]any); ok {
					code, _ = e["code"].(string)
				}
				key = fmt.Sprint(r.Status, " ", code)
			}
			amu.Lock()
			answers[key]++
			slowest = max(slowest, took)
			amu.Unlock()
			if err != nil {
				return err
			}
			if r.Status != 503 || !strings.Contains(string(r.Raw), `"`+tenants.ENotReady+`"`) || r.Header.Get("Retry-After") == "" {
				return fmt.Errorf("api: %s (Retry-After %q), want 503 not_ready with Retry-After", r, r.Header.Get("Retry-After"))
			}
			return nil
		}
		ready := func() error {
			r, err := f.apiC.try("GET", "/v1/tenants/"+slug, nil)
			if err != nil {
				return err
			}
			if r.Status != 200 {
				return fmt.Errorf("api: %s", r)
			}
			return nil
		}
		defer f.pg.Thaw()

		f.pg.Stop()
		stopped := time.Now()
		_, errStopped := poll(20*time.Second, notReady)
		// Long enough for several of billing's folds to meet it (a batch an edge a second).
		const outage = 5 * time.Second
		time.Sleep(time.Until(stopped.Add(outage)))
		f.pg.Start()
		upAgain := eventually(t, 60*time.Second, "the api answers again after Postgres started", ready)
		stoppedFor := time.Since(stopped)

		f.pg.Freeze()
		frozen := time.Now()
		_, errFrozen := poll(30*time.Second, notReady)
		time.Sleep(time.Until(frozen.Add(outage)))
		f.pg.Thaw()
		thawed := eventually(t, 60*time.Second, "the api answers again after Postgres thawed", ready)
		frozenFor := time.Since(frozen)
		time.Sleep(2 * time.Second)
		l.finish()

		got, d := f.wantBilled(t, slug, tl, 0)
		req, bill := tl.counts()
		amu.Lock()
		api := fmt.Sprintf("%v (the slowest in %s; TOLLGATE_DB_TIMEOUT %s)", answers, slowest.Round(time.Millisecond), dbTimeout)
		amu.Unlock()
		t.Logf("FIGURES Postgres down: stopped %s, frozen %s; api answered %s; api 200 again %s after start, %s after thaw; "+
			"edges: served %d (billable %d), billed %+v, 5xx %d, billed = served %s after the load; billing folded %v batches, %v folds failed and were retried; %s",
			stoppedFor.Round(time.Millisecond), frozenFor.Round(time.Millisecond), api, upAgain.Round(10*time.Millisecond),
			thawed.Round(10*time.Millisecond), req, bill, got, l.serverErrors(), d.Round(10*time.Millisecond),
			metricTotal(`tollgate_billing_batches_total{result="folded"}`, f.billingAdmin)-foldedBefore,
			metricTotal(`tollgate_billing_batches_total{result="failed"}`, f.billingAdmin)-failedBefore, l)
		if n := l.serverErrors() + l.count("transport"); n > 0 {
			t.Errorf("%d edge answers were 5xx or failed while Postgres was away: %s", n, l)
		}
		if errStopped != nil {
			t.Errorf("Postgres stopped: %v", errStopped)
		}
		if errFrozen != nil {
			t.Errorf("Postgres frozen: %v", errFrozen)
		}
	})
}

// tenant creates slug (plan unlimited) with a route /r to upstream and waits until every
// edge serves it, tallying the answers on the way (they are metered like any).
func (f *faultFleet) tenant(t *testing.T, slug, upstream string, tl *meterTally) {
	t.Helper()
	f.apiC.createTenant(slug)
	f.apiC.createRoute(slug, routeSpec("r", "/r", upstream, tenants.AuthNone))
	for _, e := range f.edges {
		eventually(t, 30*time.Second, e.name+" serves "+slug, func() error {
			r, err := e.client.do("GET", slug, "/r/x")
			if err != nil {
				return err
			}
			tl.add(r)
			if r.Status != 200 {
				return fmt.Errorf("%s", r)
			}
			return nil
		})
	}
}
