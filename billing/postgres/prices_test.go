package postgres_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	"tollgate/tenants"
)

func period(t *testing.T, s string) billing.Period {
	t.Helper()
	p, err := billing.ParsePeriod(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantField(t *testing.T, err error, field string) {
	t.Helper()
	var e *tenants.Error
	if !errors.As(err, &e) || e.Code != tenants.EValidation || e.Field != field {
		t.Fatalf("want validation_failed on %s, got %v", field, err)
	}
}

// Versions take effect by month: a month already begun keeps its version, PriceAt picks
// the latest version not after the month, and only future versions may be deleted.
func TestPriceVersions(t *testing.T) {
	db := billingtest.Open(t)
	st := db.Store.WithClock(func() time.Time { return time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC) })
	march := &billing.Price{Plan: "pro", EffectiveFrom: "2026-03", Currency: "usd", MonthlyFee: 900, IncludedRequests: 5, UnitPrice: 7}
	june := &billing.Price{Plan: "pro", EffectiveFrom: "2026-06", Currency: "usd", MonthlyFee: 1900, UnitPrice: 1, UnitRequests: 1}
	for _, p := range []*billing.Price{march, june} {
		if err := st.SetPrice(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if march.UnitRequests != billing.DefaultUnitRequests {
		t.Fatalf("unit_requests 0 became %d", march.UnitRequests)
	}
	wantField(t, st.SetPrice(ctx, &billing.Price{Plan: "pro", EffectiveFrom: "2026-02", Currency: "usd"}), "effective_from")
	for month, fee := range map[string]int64{"2026-02": 0, "2026-03": 900, "2026-05": 900, "2026-06": 1900, "2031-01": 1900} {
		got, err := st.PriceAt(ctx, "", "pro", period(t, month))
		if err != nil || got.MonthlyFee != fee {
			t.Errorf("%s: %+v %v, want fee %d", month, got, err, fee)
		}
	}
	if got, _ := st.PriceAt(ctx, "", "pro", period(t, "2026-02")); got.EffectiveFrom != "1970-01" || got.IncludedRequests != 1_000_000 {
		t.Errorf("the migrated price: %+v", got)
	}
	if _, err := st.PriceAt(ctx, "", "unlimited", period(t, "2026-03")); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Errorf("unlimited is priced: %v", err)
	}
	list, err := st.ListPrices(ctx, "")
	if err != nil || len(list) != 5 || list[3].EffectiveFrom != "2026-03" || list[4].EffectiveFrom != "2026-06" {
		t.Fatalf("list: %+v %v", list, err)
	}
	wantField(t, st.DeletePrice(ctx, "", "pro", period(t, "2026-03")), "effective_from")
	if err := st.DeletePrice(ctx, "", "pro", period(t, "2026-07")); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("delete of no version: %v", err)
	}
	if err := st.DeletePrice(ctx, "", "pro", period(t, "2026-06")); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.PriceAt(ctx, "", "pro", period(t, "2026-09")); got.MonthlyFee != 900 {
		t.Fatalf("after delete: %+v", got)
	}
}

func TestPriceValidation(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	if err := db.Tenants.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: "gold"}); err != nil {
		t.Fatal(err)
	}
	now := billing.PeriodOf(time.Now()).String()
	ok := func() *billing.Price {
		return &billing.Price{Plan: "pro", EffectiveFrom: now, Currency: "eur", UnitPrice: 1, UnitRequests: 1}
	}
	for field, p := range map[string]func(*billing.Price){
		"currency":          func(p *billing.Price) { p.Currency = "EUR" },
		"monthly_fee":       func(p *billing.Price) { p.MonthlyFee = -1 },
		"included_requests": func(p *billing.Price) { p.IncludedRequests = -1 },
		"unit_price":        func(p *billing.Price) { p.UnitPrice = -1 },
		"unit_requests":     func(p *billing.Price) { p.UnitRequests = -5 },
		"effective_from":    func(p *billing.Price) { p.EffectiveFrom = "2026-13" },
		"plan":              func(p *billing.Price) { p.Plan = "gold" }, // a consumer plan, not a platform one
		"per_consumer":      func(p *billing.Price) { p.TenantID, p.Plan, p.PerConsumer = tn.ID, "gold", true },
	} {
		bad := ok()
		p(bad)
		wantField(t, db.Store.SetPrice(ctx, bad), field)
	}
	consumer := ok()
	consumer.TenantID, consumer.Plan = tn.ID, "gold"
	if err := db.Store.SetPrice(ctx, consumer); err != nil {
		t.Fatal(err)
	}
	wrongTenant := ok()
	wrongTenant.TenantID = tn.ID // "pro" is no plan of the tenant's
	wantField(t, db.Store.SetPrice(ctx, wrongTenant), "plan")
	platform, _ := db.Store.ListPrices(ctx, "")
	own, _ := db.Store.ListPrices(ctx, tn.ID)
	if len(platform) != 3 || len(own) != 1 || own[0].TenantID != tn.ID || own[0].Plan != "gold" {
		t.Fatalf("scopes mixed: platform %+v, tenant %+v", platform, own)
	}
}

