package nats_test

import (
	"context"
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
