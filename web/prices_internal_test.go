package web

import "testing"

func TestAmount(t *testing.T) {
	for _, c := range []struct {
		in, currency string
		want         int64
		ok           bool
	}{
		{"", "usd", 0, true},
		{"15", "usd", 1500, true},
		{"15.5", "usd", 1550, true},
		{"0.05", "usd", 5, true},
		{".5", "usd", 50, true},
		{"1,234.56", "usd", 123456, true},
		{"300", "jpy", 300, true},
		{"3.5", "jpy", 0, false},
		{"1.234", "usd", 0, false},
		{"-1", "usd", 0, false},
		{"+1", "usd", 0, false},
		{"1.+5", "usd", 0, false},
		{"abc", "usd", 0, false},
		{"99999999999999999999", "usd", 0, false},
	} {
		errs := map[string]string{}
		got := amount(c.in, c.currency, "fee", "The fee", errs)
		if got != c.want || (len(errs) == 0) != c.ok {
			t.Errorf("amount(%q, %s) = %d, errors %v; want %d, ok %v", c.in, c.currency, got, errs, c.want, c.ok)
		}
	}
}

// FuzzAmount: whatever is typed in a price field is read without panicking; a refused one
// is 0 with a message, an accepted one is never negative.
func FuzzAmount(f *testing.F) {
	for _, s := range []string{"15", "0.05", "1,234.56", "-1", "1e3", "99999999999999999999", ".", "1.2.3"} {
		f.Add(s, "usd")
	}
	f.Add("300", "jpy")
	f.Fuzz(func(t *testing.T, in, currency string) {
		errs := map[string]string{}
		n := amount(in, currency, "fee", "The fee", errs)
		if len(errs) > 0 {
			if n != 0 {
				t.Fatalf("amount(%q) = %d with an error", in, n)
			}
			return
		}
		if n < 0 {
			t.Fatalf("amount(%q, %q) = %d", in, currency, n)
		}
	})
}