// A past month is exported with the plan the tenant was on at its end, whatever the
// tenant's plan became since; a plan without a version in effect is exported unpriced.
func TestExportPlanHistory(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	_, err := db.Tenants.Pool().Exec(ctx, `INSERT INTO tenant_plan_history (tenant_id, since, plan)
		VALUES ($1, '2024-01-10T00:00:00Z', 'free'), ($1, '2024-06-20T00:00:00Z', 'enterprise')`, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	may, june := time.Date(2024, 5, 3, 0, 0, 0, 0, time.UTC), time.Date(2024, 6, 3, 0, 0, 0, 0, time.UTC)
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(tn.ID, may, "r", "c1", 200, true, 20_000),
		billingtest.Record(tn.ID, june, "r", "c1", 200, true, 1000),
		billingtest.Record(tn.ID, time.Now(), "r", "c1", 200, true, 1),
	))
	planOf := func(p billing.Period) billing.ExportRow {
		t.Helper()
		rows, err := db.Store.Export(ctx, p)
		if err != nil || len(rows) != 1 {
			t.Fatalf("%s: %+v %v", p, rows, err)
		}
		return rows[0]
	}
	if r := planOf(billing.PeriodOf(may)); r.Plan != "free" || r.Included != 10_000 || r.Status != billing.StatusFree {
		t.Fatalf("May: %+v", r)
	}
	if r := planOf(billing.PeriodOf(june)); r.Plan != "enterprise" || r.ConsumerID != "c1" || r.Amount != 10 {
		t.Fatalf("June: %+v", r) // enterprise is per consumer: 1,000 at 10 per 1,000
	}
	up := *tn
	up.PlatformPlan = "unlimited"
	if err := db.Tenants.UpdateTenant(ctx, &up); err != nil {
		t.Fatal(err)
	}
	if r := planOf(billing.PeriodOf(may)); r.Plan != "free" {
		t.Fatalf("May changed with today's plan: %+v", r)
	}
	r := planOf(billing.PeriodOf(time.Now()))
	if r.Plan != "unlimited" || r.Status != billing.StatusUnpriced || r.Amount != 0 || r.Currency != "" || r.Requests != 1 {
		t.Fatalf("this month on unlimited: %+v", r)
	}
}

// Unpriced rows are listed with amount 0 and no currency, and left out of the totals; a
// monthly fee is billed on top of the overage.
func TestExportUnpricedAndFee(t *testing.T) {
	db := billingtest.Open(t)
	free := db.Tenant(t, "free-co", "free")
	open := db.Tenant(t, "open-co", "unlimited")
	now := time.Now().UTC()
	if err := db.Store.SetPrice(ctx, &billing.Price{Plan: "free", EffectiveFrom: billing.PeriodOf(now).String(),
		Currency: "usd", MonthlyFee: 500, IncludedRequests: 10, UnitPrice: 3, UnitRequests: 1}); err != nil {
		t.Fatal(err)
	}
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(free.ID, now, "r", "", 200, true, 12),
		billingtest.Record(open.ID, now, "r", "", 200, true, 99),
	))
	p := billing.PeriodOf(now)
	rows, err := db.Store.Export(ctx, p)
	if err != nil || len(rows) != 2 {
		t.Fatalf("%+v %v", rows, err)
	}
	if r := rows[0]; r.Tenant != "free-co" || r.Amount != 506 || r.MonthlyFee != 500 || r.Overage != 2 || r.Status != billing.StatusPriced {
		t.Fatalf("free-co: %+v", r)
	}
	if r := rows[1]; r.Tenant != "open-co" || r.Amount != 0 || r.Currency != "" || r.Status != billing.StatusUnpriced || r.Billable != 99 {
		t.Fatalf("open-co: %+v", r)
	}
	var js bytes.Buffer
	if err := billing.WriteJSON(&js, p, rows); err != nil {
		t.Fatal(err)
	}
	var doc billing.ExportDocument
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Totals) != 1 || doc.Totals[0] != (billing.CurrencyTotal{Currency: "usd", Requests: 12, Billable: 12, Amount: 506}) {
		t.Fatalf("totals: %+v", doc.Totals)
	}
	var csv bytes.Buffer
	if err := billing.WriteCSV(&csv, rows); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(csv.Bytes(), []byte(",open-co,"+open.ID+",,unlimited,99,99,0,0,0,0,0,,unpriced,0,0,0,0,0,0,0\n")) {
		t.Fatalf("csv:\n%s", csv.Bytes())
	}
}

