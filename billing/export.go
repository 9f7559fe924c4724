package billing

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"slices"
	"sort"
	"strconv"

	"tollgate/tenants"
)

// ExportHeader is the CSV header row of an export.
var ExportHeader = []string{
	"period", "tenant", "tenant_id", "consumer_id", "plan", "requests", "billable",
	"included", "overage", "unit_price", "unit_requests", "amount", "currency", "status", "monthly_fee",
	"function_us", "function_included_ms", "function_overage_us", "function_unit_price", "function_unit_ms",
	"function_amount",
}

// SortExport puts rows in export order: tenant slug, tenant id, consumer id.
func SortExport(rows []ExportRow) {
	sort.Slice(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.TenantID != b.TenantID {
			return a.TenantID < b.TenantID
		}
		return a.ConsumerID < b.ConsumerID
	})
}

// WriteCSV writes rows as CSV with ExportHeader. The output depends on the rows only (no
// timestamps), so the same period exported twice is the same bytes.
func WriteCSV(w io.Writer, rows []ExportRow) error {
	return writeCSV(w, rows, false)
}

// WriteConsumerCSV writes a tenant's bill of its consumers: WriteCSV's columns, then
// consumer_name.
func WriteConsumerCSV(w io.Writer, rows []ExportRow) error {
	return writeCSV(w, rows, true)
}

func writeCSV(w io.Writer, rows []ExportRow, names bool) error {
	cw := csv.NewWriter(w)
	header := ExportHeader
	if names {
		header = append(slices.Clip(header), "consumer_name")
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for i := range rows {
		r := &rows[i]
		rec := []string{
			r.Period, r.Tenant, r.TenantID, r.ConsumerID, r.Plan, i64(r.Requests), i64(r.Billable),
			i64(r.Included), i64(r.Overage), i64(r.UnitPrice), i64(r.UnitRequests), i64(r.Amount), r.Currency,
			r.Status, i64(r.MonthlyFee),
			i64(r.FunctionUS), i64(r.FunctionIncludedMS), i64(r.FunctionOverageUS), i64(r.FunctionUnitPrice),
			i64(r.FunctionUnitMS), i64(r.FunctionAmount),
		}
		if names {
			rec = append(rec, r.ConsumerName)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ExportDocument is the JSON form of an export.
type ExportDocument struct {
	Period string          `json:"period"`
	Totals []CurrencyTotal `json:"totals"` // one per currency, in currency order
	Items  []ExportRow     `json:"items"`
}

// CurrencyTotal sums an export's priced rows of one currency.
type CurrencyTotal struct {
	Currency string `json:"currency"`
	Requests int64  `json:"requests"`
	Billable int64  `json:"billable"`
	// FunctionUS is the function time (µs) of the priced rows.
	FunctionUS int64 `json:"function_us"`
	Amount     int64 `json:"amount"`
}

// WriteJSON writes rows as an ExportDocument; like WriteCSV it is deterministic. Unpriced
// rows are listed but in no total: they have no currency to be summed in. A total that
// would leave int64's range is EValidation on "amount", and nothing is written.
func WriteJSON(w io.Writer, p Period, rows []ExportRow) error {
	doc := ExportDocument{Period: p.String(), Items: rows}
	if doc.Items == nil {
		doc.Items = []ExportRow{}
	}
	var err error
	if doc.Totals, err = Totals(rows); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	return enc.Encode(doc)
}

// Totals sums the priced rows per currency, in currency order, with every sum checked:
// EValidation on "amount" when one would not fit in int64.
func Totals(rows []ExportRow) ([]CurrencyTotal, error) {
	byCur := map[string]*CurrencyTotal{}
	for i := range rows {
		r := &rows[i]
		if r.Status == StatusUnpriced {
			continue
		}
		t := byCur[r.Currency]
		if t == nil {
			t = &CurrencyTotal{Currency: r.Currency}
			byCur[t.Currency] = t
		}
		var err error
		if t.Requests, err = AddAmounts(t.Requests, r.Requests); err != nil {
			return nil, err
		}
		if t.Billable, err = AddAmounts(t.Billable, r.Billable); err != nil {
			return nil, err
		}
		if t.FunctionUS, err = AddAmounts(t.FunctionUS, r.FunctionUS); err != nil {
			return nil, err
		}
		if t.Amount, err = AddAmounts(t.Amount, r.Amount); err != nil {
			return nil, tenants.Invalid("amount", "the export's total in %s does not fit in 64 bits of minor units", r.Currency)
		}
	}
	out := make([]CurrencyTotal, 0, len(byCur))
	for _, t := range byCur {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Currency < out[j].Currency })
	return out, nil
}
