package reqlog_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"tollgate/infra/reqlog"
)

const tenant = "0190a000-0000-7000-8000-00000000000a"

func TestBatchRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 30, 0, 0, time.FixedZone("x", 3600))
	b := &reqlog.Batch{ID: reqlog.BatchID("e1", "boot", 7), EdgeID: "e1", Created: at, Entries: []reqlog.Entry{{
		Time: at, TenantID: tenant, RequestID: "r1", Method: "GET", Path: "/down", Status: 502, Code: "upstream_failed",
		GatewayUS: 100, UpstreamUS: 2000, Reason: "the upstream http://127.0.0.1:9 refused the connection"}},
		NotLogged: []reqlog.NotLogged{{TenantID: tenant, Hour: at.UTC().Truncate(time.Hour), Sampled: 5}}}
	data, err := reqlog.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := reqlog.DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "e1.boot.7" || len(got.Entries) != 1 || got.Entries[0].Reason != b.Entries[0].Reason ||
		got.Entries[0].Time.Location() != time.UTC || got.NotLogged[0].Sampled != 5 {
		t.Errorf("round trip: %+v", got)
	}
}

func TestParseFilters(t *testing.T) {
	q := reqlog.Query{}
	vals := map[string]string{"status": "5xx", "route": "down", "since": "2026-12-06", "until": "2026-12-06T12:00:00+01:00"}
	if err := reqlog.ParseFilters(func(k string) string { return vals[k] }, &q); err != nil {
		t.Fatal(err)
	}
	if q.StatusClass != 5 || q.Status != 0 || q.RouteID != "down" || !q.Until.Equal(time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)) {
		t.Errorf("parsed %+v", q)
	}
	for _, bad := range []map[string]string{{"status": "6xx"}, {"status": "99"}, {"since": "yesterday"},
		{"since": "2026-12-06", "until": "2026-12-05"}, {"route": strings.Repeat("r", 300)}, {"consumer": "a\x00b"}} {
		var fe *reqlog.FilterError
		if err := reqlog.ParseFilters(func(k string) string { return bad[k] }, &reqlog.Query{}); !errors.As(err, &fe) {
			t.Errorf("%v: %v, want a FilterError", bad, err)
		}
	}
	c := &reqlog.Cursor{Time: time.Date(2026, 12, 6, 1, 2, 3, 4, time.UTC), ID: 42}
	back, err := reqlog.DecodeCursor(c.Encode())
	if err != nil || !back.Time.Equal(c.Time) || back.ID != 42 {
		t.Errorf("cursor round trip: %+v %v", back, err)
	}
}

// FuzzDecodeBatch: whatever arrives on the stream, DecodeBatch either rejects it with
// ErrInvalid or returns a batch the store can insert.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"id":"e.b.1","edge_id":"e","created":"2026-12-06T10:00:00Z","entries":[{"time":"2026-12-06T10:00:00Z","tenant_id":"` + tenant + `","request_id":"r","method":"GET","path":"/a","status":502,"gateway_us":1,"upstream_us":2,"bytes_in":0,"bytes_out":3,"reason":"refused"}],"not_logged":[{"tenant_id":"` + tenant + `","hour":"2026-12-06T10:00:00Z","sampled":4,"dropped":0}]}`))
	f.Add([]byte(`{"id":"e.b.1","edge_id":"e","entries":[{"time":"2026-12-06T10:00:00Z","tenant_id":"` + tenant + `","status":99}]}`))
	f.Add([]byte(`{"id":"e.b.1","edge_id":"e","not_logged":[{"tenant_id":"` + tenant + `","hour":"2026-12-06T10:30:00Z","sampled":-1}]}`))
	f.Add([]byte(`{"id":"x","edge_id":"x","entries":[{"time":"0001-01-01T00:00:00Z","tenant_id":"nope","path":"\u0000"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := reqlog.DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, reqlog.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if b.ID == "" || b.EdgeID == "" {
			t.Fatal("batch without ids")
		}
		for _, e := range b.Entries {
			if len(e.TenantID) != 36 || e.Status < 100 || e.Status > 599 || e.Time.Location() != time.UTC ||
				e.GatewayUS < 0 || e.UpstreamUS < 0 || e.BytesIn < 0 || e.BytesOut < 0 ||
				len(e.Path) > reqlog.MaxPathLen || len(e.Reason) > reqlog.MaxReasonLen || strings.ContainsRune(e.Path+e.Reason+e.Method, 0) {
				t.Fatalf("accepted entry %+v", e)
			}
		}
		for _, n := range b.NotLogged {
			if len(n.TenantID) != 36 || n.Sampled < 0 || n.Dropped < 0 || !n.Hour.Equal(n.Hour.Truncate(time.Hour)) {
				t.Fatalf("accepted counts %+v", n)
			}
		}
	})
}

// FuzzParseFilters: any query string is a query or a FilterError, never a panic.
func FuzzParseFilters(f *testing.F) {
	f.Add("502", "down", "2026-12-06", "2026-12-07T00:00:00Z", "")
	f.Add("5xx", "", "", "", "MTc2NTAwMDAwMDAwMDAwMDAwMC40Mg")
	f.Add("abc", "\x00", "yesterday", "2026-13-40", "%%%")
	f.Fuzz(func(t *testing.T, status, route, since, until, cursor string) {
		vals := map[string]string{"status": status, "route": route, "since": since, "until": until}
		var q reqlog.Query
		err := reqlog.ParseFilters(func(k string) string { return vals[k] }, &q)
		var fe *reqlog.FilterError
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("error %v is not a FilterError", err)
		}
		if err == nil && !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
			t.Fatalf("accepted since %v ≥ until %v", q.Since, q.Until)
		}
		c, err := reqlog.DecodeCursor(cursor)
		if err == nil && c != nil && c.ID < 0 {
			t.Fatalf("cursor with a negative id: %+v", c)
		}
	})
}
