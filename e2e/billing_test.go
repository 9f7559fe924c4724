package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/billing"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
	"tollgate/tenants"
)

// Metering and billing: calls through real edges are counted by their meters,
// published to JetStream, folded by a `tollgate billing` process into Postgres, and read
// back through the api's usage and export: exactly, through an edge's SIGTERM, a NATS
// outage and a SIGKILL of billing.

// usageDeadline bounds how long folded usage may take to show: a meter flush (1 s), the
// consumer, and NATS reconnects after an outage.
const usageDeadline = 30 * time.Second

// meterTally counts what the client saw as the meter should: every answer of a known tenant is
// a request, billable when the upstream answered (200 here); answers that name no tenant
// or a loading/draining edge are not metered; transport errors are not counted.
type meterTally struct {
	mu       sync.Mutex
	requests int64
	billable int64
	statuses map[string]int
}

func (tl *meterTally) add(r *edgeResp) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.statuses == nil {
		tl.statuses = map[string]int{}
	}
	code := ""
	if r.Status != 200 {
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(r.Body, &env)
		code = env.Error.Code
	}
	tl.statuses[fmt.Sprint(r.Status, " ", code)]++
	switch {
	case r.Status == 200:
		tl.requests++
		tl.billable++
	case code == tenants.ETenantNotFound || code == tenants.ENotReady:
	default:
		tl.requests++
	}
}

func (tl *meterTally) counts() (requests, billable int64) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.requests, tl.billable
}

func (tl *meterTally) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return fmt.Sprintf("%d requests, %d billable (%v)", tl.requests, tl.billable, tl.statuses)
}

// billingStack is a stack with one tenant, a keyed route to an echo upstream, and a key.
type billingStack struct {
	*stack
	t    *testing.T
	api  *apiClient
	slug string
	key  string
	tl   meterTally
}

func newBillingStack(t *testing.T, slug string) *billingStack {
	t.Helper()
	s := newStack(t)
	_, api := s.startAPI()
	api.createTenant(slug)
	up := echoUpstream(t, "up")
	api.createRoute(slug, routeSpec("r", "/r", up.URL, tenants.AuthKey))
	c := api.createConsumer(slug, "app")
	_, key := api.createKey(slug, c)
	return &billingStack{stack: s, t: t, api: api, slug: slug, key: key}
}

// startMeteredEdge starts an edge with its own id and spool directory, on fresh addresses.
func (b *billingStack) startMeteredEdge(id, spool string) (*proc, *edgeClient) {
	b.t.Helper()
	b.edgeAddr, b.edgeAdm = freeAddr(b.t), freeAddr(b.t)
	return b.startEdge("TOLLGATE_EDGE_ID="+id, "TOLLGATE_METER_SPOOL_DIR="+spool)
}

// startBilling starts `tollgate billing`, the usage consumer.
func (b *billingStack) startBilling() *proc {
	b.t.Helper()
	return startProc(b.t, "billing", []string{"billing"}, b.env())
}

// call sends one keyed call and tallies its answer; false on a transport error.
func (b *billingStack) call(e *edgeClient, header ...string) bool {
	r, err := e.do("GET", b.slug, "/r/x", header...)
	if err != nil {
		return false
	}
	b.tl.add(r)
	return true
}

// calls sends n keyed calls, failing the test unless each is answered 200.
func (b *billingStack) calls(e *edgeClient, n int) {
	b.t.Helper()
	for i := 0; i < n; i++ {
		r, err := e.do("GET", b.slug, "/r/x", "X-API-Key", b.key)
		if err != nil {
			b.t.Fatalf("call %d: %v", i, err)
		}
		b.tl.add(r)
		if r.Status != 200 {
			b.t.Fatalf("call %d: %s", i, r)
		}
	}
}

