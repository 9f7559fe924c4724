package postgres_test

import (
	"golang.org/x/sync/errgroup"

	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

// The write benchmarks measure the store's write rates against the real database, the
// way the api drives it: many clients at once. Each reports its rate as a metric
// (routes/s, tenants/s); the figures in docs/performance.md come from them:
//
//	go test -run '^$' -bench 'WritesCreateRoute|WritesApplyConfig$|WritesCreateTenant' -benchtime 10000x ./tenants/postgres/
//	go test -run '^$' -bench 'WritesApplyBigConfig' -benchtime 1x ./tenants/postgres/

const benchClients = 16

func benchDB(b *testing.B) *postgres.DB {
	b.Helper()
	db, _ := pgtest.Open(b, postgres.WithUpstreamAddressRule(&tenants.UpstreamAddressRule{
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}))
	return db
}

// lags records the relay's publish lag of every change: from its commit's start to its
// publish being acknowledged.
type lags struct {
	mu   sync.Mutex
	all  []time.Duration
	last time.Time
}

func (l *lags) Published(d time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d)
	l.last = time.Now()
	l.mu.Unlock()
}

func (l *lags) PublishFailed() {}

// benchRelay runs a relay of db's outbox to a fresh bucket of the test NATS server, as the
// api does, and returns what it observes.
func benchRelay(b *testing.B, db *postgres.DB) *lags {
	b.Helper()
	ctx := context.Background()
	nc, err := natsconn.Connect(testenv.NATS(b).ClientURL(), b.Name())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	bucket := testenv.Name("tgcfg_")
	if _, err := tgnats.EnsureBucket(ctx, js, bucket, 1); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { js.DeleteKeyValue(context.Background(), bucket) })
	pub, err := tgnats.NewPublisher(nc, bucket, 0)
	if err != nil {
		b.Fatal(err)
	}
	r := postgres.NewRelay(db, pub, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l := &lags{}
	r.SetObserver(l)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(rctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return l
}

// report waits until the relay has published n changes and reports its lag: the 99th
// percentile and the most, and how long after the writes ended the last went out.
func (l *lags) report(b *testing.B, n int, writesEnded time.Time) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l.mu.Lock()
		got := len(l.all)
		l.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the relay published %d of %d changes", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.Sort(l.all)
	b.ReportMetric(float64(l.all[len(l.all)*99/100].Milliseconds()), "relay-p99-lag-ms")
	b.ReportMetric(float64(l.all[len(l.all)-1].Milliseconds()), "relay-max-lag-ms")
	b.ReportMetric(float64(max(l.last.Sub(writesEnded), 0).Milliseconds()), "relay-drain-ms")
}

func benchTenant(b *testing.B, db *postgres.DB, slug string) *tenants.Tenant {
	b.Helper()
	tn := &tenants.Tenant{Slug: slug, PlatformPlan: tenants.PlatformUnlimited}
	if err := db.CreateTenant(context.Background(), tn); err != nil {
		b.Fatalf("create tenant %s: %v", slug, err)
	}
	return tn
}

