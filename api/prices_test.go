package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"tollgate/api"
	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

func pricesEnv(t *testing.T) *env {
	return newEnv(t, func(c *api.Config) {
		c.People = c.Tenants.(tenants.PeopleService)
		c.Audit = c.Tenants.(tenants.AuditService)
		c.Prices = billingpg.New(c.Tenants.(*postgres.DB).Pool())
	})
}

// TestPricesAccess: the platform's prices are the admin token's, operator's and
// finance's; a tenant's prices are its owners' and admins' to change and its viewers' to
// read; every change is audited.
func TestPricesAccess(t *testing.T) {
	t.Parallel()
	e := pricesEnv(t)
	acme := e.tenant("acme")
	e.do("POST", "/v1/tenants/acme/plans", adminToken, map[string]any{"name": "gold"}).want(201)
	callers := map[string]caller{
		"admin-token": {name: "admin token", token: adminToken},
		"owner":       e.session("owner", acme, tenants.RoleOwner, ""),
		"viewer":      e.session("viewer", acme, tenants.RoleViewer, ""),
		"operator":    e.session("operator", "", "", tenants.PlatformOperator),
		"finance":     e.session("finance", "", "", tenants.PlatformFinance),
		"outsider":    e.session("outsider", "", "", ""),
		"tok-admin":   e.roleToken("acme", tenants.RoleAdmin),
		"tok-viewer":  e.roleToken("acme", tenants.RoleViewer),
	}
	month := billing.PeriodOf(time.Now()).String()
	body := map[string]any{"currency": "usd", "monthly_fee": 500, "included_requests": 10, "unit_price": 2}
	// platform list, platform set, tenant list, tenant set
	want := map[string][4]int{
		"admin-token": {200, 200, 200, 200},
		"owner":       {403, 403, 200, 200},
		"viewer":      {403, 403, 200, 403},
		"operator":    {200, 200, 200, 200},
		"finance":     {200, 200, 200, 403},
		"outsider":    {403, 403, 404, 404},
		"tok-admin":   {403, 403, 200, 200},
		"tok-viewer":  {403, 403, 200, 403},
	}
	for key, c := range callers {
		got := [4]int{
			e.do("GET", "/v1/billing/prices", c.token, nil, c.hdr...).status,
			e.do("PUT", "/v1/billing/prices/pro/"+month, c.token, body, c.hdr...).status,
			e.do("GET", "/v1/tenants/acme/prices", c.token, nil, c.hdr...).status,
			e.do("PUT", "/v1/tenants/acme/prices/gold/"+month, c.token, body, c.hdr...).status,
		}
		if got != want[key] {
			t.Errorf("%s: platform list, platform set, tenant list, tenant set = %v, want %v", key, got, want[key])
		}
	}
	r := e.do("GET", "/v1/tenants/acme/prices", adminToken, nil).want(200)
	if items := r.items(); len(items) != 1 || items[0].(map[string]any)["unit_requests"] != 1000.0 {
		t.Fatalf("tenant prices: %s", r.body)
	}
	actions := map[string]bool{}
	for _, it := range e.do("GET", "/v1/tenants/acme/audit", adminToken, nil).want(200).items() {
		m := it.(map[string]any)
		actions[fmt.Sprint(m["actor"], " ", m["action"], " ", m["object"])] = true
	}
	if !actions["owner@example.com prices.update gold/"+month] {
		t.Errorf("no audit entry of the owner's price: %v", actions)
	}
	var n int
	err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE tenant_id = $1
		AND actor = 'finance@example.com' AND action = 'prices.update' AND object = $2`,
		billingpg.PlatformAuditTenant, "pro/"+month).Scan(&n)
	if err != nil || n != 1 {
		t.Errorf("the platform's audit entries of finance's price: %d %v", n, err)
	}
}

// TestPricesValidation: bad versions get the error envelope naming the field; only a
// future version may be deleted.
func TestPricesValidation(t *testing.T) {
	t.Parallel()
	e := pricesEnv(t)
	e.tenant("acme")
	e.do("POST", "/v1/tenants/acme/plans", adminToken, map[string]any{"name": "gold"}).want(201)
	now := billing.PeriodOf(time.Now())
	month, next := now.String(), billing.PeriodOf(now.End()).String()
	past := billing.PeriodOf(now.Start().Add(-time.Hour)).String()
	ok := `{"currency":"usd","unit_price":1}`
	for _, c := range []struct{ path, body, code, field string }{
		{"/v1/billing/prices/pro/" + month, `{"currency":"USD"}`, "validation_failed", "currency"},
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","monthly_fee":-1}`, "validation_failed", "monthly_fee"},
		{"/v1/billing/prices/pro/" + past, ok, "validation_failed", "effective_from"},
		{"/v1/billing/prices/pro/2026-13", ok, "validation_failed", "effective_from"},
		{"/v1/billing/prices/nope/" + month, ok, "validation_failed", "plan"},
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","bogus":1}`, "invalid_request", "bogus"},
		{"/v1/tenants/acme/prices/gold/" + month, `{"currency":"usd","per_consumer":true}`, "validation_failed", "per_consumer"},
		{"/v1/tenants/acme/prices/pro/" + month, ok, "validation_failed", "plan"},
		// Stripe's largest unit amount is the most a fee or a unit price may be, so a bill
		// cannot wrap.
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","monthly_fee":9223372036854775807}`, "validation_failed", "monthly_fee"},
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","monthly_fee":100000000}`, "validation_failed", "monthly_fee"},
		{"/v1/tenants/acme/prices/gold/" + month, `{"currency":"usd","unit_price":4600000000000000000,"unit_requests":1}`, "validation_failed", "unit_price"},
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","function_unit_price":-1}`, "validation_failed", "function_unit_price"},
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","function_unit_price":100000000}`, "validation_failed", "function_unit_price"},
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","included_function_ms":-5}`, "validation_failed", "included_function_ms"},
		{"/v1/billing/prices/pro/" + month, `{"currency":"usd","function_unit_ms":-1}`, "validation_failed", "function_unit_ms"},
	} {
		e.do("PUT", c.path, adminToken, c.body).wantErr(400, c.code, c.field)
	}
	e.do("PUT", "/v1/billing/prices/pro/"+next, adminToken, ok).want(200)
	fn := e.do("PUT", "/v1/billing/prices/pro/"+month, adminToken, `{"currency":"usd","unit_price":1,"included_function_ms":100,"function_unit_price":3,"function_unit_ms":1}`).want(200)
	if !strings.Contains(string(fn.body), `"included_function_ms":100,"function_unit_price":3,"function_unit_ms":1`) {
		t.Fatalf("function time price: %s", fn.body)
	}
	e.do("PUT", "/v1/billing/prices/pro/"+month, adminToken, ok).want(200)
	if !strings.Contains(string(e.do("GET", "/v1/billing/prices", adminToken, nil).want(200).body), `"function_unit_ms":1000`) {
		t.Fatal("a price without a function unit does not default to 1000 ms")
	}
	e.do("DELETE", "/v1/billing/prices/pro/"+month, adminToken, nil).wantErr(400, "validation_failed", "effective_from")
	e.do("DELETE", "/v1/billing/prices/pro/"+next, adminToken, nil).want(204)
	e.do("DELETE", "/v1/billing/prices/pro/"+next, adminToken, nil).wantErr(404, "not_found", "")
	r := e.do("GET", "/v1/billing/prices", adminToken, nil).want(200)
	if n := len(r.items()); n != 4 { // free, pro since 1970 and this month, enterprise
		t.Fatalf("%d versions: %s", n, r.body)
	}
}

