package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/billing"
	"tollgate/tenants"
)

// Customer returns the Stripe customer of a tenant: ENotFound when billing is not enabled
// for it.
func (s *Store) Customer(ctx context.Context, tenantID string) (string, error) {
	if !validUUID(tenantID) {
		return "", tenants.Errorf(tenants.ENotFound, "no billing customer for tenant %q", tenantID)
	}
	var id string
	err := s.pool.QueryRow(ctx, `SELECT stripe_customer_id FROM billing_customers WHERE tenant_id = $1`, tenantID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", tenants.Errorf(tenants.ENotFound, "no billing customer for tenant %q", tenantID)
	}
	return id, err
}

// SetCustomer records a tenant's Stripe customer unless it has one, and returns the one
// it has (so two racing enables agree on the first).
func (s *Store) SetCustomer(ctx context.Context, tenantID, customerID string) (string, error) {
	if !validUUID(tenantID) {
		return "", tenants.Invalid("tenant_id", "must be a UUID")
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO billing_customers (tenant_id, stripe_customer_id) VALUES ($1, $2)
		ON CONFLICT (tenant_id) DO NOTHING`, tenantID, customerID); err != nil {
		return "", fmt.Errorf("billing customer: %w", err)
	}
	return s.Customer(ctx, tenantID)
}

// BillingCustomers maps every tenant billed through Stripe to its customer.
func (s *Store) BillingCustomers(ctx context.Context) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id::text, stripe_customer_id FROM billing_customers`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			return nil, err
		}
		out[t] = c
	}
	return out, rows.Err()
}

// PushTotals sums the pushes of period p per tenant and hour, by state.
func (s *Store) PushTotals(ctx context.Context, p billing.Period) ([]billing.PushTotal, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id::text, hour,
			coalesce(sum(quantity) FILTER (WHERE status = 'pushed'), 0),
			coalesce(sum(quantity) FILTER (WHERE status = 'pending'), 0),
			coalesce(sum(quantity) FILTER (WHERE status = 'failed'), 0)
		FROM stripe_pushes WHERE hour >= $1 AND hour < $2 GROUP BY 1, 2 ORDER BY 1, 2`, p.Start(), p.End())
	if err != nil {
		return nil, fmt.Errorf("push totals: %w", err)
	}
	defer rows.Close()
	var out []billing.PushTotal
	for rows.Next() {
		var t billing.PushTotal
		if err := rows.Scan(&t.TenantID, &t.Hour, &t.Pushed, &t.Pending, &t.Failed); err != nil {
			return nil, err
		}
		t.Hour = t.Hour.UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

// PlanPushes records the pushes that are due: for every tenant with a Stripe customer and
// every hour in [since, settledBefore − 1h] whose billable rollup exceeds what its pushes
// so far carry (pushed, pending or failed), a pending push of the difference at the next
// revision, due at now (the pusher's clock, not the database's). It returns how many it
// planned. Planning twice plans nothing new; two planners racing insert each push once
// (primary key).
func (s *Store) PlanPushes(ctx context.Context, since, settledBefore, now time.Time) (int, error) {
	rows, err := s.pool.Query(ctx, `
		WITH folded AS (
			SELECT u.tenant_id, u.hour, sum(u.billable) AS billable
			FROM usage_hourly u JOIN billing_customers c ON c.tenant_id = u.tenant_id
			WHERE u.hour >= $1 AND u.hour + interval '1 hour' <= $2
			GROUP BY u.tenant_id, u.hour
		), planned AS (
			SELECT tenant_id, hour, max(revision) AS revision, sum(quantity) AS quantity
			FROM stripe_pushes WHERE hour >= $1 GROUP BY tenant_id, hour
		)
		SELECT f.tenant_id::text, f.hour, coalesce(p.revision, 0) + 1, f.billable - coalesce(p.quantity, 0), c.stripe_customer_id
		FROM folded f
		JOIN billing_customers c ON c.tenant_id = f.tenant_id
		LEFT JOIN planned p ON p.tenant_id = f.tenant_id AND p.hour = f.hour
		WHERE f.billable > coalesce(p.quantity, 0)
		ORDER BY 1, 2`, since, settledBefore)
	if err != nil {
		return 0, fmt.Errorf("plan pushes: %w", err)
	}
	var plans []billing.Push
	for rows.Next() {
		var p billing.Push
		if err := rows.Scan(&p.TenantID, &p.Hour, &p.Revision, &p.Quantity, &p.CustomerID); err != nil {
			rows.Close()
			return 0, err
		}
		p.Hour = p.Hour.UTC()
		p.Identifier = billing.PushIdentifier(p.TenantID, p.Hour, p.Revision)
		plans = append(plans, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range plans {
		tag, err := s.pool.Exec(ctx, `INSERT INTO stripe_pushes
				(tenant_id, hour, revision, identifier, stripe_customer_id, quantity, next_attempt_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
			p.TenantID, p.Hour, p.Revision, p.Identifier, p.CustomerID, p.Quantity, now)
		if err != nil {
			return n, fmt.Errorf("plan push %s: %w", p.Identifier, err)
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}

// DuePushes returns up to limit pending pushes whose next attempt is due, oldest first.
func (s *Store) DuePushes(ctx context.Context, now time.Time, limit int) ([]billing.Push, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id::text, hour, revision, identifier, stripe_customer_id,
			quantity, status, attempts, last_error
		FROM stripe_pushes WHERE status = 'pending' AND next_attempt_at <= $1
		ORDER BY hour, tenant_id, revision LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due pushes: %w", err)
	}
	defer rows.Close()
	var out []billing.Push
	for rows.Next() {
		var p billing.Push
		if err := rows.Scan(&p.TenantID, &p.Hour, &p.Revision, &p.Identifier, &p.CustomerID,
			&p.Quantity, &p.Status, &p.Attempts, &p.LastError); err != nil {
			return nil, err
		}
		p.Hour = p.Hour.UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// Pushes returns every push of a tenant, in hour and revision order.
func (s *Store) Pushes(ctx context.Context, tenantID string) ([]billing.Push, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id::text, hour, revision, identifier, stripe_customer_id,
			quantity, status, attempts, last_error
		FROM stripe_pushes WHERE tenant_id = $1 ORDER BY hour, revision`, tenantID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []billing.Push
	for rows.Next() {
		var p billing.Push
		if err := rows.Scan(&p.TenantID, &p.Hour, &p.Revision, &p.Identifier, &p.CustomerID,
			&p.Quantity, &p.Status, &p.Attempts, &p.LastError); err != nil {
			return nil, err
		}
		p.Hour = p.Hour.UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// PushSucceeded marks a push accepted by Stripe.
func (s *Store) PushSucceeded(ctx context.Context, identifier string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE stripe_pushes SET status = 'pushed', pushed_at = $2,
		attempts = attempts + 1, last_error = '' WHERE identifier = $1 AND status = 'pending'`, identifier, at)
	return err
}

// PushFailed records a failed attempt: the push is retried at next, or given up on when
// permanent.
func (s *Store) PushFailed(ctx context.Context, identifier, msg string, next time.Time, permanent bool) error {
	status := billing.PushPending
	if permanent {
		status = billing.PushFailed
	}
	_, err := s.pool.Exec(ctx, `UPDATE stripe_pushes SET status = $2, attempts = attempts + 1,
		last_error = $3, next_attempt_at = $4 WHERE identifier = $1 AND status = 'pending'`, identifier, status, msg, next)
	return err
}
