package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/billing"
	"tollgate/tenants"
)

// Prices and bills (tables prices and tenant_plan_history, migration 00015). A price
// version is a row keyed by scope (tenant_id NULL for the platform's plans), plan and the
// first month it applies to; the version of a month is the latest one not after it.

// PlatformAuditTenant is the tenant id under which changes to the platform's prices are
// audited: they belong to no tenant, and every audit entry needs one.
const PlatformAuditTenant = "00000000-0000-0000-0000-000000000000"

// WithClock is s with now as the clock that decides which months are still open to price
// changes, for tests; it shares s's pool and never closes it.
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.own, c.now = false, now
	return &c
}

func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now().UTC()
	}
	return time.Now().UTC()
}

// scope is the tenant_id of a scope's rows: NULL for the platform's.
func scope(tenantID string) (any, error) {
	if tenantID == "" {
		return nil, nil
	}
	if !validUUID(tenantID) {
		return nil, tenants.Errorf(tenants.ENotFound, "no tenant %q", tenantID)
	}
	return tenantID, nil
}

const priceColumns = `coalesce(tenant_id::text, ''), plan, to_char(effective_from, 'YYYY-MM'), currency,
	monthly_fee, included_requests, unit_price, unit_requests, per_consumer,
	included_function_ms, function_unit_price, function_unit_ms`

func scanPrice(row pgx.Row) (*billing.Price, error) {
	var p billing.Price
	err := row.Scan(&p.TenantID, &p.Plan, &p.EffectiveFrom, &p.Currency, &p.MonthlyFee,
		&p.IncludedRequests, &p.UnitPrice, &p.UnitRequests, &p.PerConsumer,
		&p.IncludedFunctionMS, &p.FunctionUnitPrice, &p.FunctionUnitMS)
	return &p, err
}

// ListPrices returns every version of the scope's prices, by plan, then month.
func (s *Store) ListPrices(ctx context.Context, tenantID string) ([]billing.Price, error) {
	sc, err := scope(tenantID)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+priceColumns+` FROM prices
		WHERE tenant_id IS NOT DISTINCT FROM $1::uuid ORDER BY plan, effective_from`, sc)
	if err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (billing.Price, error) {
		p, err := scanPrice(r)
		return *p, err
	})
	if err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	return out, nil
}

