package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"tollgate/billing/billingtest"
	"tollgate/infra/reqlog"
)

// BenchmarkStoreLogBatch stores batches of 1,000 entries shaped like a failing route's
// (a reason, a request id, a path) and reports the insert rate and the bytes a row takes
// on disk with its indexes:
//
//	go test -run XXX -bench StoreLogBatch -benchtime 20x ./billing/postgres/
func BenchmarkStoreLogBatch(b *testing.B) {
	db := billingtest.Open(b)
	tn := db.Tenant(b, "acme", "pro")
	now := time.Now().UTC()
	const per = 1000
	rows := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		es := make([]reqlog.Entry, per)
		for j := range es {
			es[j] = reqlog.Entry{Time: now.Add(-time.Duration(j) * time.Millisecond), TenantID: tn.ID,
				RequestID: fmt.Sprintf("0193a1b2c3d4e5f6%016x", i*per+j), Method: "GET", Path: "/v1/orders/12345",
				RouteID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", RouteName: "orders", ConsumerID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c",
				Status: 502, Code: "upstream_failed", GatewayUS: 85, UpstreamUS: 1200, BytesOut: 150,
				Reason: "the upstream http://10.0.3.17:8080 refused the connection"}
		}
		if _, err := db.Store.StoreLogBatch(ctx, &reqlog.Batch{ID: fmt.Sprintf("bench.boot.%d", i), EdgeID: "bench", Created: now, Entries: es}); err != nil {
			b.Fatal(err)
		}
		rows += per
	}
	b.StopTimer()
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	var size int64
	if err := db.Tenants.Pool().QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'request_log'`).Scan(&size); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(size)/float64(rows), "bytes/row")
}
