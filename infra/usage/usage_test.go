package usage_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"tollgate/infra/usage"
)

func TestToken(t *testing.T) {
	for in, want := range map[string]string{"edge-1": "edge-1", "web.eu-1": "web_eu-1", "": "_", "a b*>": "a_b__"} {
		if got := usage.Token(in); got != want {
			t.Errorf("Token(%q) = %q, want %q", in, got, want)
		}
	}
	k := usage.TotalsKey(&usage.EdgeTotal{EdgeID: "web.eu", BootID: "b1", TenantID: "t-1", Hour: time.Date(2024, 3, 9, 7, 0, 0, 0, time.UTC)})
	if k != "202403.t-1.web_eu.b1.0907" {
		t.Errorf("TotalsKey = %s", k)
	}
}

// FuzzDecodeBatch: whatever arrives on the usage stream, DecodeBatch either rejects it
// or returns a batch Fold can take.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"id":"e.b.1","edge_id":"e","boot_id":"b","seq":1,"records":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:00:00Z","route_id":"r","class":2,"requests":3,"billable":3}]}`))
	f.Add([]byte(`{"id":"e.b.1","edge_id":"e","records":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:30:00Z","class":2,"requests":1}]}`))
	f.Add([]byte(`{"id":"x","edge_id":"x","records":[{"tenant_id":"{0190a000-0000-7000-8000-00000000000a}","hour":"2024-01-01T05:00:00+01:00","class":9,"requests":-1,"billable":2}]}`))
	f.Add([]byte(`{"id":"e.b.2","edge_id":"e","records":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:00:00Z","class":2,"requests":1,"billable":1,"function_us":1500}]}`))
	f.Add([]byte(`{"id":"e.b.3","edge_id":"e","records":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:00:00Z","class":5,"requests":1,"function_us":-1}]}`))
	f.Add([]byte(`null`))
	for _, l := range latencySeeds {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := usage.DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, usage.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if b.ID == "" || b.EdgeID == "" {
			t.Fatal("batch without ids")
		}
		for _, r := range b.Records {
			if len(r.TenantID) != 36 || !r.Hour.Equal(r.Hour.Truncate(time.Hour)) || r.Hour.Location() != time.UTC ||
				r.Class < 0 || r.Class > 5 || r.Requests < 0 || r.Billable < 0 || r.Billable > r.Requests || r.BytesIn < 0 || r.BytesOut < 0 || r.FunctionUS < 0 {
				t.Fatalf("accepted a bad record %+v", r)
			}
		}
		for _, l := range b.Latencies {
			if !l.Hour.Equal(l.Hour.Truncate(time.Hour)) || len(l.Gateway)+len(l.Upstream) == 0 {
				t.Fatalf("accepted a bad latency %+v", l)
			}
			for _, data := range [][]byte{l.Gateway, l.Upstream} {
				if len(data) == 0 {
					continue
				}
				s, err := usage.DecodeSketch(data)
				if err != nil {
					t.Fatalf("accepted a sketch that does not decode: %v", err)
				}
				usage.SketchPercentiles(s)
			}
		}
	})
}

// A batch of an edge that predates function time decodes with none; one that has it keeps
// it through a round trip; a negative one is refused.
func TestFunctionUSOnTheWire(t *testing.T) {
	old := `{"id":"e.b.1","edge_id":"e","boot_id":"b","seq":1,"records":[{"tenant_id":"0190a000-0000-7000-8000-00000000000a","hour":"2024-01-01T05:00:00Z","route_id":"r","class":2,"requests":3,"billable":3,"bytes_in":1,"bytes_out":2}]}`
	b, err := usage.DecodeBatch([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if r := b.Records[0]; r.Requests != 3 || r.FunctionUS != 0 {
		t.Fatalf("old batch decoded as %+v", r.Counts)
	}
	b.Records[0].FunctionUS = 1234
	data, err := usage.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"function_us":1234`) {
		t.Fatalf("encoded without function_us: %s", data)
	}
	back, err := usage.DecodeBatch(data)
	if err != nil || back.Records[0].FunctionUS != 1234 {
		t.Fatalf("round trip: %v, %+v", err, back)
	}
	b.Records[0].FunctionUS = 0
	if data, _ := usage.EncodeBatch(b); strings.Contains(string(data), "function_us") {
		t.Fatalf("zero function time on the wire: %s", data)
	}
	bad := strings.Replace(old, `"bytes_out":2`, `"bytes_out":2,"function_us":-5`, 1)
	if _, err := usage.DecodeBatch([]byte(bad)); !errors.Is(err, usage.ErrInvalid) {
		t.Fatalf("negative function_us: %v", err)
	}
	var c usage.Counts
	c.Add(usage.Counts{Requests: 1, FunctionUS: 7})
	c.Add(usage.Counts{Requests: 2, FunctionUS: 5})
	if c.Requests != 3 || c.FunctionUS != 12 {
		t.Fatalf("Add: %+v", c)
	}
}