// SetPrice creates or replaces the version of p.Plan effective from p.EffectiveFrom:
// EValidation for a bad price, a month already past, or a plan the scope does not have.
func (s *Store) SetPrice(ctx context.Context, p *billing.Price) error {
	sc, err := scope(p.TenantID)
	if err != nil {
		return err
	}
	if err := p.Validate(s.clock()); err != nil {
		return err
	}
	from, _ := billing.ParsePeriod(p.EffectiveFrom)
	return s.priceTx(ctx, func(tx pgx.Tx) error {
		if err := planExists(ctx, tx, p.TenantID, p.Plan); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO prices (tenant_id, plan, effective_from, currency, monthly_fee,
				included_requests, unit_price, unit_requests, per_consumer,
				included_function_ms, function_unit_price, function_unit_ms)
			VALUES ($1::uuid, $2, $3::date, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT ON CONSTRAINT prices_key DO UPDATE SET currency = EXCLUDED.currency,
				monthly_fee = EXCLUDED.monthly_fee, included_requests = EXCLUDED.included_requests,
				unit_price = EXCLUDED.unit_price, unit_requests = EXCLUDED.unit_requests,
				per_consumer = EXCLUDED.per_consumer, included_function_ms = EXCLUDED.included_function_ms,
				function_unit_price = EXCLUDED.function_unit_price, function_unit_ms = EXCLUDED.function_unit_ms,
				created_at = now()`,
			sc, p.Plan, dateOf(from), p.Currency, p.MonthlyFee, p.IncludedRequests, p.UnitPrice, p.UnitRequests, p.PerConsumer,
			p.IncludedFunctionMS, p.FunctionUnitPrice, p.FunctionUnitMS)
		if err != nil {
			return fmt.Errorf("set price: %w", err)
		}
		return recordAudit(ctx, tx, p.TenantID, p.Plan+"/"+from.String())
	})
}

// DeletePrice removes a version that has not taken effect yet: ENotFound, EValidation
// (this month's or an earlier one, already billed from).
func (s *Store) DeletePrice(ctx context.Context, tenantID, plan string, from billing.Period) error {
	sc, err := scope(tenantID)
	if err != nil {
		return err
	}
	if !billing.PeriodOf(s.clock()).Before(from) {
		return tenants.Invalid("effective_from", "the version of %s is in effect: only a later month's version may be deleted (set a new version to change the price)", from)
	}
	return s.priceTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM prices WHERE tenant_id IS NOT DISTINCT FROM $1::uuid
			AND plan = $2 AND effective_from = $3::date`, sc, plan, dateOf(from))
		if err != nil {
			return fmt.Errorf("delete price: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return tenants.Errorf(tenants.ENotFound, "no price of plan %q from %s", plan, from)
		}
		return recordAudit(ctx, tx, tenantID, plan+"/"+from.String())
	})
}

// PriceAt is the version of the plan in effect in period p: ENotFound when unpriced.
func (s *Store) PriceAt(ctx context.Context, tenantID, plan string, p billing.Period) (*billing.Price, error) {
	sc, err := scope(tenantID)
	if err != nil {
		return nil, err
	}
	pr, err := scanPrice(s.pool.QueryRow(ctx, `SELECT `+priceColumns+` FROM prices
		WHERE tenant_id IS NOT DISTINCT FROM $1::uuid AND plan = $2 AND effective_from <= $3::date
		ORDER BY effective_from DESC LIMIT 1`, sc, plan, dateOf(p)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, tenants.Errorf(tenants.ENotFound, "plan %q has no price in effect in %s", plan, p)
	}
	if err != nil {
		return nil, fmt.Errorf("price: %w", err)
	}
	return pr, nil
}

// dateOf is the first day of p as the text of a date, so the session's time zone plays no
// part in which month it is.
func dateOf(p billing.Period) string { return p.Start().Format("2006-01-02") }

func (s *Store) priceTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// planExists checks the scope has the plan: a platform plan, or one of the tenant's.
func planExists(ctx context.Context, tx pgx.Tx, tenantID, plan string) error {
	var ok bool
	var err error
	if tenantID == "" {
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM platform_plans WHERE name = $1)`, plan).Scan(&ok)
	} else {
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM plans WHERE tenant_id = $1 AND name = $2)`, tenantID, plan).Scan(&ok)
	}
	if err != nil {
		return fmt.Errorf("price: plan: %w", err)
	}
	if !ok {
		return tenants.Invalid("plan", "there is no plan %q", plan)
	}
	return nil
}

// recordAudit writes the audit entry of ctx's audit, if any, in the change's own
// transaction (as the tenants store does), naming object when the caller did not; a
// change of no tenant (the platform's prices) is filed under PlatformAuditTenant.
func recordAudit(ctx context.Context, tx pgx.Tx, tenantID, object string) error {
	a, ok := tenants.AuditOf(ctx)
	if !ok {
		return nil
	}
	if a.TenantID == "" {
		a.TenantID = tenantID
	}
	if a.TenantID == "" {
		a.TenantID = PlatformAuditTenant
	}
	if a.Object == "" {
		a.Object = object
	}
	_, err := tx.Exec(ctx, `INSERT INTO audit_log (tenant_id, actor, action, object) VALUES ($1, $2, $3, $4)`,
		a.TenantID, a.Actor, a.Action, a.Object)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// Export is every tenant's bill for period p: the period's rollups summed per tenant (per
// consumer on per-consumer plans), priced by the platform plan the tenant was on at the
// period's end (tenant_plan_history; for usage older than the tenant, the plan it was
// created on) with that plan's version in effect in p. A tenant whose plan has none is
// one row with status unpriced. Tenants without usage in the period have no row.
func (s *Store) Export(ctx context.Context, p billing.Period) ([]billing.ExportRow, error) {
	rows, err := s.pool.Query(ctx, `
		WITH u AS (
			SELECT tenant_id, consumer_id, sum(requests) AS requests, sum(billable) AS billable,
				sum(function_us) AS function_us
			FROM usage_hourly WHERE hour >= $1 AND hour < $2
			GROUP BY tenant_id, consumer_id
		)
		SELECT u.tenant_id::text, coalesce(t.slug, ''), coalesce(h.plan, t.plan, ''), u.consumer_id,
			u.requests, u.billable, u.function_us, `+lateralPriceColumns+`
		FROM u
		LEFT JOIN tenants t ON t.id = u.tenant_id
		LEFT JOIN LATERAL (
			SELECT plan FROM tenant_plan_history h WHERE h.tenant_id = u.tenant_id
			ORDER BY (h.since < $2) DESC, CASE WHEN h.since < $2 THEN h.since END DESC NULLS LAST, h.since
			LIMIT 1
		) h ON true
		LEFT JOIN LATERAL (
			SELECT * FROM prices pr WHERE pr.tenant_id IS NULL AND pr.plan = coalesce(h.plan, t.plan)
				AND pr.effective_from <= $3::date
			ORDER BY pr.effective_from DESC LIMIT 1
		) pr ON true
		ORDER BY u.tenant_id, u.consumer_id`, p.Start(), p.End(), dateOf(p))
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	lines, err := pgx.CollectRows(rows, scanBillLine)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	out := []billing.ExportRow{}
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && lines[j].TenantID == lines[i].TenantID {
			j++
		}
		rows, err := tenantRows(p, lines[i:j])
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		i = j
	}
	billing.SortExport(out)
	return out, nil
}