// TestConsumerBillExport: the tenant's bill of its consumers, readable by its viewers, in
// the export's formats.
func TestConsumerBillExport(t *testing.T) {
	t.Parallel()
	e := pricesEnv(t)
	e.tenant("acme")
	e.tenant("other")
	period := billing.PeriodOf(time.Now()).String()
	viewer := e.roleToken("acme", tenants.RoleViewer)
	r := e.do("GET", "/v1/tenants/acme/billing/export?format=json&period="+period, viewer.token, nil).want(200)
	if !strings.Contains(string(r.body), `"items":[]`) {
		t.Fatalf("empty bill: %s", r.body)
	}
	// CSV: the conformance checker reads JSON only, so this one goes around it.
	req := httptest.NewRequest("GET", "/v1/tenants/acme/billing/export?period="+period, nil)
	req.Header.Set("Authorization", "Bearer "+viewer.token)
	res, err := e.srv.App().Test(req, 30_000)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(string(body), strings.Join(billing.ExportHeader, ",")) {
		t.Fatalf("csv: %d %s", res.StatusCode, body)
	}
	e.do("GET", "/v1/tenants/acme/billing/export?format=xml&period="+period, viewer.token, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme/billing/export?period=May", viewer.token, nil).wantErr(400, "invalid_request", "")
	e.do("GET", "/v1/tenants/acme/billing/export?period="+period, e.token("other"), nil).wantErr(404, "not_found", "")
}

// TestPaymentGrace: a tenant's grace before a bought plan is taken back, defaults until set,
// bounded, and the tenant's own.
func TestPaymentGrace(t *testing.T) {
	t.Parallel()
	e := pricesEnv(t)
	e.tenant("acme")
	e.tenant("other")
	viewer := e.roleToken("acme", tenants.RoleViewer)
	r := e.do("GET", "/v1/tenants/acme/billing/payment-grace", viewer.token, nil).want(200)
	if !strings.Contains(string(r.body), `"failure_grace_days":3`) || !strings.Contains(string(r.body), `"end_grace_days":0`) {
		t.Fatalf("defaults: %s", r.body)
	}
	e.do("PUT", "/v1/tenants/acme/billing/payment-grace", viewer.token, `{"failure_grace_days":1}`).wantErr(403, "forbidden", "")
	e.do("PUT", "/v1/tenants/acme/billing/payment-grace", adminToken, `{"failure_grace_days":61}`).wantErr(400, "validation_failed", "failure_grace_days")
	e.do("PUT", "/v1/tenants/acme/billing/payment-grace", adminToken, `{"end_grace_days":-1}`).wantErr(400, "validation_failed", "end_grace_days")
	e.do("PUT", "/v1/tenants/acme/billing/payment-grace", adminToken, `{"failure_grace_days":7,"end_grace_days":2}`).want(200)
	r = e.do("GET", "/v1/tenants/acme/billing/payment-grace", viewer.token, nil).want(200)
	if !strings.Contains(string(r.body), `"failure_grace_days":7`) || !strings.Contains(string(r.body), `"end_grace_days":2`) {
		t.Fatalf("after PUT: %s", r.body)
	}
	r = e.do("GET", "/v1/tenants/other/billing/payment-grace", e.token("other"), nil).want(200)
	if !strings.Contains(string(r.body), `"failure_grace_days":3`) {
		t.Fatalf("another tenant's grace changed: %s", r.body)
	}
}
