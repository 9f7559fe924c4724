package postgres_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

// The write benchmarks measure the store's write rates against the real database, the
// way the api drives it: many clients at once. Each reports its rate as a metric
// (routes/s, tenants/s); the figures in docs/performance.md come from them:
//
//	go test -run '^$' -bench 'Writes' -benchtime 10000x ./tenants/postgres/

const benchClients = 16

func benchDB(b *testing.B) *postgres.DB {
	b.Helper()
	db, _ := pgtest.Open(b, postgres.WithUpstreamAddressRule(&tenants.UpstreamAddressRule{
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}))
	return db
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
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Value
	)
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed.Load() != nil {
					return
				}
				if err := fn(i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
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
