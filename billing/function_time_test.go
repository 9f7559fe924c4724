package billing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing"
	billingnats "tollgate/billing/nats"
	"tollgate/edge/meter"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// Function time from an edge's record to the finance export: the meter records it with
// the request, the batch carries it, a batch delivered twice (a lost ack, then a copy
// past JetStream's duplicate window) folds it once, and the usage report, the per-edge
// rollup and the export carry it, priced as its own unit.
func TestFunctionTimeFromEdgeToExport(t *testing.T) {
	ns := testenv.NATS(t)
	s := newStack(t, ns.ClientURL())
	tn := s.db.Tenant(t, "acme", "pro")
	now := time.Now().UTC()
	p := billing.PeriodOf(now)
	// 2 minor units per ms of function time over 1 ms included; requests within the
	// allowance.
	if err := s.db.Store.SetPrice(context.Background(), &billing.Price{Plan: "pro", EffectiveFrom: p.String(), Currency: "usd",
		IncludedRequests: 1_000_000, UnitPrice: 20, UnitRequests: 1000,
		IncludedFunctionMS: 1, FunctionUnitPrice: 2, FunctionUnitMS: 1}); err != nil {
		t.Fatal(err)
	}
	pub, err := usage.NewPublisher(s.nc, s.prefix, "edge-fn")
	if err != nil {
		t.Fatal(err)
	}
	sink := &lossyAck{Publisher: pub}
	m, err := meter.New(meter.Config{EdgeID: "edge-fn", Sink: sink, SpoolDir: t.TempDir(), FlushInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	r := m.Route(tn.ID, "r1")
	c := meter.NewConsumer(tn.ID, "c1")
	r.RecordFunction(c, 200, true, 0, 0, 1500*time.Nanosecond, now) // 2 µs
	r.RecordFunction(c, 200, true, 0, 0, 2*time.Millisecond, now)   // 2000 µs
	r.RecordFunction(c, 500, false, 0, 0, 10*time.Microsecond, now) // a failed function: 10 µs, not a billable request
	r.Record(c, 200, true, 0, 0, now)                               // no function
	const wantUS = 2 + 2000 + 10

	sink.lose.Store(true)
	m.Flush(context.Background()) // stored, but the meter thinks not: spooled
	m.Flush(context.Background()) // replayed under the same id: dropped by JetStream
	if m.Spooled() != 0 {
		t.Fatalf("spooled %d after replay", m.Spooled())
	}
	stream, err := s.js.Stream(context.Background(), usage.Stream(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw.Data, []byte(`"function_us":`)) {
		t.Fatalf("batch without function_us: %s", raw.Data)
	}
	// A copy after the window: a new message id, the same batch id.
	if _, err := s.js.PublishMsg(context.Background(), &nats.Msg{Subject: raw.Subject, Data: raw.Data},
		jetstream.WithMsgID(raw.Header.Get(jetstream.MsgIDHeader)+"-after-window")); err != nil {
		t.Fatal(err)
	}
	cons := s.consume(t, ns.ClientURL(), billingnats.UsageReaderConfig{})
	waitFor(t, 10*time.Second, "both copies handled", func() bool { st := cons.Stats(); return st.Folded+st.Duplicates == 2 })
	if st := cons.Stats(); st.Folded != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}

	sum, err := s.db.Store.Sum(context.Background())
	if err != nil || sum.Requests != 4 || sum.Billable != 3 || sum.FunctionUS != wantUS {
		t.Fatalf("rollups %+v %v, want 4 requests, 3 billable, %d µs", sum, err, wantUS)
	}
	var edgeUS int64
	for _, et := range m.Totals() {
		edgeUS += et.FunctionUS
	}
	if edgeUS != wantUS {
		t.Fatalf("the edge's totals say %d µs, want %d", edgeUS, wantUS)
	}
	byEdge, err := s.db.Store.FoldedByEdge(context.Background(), p)
	if err != nil || len(byEdge) != 1 || byEdge[0].FunctionUS != wantUS {
		t.Fatalf("folded by edge: %+v %v", byEdge, err)
	}
	hour := billing.Hour(now)
	rep, err := s.db.Store.Usage(context.Background(), billing.UsageQuery{TenantID: tn.ID, From: hour, To: hour.Add(time.Hour), ByStatus: true})
	if err != nil || rep.Total.FunctionUS != wantUS || len(rep.Items) != 2 || rep.Items[1].Status != "5xx" || rep.Items[1].FunctionUS != 10 {
		t.Fatalf("usage report: %+v %v", rep, err)
	}
	js, _ := json.Marshal(rep.Items[0])
	if !bytes.Contains(js, []byte(`"function_us":2002`)) {
		t.Fatalf("usage item JSON: %s", js)
	}

	rows, err := s.db.Store.Export(context.Background(), p)
	if err != nil || len(rows) != 1 {
		t.Fatalf("export: %+v %v", rows, err)
	}
	// 2012 µs − 1 ms included = 1012 µs at 2 per ms: ceil(2.024) = 3.
	row := rows[0]
	if row.FunctionUS != wantUS || row.FunctionIncludedMS != 1 || row.FunctionOverageUS != 1012 || row.FunctionAmount != 3 || row.Amount != 3 {
		t.Fatalf("export row: %+v", row)
	}
	var csv bytes.Buffer
	if err := billing.WriteCSV(&csv, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv.String()), "\n")
	if !strings.HasSuffix(lines[0], ",function_us,function_included_ms,function_overage_us,function_unit_price,function_unit_ms,function_amount") ||
		!strings.HasSuffix(lines[1], ",2012,1,1012,2,1,3") {
		t.Fatalf("csv:\n%s", csv.String())
	}
	var doc bytes.Buffer
	if err := billing.WriteJSON(&doc, p, rows); err != nil {
		t.Fatal(err)
	}
	var d billing.ExportDocument
	if err := json.Unmarshal(doc.Bytes(), &d); err != nil || len(d.Totals) != 1 || d.Totals[0].FunctionUS != wantUS || d.Totals[0].Amount != 3 {
		t.Fatalf("json export: %s %v", doc.Bytes(), err)
	}
}
