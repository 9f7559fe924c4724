package billing_test

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	"tollgate/tenants"
)

// app mounts the handlers the way the api will: its error renderer, its tenant scope
// and its finance check.
func app(t *testing.T, db *billingtest.DB, now time.Time) *fiber.App {
	h := billing.Handlers(db.Store, billing.HTTPConfig{
		Tenant: func(c *fiber.Ctx) (string, error) {
			id, _, err := db.Store.TenantBySlug(c.UserContext(), c.Params("slug"))
			return id, err
		},
		AuthorizeExport: func(c *fiber.Ctx) error {
			switch c.Get("Authorization") {
			case "Bearer finance":
				return nil
			case "":
				return tenants.Errorf(tenants.EUnauthenticated, "no credential")
			}
			return tenants.Errorf(tenants.EForbidden, "exports need the finance role")
		},
		Now: func() time.Time { return now },
	})
	a := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		c.Status(tenants.Status(tenants.ErrorCode(err)))
		return c.JSON(fiber.Map{"error": fiber.Map{"code": tenants.ErrorCode(err), "message": tenants.ErrorMessage(err)}})
	}})
	a.Get("/v1/tenants/:slug/usage", h.Usage)
	a.Get("/v1/billing/export", h.Export)
	return a
}

func get(t *testing.T, a *fiber.App, path, auth string) (int, string, string) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := a.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestUsageAndExportHandlers(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	d := time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC)
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(tn.ID, d.Add(3*time.Hour), "r1", "c1", 200, true, 3),
		billingtest.Record(tn.ID, d.Add(4*time.Hour), "r2", "", 404, false, 2),
		billingtest.Record(tn.ID, d.Add(30*time.Hour), "r1", "c1", 200, true, 1),
	))
	a := app(t, db, d.Add(50*time.Hour))

	// Defaults: from the start of the month to the end of the current hour.
	status, ctype, body := get(t, a, "/v1/tenants/acme/usage", "")
	if status != 200 || !strings.HasPrefix(ctype, "application/json") {
		t.Fatalf("%d %s %s", status, ctype, body)
	}
	var rep struct {
		Total struct{ Requests, Billable int64 } `json:"total"`
		Items []map[string]any                   `json:"items"`
	}
	json.Unmarshal([]byte(body), &rep)
	if rep.Total.Requests != 6 || rep.Total.Billable != 4 || len(rep.Items) != 3 {
		t.Fatalf("usage: %s", body)
	}
	status, _, body = get(t, a, "/v1/tenants/acme/usage?from=2024-05-02&to=2024-05-04&granularity=day&group_by=route,consumer", "")
	json.Unmarshal([]byte(body), &rep)
	if status != 200 || len(rep.Items) != 3 || rep.Items[0]["route_id"] != "r1" || rep.Items[0]["consumer_id"] != "c1" ||
		rep.Items[1]["consumer_id"] != "" || rep.Items[0]["start"] != "2024-05-02T00:00:00Z" {
		t.Fatalf("grouped: %d %s", status, body)
	}
	status, _, body = get(t, a, "/v1/tenants/acme/usage?from=2024-05-02T03:00:00%2B00:00&to=2024-05-02T04:00:00Z", "")
	json.Unmarshal([]byte(body), &rep)
	if status != 200 || rep.Total.Requests != 3 {
		t.Fatalf("one hour: %d %s", status, body)
	}
	for _, bad := range []string{"?from=yesterday", "?granularity=week", "?group_by=planet", "?from=2024-05-02T03:30:00Z", "?from=2024-05-03&to=2024-05-02"} {
		if status, _, body := get(t, a, "/v1/tenants/acme/usage"+bad, ""); status != 400 || !strings.Contains(body, `"invalid_request"`) {
			t.Errorf("%s: %d %s", bad, status, body)
		}
	}
	if status, _, body := get(t, a, "/v1/tenants/nobody/usage", ""); status != 404 || !strings.Contains(body, `"not_found"`) {
		t.Errorf("unknown tenant: %d %s", status, body)
	}

	// Export: finance only.
	if status, _, _ := get(t, a, "/v1/billing/export?period=2024-05", ""); status != 401 {
		t.Errorf("anonymous export: %d", status)
	}
	if status, _, _ := get(t, a, "/v1/billing/export?period=2024-05", "Bearer tenant"); status != 403 {
		t.Errorf("tenant export: %d", status)
	}
	status, ctype, csv1 := get(t, a, "/v1/billing/export?period=2024-05&format=csv", "Bearer finance")
	if status != 200 || !strings.HasPrefix(ctype, "text/csv") {
		t.Fatalf("csv: %d %s %s", status, ctype, csv1)
	}
	lines := strings.Split(strings.TrimSpace(csv1), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "2024-05,acme,"+tn.ID+",,pro,6,4,1000000,0,20,1000,0,usd") {
		t.Fatalf("csv:\n%s", csv1)
	}
	for _, col := range []string{"tenant", "requests", "billable", "amount", "currency"} {
		if !strings.Contains(","+lines[0]+",", ","+col+",") {
			t.Errorf("csv header lacks %s: %s", col, lines[0])
		}
	}
	_, _, csv2 := get(t, a, "/v1/billing/export?period=2024-05", "Bearer finance")
	if csv1 != csv2 {
		t.Fatal("two exports of a period differ")
	}
	status, _, body = get(t, a, "/v1/billing/export?period=2024-05&format=json", "Bearer finance")
	var doc billing.ExportDocument
	if err := json.Unmarshal([]byte(body), &doc); err != nil || status != 200 || len(doc.Items) != 1 || doc.Totals[0].Requests != 6 {
		t.Fatalf("json: %d %s", status, body)
	}
	for _, bad := range []string{"period=2024-13", "period=2024-5", "period=", "period=2024-05&format=xml"} {
		if status, _, _ := get(t, a, "/v1/billing/export?"+bad, "Bearer finance"); status != 400 {
			t.Errorf("%s: %d", bad, status)
		}
	}
}
