package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"tollgate/tenants"
	tgnats "tollgate/tenants/nats"
)

// entries returns n changes with values of about 500 bytes, keyed like routes of 100
// tenants.
func entries(n int, revBase int64) []tenants.Change {
	pad := strings.Repeat("x", 440)
	out := make([]tenants.Change, n)
	for i := range out {
		rev := revBase + int64(i) + 1
		out[i] = tenants.Change{
			Rev:   rev,
			Key:   key(fmt.Sprintf("tenant%03d", i%100), i),
			Value: fmt.Appendf(nil, `{"rev":%d,"route":{"id":"%d","pad":%q}}`, rev, i, pad),
		}
	}
	return out
}

// cpuTime is the CPU time the process (client and in-process server alike) has used: on
// a machine shared with other work it varies far less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublish publishes 5,000 changes as the relay does, in batches of 1,000.
// One op is the 5,000.
func BenchmarkPublish(b *testing.B) {
	e := newEnv(b)
	p := e.publisher(b)
	ctx := context.Background()
	var rev int64
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		changes := entries(5000, rev)
		rev += 5000
		for i := 0; i < len(changes); i += 1000 {
			if err := p.Publish(ctx, changes[i:i+1000]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/5000, "µs/change")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N)/5000, "cpu-µs/change")
}

// BenchmarkWatcherBoot measures an edge's boot: a new Watcher loading a bucket of 50,000
// entries of about 500 bytes until it is ready. One op is one whole load.
func BenchmarkWatcherBoot(b *testing.B) {
	const n = 50_000
	e := newEnv(b)
	p := e.publisher(b)
	ctx := context.Background()
	all := entries(n, 0)
	for i := 0; i < n; i += 1000 {
		if err := p.Publish(ctx, all[i:i+1000]); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		got := 0
		w, err := tgnats.Watch(ctx, e.js, e.bucket, tgnats.WatchConfig{OnUpdate: func(tgnats.Update) { got++ }})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-w.Ready():
		case <-time.After(time.Minute):
			b.Fatal("not ready after a minute")
		}
		w.Stop()
		if got != n {
			b.Fatalf("loaded %d entries, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/boot")
	b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/boot")
}

// BenchmarkBucketBytesPerRoute reports what one route costs a cell's bucket: the entry's
// JSON and the bytes the KV stream stores for it (subject, headers, message overhead), for
// a route of one target, two methods, key auth and a rate limit. It sizes a cell: the
// bucket holds one such message per object of the cell's tenants.
func BenchmarkBucketBytesPerRoute(b *testing.B) {
	const n = 10_000
	const tenantID = "0190a8f2-0000-7000-8000-000000000001"
	ctx := context.Background()
	for b.Loop() {
		e := newEnv(b)
		p := e.publisher(b)
		changes := make([]tenants.Change, n)
		var valueBytes int
		for i := range changes {
			id := fmt.Sprintf("0190a8f2-0000-7000-8000-%012d", i)
			r := &tenants.Route{ID: id, TenantID: tenantID, Name: fmt.Sprintf("route-%d", i),
				Paths: []string{fmt.Sprintf("/api/v1/items-%d", i)}, Methods: []string{"GET", "POST"},
				Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://backend.internal:8080", Weight: 100}}},
				Auth:     "key", RateLimit: &tenants.RateLimit{RPS: 100, Burst: 200}, Version: 1,
				CreatedAt: time.Now(), UpdatedAt: time.Now()}
			v, err := json.Marshal(&tenants.Entry{Rev: int64(i + 1), Route: r})
			if err != nil {
				b.Fatal(err)
			}
			valueBytes += len(v)
			changes[i] = tenants.Change{Rev: int64(i + 1), Key: tenants.ObjectKey(tenantID, tenants.KindRoute, id), Value: v}
		}
		for i := 0; i < n; i += 1000 {
			if err := p.Publish(ctx, changes[i:i+1000]); err != nil {
				b.Fatal(err)
			}
		}
		st, err := e.kv.Status(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(valueBytes)/n, "entry-B/route")
		b.ReportMetric(float64(st.Bytes())/n, "stored-B/route")
	}
}
