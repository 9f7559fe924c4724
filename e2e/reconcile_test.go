package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"tollgate/billing"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

// reconcileRun is one `tollgate billing reconcile` of the stack: its exit status and what
// it printed.
type reconcileRun struct {
	code int
	out  string
	rec  billing.Reconciliation
}

func (b *billingStack) reconcile(period string, args ...string) (*reconcileRun, error) {
	cmd := exec.Command(bin, append([]string{"billing", "reconcile", "--period", period}, args...)...)
	cmd.Env = b.env("TOLLGATE_LOG_LEVEL=error")
	out, err := cmd.Output()
	r := &reconcileRun{out: string(out)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		return nil, err
	}
	if len(args) > 0 && args[0] == "--json" {
		if err := json.Unmarshal(out, &r.rec); err != nil {
			return nil, fmt.Errorf("reconcile --json printed %q: %v", out, err)
		}
	}
	return r, nil
}

// kinds lists a reconciliation's discrepancies and pending differences, sorted.
func (r *reconcileRun) kinds() string {
	var out []string
	for _, d := range r.rec.Discrepancies {
		out = append(out, fmt.Sprintf("%s %s %+d", d.Kind, d.EdgeID, d.Difference))
	}
	for _, d := range r.rec.Pending {
		out = append(out, fmt.Sprintf("pending %s %+d", d.EdgeID, d.Difference))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// TestReconcileSeesPerEdge: `tollgate billing reconcile` against real processes. Calls
// through an edge reconcile OK (exit 0); while billing is stopped the same edge's new
// batches are pending in flight, not lost (exit 0); and in a settled hour an edge whose
// batch never arrived is a loss and one that never published totals is reported as such,
// each per edge with its sign (exit 1), in JSON and in text.
func TestReconcileSeesPerEdge(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "recon")
	tenantID := str(t, b.api.must(200, "GET", "/v1/tenants/"+b.slug, nil), "id")
	billingProc := b.startBilling()
	_, e := b.startMeteredEdge("edge-a", t.TempDir())
	b.warm(e)
	b.calls(e, 30)
	b.wantUsage()
	period := billing.PeriodOf(time.Now()).String()
	served, _ := b.tl.counts()
	eventually(t, 20*time.Second, "reconcile OK with edge-a's totals", func() error {
		r, err := b.reconcile(period, "--json")
		if err != nil {
			return err
		}
		if r.code != 0 || !r.rec.OK() || len(r.rec.Pending) != 0 || len(r.rec.Edges) != 1 {
			return fmt.Errorf("exit %d: %s", r.code, r.out)
		}
		if ed := r.rec.Edges[0]; ed.EdgeID != "edge-a" || ed.Served != served || ed.Folded != served {
			return fmt.Errorf("edge-a served %d, folded %d; the client saw %d", ed.Served, ed.Folded, served)
		}
		return nil
	})

	// Billing stopped: the edge's next batches wait in the stream. Pending, not lost.
	billingProc.stopClean(t, 10*time.Second)
	b.calls(e, 20)
	eventually(t, 20*time.Second, "edge-a's new batches pending in flight", func() error {
		r, err := b.reconcile(period, "--json")
		if err != nil {
			return err
		}
		if r.code != 0 || r.kinds() != "pending edge-a -20" || r.rec.InFlightBatches == 0 {
			return fmt.Errorf("exit %d, %s: %s", r.code, r.kinds(), r.out)
		}
		return nil
	})
	b.startBilling()
	b.wantUsage()

	// A settled hour, published as edges would: edge-x served 10 and only its batch of 6
	// arrived; edge-y's batch of 3 came with no totals.
	hour := billing.Hour(time.Now().Add(-2 * time.Hour))
	period = billing.PeriodOf(hour).String()
	nc, err := nats.Connect(b.natsURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, ed := range []struct {
		id           string
		batch, total int64
	}{{"edge-x", 6, 10}, {"edge-y", 3, 0}} {
		pub, err := usage.NewPublisher(nc, b.prefix, ed.id)
		if err != nil {
			t.Fatal(err)
		}
		batch := &usage.Batch{ID: usage.BatchID(ed.id, "boot1", 1), EdgeID: ed.id, BootID: "boot1", Seq: 1, Created: time.Now().UTC(),
			Records: []usage.Record{{TenantID: tenantID, Hour: hour, RouteID: "r", Class: 2,
				Counts: usage.Counts{Requests: ed.batch, Billable: ed.batch}}}}
		data, err := usage.EncodeBatch(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, batch.ID, data); err != nil {
			t.Fatal(err)
		}
		if ed.total > 0 {
			if err := pub.PutTotals(ctx, []usage.EdgeTotal{{EdgeID: ed.id, BootID: "boot1", TenantID: tenantID,
				Hour: hour, Requests: ed.total, Billable: ed.total}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := "loss edge-x -4; missing_totals edge-y +3"
	var last *reconcileRun
	eventually(t, 30*time.Second, "the loss and the missing totals reported", func() error {
		r, err := b.reconcile(period, "--json")
		if err != nil {
			return err
		}
		last = r
		if r.kinds() != want || r.code != 1 {
			return fmt.Errorf("exit %d, %q, want %q", r.code, r.kinds(), want)
		}
		return nil
	})
	for _, d := range last.rec.Discrepancies {
		if d.TenantID != tenantID || !d.Hour.Equal(hour) {
			t.Errorf("%s reported for tenant %s, hour %s", d.Kind, d.TenantID, d.Hour)
		}
	}
	text, err := b.reconcile(period)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"DIFF loss " + tenantID + " " + hour.Format("2006-01-02T15Z") + " edge edge-x: LOSS",
		"4 requests missing",
		"DIFF missing_totals " + tenantID,
	} {
		if !strings.Contains(text.out, line) || text.code != 1 {
			t.Fatalf("text output (exit %d) lacks %q:\n%s", text.code, line, text.out)
		}
	}
}

// TestReconcileEdgeKilledDuringNATSOutage: the case that used to read backwards. An edge
// spools through a NATS outage and is SIGKILLed before NATS returns; started again on
// its spool directory, it hands the dead boot's batches and totals over. Reconcile then
// sees both boots of the edge and agrees exactly: served = folded = what the client got.
func TestReconcileEdgeKilledDuringNATSOutage(t *testing.T) {
	t.Parallel()
	b := newBillingStack(t, "recon-kill")
	b.startBilling()
	spool := t.TempDir()
	edge, e := b.startMeteredEdge("edge-k", spool)
	b.warm(e)
	b.calls(e, 30)
	time.Sleep(1200 * time.Millisecond) // a flush reaches NATS before the outage

	b.ns.Shutdown()
	b.ns.WaitForShutdown()
	b.calls(e, 40)
	time.Sleep(2500 * time.Millisecond) // flushes fail: spooled
	edge.signal(syscall.SIGKILL)
	edge.waitExit(t, 10*time.Second)
	b.ns = testenv.RestartNATS(t, b.ns)

	_, e = b.startMeteredEdge("edge-k", spool)
	b.warm(e)
	b.calls(e, 10)
	b.wantUsage()
	served, _ := b.tl.counts()
	period := billing.PeriodOf(time.Now()).String()
	eventually(t, 30*time.Second, "reconcile agrees on both boots of edge-k", func() error {
		r, err := b.reconcile(period, "--json")
		if err != nil {
			return err
		}
		if r.code != 0 || !r.rec.OK() || len(r.rec.Pending) != 0 || len(r.rec.Edges) != 1 {
			return fmt.Errorf("exit %d: %s", r.code, r.out)
		}
		ed := r.rec.Edges[0]
		if ed.Boots != 2 || ed.Served-ed.Dropped != served || ed.Folded != served {
			return fmt.Errorf("edge-k: %d boots served %d (%d dropped), folded %d; the client saw %d", ed.Boots, ed.Served, ed.Dropped, ed.Folded, served)
		}
		return nil
	})
}