// A tenant's bill of its consumers: a row per consumer with usage, priced by the version
// of its consumer plan; unpriced without one or without a plan.
func TestConsumerExport(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	other := db.Tenant(t, "other", "pro")
	consumers := map[string]string{"gold": "", "silver": "", "": ""}
	for plan := range consumers {
		if plan != "" {
			if err := db.Tenants.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: plan}); err != nil {
				t.Fatal(err)
			}
		}
		c := &tenants.Consumer{TenantID: tn.ID, Name: "on-" + plan, Plan: plan}
		if err := db.Tenants.CreateConsumer(ctx, c); err != nil {
			t.Fatal(err)
		}
		consumers[plan] = c.ID
	}
	now := time.Now().UTC()
	p := billing.PeriodOf(now)
	if err := db.Store.SetPrice(ctx, &billing.Price{TenantID: tn.ID, Plan: "gold", EffectiveFrom: p.String(),
		Currency: "eur", MonthlyFee: 100, UnitPrice: 1, UnitRequests: 1}); err != nil {
		t.Fatal(err)
	}
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(tn.ID, now, "r", consumers["gold"], 200, true, 5),
		billingtest.Record(tn.ID, now, "r", consumers["silver"], 200, true, 6),
		billingtest.Record(tn.ID, now, "r", consumers[""], 200, true, 7),
		billingtest.Record(tn.ID, now, "r", "", 200, true, 8),
		billingtest.Record(other.ID, now, "r", "x", 200, true, 9),
	))
	rows, err := db.Store.ConsumerExport(ctx, tn.ID, p)
	if err != nil || len(rows) != 3 {
		t.Fatalf("%+v %v", rows, err)
	}
	for _, r := range rows {
		if want := map[string]string{consumers["gold"]: "on-gold", consumers["silver"]: "on-silver", consumers[""]: "on-"}[r.ConsumerID]; r.ConsumerName != want {
			t.Errorf("consumer %s named %q, want %q", r.ConsumerID, r.ConsumerName, want)
		}
		priced := r.ConsumerID == consumers["gold"]
		if r.Tenant != "acme" || (r.Status == billing.StatusPriced) != priced {
			t.Errorf("row %+v", r)
		}
		if priced && (r.Amount != 105 || r.Currency != "eur" || r.Plan != "gold") {
			t.Errorf("gold: %+v", r)
		}
	}
	// A version that charges nothing makes the plan free, as the portal calls it; a plan
	// with no version stays unpriced.
	if err := db.Store.SetPrice(ctx, &billing.Price{TenantID: tn.ID, Plan: "silver", EffectiveFrom: p.String(), Currency: "eur"}); err != nil {
		t.Fatal(err)
	}
	rows, err = db.Store.ConsumerExport(ctx, tn.ID, p)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, r := range rows {
		status[r.ConsumerName] = r.Status + " " + r.Currency
	}
	if status["on-gold"] != "priced eur" || status["on-silver"] != "free eur" || status["on-"] != "unpriced " {
		t.Errorf("statuses %v", status)
	}
	var csv bytes.Buffer
	if err := billing.WriteConsumerCSV(&csv, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.SplitN(csv.String(), "\n", 2)[0], ",function_amount,consumer_name") || !strings.Contains(csv.String(), ",silver,") ||
		!strings.Contains(csv.String(), ",eur,free,0,0,0,0,0,1000,0,on-silver\n") {
		t.Errorf("consumer csv:\n%s", csv.String())
	}
	if rows, err := db.Store.ConsumerExport(ctx, tn.ID, period(t, "2020-01")); err != nil || len(rows) != 0 {
		t.Fatalf("a month without usage: %+v %v", rows, err)
	}
}

// A bill that would not fit in int64 fails the export with an error naming the tenant,
// never a negative amount; the largest price on ordinary usage exports exactly.
func TestExportOverflow(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "bigco", "metered")
	now := time.Now().UTC()
	p := billing.PeriodOf(now)
	if err := db.Store.SetPrice(ctx, &billing.Price{Plan: "metered", EffectiveFrom: p.String(), Currency: "usd",
		MonthlyFee: billing.MaxUnitAmount, UnitPrice: billing.MaxUnitAmount, UnitRequests: 1}); err != nil {
		t.Fatal(err)
	}
	if err := db.Store.SetPrice(ctx, &billing.Price{Plan: "metered", EffectiveFrom: p.String(), Currency: "usd",
		UnitPrice: 4_600_000_000_000_000_000, UnitRequests: 1}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("4.6e18 per request: %v", err)
	}
	db.Fold(t, billingtest.Batch(1, billingtest.Record(tn.ID, now, "r", "", 200, true, 1000)))
	rows, err := db.Store.Export(ctx, p)
	if err != nil || len(rows) != 1 || rows[0].Amount != billing.MaxUnitAmount*1001 {
		t.Fatalf("1000 requests at the largest price: %+v %v", rows, err)
	}
	db.Fold(t, billingtest.Batch(2, billingtest.Record(tn.ID, now, "r", "", 200, true, 100_000_000_000)))
	rows, err = db.Store.Export(ctx, p)
	if tenants.ErrorCode(err) != tenants.EValidation || rows != nil || !strings.Contains(err.Error(), "bigco") {
		t.Fatalf("1e11 requests at 99,999,999 each: rows %+v, err %v", rows, err)
	}
}
