// Package billing is Tollgate's usage and billing domain: the hourly rollups it folds the
// edges' usage batches into (the batch format and the one billable rule are infra/usage's),
// the usage report and monthly export the api serves (with ready-to-mount Fiber handlers),
// prices, and the reconciliation of what edges counted with what was folded and pushed
// to Stripe.
//
// It does no I/O of its own: billing/postgres stores rollups, prices and pushes,
// billing/nats carries batches and edge totals over JetStream, billing/stripe pushes
// usage to Stripe, and billing/cli wires them into `tollgate billing`. The edge's meter
// (edge/meter) imports none of billing: what it shares with billing is infra/usage.
package billing

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"

	"tollgate/infra/usage"
	"tollgate/tenants"
)

// ClassLabel is "2xx" for class 2, "other" for 0.
func ClassLabel(class int) string {
	if class < 1 || class > 5 {
		return "other"
	}
	return string(rune('0'+class)) + "xx"
}

// Period is a calendar month in UTC, the unit of export and reconciliation.
type Period struct {
	Year  int
	Month time.Month
}

// ParsePeriod reads "YYYY-MM": EInvalidRequest when it is anything else.
func ParsePeriod(s string) (Period, error) {
	t, err := time.Parse("2006-01", s)
	if err != nil || len(s) != 7 {
		return Period{}, tenants.Errorf(tenants.EInvalidRequest, "period %q must be a month as YYYY-MM", s)
	}
	return Period{Year: t.Year(), Month: t.Month()}, nil
}

// PeriodOf is the period holding t.
func PeriodOf(t time.Time) Period {
	t = t.UTC()
	return Period{Year: t.Year(), Month: t.Month()}
}

// Start is the first instant of the period (00:00:00 UTC on the 1st).
func (p Period) Start() time.Time { return time.Date(p.Year, p.Month, 1, 0, 0, 0, 0, time.UTC) }

// End is the first instant after the period.
func (p Period) End() time.Time { return p.Start().AddDate(0, 1, 0) }

func (p Period) String() string { return fmt.Sprintf("%04d-%02d", p.Year, int(p.Month)) }

