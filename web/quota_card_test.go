package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/usage"
)

// TestQuotaCardCountsBillable: the usage page's quota card counts the month's billable
// requests, as the quota does, not the gateway's refusals among them. The tenant is on
// the free platform plan: 10,000 requests a month.
func TestQuotaCardCountsBillable(t *testing.T) {
	e := fullConsole(t)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	tn, _ := e.db.FindTenant(ctx, "acme")
	hour := billing.Hour(time.Now())
	if _, err := billingpg.New(e.db.Pool()).Fold(ctx, &usage.Batch{ID: usage.BatchID("web-test", "quota", 1), EdgeID: "web-test", BootID: "quota", Seq: 1,
		Created: time.Now().UTC(), Records: []usage.Record{
			{TenantID: tn.ID, Hour: hour, RouteID: "r", Class: 2, Counts: usage.Counts{Requests: 5000, Billable: 5000}},
			{TenantID: tn.ID, Hour: hour, RouteID: "r", Class: 4, Counts: usage.Counts{Requests: 5000}},
		}}); err != nil {
		t.Fatal(err)
	}
	pg := e.get(owner, "/console/t/acme/usage")
	for _, want := range []string{`Billable this month of 10,000 quota`, `data-testid="quota-used">5,000<`, `aria-valuenow="50"`, `data-testid="total">10,000<`} {
		if !strings.Contains(pg.body, want) {
			t.Errorf("usage page lacks %q", want)
		}
	}
}
