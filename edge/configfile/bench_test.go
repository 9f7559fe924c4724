package configfile

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"tollgate/tenants"
)

// BenchmarkWrite is one write of the config file of a bucket of
// 50,000 routes: what a change costs the edge once the file is due.
//
//	go test -run '^$' -bench Write -benchmem ./edge/configfile/
func BenchmarkWrite(b *testing.B) {
	s := &Contents{Bucket: "tollgate_config", AsOf: time.Now()}
	for i := range 50_000 {
		id := fmt.Sprint("route-", i)
		r := &tenants.Route{ID: id, TenantID: "t-acme", Name: id, Paths: []string{fmt.Sprintf("/api/v1/r%d", i)}, Methods: []string{"GET"},
			Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "http://127.0.0.1:9000", Weight: 1}}}}
		v, err := json.Marshal(&tenants.Entry{Rev: int64(i + 1), Route: r})
		if err != nil {
			b.Fatal(err)
		}
		s.Entries = append(s.Entries, Entry{Key: tenants.ObjectKey("t-acme", tenants.KindRoute, r.ID), Revision: uint64(i + 1), Value: v})
	}
	dir := b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		if err := writeFile(dir, s.body()); err != nil {
			b.Fatal(err)
		}
	}
}