// Hour truncates t to its UTC hour, the grain of every rollup.
func Hour(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// Price is what a platform plan costs: an allowance of billable requests included each
// period, then UnitPrice minor units of Currency per UnitRequests billable requests over
// it (rounded up to a whole minor unit); and, as a unit of its own, an allowance of
// function time in milliseconds, then FunctionUnitPrice minor units per FunctionUnitMS
// milliseconds over it, counted from the metered microseconds (rounded up to a whole
// minor unit, separately from the requests' charge). With PerConsumer the allowances and
// the amount apply to each consumer of the tenant separately.
type Price struct {
	TenantID string `json:"tenant_id,omitempty"` // "": a platform plan's price
	Plan     string `json:"plan"`
	// EffectiveFrom is the first month ("YYYY-MM") this version of the price applies to.
	EffectiveFrom    string `json:"effective_from"`
	Currency         string `json:"currency"`    // ISO 4217, lowercase ("usd")
	MonthlyFee       int64  `json:"monthly_fee"` // minor units, charged every month on the plan
	IncludedRequests int64  `json:"included_requests"`
	UnitPrice        int64  `json:"unit_price"` // minor units (cents) per UnitRequests
	UnitRequests     int64  `json:"unit_requests"`
	PerConsumer      bool   `json:"per_consumer"`
	// Function time: IncludedFunctionMS milliseconds each period free, then
	// FunctionUnitPrice minor units per FunctionUnitMS milliseconds.
	IncludedFunctionMS int64 `json:"included_function_ms"`
	FunctionUnitPrice  int64 `json:"function_unit_price"`
	FunctionUnitMS     int64 `json:"function_unit_ms"`
}

// MaxUnitAmount is the largest amount in minor units one price may charge (a monthly fee,
// a unit price): Stripe refuses a larger unit_amount, and keeping every factor of a bill
// this small is what lets its products be checked rather than trusted.
const MaxUnitAmount = 99_999_999

// Charge is the overage over the price's allowance and its amount in minor units, rounded
// up. The product is taken in 128 bits: an amount past int64 is EValidation on "amount",
// never a wrapped (negative) number.
func (p *Price) Charge(billable int64) (overage, amount int64, err error) {
	overage = billable - p.IncludedRequests
	if overage <= 0 || billable < 0 || p.IncludedRequests < 0 {
		return 0, 0, nil
	}
	if p.UnitPrice < 0 {
		return 0, 0, tenants.Invalid("unit_price", "must be ≥ 0")
	}
	unit := p.UnitRequests
	if unit <= 0 {
		unit = 1
	}
	hi, lo := bits.Mul64(uint64(overage), uint64(p.UnitPrice))
	lo, carry := bits.Add64(lo, uint64(unit-1), 0)
	hi += carry
	if hi >= uint64(unit) {
		return 0, 0, overflow(p)
	}
	q, _ := bits.Div64(hi, lo, uint64(unit))
	if q > math.MaxInt64 {
		return 0, 0, overflow(p)
	}
	return overage, int64(q), nil
}

// FunctionCharge is the function time over the price's allowance, in microseconds, and
// its amount in minor units, rounded up: ceil(overage µs × FunctionUnitPrice ÷
// (FunctionUnitMS × 1000)), in 128 bits like Charge.
func (p *Price) FunctionCharge(functionUS int64) (overageUS, amount int64, err error) {
	if functionUS <= 0 || p.IncludedFunctionMS < 0 {
		return 0, 0, nil
	}
	if p.IncludedFunctionMS > MaxFunctionMS {
		return 0, 0, nil // an allowance past any month's function time
	}
	overageUS = functionUS - p.IncludedFunctionMS*1000
	if overageUS <= 0 {
		return 0, 0, nil
	}
	if p.FunctionUnitPrice < 0 {
		return 0, 0, tenants.Invalid("function_unit_price", "must be ≥ 0")
	}
	unitMS := p.FunctionUnitMS
	if unitMS <= 0 {
		unitMS = DefaultFunctionUnitMS
	}
	if unitMS > MaxFunctionMS {
		unitMS = MaxFunctionMS
	}
	unit := uint64(unitMS) * 1000
	hi, lo := bits.Mul64(uint64(overageUS), uint64(p.FunctionUnitPrice))
	lo, carry := bits.Add64(lo, unit-1, 0)
	hi += carry
	if hi >= unit {
		return 0, 0, overflow(p)
	}
	q, _ := bits.Div64(hi, lo, unit)
	if q > math.MaxInt64 {
		return 0, 0, overflow(p)
	}
	return overageUS, int64(q), nil
}

// MaxFunctionMS bounds a price's milliseconds (allowance, unit) so that they are
// microseconds in int64: about 285 years of function time.
const MaxFunctionMS = math.MaxInt64 / 1000

func overflow(p *Price) error {
	return tenants.Invalid("amount", "the bill of plan %q does not fit in 64 bits of minor units: its price cannot be billed", p.Plan)
}

// AddAmounts is a + b, EValidation on "amount" when the sum leaves int64's range.
func AddAmounts(a, b int64) (int64, error) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, tenants.Invalid("amount", "a total of %d and %d minor units does not fit in 64 bits", a, b)
	}
	return s, nil
}

// UsageService answers the questions the api and finance ask of the rollups.
type UsageService interface {
	// Usage reports a tenant's usage for a query: EInvalidRequest for a bad range.
	Usage(ctx context.Context, q UsageQuery) (*UsageReport, error)
	// Export is every tenant's bill for a period, in ExportRow order.
	Export(ctx context.Context, p Period) ([]ExportRow, error)
}

// Granularity of a usage report.
const (
	GranularityHour = "hour"
	GranularityDay  = "day"
)

