package billing_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/tenants"
)

func TestParsePeriod(t *testing.T) {
	for _, c := range []struct {
		in    string
		ok    bool
		start string
	}{
		{"2024-01", true, "2024-01-01T00:00:00Z"},
		{"2024-12", true, "2024-12-01T00:00:00Z"},
		{"2024-13", false, ""}, {"2024-1", false, ""}, {"24-01", false, ""}, {"", false, ""},
		{"2024-01-01", false, ""}, {"2024/01", false, ""},
	} {
		p, err := billing.ParsePeriod(c.in)
		if (err == nil) != c.ok {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if err != nil {
			if tenants.ErrorCode(err) != tenants.EInvalidRequest {
				t.Errorf("%q: code %s", c.in, tenants.ErrorCode(err))
			}
			continue
		}
		if p.Start().Format(time.RFC3339) != c.start || p.String() != c.in || !p.End().Equal(p.Start().AddDate(0, 1, 0)) {
			t.Errorf("%q: %v %v", c.in, p.Start(), p.End())
		}
	}
	if got := billing.PeriodOf(time.Date(2024, 2, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600))); got.String() != "2024-01" {
		t.Errorf("PeriodOf 2024-02-01T00:00+01:00 = %s, want 2024-01 (UTC)", got)
	}
}

func TestCharge(t *testing.T) {
	p := billing.Price{IncludedRequests: 1000, UnitPrice: 20, UnitRequests: 1000}
	for _, c := range []struct{ billable, overage, amount int64 }{
		{0, 0, 0}, {1000, 0, 0}, {1001, 1, 1}, {2000, 1000, 20}, {2001, 1001, 21}, {1_001_000, 1_000_000, 20_000},
	} {
		o, a, err := p.Charge(c.billable)
		if o != c.overage || a != c.amount || err != nil {
			t.Errorf("Charge(%d) = %d, %d, %v; want %d, %d", c.billable, o, a, err, c.overage, c.amount)
		}
	}
}

// A bill that would pass int64 is an error, never a wrapped negative amount; one that
// just fits is exact (the product is taken in 128 bits).
func TestChargeOverflow(t *testing.T) {
	huge := billing.Price{Plan: "huge", UnitPrice: 4_600_000_000_000_000_000, UnitRequests: 1}
	if _, a, err := huge.Bill(3); tenants.ErrorCode(err) != tenants.EValidation || a != 0 {
		t.Fatalf("3 requests at 4.6e18: amount %d, %v", a, err)
	}
	fee := billing.Price{Plan: "fee", MonthlyFee: math.MaxInt64, UnitPrice: 1, UnitRequests: 1}
	if _, a, err := fee.Bill(1); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("max fee plus a request: amount %d, %v", a, err)
	}
	capped := billing.Price{Plan: "capped", UnitPrice: billing.MaxUnitAmount, UnitRequests: 1000}
	billable := int64(math.MaxInt64 / billing.MaxUnitAmount * 1000)
	if _, a, err := capped.Bill(billable); err != nil || a <= 0 {
		t.Fatalf("the largest price on a near-overflow count: %d, %v", a, err)
	}
	if _, a, err := capped.Bill(math.MaxInt64); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("the largest price on MaxInt64 requests: %d, %v", a, err)
	}
	rows := []billing.ExportRow{{Currency: "usd", Status: billing.StatusPriced, Amount: math.MaxInt64 - 1},
		{Currency: "usd", Status: billing.StatusPriced, Amount: 2}}
	var buf bytes.Buffer
	if err := billing.WriteJSON(&buf, billing.PeriodOf(time.Now()), rows); tenants.ErrorCode(err) != tenants.EValidation || buf.Len() != 0 {
		t.Fatalf("an overflowing total: %v, wrote %q", err, buf.String())
	}
	tot, err := billing.Totals(rows[1:])
	if err != nil || len(tot) != 1 || tot[0].Amount != 2 {
		t.Fatalf("totals %+v: %v", tot, err)
	}
}

// Prices over Stripe's largest unit amount are refused.
func TestPriceBounds(t *testing.T) {
	now := time.Now()
	for _, p := range []billing.Price{
		{Plan: "a", Currency: "usd", MonthlyFee: math.MaxInt64},
		{Plan: "a", Currency: "usd", MonthlyFee: billing.MaxUnitAmount + 1},
		{Plan: "a", Currency: "usd", UnitPrice: 4_600_000_000_000_000_000, UnitRequests: 1},
		{Plan: "a", Currency: "usd", UnitPrice: billing.MaxUnitAmount + 1},
	} {
		p.EffectiveFrom = billing.PeriodOf(now).String()
		if err := p.Validate(now); tenants.ErrorCode(err) != tenants.EValidation {
			t.Errorf("%+v: %v", p, err)
		}
	}
	ok := billing.Price{Plan: "a", Currency: "usd", MonthlyFee: billing.MaxUnitAmount, UnitPrice: billing.MaxUnitAmount,
		EffectiveFrom: billing.PeriodOf(now).String()}
	if err := ok.Validate(now); err != nil {
		t.Fatal(err)
	}
}
