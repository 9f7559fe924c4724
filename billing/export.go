package billing

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"sort"
	"strconv"
)

// ExportHeader is the CSV header row of an export.
var ExportHeader = []string{
	"period", "tenant", "tenant_id", "consumer_id", "plan", "requests", "billable",
	"included", "overage", "unit_price", "unit_requests", "amount", "currency", "status", "monthly_fee",
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
	cw := csv.NewWriter(w)
	if err := cw.Write(ExportHeader); err != nil {
		return err
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for i := range rows {
		r := &rows[i]
		if err := cw.Write([]string{
			r.Period, r.Tenant, r.TenantID, r.ConsumerID, r.Plan, i64(r.Requests), i64(r.Billable),
			i64(r.Included), i64(r.Overage), i64(r.UnitPrice), i64(r.UnitRequests), i64(r.Amount), r.Currency,
			r.Status, i64(r.MonthlyFee),
		}); err != nil {
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
	Amount   int64  `json:"amount"`
}

// WriteJSON writes rows as an ExportDocument; like WriteCSV it is deterministic. Unpriced
// rows are listed but in no total: they have no currency to be summed in.
func WriteJSON(w io.Writer, p Period, rows []ExportRow) error {
	doc := ExportDocument{Period: p.String(), Totals: []CurrencyTotal{}, Items: rows}
	if doc.Items == nil {
		doc.Items = []ExportRow{}
	}
	byCur := map[string]*CurrencyTotal{}
	for i := range rows {
		if rows[i].Status == StatusUnpriced {
			continue
		}
		t := byCur[rows[i].Currency]
		if t == nil {
			t = &CurrencyTotal{Currency: rows[i].Currency}
			byCur[t.Currency] = t
		}
		t.Requests += rows[i].Requests
		t.Billable += rows[i].Billable
		t.Amount += rows[i].Amount
	}
	for _, t := range byCur {
		doc.Totals = append(doc.Totals, *t)
	}
	sort.Slice(doc.Totals, func(i, j int) bool { return doc.Totals[i].Currency < doc.Totals[j].Currency })
	enc := json.NewEncoder(w)
	return enc.Encode(doc)
}
