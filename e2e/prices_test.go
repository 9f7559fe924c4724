package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/tenants"
)

// Prices: a tenant on the unlimited plan and one on a plan without a price are exported
// unpriced (never with the free plan's numbers); a price set through the API for the
// current month prices the tenant's calls in the same month's export.

// exportRows is the JSON export of the current month, by tenant slug.
func exportRows(t *testing.T, api *apiClient, period string) (map[string]billing.ExportRow, billing.ExportDocument) {
	t.Helper()
	r := api.call("GET", "/v1/billing/export?format=json&period="+period, nil)
	var doc billing.ExportDocument
	if r.Status != 200 || json.Unmarshal(r.Raw, &doc) != nil {
		t.Fatalf("export: %s", r)
	}
	rows := map[string]billing.ExportRow{}
	for _, row := range doc.Items {
		rows[row.Tenant] = row
	}
	return rows, doc
}

func TestExportUnpriced(t *testing.T) {
	b := newBillingStack(t, "unl")
	api := b.api
	api.must(200, "PUT", "/v1/platform/plans/bare", map[string]any{}, "If-Match", "*")
	api.must(201, "POST", "/v1/tenants", map[string]any{"slug": "bare", "name": "E2E bare", "plan": "bare"})
	up := echoUpstream(t, "bare-up")
	api.createRoute("bare", routeSpec("r", "/r", up.URL, tenants.AuthKey))
	_, bareKey := api.createKey("bare", api.createConsumer("bare", "app"))
	_, e := b.startMeteredEdge("prices-1", t.TempDir())
	b.startBilling()

	b.warm(e)
	b.calls(e, 5)
	eventually(t, 10*time.Second, "bare served", served(e, "bare", "/r/x", "bare-up", "X-API-Key", bareKey))
	const bareCalls = 7
	for i := 0; i < bareCalls; i++ {
		if r := e.get(t, "bare", "/r/x", "X-API-Key", bareKey); r.Status != 200 {
			t.Fatalf("bare call %d: %s", i, r)
		}
	}
	b.wantUsage()
	// Billable: the calls above and the one 200 that told the route was served.
	const bareBillable = bareCalls + 1
	eventually(t, usageDeadline, "bare's usage folded", func() error {
		r := api.call("GET", "/v1/tenants/bare/usage", nil)
		var rep billing.UsageReport
		if r.Status != 200 || json.Unmarshal(r.Raw, &rep) != nil {
			return fmt.Errorf("usage: %s", r)
		}
		if rep.Total.Billable != bareBillable {
			return fmt.Errorf("%d billable so far, want %d", rep.Total.Billable, bareBillable)
		}
		return nil
	})

	period := billing.PeriodOf(time.Now()).String()
	rows, doc := exportRows(t, api, period)
	for _, slug := range []string{"unl", "bare"} {
		r, ok := rows[slug]
		if !ok || r.Status != billing.StatusUnpriced || r.Amount != 0 || r.Currency != "" || r.Included != 0 || r.Billable == 0 {
			t.Errorf("%s: %+v (present %v), want an unpriced row with its usage", slug, r, ok)
		}
	}
	if len(doc.Totals) != 0 {
		t.Errorf("unpriced rows summed into totals: %+v", doc.Totals)
	}

	api.must(200, "PUT", "/v1/billing/prices/bare/"+period, map[string]any{
		"currency": "usd", "monthly_fee": 700, "included_requests": 2, "unit_price": 100, "unit_requests": 1})
	rows, doc = exportRows(t, api, period)
	r := rows["bare"]
	want := int64(700 + (bareBillable-2)*100)
	if r.Status != billing.StatusPriced || r.Currency != "usd" || r.MonthlyFee != 700 || r.Amount != want {
		t.Fatalf("bare after its price: %+v, want amount %d", r, want)
	}
	if rows["unl"].Status != billing.StatusUnpriced {
		t.Errorf("unlimited got priced: %+v", rows["unl"])
	}
	if len(doc.Totals) != 1 || doc.Totals[0].Amount != want {
		t.Errorf("totals: %+v, want usd %d", doc.Totals, want)
	}
}