// warm waits until the edge serves the route, tallying every answer on the way.
func (b *billingStack) warm(e *edgeClient) {
	b.t.Helper()
	eventually(b.t, 10*time.Second, "route served", func() error {
		r, err := e.do("GET", b.slug, "/r/x", "X-API-Key", b.key)
		if err != nil {
			return err
		}
		b.tl.add(r)
		if r.Status != 200 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
}

// load calls from workers goroutines until stop is closed.
func (b *billingStack) load(e *edgeClient, workers int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !b.call(e, "X-API-Key", b.key) {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	return &wg
}

// usage is the tenant's usage total this month.
func (b *billingStack) usage() (usage.Counts, error) {
	r, err := b.api.try("GET", "/v1/tenants/"+b.slug+"/usage", nil)
	if err != nil {
		return usage.Counts{}, err
	}
	var rep billing.UsageReport
	if r.Status != 200 || json.Unmarshal(r.Raw, &rep) != nil {
		return usage.Counts{}, fmt.Errorf("usage: %s", r)
	}
	return rep.Total, nil
}

// wantUsage waits until the usage equals the meterTally, fails at once if it goes past it, and
// checks that it stays there over two more meter flushes.
func (b *billingStack) wantUsage() usage.Counts {
	b.t.Helper()
	req, bill := b.tl.counts()
	var got usage.Counts
	check := func() error {
		var err error
		if got, err = b.usage(); err != nil {
			return err
		}
		if got.Requests > req || got.Billable > bill {
			b.t.Fatalf("usage %+v is past what was served: %s", got, &b.tl)
		}
		if got.Requests != req || got.Billable != bill {
			return fmt.Errorf("usage %+v, want %s", got, &b.tl)
		}
		return nil
	}
	d := eventually(b.t, usageDeadline, "usage", check)
	time.Sleep(2500 * time.Millisecond)
	if err := check(); err != nil {
		b.t.Fatalf("usage changed after it matched: %v", err)
	}
	b.t.Logf("usage %d requests, %d billable: matched %s after the last call", got.Requests, got.Billable, d.Round(10*time.Millisecond))
	return got
}

// wantExport checks the month's export (JSON and CSV) against the usage.
func (b *billingStack) wantExport(want usage.Counts) {
	b.t.Helper()
	period := billing.PeriodOf(time.Now()).String()
	r := b.api.call("GET", "/v1/billing/export?format=json&period="+period, nil)
	var doc billing.ExportDocument
	if r.Status != 200 || json.Unmarshal(r.Raw, &doc) != nil {
		b.t.Fatalf("export: %s", r)
	}
	var got usage.Counts
	var total billing.CurrencyTotal
	for _, row := range doc.Items {
		if row.Tenant == b.slug {
			got.Requests += row.Requests
			got.Billable += row.Billable
		}
	}
	for _, ct := range doc.Totals {
		total.Requests += ct.Requests
		total.Billable += ct.Billable
	}
	// Unpriced rows (the unlimited plan has no price) are listed but in no total.
	for _, row := range doc.Items {
		if row.Status == billing.StatusUnpriced {
			total.Requests += row.Requests
			total.Billable += row.Billable
		}
	}
	if got.Requests != want.Requests || got.Billable != want.Billable {
		b.t.Fatalf("export rows of %s: %d requests, %d billable; usage has %+v", b.slug, got.Requests, got.Billable, want)
	}
	if total.Requests != want.Requests || total.Billable != want.Billable {
		b.t.Fatalf("export totals %+v, want the usage %+v (one tenant)", doc.Totals, want)
	}
	csv := b.api.call("GET", "/v1/billing/export?period="+period, nil)
	if csv.Status != 200 || !strings.Contains(string(csv.Raw), ","+b.slug+",") {
		b.t.Fatalf("csv export: %s", csv)
	}
	again := b.api.call("GET", "/v1/billing/export?period="+period, nil)
	if string(again.Raw) != string(csv.Raw) {
		b.t.Fatalf("the same period exported twice differs")
	}
}

// TestBillingCounts: calls through two edges, keyed and not, show exactly in usage and
// export, and reconciliation finds nothing to report.
func TestBillingCounts(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "bill-counts")
	b.startBilling()
	_, e1 := b.startMeteredEdge("edge-1", t.TempDir())
	_, e2 := b.startMeteredEdge("edge-2", t.TempDir())
	b.warm(e1)
	b.warm(e2)
	b.calls(e1, 60)
	b.calls(e2, 40)
	for i := 0; i < 7; i++ { // 401: counted, not billed
		b.call(e1)
	}
	b.call(e2, "X-API-Key", b.key)
	if r, _ := e2.do("GET", b.slug, "/nowhere"); r != nil { // 404 route_not_found: counted, not billed
		b.tl.add(r)
	}
	got := b.wantUsage()
	if got.Requests == got.Billable {
		t.Fatalf("no unbillable requests counted: %+v (%s)", got, &b.tl)
	}
	b.wantExport(got)

	// A batch published twice — once more under a new Nats-Msg-Id, so JetStream's dedupe
	// window does not drop it and billing's batch key has to — changes nothing.
	republishFirstBatch(t, b.natsURL(), b.prefix)
	b.wantUsage()

	// Reconciliation: the edges' own totals, the rollups, (no Stripe) agree.
	period := billing.PeriodOf(time.Now()).String()
	eventually(t, 10*time.Second, "billing reconcile reports no discrepancies", func() error {
		cmd := exec.Command(bin, "billing", "reconcile", "--period", period)
		cmd.Env = b.env()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// TestBillingEdgeSIGTERM: an edge SIGTERMed under load drains its meter: every call that
// got an answer is counted, none twice.
func TestBillingEdgeSIGTERM(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "bill-sigterm")
	b.startBilling()
	edge, e := b.startMeteredEdge("edge-term", t.TempDir())
	b.warm(e)
	stop := make(chan struct{})
	wg := b.load(e, 4, stop)
	time.Sleep(1500 * time.Millisecond)
	edge.stopClean(t, stopTimeout)
	close(stop)
	wg.Wait()
	if req, _ := b.tl.counts(); req < 20 {
		t.Fatalf("too little load before the SIGTERM: %s", &b.tl)
	}
	b.wantExport(b.wantUsage())
}

// TestBillingNATSOutage: while NATS is down the edge keeps serving and spools its
// batches; once NATS is back the spool is replayed and the count is exact.
func TestBillingNATSOutage(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "bill-nats")
	b.startBilling()
	edge, e := b.startMeteredEdge("edge-nats", t.TempDir())
	b.warm(e)
	b.calls(e, 30)
	time.Sleep(1200 * time.Millisecond) // a flush reaches NATS before the outage

	b.ns.Shutdown()
	b.ns.WaitForShutdown()
	b.calls(e, 50)
	time.Sleep(2500 * time.Millisecond) // flushes fail: spooled
	b.calls(e, 20)
	b.ns = testenv.RestartNATS(t, b.ns)
	b.calls(e, 30)
	b.wantExport(b.wantUsage())
	for _, result := range []string{"spooled", "replayed"} {
		if n := meterSample(t, edge.adminAddr, `tollgate_meter_batches_total{result="`+result+`"}`); n < 1 {
			t.Errorf("%s batches: %v, want some: the outage did not exercise the spool", result, n)
		}
	}
}

// meterSample reads one sample from a process's /metrics (0 when absent).
func meterSample(t *testing.T, adminAddr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestBillingKilled: billing SIGKILLed while folding and started again loses and doubles
// nothing: a batch is acked only after its fold committed, and a redelivered one folds
// nothing.
func TestBillingKilled(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "bill-kill")
	bp := b.startBilling()
	_, e := b.startMeteredEdge("edge-kill", t.TempDir())
	b.warm(e)
	stop := make(chan struct{})
	wg := b.load(e, 3, stop)
	time.Sleep(1500 * time.Millisecond)
	bp.signal(syscall.SIGKILL)
	bp.waitExit(t, 5*time.Second)
	time.Sleep(1500 * time.Millisecond) // batches pile up in the stream
	b.startBilling()
	time.Sleep(1000 * time.Millisecond)
	close(stop)
	wg.Wait()
	b.wantExport(b.wantUsage())
}

// republishFirstBatch publishes the usage stream's first message again with a new msg id.
func republishFirstBatch(t *testing.T, natsURL, prefix string) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, usage.Stream(prefix))
	if err != nil {
		t.Fatalf("usage stream: %v", err)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("first usage batch: %v", err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Data: m.Data}, jetstream.WithMsgID("e2e-republished")); err != nil {
		t.Fatalf("republish: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("republished batch %s; the stream holds %d messages", m.Header.Get("Nats-Msg-Id"), info.State.Msgs)
}