// ConsumerExport is a tenant's bill of its consumers for period p: one row per consumer
// with usage in p, priced by the version of the consumer's plan (the tenant's consumer
// plan it is on now) in effect in p; unpriced when the plan has none or the consumer has
// no plan (or is gone). Traffic without a consumer is nobody's bill and has no row.
func (s *Store) ConsumerExport(ctx context.Context, tenantID string, p billing.Period) ([]billing.ExportRow, error) {
	if !validUUID(tenantID) {
		return nil, tenants.Errorf(tenants.ENotFound, "no tenant %q", tenantID)
	}
	rows, err := s.pool.Query(ctx, `
		WITH u AS (
			SELECT consumer_id, sum(requests) AS requests, sum(billable) AS billable,
				sum(function_us) AS function_us
			FROM usage_hourly WHERE tenant_id = $4 AND hour >= $1 AND hour < $2 AND consumer_id <> ''
			GROUP BY consumer_id
		)
		SELECT $4::text, coalesce(t.slug, ''), coalesce(c.plan, ''), u.consumer_id, coalesce(c.name, ''),
			u.requests, u.billable, u.function_us, `+lateralPriceColumns+`
		FROM u
		LEFT JOIN tenants t ON t.id = $4
		LEFT JOIN consumers c ON c.tenant_id = $4 AND c.id::text = u.consumer_id
		LEFT JOIN LATERAL (
			SELECT * FROM prices pr WHERE pr.tenant_id = $4 AND pr.plan = c.plan AND pr.effective_from <= $3::date
			ORDER BY pr.effective_from DESC LIMIT 1
		) pr ON true
		ORDER BY u.consumer_id`, p.Start(), p.End(), dateOf(p), tenantID)
	if err != nil {
		return nil, fmt.Errorf("consumer export: %w", err)
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (billLine, error) { return scanBillLineNamed(r, true) })
	if err != nil {
		return nil, fmt.Errorf("consumer export: %w", err)
	}
	out := make([]billing.ExportRow, 0, len(lines))
	for _, l := range lines {
		r, err := l.row(p, l.ConsumerID, l.Requests, l.Billable, l.FunctionUS)
		if err != nil {
			return nil, err
		}
		r.ConsumerName = l.ConsumerName
		out = append(out, r)
	}
	billing.SortExport(out)
	return out, nil
}

// lateralPriceColumns are the columns of the version a bill's query joined as pr, all
// NULL when there is none.
const lateralPriceColumns = `pr.currency, pr.monthly_fee, pr.included_requests, pr.unit_price, pr.unit_requests, pr.per_consumer,
	pr.included_function_ms, pr.function_unit_price, pr.function_unit_ms`

// billLine is one row of a bill's query: usage of a tenant (and consumer) and the price
// version it is billed by, if any.
type billLine struct {
	billing.ExportRow
	price *billing.Price
}

