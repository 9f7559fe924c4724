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

// Function time is priced as its own unit: metered microseconds over the allowance in
// milliseconds, at a price per unit of milliseconds, rounded up to a whole minor unit on
// its own, and added to the monthly fee and the requests' charge.
func TestFunctionCharge(t *testing.T) {
	// 1 cent per 1,000 ms (a second) over 10 s included.
	p := billing.Price{Plan: "fn", IncludedRequests: 1000, UnitPrice: 20, UnitRequests: 1000,
		IncludedFunctionMS: 10_000, FunctionUnitPrice: 1, FunctionUnitMS: 1000}
	for _, c := range []struct{ us, overage, amount int64 }{
		{0, 0, 0}, {-5, 0, 0}, {10_000_000, 0, 0}, {10_000_001, 1, 1}, {11_000_000, 1_000_000, 1},
		{11_000_001, 1_000_001, 2}, {3_610_000_000, 3_600_000_000, 3600},
	} {
		o, a, err := p.FunctionCharge(c.us)
		if o != c.overage || a != c.amount || err != nil {
			t.Errorf("FunctionCharge(%d µs) = %d, %d, %v; want %d, %d", c.us, o, a, err, c.overage, c.amount)
		}
	}
	// Per millisecond: 3 minor units per ms, nothing included; 1 µs costs a whole unit.
	ms := billing.Price{Plan: "ms", FunctionUnitPrice: 3, FunctionUnitMS: 1}
	for _, c := range []struct{ us, amount int64 }{{1, 1}, {333, 1}, {334, 2}, {1000, 3}, {1001, 4}, {5_000_000, 15_000}} {
		if _, a, err := ms.FunctionCharge(c.us); a != c.amount || err != nil {
			t.Errorf("per ms: FunctionCharge(%d µs) = %d, %v; want %d", c.us, a, err, c.amount)
		}
	}
	p.MonthlyFee = 500
	b, err := p.BillUsage(2001, 11_000_001)
	if err != nil {
		t.Fatal(err)
	}
	// 500 fee + ceil(1001 × 20 / 1000) = 21 + ceil(1,000,001 µs × 1 / 1,000,000) = 2.
	if b.Overage != 1001 || b.FunctionOverageUS != 1_000_001 || b.FunctionAmount != 2 || b.Amount != 523 {
		t.Fatalf("BillUsage = %+v, want overage 1001, function 1000001 µs for 2, amount 523", b)
	}
	if o, a, err := p.Bill(2001); o != 1001 || a != 521 || err != nil {
		t.Fatalf("Bill without function time = %d, %d, %v", o, a, err)
	}
	// Past int64: an error, never a wrapped amount.
	huge := billing.Price{Plan: "huge", FunctionUnitPrice: math.MaxInt64, FunctionUnitMS: 1}
	if _, _, err := huge.FunctionCharge(math.MaxInt64); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("overflowing function charge: %v", err)
	}
	fits := billing.Price{Plan: "fits", FunctionUnitPrice: 99_999_999, FunctionUnitMS: 1}
	if _, a, err := fits.FunctionCharge(92_233_720_368_547); err != nil || a != 9_223_371_944_620_979_632 {
		t.Fatalf("largest function charge = %d, %v", a, err)
	}
}

func TestFunctionPriceValidation(t *testing.T) {
	now := time.Date(2024, 5, 10, 0, 0, 0, 0, time.UTC)
	base := billing.Price{Plan: "p", EffectiveFrom: "2024-05", Currency: "usd"}
	p := base
	if err := p.Validate(now); err != nil || p.FunctionUnitMS != billing.DefaultFunctionUnitMS {
		t.Fatalf("defaults: %v, function_unit_ms %d", err, p.FunctionUnitMS)
	}
	for field, mod := range map[string]func(*billing.Price){
		"included_function_ms": func(p *billing.Price) { p.IncludedFunctionMS = -1 },
		"function_unit_price":  func(p *billing.Price) { p.FunctionUnitPrice = billing.MaxUnitAmount + 1 },
		"function_unit_ms":     func(p *billing.Price) { p.FunctionUnitMS = -1 },
	} {
		p := base
		mod(&p)
		err := p.Validate(now)
		if tenants.ErrorCode(err) != tenants.EValidation || !bytes.Contains([]byte(err.Error()), []byte(field)) {
			t.Errorf("%s: %v", field, err)
		}
	}
}