// fanOut runs n calls of fn over clients goroutines and returns how long they took.
func fanOut(b *testing.B, n, clients int, fn func(i int) error) time.Duration {
	b.Helper()
	// The first error stops handing out calls; those under way finish.
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(clients)
	start := time.Now()
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(i) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkWritesCreateRoute creates b.N routes in one tenant from 16 clients, and
// reports the rate of the first and of the last tenth: a rate that falls as the tenant
// grows shows in the second.
func BenchmarkWritesCreateRoute(b *testing.B) {
	db := benchDB(b)
	tn := benchTenant(b, db, "bench-routes")
	relay := benchRelay(b, db)
	ctx := context.Background()
	tenth := max(b.N/10, 1)
	var firstDone, lastStart atomic.Int64
	var mu sync.Mutex
	b.ResetTimer()
	start := time.Now()
	d := fanOut(b, b.N, benchClients, func(i int) error {
		if i == b.N-tenth {
			lastStart.Store(int64(time.Since(start)))
		}
		r := newRoute(tn.ID, fmt.Sprintf("r%06d", i), fmt.Sprintf("/r%06d", i))
		if err := db.CreateRoute(ctx, r); err != nil {
			return err
		}
		if i == tenth-1 {
			mu.Lock()
			firstDone.Store(int64(time.Since(start)))
			mu.Unlock()
		}
		return nil
	})
	b.StopTimer()
	relay.report(b, b.N+1, time.Now()) // and the tenant
	b.ReportMetric(float64(b.N)/d.Seconds(), "routes/s")
	if f := time.Duration(firstDone.Load()); f > 0 {
		b.ReportMetric(float64(tenth)/f.Seconds(), "first-tenth-routes/s")
	}
	if l := time.Duration(lastStart.Load()); l > 0 && d > l {
		b.ReportMetric(float64(tenth)/(d-l).Seconds(), "last-tenth-routes/s")
	}
}

// BenchmarkWritesApplyConfig applies a document of 10 routes to each of b.N tenants, from
// 16 clients.
func BenchmarkWritesApplyConfig(b *testing.B) {
	db := benchDB(b)
	relay := benchRelay(b, db)
	ctx := context.Background()
	ids := make([]string, b.N)
	fanOut(b, b.N, benchClients, func(i int) error {
		tn := &tenants.Tenant{Slug: fmt.Sprintf("bench-doc-%06d", i), PlatformPlan: tenants.PlatformUnlimited}
		ids[i] = tn.Slug
		if err := db.CreateTenant(ctx, tn); err != nil {
			return err
		}
		ids[i] = tn.ID
		return nil
	})
	b.ResetTimer()
	d := fanOut(b, b.N, benchClients, func(i int) error {
		doc := &tenants.ConfigDocument{Version: tenants.ConfigDocumentVersion, Tenant: fmt.Sprintf("bench-doc-%06d", i)}
		for j := range 10 {
			doc.Routes = append(doc.Routes, newRoute("", fmt.Sprintf("r%02d", j), fmt.Sprintf("/r%02d", j)))
		}
		_, err := db.ApplyConfig(ctx, ids[i], doc, tenants.ApplyOptions{})
		return err
	})
	b.StopTimer()
	relay.report(b, 11*b.N, time.Now()) // the tenants' entries and the routes'
	b.ReportMetric(float64(10*b.N)/d.Seconds(), "routes/s")
}

// BenchmarkWritesApplyBigConfig applies one document of 50,000 routes to an empty tenant
// b.N times (each to a new tenant).
func BenchmarkWritesApplyBigConfig(b *testing.B) {
	db := benchDB(b)
	ctx := context.Background()
	const n = 50_000
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		tn := benchTenant(b, db, fmt.Sprintf("bench-big-%d", i))
		doc := &tenants.ConfigDocument{Version: tenants.ConfigDocumentVersion, Tenant: tn.Slug}
		for j := range n {
			doc.Routes = append(doc.Routes, newRoute("", fmt.Sprintf("r%06d", j), fmt.Sprintf("/r%06d/{id}", j)))
		}
		b.StartTimer()
		start := time.Now()
		if _, err := db.ApplyConfig(ctx, tn.ID, doc, tenants.ApplyOptions{}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/apply")
}

// BenchmarkWritesCreateTenant creates b.N tenants from 16 clients.
func BenchmarkWritesCreateTenant(b *testing.B) {
	db := benchDB(b)
	ctx := context.Background()
	b.ResetTimer()
	d := fanOut(b, b.N, benchClients, func(i int) error {
		return db.CreateTenant(ctx, &tenants.Tenant{Slug: fmt.Sprintf("bench-t-%07d", i), PlatformPlan: tenants.PlatformFree})
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/d.Seconds(), "tenants/s")
}