// Dimensions a usage report can be grouped by besides time.
const (
	GroupRoute    = "route"
	GroupConsumer = "consumer"
	GroupStatus   = "status"
)

// UsageQuery asks for one tenant's usage over [From, To), both on whole UTC hours,
// bucketed by Granularity (UTC hours or UTC days; a day bucket is clipped to the range)
// and optionally grouped by route, consumer and status class.
type UsageQuery struct {
	TenantID    string
	From, To    time.Time
	Granularity string
	ByRoute     bool
	ByConsumer  bool
	ByStatus    bool
}

// UsageReport is the answer to a UsageQuery: the range's total and one item per bucket
// and group that saw traffic, ordered by start, route, consumer, status.
type UsageReport struct {
	From        time.Time    `json:"from"`
	To          time.Time    `json:"to"`
	Granularity string       `json:"granularity"`
	Total       usage.Counts `json:"total"`
	Items       []UsageItem  `json:"items"`
}

// UsageItem is the usage of one time bucket (and group). RouteID, ConsumerID and Status
// are present only when the report is grouped by them; an empty ConsumerID is traffic
// without an authenticated consumer, an empty RouteID traffic that matched no route.
type UsageItem struct {
	Start      time.Time `json:"start"`
	RouteID    *string   `json:"route_id,omitempty"`
	ConsumerID *string   `json:"consumer_id,omitempty"`
	Status     string    `json:"status,omitempty"`
	usage.Counts
}

// Query bounds.
const (
	MaxHourlyRange = 31 * 24 * time.Hour
	MaxDailyRange  = 366 * 24 * time.Hour
)

// Validate checks the range and fills defaults (granularity hour).
func (q *UsageQuery) Validate() error {
	if q.Granularity == "" {
		q.Granularity = GranularityHour
	}
	if q.Granularity != GranularityHour && q.Granularity != GranularityDay {
		return tenants.Errorf(tenants.EInvalidRequest, "granularity must be %q or %q", GranularityHour, GranularityDay)
	}
	q.From, q.To = q.From.UTC(), q.To.UTC()
	if !q.From.Equal(Hour(q.From)) || !q.To.Equal(Hour(q.To)) {
		return tenants.Errorf(tenants.EInvalidRequest, "from and to must be whole UTC hours (usage is kept per hour)")
	}
	if !q.To.After(q.From) {
		return tenants.Errorf(tenants.EInvalidRequest, "to must be after from")
	}
	max := MaxHourlyRange
	if q.Granularity == GranularityDay {
		max = MaxDailyRange
	}
	if q.To.Sub(q.From) > max {
		return tenants.Errorf(tenants.EInvalidRequest, "a %s-granularity range may span at most %d days", q.Granularity, int(max/(24*time.Hour)))
	}
	return nil
}

// ParseGroupBy reads a comma-separated group_by list into q.
func (q *UsageQuery) ParseGroupBy(s string) error {
	if s == "" {
		return nil
	}
	for _, g := range strings.Split(s, ",") {
		switch strings.TrimSpace(g) {
		case GroupRoute:
			q.ByRoute = true
		case GroupConsumer:
			q.ByConsumer = true
		case GroupStatus:
			q.ByStatus = true
		default:
			return tenants.Errorf(tenants.EInvalidRequest, "group_by %q: must be a comma-separated list of route, consumer, status", g)
		}
	}
	return nil
}