func scanBillLine(r pgx.CollectableRow) (billLine, error) { return scanBillLineNamed(r, false) }

// scanBillLineNamed scans a bill's row; named: the consumer's name follows its id.
func scanBillLineNamed(r pgx.CollectableRow, named bool) (billLine, error) {
	var (
		l                             billLine
		currency                      *string
		fee, included, unit, unitReqs *int64
		perConsumer                   *bool
		fnIncluded, fnPrice, fnUnit   *int64
	)
	dest := []any{&l.TenantID, &l.Tenant, &l.Plan, &l.ConsumerID, &l.Requests, &l.Billable, &l.FunctionUS,
		&currency, &fee, &included, &unit, &unitReqs, &perConsumer, &fnIncluded, &fnPrice, &fnUnit}
	if named {
		dest = slices.Insert(dest, 4, any(&l.ConsumerName))
	}
	err := r.Scan(dest...)
	if err != nil || currency == nil {
		return l, err
	}
	l.price = &billing.Price{Plan: l.Plan, Currency: *currency, MonthlyFee: *fee, IncludedRequests: *included,
		UnitPrice: *unit, UnitRequests: *unitReqs, PerConsumer: *perConsumer,
		IncludedFunctionMS: *fnIncluded, FunctionUnitPrice: *fnPrice, FunctionUnitMS: *fnUnit}
	return l, nil
}

// row is the export row of requests, billable and function time on l's tenant and price:
// EValidation (naming the tenant) when its amount does not fit in int64.
func (l *billLine) row(p billing.Period, consumer string, requests, billable, functionUS int64) (billing.ExportRow, error) {
	r := billing.ExportRow{Period: p.String(), Tenant: l.Tenant, TenantID: l.TenantID, ConsumerID: consumer,
		Plan: l.Plan, Requests: requests, Billable: billable, FunctionUS: functionUS, Status: billing.StatusUnpriced}
	if pr := l.price; pr != nil {
		b, err := pr.BillUsage(billable, functionUS)
		if err != nil {
			return r, tenants.Invalid("amount", "the %s bill of tenant %s (%s) on plan %q does not fit in 64 bits of minor units", p, l.Tenant, l.TenantID, l.Plan)
		}
		r.Overage, r.Amount, r.FunctionOverageUS, r.FunctionAmount = b.Overage, b.Amount, b.FunctionOverageUS, b.FunctionAmount
		r.Included, r.UnitPrice, r.UnitRequests, r.MonthlyFee = pr.IncludedRequests, pr.UnitPrice, pr.UnitRequests, pr.MonthlyFee
		r.FunctionIncludedMS, r.FunctionUnitPrice, r.FunctionUnitMS = pr.IncludedFunctionMS, pr.FunctionUnitPrice, pr.FunctionUnitMS
		r.Currency, r.Status = pr.Currency, billing.StatusPriced
		if pr.MonthlyFee == 0 && pr.UnitPrice == 0 && pr.FunctionUnitPrice == 0 {
			r.Status = billing.StatusFree
		}
	}
	return r, nil
}

// tenantRows bills one tenant's lines (one per consumer, the same plan and price): a row
// per consumer on a per-consumer price, else one row of their sum.
func tenantRows(p billing.Period, lines []billLine) ([]billing.ExportRow, error) {
	first := &lines[0]
	if first.price != nil && first.price.PerConsumer {
		out := make([]billing.ExportRow, 0, len(lines))
		for _, l := range lines {
			r, err := first.row(p, l.ConsumerID, l.Requests, l.Billable, l.FunctionUS)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
	var req, bill, fn int64
	var err error
	for _, l := range lines {
		if req, err = billing.AddAmounts(req, l.Requests); err != nil {
			return nil, err
		}
		if bill, err = billing.AddAmounts(bill, l.Billable); err != nil {
			return nil, err
		}
		if fn, err = billing.AddAmounts(fn, l.FunctionUS); err != nil {
			return nil, err
		}
	}
	r, err := first.row(p, "", req, bill, fn)
	if err != nil {
		return nil, err
	}
	return []billing.ExportRow{r}, nil
}

// Interface guards.
var (
	_ billing.PriceService  = (*Store)(nil)
	_ billing.ConsumerBills = (*Store)(nil)
)