// ExportRow is one line of a period's bill: a tenant, or one consumer of a tenant whose
// plan is priced per consumer (in a tenant's bill of its consumers, one consumer). Rows
// are ordered by tenant slug, tenant id, consumer id.
type ExportRow struct {
	Period     string `json:"period"`
	Tenant     string `json:"tenant"` // the slug; empty when the tenant was deleted
	TenantID   string `json:"tenant_id"`
	ConsumerID string `json:"consumer_id"` // only on per-consumer plans
	// ConsumerName is the consumer's name, in a tenant's bill of its consumers only
	// (empty for a consumer deleted since).
	ConsumerName string `json:"consumer_name,omitempty"`
	Plan         string `json:"plan"`
	Requests     int64  `json:"requests"`
	Billable     int64  `json:"billable"`
	Included     int64  `json:"included"`
	Overage      int64  `json:"overage"`
	UnitPrice    int64  `json:"unit_price"`
	UnitRequests int64  `json:"unit_requests"`
	MonthlyFee   int64  `json:"monthly_fee"`
	// Function time: metered (µs, every status: the tenant's code ran), the allowance
	// (ms), the time over it (µs), its price and unit, and its part of Amount.
	FunctionUS         int64  `json:"function_us"`
	FunctionIncludedMS int64  `json:"function_included_ms"`
	FunctionOverageUS  int64  `json:"function_overage_us"`
	FunctionUnitPrice  int64  `json:"function_unit_price"`
	FunctionUnitMS     int64  `json:"function_unit_ms"`
	FunctionAmount     int64  `json:"function_amount"`
	Amount             int64  `json:"amount"` // minor units of Currency: the monthly fee plus the overages' charges
	Currency           string `json:"currency"`
	// Status is StatusPriced, StatusFree when the version in effect charges nothing, or
	// StatusUnpriced when the plan had no price version in effect for the period (then
	// every price field is 0 and Currency is empty).
	Status string `json:"status"`
}

// Push is one Billing Meter event for Stripe: a tenant's usage of one meter in one hour
// (billable requests, or function time in µs), or (revision 2 and later) what folded
// into the hour after it was first pushed.
type Push struct {
	TenantID   string
	Meter      string // MeterRequests or MeterFunctionUS
	Hour       time.Time
	Revision   int
	Identifier string // PushIdentifier or FunctionPushIdentifier of (TenantID, Hour, Revision)
	CustomerID string // Stripe customer
	Quantity   int64
	Status     string // PushPending, PushPushed, PushFailed
	Attempts   int
	LastError  string
}

// Push meters: what a push carries. Each is its own Stripe meter event name.
const (
	// MeterRequests: billable requests.
	MeterRequests = "requests"
	// MeterFunctionUS: function time in whole microseconds, as folded — the unit the
	// edges meter in, so a push never rounds and an hour's late revisions add up to the
	// rollup exactly.
	MeterFunctionUS = "function_us"
)

// Push states.
const (
	PushPending = "pending"
	PushPushed  = "pushed"
	PushFailed  = "failed"
)

// PushIdentifier is the meter event identifier of a tenant's hour of billable requests at
// a revision: deterministic, so every retry of the same push carries the same identifier
// and Stripe counts it once ("tollgate-<tenant id>-<YYYYMMDDHH>-r<revision>", under
// Stripe's 100 characters).
func PushIdentifier(tenantID string, hour time.Time, revision int) string {
	return fmt.Sprintf("tollgate-%s-%s-r%d", tenantID, hour.UTC().Format("2006010215"), revision)
}

// FunctionPushIdentifier is PushIdentifier's for function time
// ("tollgate-fn-<tenant id>-<YYYYMMDDHH>-r<revision>"): the two meters' pushes of an
// hour never share an identifier, so Stripe's dedupe cannot take one for a retry of the
// other, whatever the event names.
func FunctionPushIdentifier(tenantID string, hour time.Time, revision int) string {
	return fmt.Sprintf("tollgate-fn-%s-%s-r%d", tenantID, hour.UTC().Format("2006010215"), revision)
}

// MeterPushIdentifier is the identifier of a push of the meter: PushIdentifier or
// FunctionPushIdentifier.
func MeterPushIdentifier(meter, tenantID string, hour time.Time, revision int) string {
	if meter == MeterFunctionUS {
		return FunctionPushIdentifier(tenantID, hour, revision)
	}
	return PushIdentifier(tenantID, hour, revision)
}
